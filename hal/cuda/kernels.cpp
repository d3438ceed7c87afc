// The CUDA/HIP kernels of the registry's ops: which kernel serves an op (looked up by name in one
// table), with which operand layouts, grid and parameters. An op of the registry that is not in the
// table (new ops land in src/ops/ before their CUDA kernel) is reported unsupported with the reason,
// never skipped and never run by a kernel written for another signature.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>

#include "hal/cuda/device.hpp"
#include "hal/cuda/kernels.hpp"
#include "kf/error.hpp"
#include "ops/reference_math.hpp"
#include "ops/registry.hpp"

namespace kf::hal::cuda {
namespace {

struct Entry {
  Family family;
  int id;                   // EltOp or RowOp
  const char* signature;    // the op's inputs the kernel reads, in order
};

// Every op with a kernel, by registry name. The signatures are checked against the registry's.
const std::unordered_map<std::string, Entry>& table() {
  static const std::unordered_map<std::string, Entry> t = [] {
    std::unordered_map<std::string, Entry> m;
    auto elt = [&](const char* name, EltOp op, const char* sig) {
      m.emplace(name, Entry{Family::Elementwise, static_cast<int>(op), sig});
    };
    elt("add_relu", EltOp::add_relu, "a,b");
    elt("mul_relu", EltOp::mul_relu, "a,b");
    elt("add_sigmoid", EltOp::add_sigmoid, "a,b");
    elt("mul_tanh", EltOp::mul_tanh, "a,b");
    elt("bias_relu", EltOp::bias_relu, "x,bias");
    elt("bias_gelu", EltOp::bias_gelu, "x,bias");
    elt("bias_gelu_tanh", EltOp::bias_gelu_tanh, "x,bias");
    elt("bias_silu", EltOp::bias_silu, "x,bias");
    elt("swiglu", EltOp::swiglu, "x,gate");
    elt("geglu", EltOp::geglu, "x,gate");
    elt("mish_scale", EltOp::mish_scale, "x,s");
    elt("prelu_bias", EltOp::prelu_bias, "x,a,bias");
    elt("dropout", EltOp::dropout, "x");
    elt("gelu_dropout", EltOp::gelu_dropout, "x");
    elt("bias_gelu_dropout", EltOp::bias_gelu_dropout, "x,bias");
    elt("add_dropout_residual", EltOp::add_dropout_residual, "x,r");
    elt("add", EltOp::add, "a,b");
    elt("mul", EltOp::mul, "a,b");
    elt("prelu", EltOp::prelu, "a,b");
    elt("copy", EltOp::copy, "x");
    elt("relu", EltOp::relu, "x");
    elt("sigmoid", EltOp::sigmoid, "x");
    elt("tanh", EltOp::tanh, "x");
    elt("gelu", EltOp::gelu, "x");
    elt("gelu_tanh", EltOp::gelu_tanh, "x");
    elt("silu", EltOp::silu, "x");
    elt("mish", EltOp::mish, "x");
    auto row = [&](const char* name, RowOp op) {
      m.emplace(name, Entry{Family::Reduction, static_cast<int>(op), "x"});
    };
    row("sum_squared", RowOp::sum_squared);
    row("mean_abs", RowOp::mean_abs);
    row("softmax", RowOp::softmax);
    row("log_softmax", RowOp::log_softmax);
    if (m.size() != static_cast<size_t>(EltOp::count) + static_cast<size_t>(RowOp::count))
      throw Error(ErrorCode::Internal, std::string(kBackend) + ": the kernel table and kernels.hpp list other ops");
    return m;
  }();
  return t;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

bool dt_of(DType t, Dt* out) {
  switch (t) {
    case DType::f32: *out = Dt::f32; return true;
    case DType::f16: *out = Dt::f16; return true;
    case DType::bf16: *out = Dt::bf16; return true;
    case DType::f64: *out = Dt::f64; return true;
    default: return false;
  }
}

Mode mode_of(const TensorArg& a, int64_t n) {
  if (!a.buffer) return kAbsent;
  if (a.numel == n) return kFull;
  if (a.numel == 1) return kScalar;
  return kFeatures;
}

}  // namespace

bool CudaDevice::supports(const OpDef& op, DType dtype, std::string* why) const {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  const std::string api = kBackend == std::string("hip") ? "HIP" : "CUDA";
  const auto it = table().find(op.name);
  if (it == table().end()) return no("no " + api + " kernel for " + op.name + " yet");
  const Entry& e = it->second;
  if (e.family != op.family || joined(op.inputs) != e.signature)
    return no("the " + api + " kernel for " + op.name + " reads inputs (" + e.signature +
              ") but the registry declares (" + joined(op.inputs) + "): no " + api + " kernel for this " + op.name +
              " yet");
  Dt dt;
  if (!dt_of(dtype, &dt)) return no("no " + api + " kernel for " + op.name + " in " + to_string(dtype));
  for (size_t k = 0; k < op.inputs.size(); ++k)  // the kernels read every input in the op's dtype
    if (op.input_dtype(k, dtype) != dtype)
      return no("the " + api + " kernel for " + op.name + " reads input '" + op.inputs[k] + "' as " +
                to_string(dtype) + ", the registry declares " + to_string(op.input_dtype(k, dtype)));
  return true;
}

std::string CudaDevice::dispatch(const OpCall& call) {
  const OpDef& op = *call.op;
  const Entry& entry = table().at(op.name);  // supports() was asked first
  Dt dt = Dt::f32;
  dt_of(call.dtype, &dt);
  const int64_t vw = 16 / static_cast<int64_t>(dtype_size(call.dtype));
  const TensorArg& out = call.outputs[0];
  const std::string prefix = std::string(kBackend) + ":";
  make_current();

  if (entry.family == Family::Elementwise) {
    EltwiseParams p;
    p.n = out.numel;
    p.feat = out.shape.empty() ? 1 : std::max<int64_t>(1, out.shape.back());
    if (p.n == 0) return prefix + "eltwise/empty";
    const bool packed = call.inputs.size() > 1 && !call.inputs[1].buffer && op.required_inputs == 1 &&
                        op.inputs.size() == 2 && op.inputs[1] == "gate";
    p.mode1 = packed ? kAbsent : (call.inputs.size() > 1 ? mode_of(call.inputs[1], p.n) : kAbsent);
    p.mode2 = call.inputs.size() > 2 ? mode_of(call.inputs[2], p.n) : kAbsent;
    p.packed = packed;
    p.gather = (packed || p.mode1 == kFeatures || p.mode2 == kFeatures) && p.feat % vw != 0;
    p.in0 = ptr_of(call.inputs[0].buffer);
    if (call.inputs.size() > 1) p.in1 = ptr_of(call.inputs[1].buffer);
    if (call.inputs.size() > 2) p.in2 = ptr_of(call.inputs[2].buffer);
    p.out = ptr_of(out.buffer);
    if (op.random) {
      p.seed_lo = static_cast<uint32_t>(call.attrs.seed);
      p.seed_hi = static_cast<uint32_t>(call.attrs.seed >> 32);
      p.off_lo = static_cast<uint32_t>(call.attrs.offset);
      p.off_hi = static_cast<uint32_t>(call.attrs.offset >> 32);
      p.thr = ref::dropout_threshold(call.attrs.p);
      p.keep_d = 1.0 / (1.0 - call.attrs.p);
      p.keep_f = static_cast<float>(p.keep_d);
    }
    const int64_t packs = (p.n + vw - 1) / vw;
    const int64_t tiles = (packs + int64_t(kEltwiseThreads) * kEltwiseItems - 1) / (int64_t(kEltwiseThreads) * kEltwiseItems);
    // Up to 32 blocks per multiprocessor (4 waves of 8 resident blocks); blocks stride over the rest.
    const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>(tiles, 1, int64_t(sm_count_) * 32));
    check_launch(launch_eltwise(static_cast<EltOp>(entry.id), dt, p, blocks, stream_), "eltwise " + op.name);
    return prefix + "eltwise/" + (p.gather ? "gather" : "16B-packs");
  }

