// Normalizations (docs/ops.md section 3) beyond the registry-driven accuracy tests of test_ops: eps and
// groups checks, the three row regimes of the Vulkan kernels (several rows per workgroup, one workgroup
// per row, rows split over workgroups) each reached and deterministic, and the in-place aliasing rules.
#include <algorithm>
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
      in.push_back(tc.inputs[k].empty() ? Tensor() : values(tc.inputs[k], op.input_dtype(k, DType::f32, tc.attrs)));
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
      // Rows split over workgroups take the one-pass path (coop=) by default on GPUs, the two passes
      // (split=) on CPU devices (KF_TUNE rows_coop).
      const bool split_ok = c.variant == "split=" && r.variant.find("coop=") != std::string::npos;
      if (GetParam().backend == "vulkan") {
        EXPECT_TRUE(r.variant.find(c.variant) != std::string::npos || split_ok)
            << c.op << " " << to_string(c.x) << " ran as " << r.variant << ", expected " << c.variant;
      }
    }
}

// Rows longer than a workgroup's registers in one pass (norm.comp PASS 3, KF_TUNE rows_coop=2; not the
// default on lavapipe, forced here): P workgroups share a row and exchange their parts' statistics.
// With rows_spin=1 a part hardly waits for its siblings and mostly recomputes their statistics from
// memory; with a large bound it waits for them where they run at the same time, and reads what they
// published. Both must match the reference, repeat bit for bit, and give the same bits as each other
// (a recomputed part gives exactly the statistics its owner publishes). Row lengths that are and are
// not multiples of the pack, P = 2 (16-bit rows of 65536 cached raw), 3, 4, 13, one row and many, f64;
// rows past 32 parts take the two passes.
TEST_P(Norm, CoopRows) {
  if (GetParam().backend != "vulkan") GTEST_SKIP() << "KF_TUNE knobs of the Vulkan backend";
  struct Case {
    std::string op;
    Shape x;
    DType t;
    std::string variant;  // a substring of the variant (lavapipe: 512-invocation workgroups)
  };
  const std::vector<Case> cases = {
      {"layer_norm", {1, 65536}, DType::f32, "coop=4x16384"},
      {"layer_norm", {3, 65536}, DType::f16, "coop=2x32768,raw16"},
      {"rms_norm", {2, 65536}, DType::bf16, "coop=2x32768,raw16"},
      {"rms_norm", {2, 40003}, DType::f32, "coop=3x13336"},
      {"add_layer_norm", {5, 50001}, DType::f16, "coop=4x12504"},
      {"add_rms_norm", {3, 65536}, DType::bf16, "coop=4x16384"},
      {"layer_norm_gelu", {4, 100000}, DType::bf16, "coop=4x25000,raw16"},
      {"rms_norm_silu", {2, 200003}, DType::f16, "coop=13x15392"},
      {"layer_norm_relu", {64, 20000}, DType::f32, "coop=2x10000"},
      {"add_layer_norm", {1, 16385}, DType::f32, "coop=2x8196"},
      {"layer_norm", {2, 40000}, DType::f64, "coop=3x13334"},
      {"layer_norm", {1, 600000}, DType::f32, "split="},
      {"softmax", {2, 65536}, DType::f32, "coop=4x16384"},
      {"softmax", {3, 65536}, DType::bf16, "coop=2x32768,raw16"},
      {"softmax", {2, 100000}, DType::f16, "coop=7x14288"},
      {"log_softmax", {5, 30000}, DType::f32, "coop=2x15000"},
      {"log_softmax", {1, 131072}, DType::bf16, "coop=4x32768,raw16"},
      {"softmax", {2, 65537}, DType::f32, "tpr=512,scalar"}};  // not whole packs: the streamed path
  std::vector<std::vector<std::vector<uint8_t>>> first(cases.size());
  for (const char* tune : {"rows_coop=2,rows_spin=1", "rows_coop=2,rows_spin=8192"}) {
    ContextOptions co = options_for(GetParam());
    co.tuning = tune;
    Context ctx = Context::create(co);
    ValidationCheck vc(ctx);
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const OpDef& op = get_op(c.op);
      if (!ctx.supports(op.name, c.t)) continue;
      SCOPED_TRACE(::testing::Message() << c.op << " " << to_string(c.t) << " " << to_string(c.x) << " " << tune);
      std::vector<Shape> shapes = {c.x};
      if (c.op.rfind("add_", 0) == 0) shapes.push_back(c.x);
      const int n_affine = c.op.find("softmax") != std::string::npos ? 0 : c.op.find("layer_norm") != std::string::npos ? 2 : 1;
      for (int j = 0; j < n_affine; ++j) shapes.push_back({c.x.back()});
      // Against the reference, twice (the same bits), outputs poisoned.
      TestCase tc{"coop", shapes};
      check::CaseOptions o;
      o.repeat = true;
      o.check_validation = false;
      const uint64_t seed = fresh_seed();
      const auto r = check::run_case(ctx, op, c.t, tc, seed, o);
      EXPECT_TRUE(r.pass && r.deterministic) << "seed " << seed << " (variant " << r.variant << "):\n" << r.message;
      EXPECT_NE(r.variant.find(c.variant), std::string::npos) << "ran as " << r.variant << ", expected " << c.variant;
      // The same fixed inputs under both bounds: the same bits.
      std::mt19937_64 rng(11 + i);
      std::vector<Tensor> in;
      for (const Shape& s : shapes) in.push_back(ctx.from_host(s, c.t, uniform(size_t(numel(s)), 1, rng)));
      std::vector<Tensor> out;
      for (const Shape& s : op.infer(op, shapes, {})) {
        out.push_back(ctx.empty(s, c.t));
        out.back().fill_bytes(kPoison);
      }
      ctx.run(c.op, in, out, {});
      std::vector<std::vector<uint8_t>> bytes;
      for (const Tensor& t : out) bytes.push_back(raw_bytes(t));
      if (first[i].empty()) first[i] = std::move(bytes);
      else EXPECT_TRUE(first[i] == bytes) << "other bits with another spin bound";
    }
    // softmax's special rows with parts of their own: all -inf (zeros; log_softmax NaN as the
    // reference), a first part all -inf, a NaN in the last part.
    for (const char* name : {"softmax", "log_softmax"})
      for (DType t : {DType::f32, DType::bf16}) {
        const Shape x = {3, 65536};
        std::mt19937_64 rng(fresh_seed());
        std::vector<double> v = uniform(size_t(numel(x)), 4, rng);
        const double inf = std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < 65536; ++j) v[size_t(j)] = -inf;
        for (int64_t j = 0; j < 20000; ++j) v[size_t(65536 + j)] = -inf;
        v[size_t(2 * 65536 + 60000)] = std::numeric_limits<double>::quiet_NaN();
        EXPECT_EQ(run_and_compare(ctx, get_op(name), t, {x}, {v}, {}), "") << name << " " << to_string(t) << " " << tune;
        EXPECT_NE(ctx.last_variant().find("coop="), std::string::npos) << ctx.last_variant();
      }
  }
}

