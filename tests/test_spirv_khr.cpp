// The KHR cooperative-matrix kernels compiled at run time (hal/vulkan/runtime_shader.hpp): Debian's glslang
// compiles their KF_COOPMAT_NV_AS_KHR form and hal/vulkan/spirv_khr.cpp rewrites the module to
// SPV_KHR_cooperative_matrix. No GPU runs them here (lavapipe has no cooperative matrices): the rewriter's
// mapping and refusals on tiny modules, and representative run-time variants (attention and its backward
// with a score function, a product with another output dtype at another fragment shape) through the newer
// spirv-val of tools/install-deps.sh where the build found it (KF_SPIRV_VAL_KHR), their matrix types
// against the build's own KHR modules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "hal/vulkan/runtime_shader.hpp"
#include "hal/vulkan/spirv_khr.hpp"
#include "hal/vulkan/spirv_table.hpp"
#include "kf/error.hpp"
#include "ops/score_mod.hpp"

namespace vk = kf::hal::vk;
using kf::Error;
using kf::ErrorCode;

namespace {

// A module of instructions (each: opcode, operands) with the header's bound.
std::vector<uint32_t> module(const std::vector<std::vector<uint32_t>>& insts, uint32_t bound) {
  std::vector<uint32_t> w = {0x07230203u, 0x00010500u, 0u, bound, 0u};
  for (const auto& in : insts) {
    w.push_back(static_cast<uint32_t>(in.size() << 16) | in[0]);
    w.insert(w.end(), in.begin() + 1, in.end());
  }
  return w;
}
std::vector<uint32_t> str(const std::string& s) {
  std::vector<uint32_t> w(s.size() / 4 + 1, 0u);
  std::memcpy(w.data(), s.data(), s.size());
  return w;
}
std::vector<uint32_t> cat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
// The instructions of a module with opcode `op` (their words after the header word).
std::vector<std::vector<uint32_t>> find(const std::vector<uint32_t>& m, uint32_t op) {
  std::vector<std::vector<uint32_t>> out;
  for (size_t i = 5; i < m.size();) {
    const uint32_t n = m[i] >> 16;
    if ((m[i] & 0xffffu) == op) out.emplace_back(m.begin() + i + 1, m.begin() + i + n);
    i += n;
  }
  return out;
}

// A tiny NV-as-KHR module (not a whole shader: what the rewriter reads). Ids: 1 uint, 2 half, 3 float,
// 4..6 the marker scopes (2, 1, 5), 7 = 16, 8 = 8, 9 true, 10 false, 11..13 the matrix types A 16x16,
// B 16x8, accumulator 16x8, 14 a pointer, 15 a stride, 16..19 results, 20 a non-constant flag.
std::vector<std::vector<uint32_t>> tiny(uint32_t a_scope_value = 2, uint32_t load_flag = 10) {
  return {
      {17, 1},                                                // OpCapability Shader
      {17, 5357},                                             // OpCapability CooperativeMatrixNV
      cat({10}, str("SPV_NV_cooperative_matrix")),            // OpExtension
      {21, 1, 32, 0},                                         // OpTypeInt 32 0
      {22, 2, 16},                                            // OpTypeFloat 16
      {22, 3, 32},                                            // OpTypeFloat 32
      {43, 1, 4, a_scope_value},                              // OpConstant: the markers
      {43, 1, 5, 1},
      {43, 1, 6, 5},
      {43, 1, 7, 16},
      {43, 1, 8, 8},
      {41, 0, 9},                                             // OpConstantTrue (type id unused here)
      {42, 0, 10},                                            // OpConstantFalse
      {5358, 11, 2, 4, 7, 7},                                 // OpTypeCooperativeMatrixNV A
      {5358, 12, 2, 5, 7, 8},                                 // B
      {5358, 13, 3, 6, 7, 8},                                 // accumulator
      {5359, 11, 16, 14, 15, load_flag},                      // OpCooperativeMatrixLoadNV (row-major)
      {5359, 12, 17, 14, 15, 9, 2, 0},                        // column-major, memory access Aligned 0
      {5361, 13, 18, 16, 17, 19},                             // OpCooperativeMatrixMulAddNV
      {5360, 14, 18, 15, 9},                                  // OpCooperativeMatrixStoreNV (column-major)
      {5362, 1, 19, 13},                                      // OpCooperativeMatrixLengthNV
  };
}

std::string message_of(const std::vector<uint32_t>& m) {
  try {
    vk::rewrite_coopmat_nv_to_khr(m, "the test");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Internal);
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SpirvKhr, RewritesTheNvAsKhrForm) {
  const auto khr = vk::rewrite_coopmat_nv_to_khr(module(tiny(), 21), "the test");
  // Capability and extension.
  std::set<uint32_t> caps;
  for (const auto& c : find(khr, 17)) caps.insert(c[0]);
  EXPECT_EQ(caps, (std::set<uint32_t>{1, 6022}));
  ASSERT_EQ(find(khr, 10).size(), 1u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(find(khr, 10)[0].data())), "SPV_KHR_cooperative_matrix");
  // The constants: 0 (use A, RowMajor) and 3 (Subgroup) are new; 1 and 2 are the module's (ids 5 and 4).
  std::map<uint32_t, uint32_t> value;  // id -> value
  for (const auto& c : find(khr, 43)) value[c[1]] = c[2];
  EXPECT_EQ(khr[3], 23u) << "the bound: two new constants";
  // The types: (result, component, Subgroup, rows, cols, use).
  const auto types = find(khr, 4456);
  ASSERT_EQ(types.size(), 3u);
  EXPECT_TRUE(find(khr, 5358).empty());
  const uint32_t uses[3] = {0, 1, 2};
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(types[k].size(), 6u);
    EXPECT_EQ(types[k][0], 11u + k);
    EXPECT_EQ(value.at(types[k][2]), 3u) << "scope Subgroup";
    EXPECT_EQ(value.at(types[k][5]), uses[k]);
  }
  EXPECT_EQ(types[1][5], 5u) << "the module's own constant 1, declared before the first matrix type";
  // Loads: (type, result, pointer, layout, stride, [memory operands]).
  const auto loads = find(khr, 4457);
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads[0], (std::vector<uint32_t>{11, 16, 14, loads[0][3], 15}));
  EXPECT_EQ(value.at(loads[0][3]), 0u) << "RowMajor";
  EXPECT_EQ(loads[1], (std::vector<uint32_t>{12, 17, 14, 5, 15, 2, 0})) << "ColumnMajor, the memory operands kept";
  // Store: (pointer, object, layout, stride).
  EXPECT_EQ(find(khr, 4458), (std::vector<std::vector<uint32_t>>{{14, 18, 5, 15}}));
  EXPECT_EQ(find(khr, 4459), (std::vector<std::vector<uint32_t>>{{13, 18, 16, 17, 19}}));
  EXPECT_EQ(find(khr, 4460), (std::vector<std::vector<uint32_t>>{{1, 19, 13}}));
  for (uint32_t nv_op : {5359u, 5360u, 5361u, 5362u}) EXPECT_TRUE(find(khr, nv_op).empty()) << nv_op;
  // The new constants follow OpTypeInt 32 0 directly (the module's order: types before their users).
  const size_t int_at = 5 + 2 + 2 + 8;  // the header, OpCapability x2, OpExtension (1 + 7 words)
  EXPECT_EQ(khr[int_at] & 0xffffu, 21u);
  EXPECT_EQ(khr[int_at + 4], (4u << 16) | 43u);
  EXPECT_EQ(khr[int_at + 4 + 3], 0u);
  EXPECT_EQ(khr[int_at + 8 + 3], 3u);
}

