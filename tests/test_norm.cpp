// Normalizations (KERNELS.md section 3) beyond the registry-driven accuracy tests of test_ops: eps and
// groups checks, the three row regimes of the Vulkan kernels (several rows per workgroup, one workgroup
// per row, rows split over workgroups) each reached and deterministic, and the in-place aliasing rules.
#include <limits>

#include "common.hpp"

namespace kf::test {
namespace {

class Norm : public ::testing::TestWithParam<DeviceRef> {
 protected:
  void SetUp() override { ctx_ = &context_for(GetParam()); }

  Tensor values(const Shape& s, DType t = DType::f32) {
    std::mt19937_64 rng(7);
    return ctx_->from_host(s, t, uniform(static_cast<size_t>(numel(s)), 1, rng));
  }
  Tensor poisoned(const Shape& s, DType t = DType::f32) {
    Tensor y = ctx_->empty(s, t);
    y.fill_bytes(kPoison);
    return y;
  }
  // Runs a call that must raise kf::Error `code` naming every substring, leaving `out` untouched.
  void expect_error(const std::string& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                    const Attrs& a, ErrorCode code, const std::vector<std::string>& substrings) {
    SCOPED_TRACE(op);
    expect_rejected(*ctx_, [&] { ctx_->run(op, in, out, a); }, code, substrings, out);
  }