// KF_TUNE rows_wg: the same one-pass rows on workgroups of 256 and 1024 invocations (the parts follow:
// P = 8 and 2 for f32 rows of 65536), against the reference; out-of-range values are refused.
TEST_P(Norm, CoopRowsWorkgroup) {
  if (GetParam().backend != "vulkan") GTEST_SKIP() << "KF_TUNE knobs of the Vulkan backend";
  struct Case {
    const char* tune;
    std::string op;
    std::string variant;
  };
  const Case cases[] = {{"rows_coop=2,rows_wg=256", "layer_norm", "coop=8x8192"},
                        {"rows_coop=2,rows_wg=256", "softmax", "tpr=256,16B-packs,coop=8x8192"},
                        {"rows_coop=2,rows_wg=1024", "rms_norm", "coop=2x32768"},
                        {"rows_coop=2,rows_wg=1024", "softmax", "tpr=1024,16B-packs,coop=2x32768"}};
  for (const Case& c : cases) {
    ContextOptions co = options_for(GetParam());
    co.tuning = c.tune;
    Context ctx = Context::create(co);
    if (ctx.device().caps.max_workgroup_size < 1024) GTEST_SKIP() << "the device's workgroups stop below 1024";
    SCOPED_TRACE(::testing::Message() << c.op << " " << c.tune);
    const OpDef& op = get_op(c.op);
    std::vector<Shape> shapes = {{2, 65536}};
    const int n_affine = c.op == "softmax" ? 0 : c.op == "layer_norm" ? 2 : 1;
    for (int j = 0; j < n_affine; ++j) shapes.push_back({65536});
    TestCase tc{"coop_wg", shapes};
    check::CaseOptions o;
    o.repeat = true;
    const uint64_t seed = fresh_seed();
    const auto r = check::run_case(ctx, op, DType::f32, tc, seed, o);
    EXPECT_TRUE(r.pass && r.deterministic) << "seed " << seed << " (variant " << r.variant << "):\n" << r.message;
    EXPECT_NE(r.variant.find(c.variant), std::string::npos) << "ran as " << r.variant << ", expected " << c.variant;
  }
  ContextOptions co = options_for(GetParam());
  co.tuning = "rows_wg=300";
  EXPECT_THROW(Context::create(co), Error);
}