TEST(SpirvKhr, RefusesWhatItCannotMap) {
  EXPECT_NE(message_of(module(tiny(3), 21)).find("marks no use"), std::string::npos) << "a Subgroup-scoped type";
  EXPECT_NE(message_of(module(tiny(2, 20), 21)).find("OpCooperativeMatrixLoadNV"), std::string::npos)
      << "a layout flag that is no constant";
  auto no_store_flag = tiny();
  no_store_flag[19] = {5360, 14, 18, 15, 16};
  EXPECT_NE(message_of(module(no_store_flag, 21)).find("OpCooperativeMatrixStoreNV"), std::string::npos);
  auto no_uint = tiny();
  no_uint[3] = {21, 1, 32, 1};  // signed
  EXPECT_NE(message_of(module(no_uint, 21)).find("OpTypeInt 32 0"), std::string::npos);
  EXPECT_NE(message_of({1, 2, 3}).find("not a SPIR-V module"), std::string::npos);
  auto cut = module(tiny(), 21);
  cut.pop_back();
  EXPECT_NE(message_of(cut).find("past the module's end"), std::string::npos);
}

namespace {

// The matrix types of a KHR module as (component width, rows, cols, use), the constants resolved.
std::set<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>> matrix_types(const std::vector<uint32_t>& m) {
  std::map<uint32_t, uint32_t> value, width;
  for (const auto& c : find(m, 43)) value[c[1]] = c[2];
  for (const auto& f : find(m, 22)) width[f[0]] = f[1];
  std::set<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>> out;
  for (const auto& t : find(m, 4456)) out.emplace(width[t[1]], value[t[3]], value[t[4]], value[t[5]]);
  return out;
}

const vk::SpirvEntry* entry(const std::string& name) {
  for (size_t k = 0; k < vk::kSpirvTableSize; ++k)
    if (name == vk::kSpirvTable[k].name) return &vk::kSpirvTable[k];
  return nullptr;
}

// The variant's module compiled at run time with more definitions; empty (the test skipped) where this
// build has no shader compiler.
std::vector<uint32_t> compile(const vk::SpirvEntry& e, const vk::Defines& more) {
  vk::Defines d = vk::parse_defines(e.defines);
  d.insert(d.end(), more.begin(), more.end());
  return vk::compile_shader(e.source, d, std::string(e.name) + " (test)");
}

// Whether the newer spirv-val the build found is still there: a test binary copied to a GPU machine
// without .tools/ still rewrites the modules and checks their types, unvalidated.
bool have_validator() {
#if defined(KF_SPIRV_VAL_KHR)
  static const bool there = std::filesystem::exists(KF_SPIRV_VAL_KHR);
  return there;
#else
  return false;
#endif
}

// spirv-val --target-env vulkan1.3 of the newer SPIRV-Tools: "" when it passes (or is not there).
std::string validate(const std::vector<uint32_t>& m, const std::string& name) {
#if defined(KF_SPIRV_VAL_KHR)
  if (!have_validator()) return "";
  char path[] = "/tmp/kf_spirv_khr_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "no temporary file";
  close(fd);
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(m.data()), static_cast<std::streamsize>(m.size() * 4));
  }
  const std::string log = std::string(path) + ".log";
  const std::string cmd = "env LD_LIBRARY_PATH=" KF_SPIRV_VAL_KHR_LIB " " KF_SPIRV_VAL_KHR " --target-env vulkan1.3 " +
                          std::string(path) + " > " + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream lf(log);
  const std::string out((std::istreambuf_iterator<char>(lf)), {});
  std::remove(path);
  std::remove(log.c_str());
  return rc == 0 ? "" : name + ": " + out;