  Context* ctx_ = nullptr;
};

// eps <= 0 after defaulting (0 selects the op's default), NaN or infinite: InvalidArgument naming 'eps'.
TEST_P(Norm, BadEpsIsRejected) {
  ValidationCheck vc(*ctx_);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const auto& op : registry()) {
    if (op.default_eps <= 0 || op.tests.empty()) continue;
    const TestCase& tc = op.tests.front();
    std::vector<Tensor> in;
    for (size_t k = 0; k < tc.inputs.size(); ++k)
      in.push_back(tc.inputs[k].empty() ? Tensor() : values(tc.inputs[k], op.input_dtype(k, DType::f32)));
    std::vector<Shape> shapes = tc.inputs;
    shapes.resize(op.inputs.size());
    std::vector<Tensor> out;
    for (const auto& s : op.infer(op, shapes, tc.attrs)) out.push_back(poisoned(s));
    for (double eps : {-1e-5, -1.0, nan, inf}) {
      SCOPED_TRACE(::testing::Message() << op.name << " eps = " << eps);
      Attrs a = tc.attrs;
      a.eps = eps;
      expect_error(op.name, in, out, a, ErrorCode::InvalidArgument, {op.name, "'eps'"});
    }
  }
}

TEST_P(Norm, GroupsMustDivideChannels) {
  ValidationCheck vc(*ctx_);
  Tensor x = values({2, 6, 3}), y = poisoned({2, 6, 3});
  for (int64_t g : {0, -2, 4, 7}) {
    Attrs a;
    a.groups = g;
    expect_error("group_norm", {x}, {y}, a, ErrorCode::InvalidArgument, {"group_norm", "'groups'", "6 channels"});
  }
  Tensor w = values({5});
  Attrs a;
  a.groups = 3;
  expect_error("group_norm", {x, w}, {y}, a, ErrorCode::Shape, {"group_norm", "'w'", "[5]", "[6]"});
  expect_error("batch_norm_relu", {values({6}), w, w, w, w}, {poisoned({6})}, {}, ErrorCode::Shape,
               {"batch_norm_relu", "'x'"});
}

// Each row regime of the Vulkan kernels, forced by the row length: the variant that ran says which,
// the result matches the reference, and two runs give the same bits.
TEST_P(Norm, RowRegimes) {
  ValidationCheck vc(*ctx_);
  struct Case {
    std::string op;
    Shape x;
    std::string variant;  // a substring of the variant on Vulkan devices
  };
  const std::vector<Case> cases = {
      {"layer_norm", {300, 17}, "tpr="},          {"layer_norm", {8, 8192}, "tpr=256"},
      {"layer_norm", {2, 200000}, "split="},      {"rms_norm", {3, 100003}, "split="},
      {"add_layer_norm", {2, 70000}, "split="},   {"add_rms_norm", {300, 17}, "tpr="},
      {"rms_norm_silu", {8, 8192}, "tpr=256"},    {"layer_norm_gelu", {2, 30000}, "split="},
      {"layer_norm", {3, 12001}, "tpr=512"},      {"add_rms_norm", {5, 16384}, "tpr=512"},
      {"layer_norm", {3, 20000}, "split="}};  // (CUDA: rows past 1024 x 4 packs that fit the registers)
  for (const auto& c : cases)
    for (DType t : {DType::f32, DType::f16}) {
      const OpDef& op = get_op(c.op);
      if (!ctx_->supports(op.name, t)) continue;
      TestCase tc{"regime", {c.x}};
      if (c.op.rfind("add_", 0) == 0) tc.inputs.push_back(c.x);
      tc.inputs.push_back({c.x.back()});
      check::CaseOptions o;
      o.repeat = true;
      o.check_validation = false;
      const uint64_t seed = fresh_seed();
      const auto r = check::run_case(*ctx_, op, t, tc, seed, o);
      EXPECT_TRUE(r.pass) << c.op << " " << to_string(t) << " " << to_string(c.x) << " seed " << seed << " (variant "
                          << r.variant << "):\n" << r.message;
      if (GetParam().backend == "vulkan")
        EXPECT_NE(r.variant.find(c.variant), std::string::npos)
            << c.op << " " << to_string(c.x) << " ran as " << r.variant << ", expected " << c.variant;
    }
}

// The multi-pass kernels of sections 3 and 6 (split rows, column sums, loss reductions) give the same
// bits on the same inputs every run (ARCHITECTURE.md principle 8).
TEST_P(Norm, MultiPassDeterministic) {
  ValidationCheck vc(*ctx_);
  const std::vector<std::pair<std::string, std::vector<Shape>>> cases = {
      {"cross_entropy_backward", {{3, 100003}, {3}}}, {"cross_entropy", {{300, 17}, {300}}},
      {"cross_entropy", {{3, 50000}, {3}}}, {"cross_entropy_backward", {{3, 20000}, {3}}},
      {"cross_entropy_backward", {{3, 50000}, {3}}},
      {"layer_norm_backward", {{64, 1000}, {64, 1000}, {1000}}}, {"rms_norm_backward", {{2, 50000}, {2, 50000}}},
      {"mse", {{1000003}, {1000003}}}, {"group_norm", {{2, 4, 50001}}}, {"softmax_backward", {{5, 20000}, {5, 20000}}}};
  for (const auto& [name, shapes] : cases)
    for (DType t : {DType::f32, DType::bf16}) {
      const OpDef& op = get_op(name);
      if (!ctx_->supports(name, t)) continue;
      TestCase tc{"repeat", shapes};
      if (name == "group_norm") tc.attrs.groups = 2;
      check::CaseOptions o;
      o.repeat = true;
      o.check_validation = false;
      const uint64_t seed = fresh_seed();
      const auto r = check::run_case(*ctx_, op, t, tc, seed, o);
      EXPECT_TRUE(r.pass && r.deterministic) << name << " " << to_string(t) << " seed " << seed << " (variant "
                                             << r.variant << "):\n" << r.message;
    }
}

// layer_norm_backward / rms_norm_backward's weight and bias gradients by each column path: summed in the
// row pass (FUSED_COLS, automatic where rows fit the registers) and by the separate column pass
// (KF_TUNE normbwd_cols=1; also what rows too long for the registers take), on many rows (more than
// the fused path's workgroups, so that workgroups loop) and short odd rows, against the reference,
// twice (the same bits).
TEST_P(Norm, BackwardColumnPaths) {
  if (GetParam().backend != "vulkan") GTEST_SKIP() << "KF_TUNE knobs of the Vulkan backend";
  for (const char* tune : {"normbwd_cols=3", "normbwd_cols=2", "normbwd_cols=1"}) {
    ContextOptions o = options_for(GetParam());
    o.tuning = tune;
    Context ctx = Context::create(o);
    ValidationCheck vc(ctx);
    const bool fused = std::string(tune) == "normbwd_cols=2";
    const bool fused_rows = std::string(tune) == "normbwd_cols=3";  // rows of whole packs (not 130 x 7)
    for (const char* name : {"layer_norm_backward", "rms_norm_backward"})
      for (const Shape& x : {Shape{4100, 64}, Shape{37, 1000}, Shape{130, 7}})
        for (DType t : {DType::f32, DType::f16}) {
          if (!ctx.supports(name, t)) continue;
          TestCase tc{"cols", {x, x, {x.back()}}};
          check::CaseOptions co;
          co.repeat = true;
          co.check_validation = false;
          const uint64_t seed = fresh_seed();
          const auto r = check::run_case(ctx, get_op(name), t, tc, seed, co);
          EXPECT_TRUE(r.pass && r.deterministic) << name << " " << to_string(t) << " " << to_string(x) << " " << tune
                                                 << " seed " << seed << " (variant " << r.variant << "):\n" << r.message;
          EXPECT_EQ(r.variant.find("columns=fused") != std::string::npos, fused) << r.variant;
          EXPECT_EQ(r.variant.find("fused-rows") != std::string::npos, fused_rows && x.back() % 8 == 0) << r.variant;
        }
  }
}

// Rows far from zero: the fused backward takes the row's sums about a shift (its first value), and the
// variance of x = c + u (|u| <= 1) must keep its precision for c in the hundreds (f16: values of 100 to
// 102 are still exact halves), whatever the path.
TEST_P(Norm, BackwardRowsFarFromZero) {
  ValidationCheck vc(*ctx_);
  for (const char* name : {"layer_norm_backward", "rms_norm_backward"})
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      if (!ctx_->supports(name, t)) continue;
      for (const Shape& x : {Shape{64, 1024}, Shape{9, 4096}, Shape{5, 40}}) {
        std::mt19937_64 rng(fresh_seed());
        const size_t n = static_cast<size_t>(numel(x));
        std::vector<double> xv = uniform(n, 1, rng), dy = uniform(n, 1, rng), w = uniform(size_t(x.back()), 1, rng);
        const double c = t == DType::f32 ? 1000.0 : 101.0;
        for (double& v : xv) v += c;
        const std::string msg = run_and_compare(*ctx_, get_op(name), t, {x, x, {x.back()}}, {dy, xv, w}, {});
        EXPECT_EQ(msg, "") << name << " " << to_string(t) << " " << to_string(x);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Devices, Norm, ::testing::ValuesIn(devices()),
                         [](const ::testing::TestParamInfo<DeviceRef>& i) { return i.param.tag; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Norm);

}  // namespace
}  // namespace kf::test
