// Forces each Vulkan matrix-product path (and the CUDA backend's epilogue paths, below) (portable tiled, NV cooperative matrix) where the device has
// it, and checks linear and matmul on both against the float64 reference (issue 5: "the tests force
// each path"). A device without the cooperative-matrix shape skips that path, saying why.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "check/conformance.hpp"
#include "kf/kf.hpp"
#include "ops/registry.hpp"
#include "product_cases.hpp"

namespace kf {
namespace {

using PathCase = test::ProductCase;
const std::vector<PathCase>& kCases = test::kProductCases;

using test::vulkan_devices;

void run_path(int path, DType dtype, int cfg = 0) {
  const auto& devices = vulkan_devices();
  if (devices.empty()) GTEST_SKIP() << "no Vulkan device";
  for (const auto& d : devices) {
    ContextOptions o;
    o.backend = "vulkan";
    o.device = std::to_string(d.info.index);
    o.validation = true;
    // bf16_coopmat=scaled: the bf16-native kernels are test_coopmat's (Coopmat.Bf16NativeOrScaled).
    o.tuning = "mm_path=" + std::to_string(path) + (cfg ? ",mm_cfg=" + std::to_string(cfg) : "") + ",bf16_coopmat=scaled";
    Context ctx = Context::create(o);
    // (The tensor-core path in f16 also takes bf16, as f16 times powers of two: A's rows, and W's rows
    // or B's columns. Checked in the same context, for each tile shape; each context is a Vulkan
    // instance, of which the H100's driver allowed only so many per process.)
    for (DType t : path == 2 && dtype == DType::f16 ? std::vector<DType>{dtype, DType::bf16} : std::vector<DType>{dtype})
      for (const auto& c : kCases) {
        const OpDef& op = get_op(c.op);
        TestCase tc{"path", c.shapes, {}, 1};
        tc.attrs.act = c.act;
        const auto r = check::run_case(ctx, op, t, tc, check::fresh_seed());
        if (path == 2 && !r.pass && r.message.find("cooperative-matrix path was forced") != std::string::npos) {
          GTEST_SKIP() << d.info.name << ": " << r.message;
        }
        EXPECT_TRUE(r.pass) << d.info.name << " " << o.tuning << " " << c.op << " " << to_string(c.shapes[0]) << " x "
                            << to_string(c.shapes[1]) << " (" << to_string(t) << "): " << r.message
                            << " seed " << r.seed;
        EXPECT_NE(r.variant.find(path == 2 ? "coopmat" : "portable"), std::string::npos) << r.variant;
        if (path == 2 && t == DType::bf16) {
          const char* want = std::string(c.op) == "linear" ? "bf16-rows-as-scaled-f16" : "bf16-rows-cols-as-scaled-f16";
          EXPECT_NE(r.variant.find(want), std::string::npos) << r.variant;
        }
      }
  }
}

// The few-rows / split-K kernel (mm_gemv.comp, KF_TUNE mm_path=3): linear's layout only. Decode shapes
// (M = 1..16), rows beyond one 16-row tile, K that is not a multiple of the 16-byte pack (element loads).
const std::vector<PathCase> kGemvCases = {
    {"linear", {{1, 256}, {300, 256}, {300}, {}}, kActNone},
    {"linear", {{1, 1001}, {33, 1001}, {33}, {}}, kActGelu},
    {"linear", {{16, 520}, {70, 520}, {}, {16, 70}}, kActSilu},
    {"linear", {{3, 5, 136}, {9, 136}, {9}, {3, 5, 9}}, kActRelu},
    {"linear", {{37, 40}, {129, 40}, {129}, {37, 129}}, kActGeluTanh},
    {"linear", {{2, 3}, {5, 3}, {}, {}}, kActNone},
};

// Runs the cases on every Vulkan device with the knobs `tune`; each must pass, give the same bits twice
// (the split-K combine adds in a fixed order) and report a variant containing `want`.
void run_gemv(const std::string& tune, const std::vector<PathCase>& cases, DType dtype, const std::string& want) {
  const auto devices = vulkan_devices();
  if (devices.empty()) GTEST_SKIP() << "no Vulkan device";
  for (const auto& d : devices) {
    ContextOptions o;
    o.backend = "vulkan";
    o.device = std::to_string(d.info.index);
    o.validation = true;
    o.tuning = tune;
    Context ctx = Context::create(o);
    for (const auto& c : cases) {
      const OpDef& op = get_op(c.op);
      TestCase tc{"path", c.shapes, {}, 1};
      tc.attrs.act = c.act;
      check::CaseOptions co;
      co.repeat = true;
      const auto r = check::run_case(ctx, op, dtype, tc, check::fresh_seed(), co);
      EXPECT_TRUE(r.pass) << d.info.name << " " << tune << " " << to_string(c.shapes[0]) << " x "
                          << to_string(c.shapes[1]) << " (" << to_string(dtype) << "): " << r.message << " seed "
                          << r.seed;
      EXPECT_NE(r.variant.find(want), std::string::npos) << r.variant;
    }
  }
}

TEST(MatmulPaths, GemvF32) { run_gemv("mm_path=3", kGemvCases, DType::f32, "gemv"); }
TEST(MatmulPaths, GemvF16) { run_gemv("mm_path=3", kGemvCases, DType::f16, "gemv"); }
TEST(MatmulPaths, GemvBF16) { run_gemv("mm_path=3", kGemvCases, DType::bf16, "gemv"); }
TEST(MatmulPaths, GemvSplitKForcedF32) { run_gemv("mm_path=3,mm_splitk=3", kGemvCases, DType::f32, "splitk"); }
TEST(MatmulPaths, GemvSplitKForcedF16) { run_gemv("mm_path=3,mm_splitk=5", kGemvCases, DType::f16, "splitk"); }
TEST(MatmulPaths, GemvSplitKOneSliceBF16) { run_gemv("mm_path=3,mm_splitk=1", kGemvCases, DType::bf16, "splitk1,"); }
// Each workgroup shape (rows of W per workgroup: 4, 8, 16), with and without forced K splits.
TEST(MatmulPaths, GemvRowsF32) { run_gemv("mm_path=3,gemv_rows=16", kGemvCases, DType::f32, ",rows16"); }
TEST(MatmulPaths, GemvRowsF16) { run_gemv("mm_path=3,gemv_rows=4", kGemvCases, DType::f16, ",rows4"); }
TEST(MatmulPaths, GemvRowsSplitKBF16) { run_gemv("mm_path=3,gemv_rows=16,mm_splitk=3", kGemvCases, DType::bf16, ",rows16"); }

// Automatic selection: M <= 16 takes the few-rows kernel, and a narrow N with a long K splits K (75
// workgroups of 4 outputs are far from filling a GPU: 4100 / 1024 = 4 slices).
TEST(MatmulPaths, GemvChosenForDecode) {
  run_gemv("", {{"linear", {{1, 4100}, {300, 4100}, {300}, {}}, kActGelu}}, DType::f32, "gemv-splitk4,rows4,16B-packs");
  run_gemv("", {{"linear", {{2, 4100}, {300, 4100}, {}, {}}, kActNone}}, DType::f16, "gemv-splitk4,rows4,scalar");
  run_gemv("", {{"linear", {{17, 64}, {30, 64}, {}, {}}, kActNone}}, DType::f32, "portable");
}

// matmul's B [K, N] is not the few-rows kernel's layout: forcing it there is an Unsupported error.
TEST(MatmulPaths, GemvForcedOnMatmulIsUnsupported) {
  const auto devices = vulkan_devices();
  if (devices.empty()) GTEST_SKIP() << "no Vulkan device";
  ContextOptions o;
  o.backend = "vulkan";
  o.device = std::to_string(devices[0].info.index);
  o.tuning = "mm_path=3";
  Context ctx = Context::create(o);
  Tensor a = ctx.from_host({2, 3}, DType::f32, {1, 2, 3, 4, 5, 6});
  Tensor b = ctx.from_host({3, 1}, DType::f32, {1, 1, 1});
  try {
    ctx.call("matmul", {a, b});
    FAIL() << "expected kf::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("mm_path=3"), std::string::npos) << e.what();
  }
}

TEST(MatmulPaths, PortableF32) { run_path(1, DType::f32); }
TEST(MatmulPaths, PortableF16) { run_path(1, DType::f16); }
TEST(MatmulPaths, PortableBF16) { run_path(1, DType::bf16); }
TEST(MatmulPaths, CooperativeMatrixF16) { run_path(2, DType::f16); }
// bf16 on the tensor-core path (A's rows, and W's rows or B's columns, as f16 times powers of two;
// run_path checks every tile shape): rows of A, and rows of W or columns of B, of very different
// magnitudes (one near 1e-6, others up to 3e5, beyond f16's range), each output compared with the CPU
// backend's on the same bf16 inputs, relative to the magnitudes of its row and column. matmul: batched
// B, whose columns' factors are per batch.
void run_bf16_magnitudes(const char* name) {
  const auto& devices = vulkan_devices();
  if (devices.empty()) GTEST_SKIP() << "no Vulkan device";
  const bool linear = std::string(name) == "linear";
  int checked = 0;
  for (const auto& d : devices) {
    ContextOptions o;
    o.backend = "vulkan";
    o.device = std::to_string(d.info.index);
    o.tuning = "mm_path=2,bf16_coopmat=scaled";  // the scaling is what this checks
    Context ctx = Context::create(o);
    if (!ctx.device().caps.coopmat_nv) continue;
    ++checked;
    Context cpu = Context::create(ContextOptions{.backend = "cpu"});
    const int64_t M = 70, N = linear ? 90 : 88, K = 136, B = linear ? 1 : 2;
    std::mt19937_64 rng(check::fresh_seed());
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    // a [B, M, K]; w: linear's W [N, K], or matmul's b [B, K, N]; bw(i, n, k) its element.
    std::vector<double> a(B * M * K), w(B * N * K);
    const auto bw = [&](int64_t i, int64_t n, int64_t k) -> double& {
      return linear ? w[n * K + k] : w[(i * K + k) * N + n];
    };
    for (int64_t i = 0; i < B; ++i)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) a[(i * M + m) * K + k] = u(rng) * (m == 3 + i ? 1e-6 : m == 5 ? 3e5 : 1.0);
    for (int64_t i = 0; i < B; ++i)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) bw(i, n, k) = u(rng) * (n == 7 + i ? 1e-6 : n == 11 ? 2e5 : 1.0);
    const Shape sa = linear ? Shape{M, K} : Shape{B, M, K}, sw = linear ? Shape{N, K} : Shape{B, K, N};
    std::vector<std::vector<double>> outs;
    for (Context* c : {&ctx, &cpu}) {
      Tensor ta = c->from_host(sa, DType::bf16, a), tw = c->from_host(sw, DType::bf16, w);
      outs.push_back(c->call(name, {ta, tw}).at(0).to_double());
      if (c == &ctx) {
        EXPECT_NE(c->last_variant().find(linear ? "bf16-rows-as-scaled-f16" : "bf16-rows-cols-as-scaled-f16"),
                  std::string::npos) << c->last_variant();
      }
    }
    // Each output against the magnitude of its row's and column's inputs (bf16 output rounding: 2^-8).
    int bad = 0;
    for (int64_t i = 0; i < B; ++i)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double am = 0, wm = 0;
          for (int64_t k = 0; k < K; ++k)
            am = std::max(am, std::fabs(a[(i * M + m) * K + k])), wm = std::max(wm, std::fabs(bw(i, n, k)));
          const int64_t e = (i * M + m) * N + n;
          const double ref = outs[1][e], got = outs[0][e];
          if (!(std::fabs(got - ref) <= 1e-2 * std::fabs(ref) + 1e-3 * am * wm * std::sqrt(double(K))) && ++bad <= 5)
            ADD_FAILURE() << name << " element (" << i << ", " << m << ", " << n << "): vulkan " << got << ", cpu " << ref;
        }
    EXPECT_EQ(bad, 0);
  }
  if (checked == 0) GTEST_SKIP() << "no Vulkan device with NV cooperative matrices";
}