#else
  (void)m, (void)name;
  return "";
#endif
}

struct Case {
  const char* variant;
  bool score_mod, grad;
  const char* odt;  // another output dtype, or ""
};

}  // namespace

// Representative run-time KHR variants: each compiles, rewrites, has the matrix types of the build's own
// KHR module of that shape and passes the newer spirv-val.
TEST(SpirvKhr, RunTimeVariantsValidate) {
  if (!have_validator())
    std::cout << "no newer spirv-val (tools/install-deps.sh): the modules are rewritten but not validated\n";
  const std::string fn = "score * 0.5 - 0.1 * float(abs(i - j)) + float(h) * 0.01";
  const kf::ScoreMod sm = kf::ScoreMod::parse("attention", fn);
  const Case cases[] = {
      {"attn_cm_khr_f16_d64", true, false, ""},          // attention with a score function
      {"attn_cm_khr_bf16_d128", true, false, ""},
      {"attn_bwd_cm_khr_dkv_d64", true, true, ""},       // its backward's passes
      {"attn_bwd_cm_khr_dq_d128", true, true, ""},
      {"attn_bwd_cm_khr_dkv_d128_bf16", true, true, ""},  // and in bf16 (staged as f16)
      {"attn_bwd_cm_khr_dq_d64_bf16", true, true, ""},
      {"mm_coopmat_khr_f16_c1_16x8x16", false, false, "F32"},  // a product storing f32 at 16x8x16
      {"mm_coopmat_khr_bf16_c13_16x8x8", false, false, "F16"},
      {"mm_coopmat_khr_f16_c13_8x16x16_sg8", false, false, "F32"},  // Intel's 8x16x16, subgroups of 8
      {"mm_coopmat_khr_bf16_c1_8x16x16_sg16", false, false, "F16"},  // and of 16
  };
  int checked = 0;
  for (const Case& c : cases) {
    const vk::SpirvEntry* e = entry(c.variant);
    if (!e) {
      std::cout << c.variant << " is not in this build (no glslang 13 at build time): skipped\n";
      continue;
    }
    vk::Defines more;
    if (c.score_mod) more.emplace_back("SCORE_MOD", sm.glsl());
    if (c.grad) more.emplace_back("SCORE_MOD_GRAD", sm.glsl_grad());
    if (*c.odt) more.emplace_back(std::string("ODT_") + c.odt, "");
    std::vector<uint32_t> m;
    try {
      m = compile(*e, more);
    } catch (const Error& err) {
      if (err.code() == ErrorCode::Unsupported) GTEST_SKIP() << err.what();  // a build without shaderc
      ADD_FAILURE() << c.variant << ": " << err.what();
      continue;
    }
    EXPECT_FALSE(find(m, 4456).empty()) << c.variant;
    EXPECT_TRUE(find(m, 5358).empty()) << c.variant;
    EXPECT_EQ(matrix_types(m), matrix_types(std::vector<uint32_t>(e->code, e->code + e->words)))
        << c.variant << ": the matrix types of the build's KHR module";
    EXPECT_EQ(validate(m, c.variant), "");
    ++checked;
  }
  std::cout << checked << " run-time KHR variants rewritten and checked\n";
}

