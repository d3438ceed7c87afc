// The rewrite of a KF_COOPMAT_NV_AS_KHR module into SPV_KHR_cooperative_matrix (spirv_khr.hpp). The
// opcodes and operand orders are the SPIR-V registry's (Debian 12's spirv-headers predate the KHR
// extension, so they are spelled out here).
#include "hal/vulkan/spirv_khr.hpp"

#include <cstring>
#include <map>

#include "kf/error.hpp"

namespace kf::hal::vk {

namespace {

constexpr uint32_t kMagic = 0x07230203;
enum : uint32_t {
  OpExtension = 10,
  OpCapability = 17,
  OpTypeInt = 21,
  OpConstantTrue = 41,
  OpConstantFalse = 42,
  OpConstant = 43,
  OpTypeCooperativeMatrixKHR = 4456,
  OpCooperativeMatrixLoadKHR = 4457,
  OpCooperativeMatrixStoreKHR = 4458,
  OpCooperativeMatrixMulAddKHR = 4459,
  OpCooperativeMatrixLengthKHR = 4460,
  OpTypeCooperativeMatrixNV = 5358,
  OpCooperativeMatrixLoadNV = 5359,
  OpCooperativeMatrixStoreNV = 5360,
  OpCooperativeMatrixMulAddNV = 5361,
  OpCooperativeMatrixLengthNV = 5362,
};
constexpr uint32_t kCapabilityCooperativeMatrixNV = 5357, kCapabilityCooperativeMatrixKHR = 6022;
constexpr uint32_t kScopeSubgroup = 3;
// MatrixAUse 0, MatrixBUse 1, MatrixAccumulatorUse 2; RowMajor 0, ColumnMajor 1.
constexpr uint32_t kUseA = 0, kUseB = 1, kUseAcc = 2;

// An OpExtension / OpCapability literal string as words (nul-terminated, zero-padded).
std::vector<uint32_t> string_words(const std::string& s) {
  std::vector<uint32_t> w(s.size() / 4 + 1, 0u);
  std::memcpy(w.data(), s.data(), s.size());
  return w;
}
std::string words_string(const uint32_t* w, size_t n) {
  std::string s(reinterpret_cast<const char*>(w), n * 4);
  return s.substr(0, s.find('\0'));
}
uint32_t header(uint32_t words, uint32_t op) { return (words << 16) | op; }

}  // namespace

std::vector<uint32_t> rewrite_coopmat_nv_to_khr(const std::vector<uint32_t>& nv, const std::string& what) {
  const auto fail = [&](const std::string& why) {
    return Error(ErrorCode::Internal, what + ": the rewrite of its SPIR-V to SPV_KHR_cooperative_matrix failed: " + why);
  };
  if (nv.size() < 5 || nv[0] != kMagic) throw fail("not a SPIR-V module");
  // First pass: the 32-bit unsigned int type, the integer constants declared before the first matrix
  // type (those the new types may name), the boolean constants (the NV layouts).
  uint32_t uint_type = 0;
  bool seen_matrix = false;
  std::map<uint32_t, uint32_t> early_uint;  // value -> id (unsigned 32-bit, before the first matrix type)
  std::map<uint32_t, uint32_t> int_value;   // id -> value of every 32-bit integer constant
  std::map<uint32_t, bool> bool_value;      // id -> value of OpConstantTrue / OpConstantFalse
  std::map<uint32_t, bool> int32_types;     // 32-bit integer type ids
  for (size_t i = 5; i < nv.size();) {
    const uint32_t n = nv[i] >> 16, op = nv[i] & 0xffffu;
    if (n == 0 || i + n > nv.size()) throw fail("an instruction runs past the module's end (word " + std::to_string(i) + ")");
    const uint32_t* in = &nv[i];
    if (op == OpTypeInt && n == 4 && in[2] == 32) {
      int32_types[in[1]] = true;
      if (in[3] == 0 && !uint_type) uint_type = in[1];
    } else if (op == OpConstant && n == 4 && int32_types.count(in[1])) {
      int_value[in[2]] = in[3];
      if (in[1] == uint_type && !seen_matrix && !early_uint.count(in[3])) early_uint[in[3]] = in[2];
    } else if ((op == OpConstantTrue || op == OpConstantFalse) && n == 3) {
      bool_value[in[2]] = op == OpConstantTrue;
    } else if (op == OpTypeCooperativeMatrixNV) {
      seen_matrix = true;
    }
    i += n;
  }
  if (!uint_type) throw fail("the module declares no 32-bit unsigned integer type (OpTypeInt 32 0)");
  // The constants the KHR form names: the module's where declared early enough, else new ones.
  uint32_t bound = nv[3];
  std::vector<uint32_t> new_constants;
  std::map<uint32_t, uint32_t> constant;  // value -> id
  for (uint32_t v : {kUseA, kUseB, kUseAcc, kScopeSubgroup}) {
    if (auto it = early_uint.find(v); it != early_uint.end()) {
      constant[v] = it->second;
    } else {
      constant[v] = bound;
      new_constants.insert(new_constants.end(), {header(4, OpConstant), uint_type, bound, v});
      ++bound;
    }
  }
  const auto layout = [&](uint32_t id, const char* inst) {
    auto it = bool_value.find(id);
    if (it == bool_value.end())
      throw fail(std::string(inst) + " takes its column-major flag from %" + std::to_string(id) +
                 ", which is not a boolean constant (the KHR layout must be a constant)");
    return constant[it->second ? 1u : 0u];  // ColumnMajor : RowMajor
  };

  std::vector<uint32_t> out(nv.begin(), nv.begin() + 5);
  out.reserve(nv.size() + new_constants.size() + 64);
  bool inserted = false;
  for (size_t i = 5; i < nv.size();) {
    const uint32_t n = nv[i] >> 16, op = nv[i] & 0xffffu;
    const uint32_t* in = &nv[i];
    i += n;
    switch (op) {
      case OpCapability:
        out.insert(out.end(), in, in + n);
        if (n == 2 && in[1] == kCapabilityCooperativeMatrixNV) out.back() = kCapabilityCooperativeMatrixKHR;
        break;
      case OpExtension:
        if (words_string(in + 1, n - 1) == "SPV_NV_cooperative_matrix") {
          const auto s = string_words("SPV_KHR_cooperative_matrix");
          out.push_back(header(static_cast<uint32_t>(1 + s.size()), OpExtension));
          out.insert(out.end(), s.begin(), s.end());
        } else {
          out.insert(out.end(), in, in + n);
        }
        break;
      case OpTypeInt:
        out.insert(out.end(), in, in + n);
        if (n == 4 && in[1] == uint_type) {
          out.insert(out.end(), new_constants.begin(), new_constants.end());
          inserted = true;
        }
        break;
      case OpTypeCooperativeMatrixNV: {  // result, component type, scope, rows, columns
        if (n != 6) throw fail("OpTypeCooperativeMatrixNV of " + std::to_string(n) + " words");
        auto it = int_value.find(in[3]);
        const uint32_t mark = it == int_value.end() ? ~0u : it->second;
        uint32_t use = 0;
        if (mark == kUseMarkA) use = kUseA;
        else if (mark == kUseMarkB) use = kUseB;
        else if (mark == kUseMarkAcc) use = kUseAcc;
        else
          throw fail("matrix type %" + std::to_string(in[1]) + " has scope " +
                     (it == int_value.end() ? "%" + std::to_string(in[3]) + " (no integer constant)" : std::to_string(mark)) +
                     ", which marks no use (Workgroup A, Device B, QueueFamily accumulator: KF_COOPMAT_NV_AS_KHR)");
        if (!inserted) throw fail("a matrix type precedes the 32-bit unsigned integer type");
        out.insert(out.end(), {header(7, OpTypeCooperativeMatrixKHR), in[1], in[2], constant[kScopeSubgroup], in[4], in[5],
                               constant[use]});
        break;
      }
      case OpCooperativeMatrixLoadNV: {  // type, result, pointer, stride, column-major, [memory access]
        if (n < 6) throw fail("OpCooperativeMatrixLoadNV of " + std::to_string(n) + " words");
        out.insert(out.end(), {header(n, OpCooperativeMatrixLoadKHR), in[1], in[2], in[3],
                               layout(in[5], "OpCooperativeMatrixLoadNV"), in[4]});
        out.insert(out.end(), in + 6, in + n);
        break;
      }
      case OpCooperativeMatrixStoreNV: {  // pointer, object, stride, column-major, [memory access]
        if (n < 5) throw fail("OpCooperativeMatrixStoreNV of " + std::to_string(n) + " words");
        out.insert(out.end(), {header(n, OpCooperativeMatrixStoreKHR), in[1], in[2],
                               layout(in[4], "OpCooperativeMatrixStoreNV"), in[3]});
        out.insert(out.end(), in + 5, in + n);
        break;
      }
      case OpCooperativeMatrixMulAddNV:  // type, result, A, B, C (the KHR form's operands flag: none)
        out.push_back(header(n, OpCooperativeMatrixMulAddKHR));
        out.insert(out.end(), in + 1, in + n);
        break;
      case OpCooperativeMatrixLengthNV:  // type, result, matrix type
        out.push_back(header(n, OpCooperativeMatrixLengthKHR));
        out.insert(out.end(), in + 1, in + n);
        break;
      default:
        out.insert(out.end(), in, in + n);
    }
  }
  out[3] = bound;
  return out;
}

}  // namespace kf::hal::vk
