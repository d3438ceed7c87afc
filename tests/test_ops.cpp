// Registry-driven correctness (docs/architecture.md principle 1): every op of kf::registry(), in every dtype it
// takes, on every test case it declares, on every usable device of every backend, against its float64
// reference. An op added to the registry is tested here without another line.
#include <algorithm>
#include <set>

#include "common.hpp"

namespace kf::test {
namespace {

struct OpParam {
  DeviceRef device;
  const OpDef* op;
  DType dtype;
  size_t case_index;
  std::string name;  // vulkan0_add_relu_f16_rows7x33_bcast
  friend void PrintTo(const OpParam& p, std::ostream* os) { *os << p.name; }
};

std::vector<OpParam> all_params() {
  std::vector<OpParam> v;
  std::set<std::string> seen;
  for (const auto& d : devices())
    for (const auto& op : registry())
      for (DType t : op.dtypes)
        for (size_t c = 0; c < op.tests.size(); ++c) {
          std::string name = sanitize(d.tag + "_" + op.name + "_" + to_string(t) + "_" + op.tests[c].label);
          // Labels that differ only in punctuation would collide after sanitizing: keep names unique.
          if (!seen.insert(name).second) name += "_" + std::to_string(c), seen.insert(name);
          v.push_back({d, &op, t, c, name});
        }
  return v;
}

class Ops : public ::testing::TestWithParam<OpParam> {};

TEST_P(Ops, MatchesReference) {
  const OpParam& p = GetParam();
  const OpDef& op = *p.op;
  const TestCase& tc = op.tests[p.case_index];
  Context& ctx = context_for(p.device);
  ValidationCheck vc(ctx);
  std::string why;
  if (!ctx.supports(op.name, p.dtype, &why)) GTEST_SKIP() << "unsupported on " << p.device.name << ": " << why;

  const uint64_t seed = fresh_seed();
  check::CaseOptions o;
  o.check_validation = false;  // ValidationCheck covers the whole test
  const check::CaseResult r = check::run_case(ctx, op, p.dtype, tc, seed, o);
  if (r.unsupported) GTEST_SKIP() << "unsupported on " << p.device.name << ": " << r.message;
  EXPECT_TRUE(r.pass) << op.name << " " << to_string(p.dtype) << " case " << tc.label << " on " << p.device.name
                      << " (variant " << ctx.last_variant() << "), input seed " << seed << ":\n" << r.message;
}

INSTANTIATE_TEST_SUITE_P(All, Ops, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<OpParam>& i) { return i.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Ops);

// A Vulkan device runs every op in f32, and in f16 and bf16 when it has 16-bit storage; only the f64
// variants of transcendental ops may be missing (GLSL has no float64 exp/tanh/erf). Non-transcendental
// f64 ops are required where the device reports float64.
TEST(OpsCoverage, VulkanRunsEveryOp) {
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    Context& ctx = context_for(d);
    const Caps& caps = ctx.device().caps;
    ++checked;
    for (const auto& op : registry())
      for (DType t : op.dtypes) {
        std::string why;
        if (ctx.supports(op.name, t, &why)) continue;
        EXPECT_FALSE(why.empty()) << op.name << " " << to_string(t) << " is unsupported on " << d.name
                                  << " without a reason";
        const bool required = t == DType::f32 || ((t == DType::f16 || t == DType::bf16) && caps.storage16) ||
                              (t == DType::f64 && caps.float64 && !op.transcendental);
        EXPECT_FALSE(required) << op.name << " " << to_string(t) << " is unsupported on " << d.name << ": " << why;
      }
  }
  if (checked == 0) GTEST_SKIP() << "no usable Vulkan device";
}

// The CUDA (or HIP) backend, when built: its device runs every op that has a kernel in hal/cuda/ (docs/ops.md
// sections 1 to 6, as listed below) in every dtype; linear, matmul and linear_cross_entropy need cuBLASLt, opened at run
// time, and must say so when it is missing (and the HIP build, which has no hipBLASLt); any other op is
// unsupported with a reason. When the build has the backend but the machine has no usable device, the
// registry cases above have no cuda instances: this test is skipped, saying so and why.
TEST(OpsCoverage, CudaRunsItsOps) {
  const std::vector<std::string> built = Context::backends();
  std::string gpu;
  for (const char* b : {"cuda", "hip"})
    if (std::find(built.begin(), built.end(), b) != built.end()) gpu = b;
  if (gpu.empty()) GTEST_SKIP() << "this build has no CUDA or HIP backend";
  static const std::set<std::string> with_kernel = {
      // section 1 and the primitives
      "add_relu", "mul_relu", "add_sigmoid", "mul_tanh", "bias_relu", "bias_gelu", "bias_gelu_tanh", "bias_silu",
      "swiglu", "geglu", "mish_scale", "prelu_bias", "dropout", "gelu_dropout", "bias_gelu_dropout",
      "add_dropout_residual", "add", "mul", "prelu", "copy", "relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu",
      "mish",
      // section 2
      "sum_squared", "mean_abs", "softmax", "log_softmax",
      // section 3 and its backward
      "layer_norm", "layer_norm_relu", "layer_norm_gelu", "layer_norm_silu", "rms_norm", "rms_norm_gelu",
      "rms_norm_silu", "add_layer_norm", "add_rms_norm", "batch_norm_relu", "group_norm", "relu_backward",
      "sigmoid_backward", "tanh_backward", "gelu_backward", "gelu_tanh_backward", "silu_backward", "mish_backward",
      "dropout_backward", "softmax_backward", "layer_norm_backward", "rms_norm_backward",
      // section 4's embedding and convolutions, section 5 (attention.cu, attention_bwd.cu, conv.cu)
      "embedding", "conv2d", "conv2d_bn_relu", "conv2d_gelu_dropout", "depthwise_pointwise", "attention_scores",
      "attention", "attention_backward",
      // section 6
      "cross_entropy", "cross_entropy_backward", "mse", "mse_backward", "adamw_step", "sgd_step"};
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != gpu) continue;
    Context& ctx = context_for(d);
    ++checked;
    for (const auto& op : registry())
      for (DType t : op.dtypes) {
        std::string why;
        const bool ok = ctx.supports(op.name, t, &why);
        if (op.name == "linear" || op.name == "matmul" || op.name == "linear_dropout" ||
            op.name == "linear_cross_entropy" || op.name == "linear_cross_entropy_backward") {
          if (!ok) {
            EXPECT_NE(why.find(gpu == "cuda" ? "cuBLASLt" : "hipBLASLt"), std::string::npos) << op.name << ": " << why;
          }
          continue;
        }
        if (with_kernel.count(op.name)) {
          EXPECT_TRUE(ok) << op.name << " " << to_string(t) << " on " << d.name << ": " << why;
        } else if (!ok) {
          EXPECT_FALSE(why.empty()) << op.name << " " << to_string(t) << " is unsupported without a reason";
        }
      }
  }
  if (checked == 0) {
    std::string why;
    for (const auto& e : device_entries())
      if (e.info.backend == gpu && !e.usable) why += "\n  " + e.info.name + ": " + e.why_not;
    GTEST_SKIP() << "the " << gpu << " backend is built but no usable " << gpu
                 << " device is present (or KF_BACKEND / KF_DEVICE select another): its run-time cases are skipped"
                 << why;
  }
}

// The CPU backend is the reference: it runs everything.
TEST(OpsCoverage, CpuRunsEveryOp) {
  for (const auto& d : devices()) {
    if (d.backend != "cpu") continue;
    Context& ctx = context_for(d);
    for (const auto& op : registry())
      for (DType t : op.dtypes) {
        std::string why;
        EXPECT_TRUE(ctx.supports(op.name, t, &why)) << op.name << " " << to_string(t) << ": " << why;
      }
  }
}

// Every op declares test cases, and every case has a shape per required input (a registry sanity check).
TEST(OpsCoverage, RegistryCasesAreWellFormed) {
  for (const auto& op : registry()) {
    EXPECT_FALSE(op.tests.empty()) << op.name << " declares no test case";
    EXPECT_TRUE(op.reference) << op.name << " has no reference";
    for (const auto& tc : op.tests) {
      ASSERT_LE(tc.inputs.size(), op.inputs.size()) << op.name << " " << tc.label;
      for (int k = 0; k < op.required_inputs; ++k)
        EXPECT_FALSE(k >= int(tc.inputs.size()) || tc.inputs[k].empty())
            << op.name << " " << tc.label << " leaves out required input " << op.inputs[k];
    }
  }
}

}  // namespace
}  // namespace kf::test