// CUDA on sm_90: long rows on thread-block clusters (hal/cuda/kernels.hpp ClusterPlan), automatically for
// the rows past a 1024-thread block's registers, and forced to P blocks (KF_TUNE rows_cluster=P) on short
// rows (parts of a pack or two, blocks left empty) and long ones (parts in shared memory; 8 x 5003 and
// 8 x 2501 values: parts that are multiples of nothing), every op with a cluster kernel, f32 / f16 /
// bf16, against the reference, twice (the same bits); rows_cluster=1 never. softmax's special rows: all
// -inf (zeros; log_softmax NaN, as the reference), the first parts -inf, a NaN in the last part.
TEST_P(Norm, CudaClusterRows) {
  if (GetParam().backend != "cuda") GTEST_SKIP() << "thread-block clusters of the CUDA backend";
  const std::string drv = ctx_->device().driver;
  const size_t at = drv.find("sm_");
  if (at == std::string::npos || std::atoi(drv.c_str() + at + 3) < 90)
    GTEST_SKIP() << "thread-block clusters need compute capability 9.0 (" << drv << ")";
  struct Case {
    std::string op;
    Shape x;
  };
  const std::vector<Case> long_rows = {
      {"layer_norm", {2, 65536}},  {"rms_norm", {3, 40024}},      {"layer_norm_gelu", {2, 65536}},
      {"rms_norm_silu", {1, 200000}}, {"add_layer_norm", {2, 40024}}, {"add_rms_norm", {2, 65536}},
      {"layer_norm_relu", {3, 40024}}, {"layer_norm_silu", {1, 65536}}, {"rms_norm_gelu", {2, 40024}},
      {"softmax", {2, 65536}},     {"log_softmax", {3, 20008}},   {"softmax", {2, 20008}}};
  const std::vector<Case> short_rows = {{"layer_norm", {5, 8}},     {"rms_norm", {3, 40}}, {"add_layer_norm", {2, 24}},
                                        {"add_rms_norm", {4, 4096}}, {"softmax", {5, 16}},  {"log_softmax", {3, 4104}}};
  for (const char* tune : {"", "rows_cluster=2", "rows_cluster=3", "rows_cluster=8", "rows_cluster=1"}) {
    ContextOptions co = options_for(GetParam());
    co.tuning = tune;
    Context ctx = Context::create(co);
    ValidationCheck vc(ctx);
    const bool never = std::string(tune) == "rows_cluster=1", forced = *tune != '\0' && !never;
    std::vector<Case> cases = long_rows;
    if (forced) cases.insert(cases.end(), short_rows.begin(), short_rows.end());
    for (const Case& c : cases)
      for (DType t : {DType::f32, DType::f16, DType::bf16}) {
        SCOPED_TRACE(::testing::Message() << c.op << " " << to_string(t) << " " << to_string(c.x) << " '" << tune << "'");
        const OpDef& op = get_op(c.op);
        std::vector<Shape> shapes = {c.x};
        if (c.op.rfind("add_", 0) == 0) shapes.push_back(c.x);
        const int n_affine = c.op.find("softmax") != std::string::npos ? 0 : c.op.find("layer_norm") != std::string::npos ? 2 : 1;
        for (int j = 0; j < n_affine; ++j) shapes.push_back({c.x.back()});
        TestCase tc{"cluster", shapes};
        check::CaseOptions o;
        o.repeat = true;
        o.check_validation = false;
        const uint64_t seed = fresh_seed();
        const auto r = check::run_case(ctx, op, t, tc, seed, o);
        EXPECT_TRUE(r.pass && r.deterministic) << "seed " << seed << " (variant " << r.variant << "):\n" << r.message;
        // Forced: P blocks where a part fits the shared memory (as kernels.hpp cluster_plan: 256 threads,
        // 4 packs a thread in registers, 2 and twice the bytes for the add forms, the rest in shared memory).
        const int P = forced ? std::atoi(tune + 13) : 0;
        const bool add = c.op.rfind("add_", 0) == 0;
        const int64_t npk = c.x.back() / (16 / int64_t(dtype_size(t))), regs = add ? 2 : 4;
        const int64_t per = ((P ? (npk + P - 1) / P : 0) + 255) / 256;
        const bool fits = 512 + std::max<int64_t>(0, per - regs) * 256 * (add ? 32 : 16) <= ctx.device().caps.max_shared_bytes;
        EXPECT_EQ(r.variant.find(",cluster=") != std::string::npos, !never && (!forced || fits)) << r.variant;
        if (forced && fits) {
          EXPECT_NE(r.variant.find(",cluster=" + std::to_string(P)), std::string::npos) << r.variant;
        }
      }
    if (never) continue;
    for (const char* name : {"softmax", "log_softmax"})
      for (DType t : {DType::f32, DType::bf16}) {
        const Shape x = {3, 65536};
        std::mt19937_64 rng(fresh_seed());
        std::vector<double> v = uniform(size_t(numel(x)), 4, rng);
        const double inf = std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < 65536; ++j) v[size_t(j)] = -inf;
        for (int64_t j = 0; j < 40000; ++j) v[size_t(65536 + j)] = -inf;
        v[size_t(2 * 65536 + 60000)] = std::numeric_limits<double>::quiet_NaN();
        EXPECT_EQ(run_and_compare(ctx, get_op(name), t, {x}, {v}, {}), "") << name << " " << to_string(t) << " '" << tune << "'";
        EXPECT_NE(ctx.last_variant().find(",cluster="), std::string::npos) << ctx.last_variant();
      }
  }
}

// The multi-pass kernels of sections 3 and 6 (split rows, column sums, loss reductions) give the same
// bits on the same inputs every run (docs/architecture.md principle 8).
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