  // Row kernels: tpr threads per row, enough that each caches its share of the row (softmax) or reads
  // about two rounds of its unrolled loads (sums); 256-thread blocks, or one 1024-thread block per row
  // for rows longer than 256 threads hold.
  const TensorArg& in = call.inputs[0];
  RowsParams p;
  p.feat = std::max<int64_t>(1, in.shape.empty() ? 1 : in.shape.back());
  p.rows = in.numel / p.feat;
  if (p.rows == 0) return prefix + "rows/empty";
  p.in = ptr_of(in.buffer);
  p.out = ptr_of(out.buffer);
  p.wide = p.feat % vw == 0;
  p.scale = static_cast<float>(call.attrs.scale);
  p.scale_d = call.attrs.scale;
  const bool sums = entry.id == static_cast<int>(RowOp::sum_squared) || entry.id == static_cast<int>(RowOp::mean_abs);
  const int64_t units = p.wide ? p.feat / vw : p.feat;
  if (p.feat > INT32_MAX)  // rows.cu indexes within a row in 32 bits
    throw Error(ErrorCode::Unsupported, prefix + " " + op.name + ": rows of " + std::to_string(p.feat) +
                                            " features exceed the row kernels' 2^31 - 1");
  const int64_t per_value = call.dtype == DType::f64 ? 2 : 1;  // f64 caches half as many values
  auto per_thread = [&](int cache_values) -> int64_t {
    if (sums) return 8;
    const int64_t v = cache_values / per_value;
    return std::max<int64_t>(1, p.wide ? v / vw : v);
  };
  const int warp = std::max<int>(1, static_cast<int>(info_.caps.subgroup_size));
  const int cache = rows_values_;
  int block = 256, tpr = warp;
  while (int64_t(tpr) * per_thread(cache) < units && tpr < 256) tpr *= 2;
  if (int64_t(tpr) * per_thread(cache) < units) block = tpr = 1024;
  p.tpr = tpr;
  const int64_t rpb = block / tpr;
  const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>((p.rows + rpb - 1) / rpb, 1, int64_t(1) << 30));
  check_launch(launch_rows(static_cast<RowOp>(entry.id), dt, p, block, cache, blocks, stream_), "rows " + op.name);
  return prefix + "rows/warp-shuffle,tpr=" + std::to_string(tpr) + ",block=" + std::to_string(block) +
         (sums || block == 1024 ? "" : ",cache=" + std::to_string(cache)) + (p.wide ? ",16B-packs" : ",scalar");
}

}  // namespace kf::hal::cuda