// A build-time KHR variant compiled again through the NV-as-KHR form and the rewrite: the same matrix
// types and kinds of instructions as the module glslang 13 made, and valid.
TEST(SpirvKhr, BuildTimeVariantThroughTheRewrite) {
  const char* names[] = {"mm_coopmat_khr_f16_c1", "attn_bwd_cm_khr_dq_d64", "attn_bwd_cm_khr_dkv_d64_bf16"};
  for (const char* name : names) {
    const vk::SpirvEntry* e = entry(name);
    if (!e) GTEST_SKIP() << name << " is not in this build (no glslang 13 at build time)";
    std::vector<uint32_t> m;
    try {
      m = compile(*e, {});
    } catch (const Error& err) {
      if (err.code() == ErrorCode::Unsupported) GTEST_SKIP() << err.what();
      FAIL() << name << ": " << err.what();
    }
    const std::vector<uint32_t> built(e->code, e->code + e->words);
    EXPECT_EQ(matrix_types(m), matrix_types(built)) << name;
    for (uint32_t op : {4457u, 4458u, 4459u})
      EXPECT_EQ(find(m, op).empty(), find(built, op).empty()) << name << ": opcode " << op;
    EXPECT_EQ(m[1], built[1]) << name << ": the SPIR-V version (Vulkan 1.2's 1.5, as the build's)";
    EXPECT_EQ(validate(m, name), "");
#if defined(KF_SPIRV_VAL_KHR)
    // The validator does look at the uses: A's type with B's use (invalid products, or a copy of B's type).
    std::map<uint32_t, uint32_t> value;
    for (const auto& c : find(m, 43)) value[c[1]] = c[2];
    size_t a_at = 0;
    uint32_t b_use = 0;
    for (size_t i = 5; i < m.size(); i += m[i] >> 16)
      if ((m[i] & 0xffffu) == 4456u) {
        if (value[m[i + 6]] == 0u && !a_at) a_at = i + 6;
        if (value[m[i + 6]] == 1u) b_use = m[i + 6];
      }
    ASSERT_TRUE(a_at && b_use) << name;
    m[a_at] = b_use;
    if (have_validator()) {
      EXPECT_NE(validate(m, name), "") << name << ": spirv-val passed A's type with use B";
    }
#endif
  }
}