TEST(MatmulPaths, CooperativeMatrixBf16Magnitudes) { run_bf16_magnitudes("linear"); }
TEST(MatmulPaths, CooperativeMatrixBf16MatmulMagnitudes) { run_bf16_magnitudes("matmul"); }

// bf16 linear_cross_entropy_backward on the tensor cores (hal/vulkan/lce.cpp): W converted once per call
// (rows scaled for Z = h W^T, columns for d_h = G W) and reused by every chunk; d_W = G^T h with G's and
// h's columns scaled, accumulated over the chunks in bf16. Chunks of 32 rows (the last partial: 70 =
// 32 + 32 + 6), against the float64 reference.
TEST(MatmulPaths, CooperativeMatrixBf16LinearCrossEntropy) {
  const auto& devices = vulkan_devices();
  if (devices.empty()) GTEST_SKIP() << "no Vulkan device";
  int checked = 0;
  for (const auto& d : devices) {
    ContextOptions o;
    o.backend = "vulkan";
    o.device = std::to_string(d.info.index);
    o.validation = true;
    o.tuning = "mm_path=2,lce_rows=24";
    Context ctx = Context::create(o);
    if (!ctx.device().caps.coopmat_nv) continue;
    ++checked;
    for (const char* name : {"linear_cross_entropy", "linear_cross_entropy_backward"}) {
      TestCase tc{"lce", {{70, 72}, {264, 72}, {70}}, {}, 1};
      tc.attrs.label_smoothing = 0.1;
      tc.attrs.z_loss = 1e-3;
      const auto r = check::run_case(ctx, get_op(name), DType::bf16, tc, check::fresh_seed());
      EXPECT_TRUE(r.pass) << d.info.name << " " << name << " (" << r.variant << "): " << r.message << " seed " << r.seed;
      EXPECT_NE(r.variant.find("chunks=3x32rows"), std::string::npos) << r.variant;
      EXPECT_NE(r.variant.find("bf16-rows-as-scaled-f16,b-preconverted"), std::string::npos) << r.variant;
      if (std::string(name) == "linear_cross_entropy_backward") {
        EXPECT_NE(r.variant.find("dW:coopmat-nv,bf16-cols-as-scaled-f16"), std::string::npos) << r.variant;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no Vulkan device with NV cooperative matrices";
}

// Every tile shape of the tensor-core kernel (KF_TUNE mm_cfg), not only the default.
TEST(MatmulPaths, CooperativeMatrixF16AllTiles) {
  for (int cfg = 1; cfg <= 14; ++cfg) run_path(2, DType::f16, cfg);
}

// The CUDA backend's two epilogue paths (hal/cuda/matmul.cpp): cuBLASLt's fused epilogues (bias, relu,
// gelu_tanh in f16/bf16, the residual as beta = 1) and, with KF_TUNE mm_epilogue=kernel, the epilogue
// kernel for everything; every activation, with and without bias and residual, batched and folded.
void run_cuda_epilogues(const std::string& tuning, DType dtype) {
  std::vector<DeviceEntry> devices;
  std::string why;
  for (const auto& e : Context::list_devices())
    if (e.info.backend == "cuda") {
      if (e.usable) devices.push_back(e);
      else why += " " + e.info.name + ": " + e.why_not;
    }
  if (devices.empty()) GTEST_SKIP() << "no usable CUDA device (or no CUDA backend in this build)" << why;
  for (const auto& d : devices) {
    ContextOptions o;
    o.backend = "cuda";
    o.device = std::to_string(d.info.index);
    o.tuning = tuning;
    Context ctx = Context::create(o);
    if (std::string w; !ctx.supports("linear", dtype, &w)) GTEST_SKIP() << d.info.name << ": " << w;
    for (const auto& c : kCases)
      for (int64_t act = kActNone; act <= kActSilu; ++act)
        for (int form = 0; form < 4; ++form) {  // bias and residual: neither, bias, residual, both
          const OpDef& op = get_op(c.op);
          std::vector<Shape> shapes = c.shapes;
          const Shape out = op.infer(op, shapes, Attrs{}).at(0);
          shapes[2] = form & 1 ? Shape{out.back()} : Shape{};
          shapes[3] = form & 2 ? out : Shape{};
          TestCase tc{"epilogue", shapes, {}, 1};
          tc.attrs.act = act;
          const auto r = check::run_case(ctx, op, dtype, tc, check::fresh_seed());
          EXPECT_TRUE(r.pass) << d.info.name << " " << c.op << " " << to_string(shapes[0]) << " x " << to_string(shapes[1])
                              << " act " << act << " form " << form << " (" << to_string(dtype) << ", " << r.variant
                              << "): " << r.message << " seed " << r.seed;
          if (tuning == "mm_epilogue=kernel") {  // no epilogue part fused into cuBLASLt (its own kernel may run)
            for (const char* fused : {"+bias", "+relu", "+gelu", "residual(beta=1)"})
              EXPECT_EQ(r.variant.find(fused), std::string::npos) << r.variant;
          }
        }
  }
}

TEST(MatmulPaths, CudaFusedEpiloguesF32) { run_cuda_epilogues("", DType::f32); }
TEST(MatmulPaths, CudaFusedEpiloguesF16) { run_cuda_epilogues("", DType::f16); }
TEST(MatmulPaths, CudaFusedEpiloguesBF16) { run_cuda_epilogues("", DType::bf16); }
TEST(MatmulPaths, CudaFusedEpiloguesF64) { run_cuda_epilogues("", DType::f64); }
TEST(MatmulPaths, CudaKernelEpiloguesF32) { run_cuda_epilogues("mm_epilogue=kernel", DType::f32); }
TEST(MatmulPaths, CudaKernelEpiloguesF16) { run_cuda_epilogues("mm_epilogue=kernel", DType::f16); }

}  // namespace
}  // namespace kf
