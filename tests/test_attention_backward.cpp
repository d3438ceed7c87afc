// attention_backward (docs/ops.md section 5) beyond the registry cases: Vulkan's cooperative-matrix backward
// (f16, and bf16 over wide magnitudes), and the CUDA backend's kernels (portable, tensor-core, warpgroup)
// on every registry case and awkward shapes, with dropout's keep bits kept or drawn twice.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include "attention_common.hpp"

namespace kf::test {
namespace {

// attention_backward's tensor-core passes (attention_bwd_coopmat.comp: f16 and bf16, D 32 to 128) forced
// (KF_TUNE attn_path=2), in the QUAD form where the device has its layout and in the generic form
// (attn_quad=1: f16 and bf16, D 64 and 128, without dropout, soft-capping or ALiBi), on every registry case, refused where they do
// not apply (saying so), and on cases over several workgroups' tiles (64 keys / 64 rows; 32 in the
// generic form) with GQA, causal and window masks, key lengths, dropout, soft-capping and ALiBi; the
// automatic choice takes them where they apply, the portable passes elsewhere; skipped where the device
// has no NV cooperative matrices.
TEST(AttentionPaths, BackwardCooperativeMatrix) {
  int checked = 0;
  const OpDef& op = get_op("attention_backward");
  const auto shapes = [](int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D) {
    return std::vector<Shape>{{B, Hq, Sq, D}, {B, Hkv, Sk, D}, {B, Hkv, Sk, D}, {B, Hq, Sq, D}, {B, Hq, Sq, D}, {B, Hq, Sq}};
  };
  std::vector<TestCase> cases = op.tests;
  std::vector<TestCase> more = {
      {"gqa_h4_kv1_sq70_sk150_d64_causal", shapes(1, 4, 1, 70, 150, 64), {}, 2},
      {"b2_sq100_sk90_d128_window_key_lengths", shapes(2, 2, 2, 100, 90, 128), {}, 2},
      {"gqa_h6_kv2_sq65_sk200_d128_causal", shapes(1, 6, 2, 65, 200, 128), {}, 2},
      {"gqa_h4_kv2_sq150_sk130_d128", shapes(1, 4, 2, 150, 130, 128), {}, 2},
      {"gqa_h4_kv2_sq100_sk150_d64_causal_dropout_softcap_alibi", shapes(1, 4, 2, 100, 150, 64), {}, 2},
      {"gqa_h6_kv2_sq90_sk140_d80_causal", shapes(1, 6, 2, 90, 140, 80), {}, 2},
      {"b2_sq70_sk130_d96_window", shapes(2, 2, 2, 70, 130, 96), {}, 2},
      {"gqa_h4_kv1_sq80_sk100_d32_dropout", shapes(1, 4, 1, 80, 100, 32), {}, 2},
  };
  more[4].attrs.causal = true;
  more[4].attrs.p = 0.2;
  more[4].attrs.softcap = 5;
  more[4].attrs.alibi = true;
  more[5].attrs.causal = true;
  more[6].attrs.window = 30;
  more[7].attrs.p = 0.1;
  more[0].attrs.causal = true;
  more[1].inputs.resize(8);
  more[1].inputs[7] = {2};  // key lengths
  more[1].attrs.window = 20;
  more[2].attrs.causal = true;
  cases.insert(cases.end(), more.begin(), more.end());
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    // (attn_coopmat=nv: where a device has both, attention's default is KHR; test_coopmat covers KHR.)
    if (!tuned(d, "").device().caps.coopmat_nv) continue;
    Context forced = tuned(d, "attn_coopmat=nv,attn_path=2");
    Context generic = tuned(d, "attn_coopmat=nv,attn_path=2,attn_quad=1");
    Context automatic = tuned(d, "attn_coopmat=nv");
    ValidationCheck vc(forced), vg(generic), va(automatic);
    for (const DType t : {DType::f16, DType::bf16})
      for (const TestCase& tc : cases) {
        const Attrs& a = tc.attrs;
        const int64_t D = tc.inputs[0][3];
        const auto given = [&](size_t k) { return tc.inputs.size() > k && !tc.inputs[k].empty(); };
        const bool applies = (D == 32 || D == 64 || D == 80 || D == 96 || D == 128) && a.rope == 0 && !given(8) && !given(11);
        const bool quad_options = a.p > 0 || a.softcap > 0 || a.alibi || given(6) ||
                                  (D != 64 && D != 128);  // (the QUAD form's only; both take a score function)
        for (Context* ctx : {&forced, &generic, &automatic}) {
          const uint64_t seed = fresh_seed();
          check::CaseOptions o;
          o.repeat = true;  // no atomics: the same bits twice
          const check::CaseResult r = check::run_case(*ctx, op, t, tc, seed, o);
          // The QUAD form's options and head dimensions: refused in the generic form (and where the
          // device's accumulator layout was not found), portable in the automatic choice there.
          const bool runs = applies && !(quad_options && ctx == &generic) &&
                            r.message.find("its generic form does not apply") == std::string::npos &&
                            r.message.find("its generic form takes head dimensions") == std::string::npos;
          if (ctx != &automatic && !runs) {
            EXPECT_FALSE(r.pass) << to_string(t) << " " << tc.label << ": ran " << r.variant;
            EXPECT_NE(r.message.find("the cooperative-matrix path was forced (KF_TUNE attn_path=2) but "), std::string::npos)
                << tc.label << ": " << r.message;
            if (applies) {
              EXPECT_TRUE(r.message.find("its generic form does not apply dropout, soft-capping or ALiBi") !=
                              std::string::npos ||
                          r.message.find("its generic form takes head dimensions 64 and 128") != std::string::npos)
                  << r.message;
            }
            continue;
          }
          ++checked;
          EXPECT_TRUE(r.pass) << to_string(t) << " " << tc.label << " (variant " << r.variant << "), seed " << seed << ":\n"
                              << r.message;
          if (ctx == &automatic && quad_options) continue;  // (the QUAD form where the device has it)
          EXPECT_EQ(r.variant.find("attention_backward/coopmat-nv") != std::string::npos, applies) << tc.label << ": " << r.variant;
          EXPECT_EQ(r.variant.find("bf16-staged-as-f16") != std::string::npos, applies && t == DType::bf16) << r.variant;
          if (ctx == &generic) {
            EXPECT_EQ(r.variant.find("-quad"), std::string::npos) << tc.label << ": " << r.variant;
          }
        }
      }
    const check::CaseResult r32 = check::run_case(forced, op, DType::f32, op.tests[0], fresh_seed());
    EXPECT_FALSE(r32.pass);
    EXPECT_NE(r32.message.find("it takes f16 and bf16 only"), std::string::npos) << r32.message;
  }
  if (checked == 0) GTEST_SKIP() << "no Vulkan device with NV cooperative matrices";
}

// bf16 on the tensor-core backward runs on f16 copies times a power of two per tensor, dS times one from
// its bound: magnitudes beyond f16's range (K and V up to 3e5), far below it (everything near 1e-6) and
// apart (V near 1e-30 with dO near 5e3) give the gradients the CPU backend computes from the same bf16
// inputs (within 2e-2 of each gradient's largest magnitude); causal, GQA. In each form that takes bf16:
// NV's and KHR's QUAD (where the device's layouts were found) and generic (attn_quad=1) forms, KHR's QUAD
// form both staged as f16 (bf16_coopmat=scaled) and as bf16 (where the device takes bf16 natively); KHR
// where the device runs it, without the validation layer (which predates VK_KHR_cooperative_matrix on
// Debian 12).
TEST(AttentionPaths, BackwardBf16Magnitudes) {
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    for (const std::string tune : {"attn_coopmat=nv,attn_path=2", "attn_coopmat=nv,attn_path=2,attn_quad=1",
                                   "attn_path=2,attn_coopmat=khr", "attn_path=2,attn_coopmat=khr,bf16_coopmat=scaled",
                                   "attn_path=2,attn_coopmat=khr,attn_quad=1"}) {
      const bool khr = tune.find("khr") != std::string::npos;
      ContextOptions co = options_for(d);
      co.tuning = tune;
      co.validation = co.validation && !khr;
      std::unique_ptr<Context> made;
      try {
        made = std::make_unique<Context>(Context::create(co));
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Unsupported) << tune << ": " << e.what();  // (no such path on the device)
        continue;
      }
      Context& ctx = *made;
      if (!khr && !ctx.device().caps.coopmat_nv) continue;
      ValidationCheck vc(ctx);
      struct Mag {
        double q, k, v, d;
      };
      for (const Mag m : {Mag{1e-4, 2e5, 3e5, 1e-3}, Mag{1e-6, 1e-6, 1e-6, 1e-6}, Mag{3e-4, 7e4, 1e-30, 5e3}}) {
        const Shape qs{1, 4, 70, 64}, ks{1, 2, 90, 64};
        std::mt19937_64 rng(fresh_seed());
        const std::vector<double> qv = uniform(numel(qs), m.q, rng), kv = uniform(numel(ks), m.k, rng),
                                  vv = uniform(numel(ks), m.v, rng), dv = uniform(numel(qs), m.d, rng);
        Attrs a;
        a.causal = true;
        a.return_lse = true;
        // o and lse from the CPU forward on the same bf16 values, given to both backends.
        Context& c0 = cpu();
        Tensor q0 = c0.from_host(qs, DType::bf16, qv), k0 = c0.from_host(ks, DType::bf16, kv), v0 = c0.from_host(ks, DType::bf16, vv);
        const std::vector<Tensor> fw = c0.call("attention", {q0, k0, v0}, a);
        const std::vector<double> ov = fw.at(0).to_double(), lv = fw.at(1).to_double();
        Attrs b;
        b.causal = true;
        std::vector<std::vector<std::vector<double>>> grads;
        for (int which = 0; which < 2; ++which) {
          Context& c = which == 0 ? ctx : cpu();
          std::vector<Tensor> in = {c.from_host(qs, DType::bf16, qv), c.from_host(ks, DType::bf16, kv), c.from_host(ks, DType::bf16, vv),
                                    c.from_host(qs, DType::bf16, ov), c.from_host(qs, DType::bf16, dv),
                                    c.from_host({1, 4, 70}, DType::bf16, lv)};
          const std::vector<Tensor> r = c.call("attention_backward", in, b);
          if (which == 0) {
            // bf16 as bf16 only in KHR's QUAD form, where the device takes it natively.
            const bool native = khr && c.device().caps.coopmat_bf16 == "native" && tune.find("scaled") == std::string::npos &&
                                c.last_variant().find("-quad") != std::string::npos;
            EXPECT_NE(c.last_variant().find(native ? "bf16-native" : "bf16-staged-as-f16"), std::string::npos) << c.last_variant();
            EXPECT_NE(c.last_variant().find(khr ? "coopmat-khr" : "coopmat-nv"), std::string::npos) << c.last_variant();
            if (tune.find("attn_quad=1") != std::string::npos) {
              EXPECT_EQ(c.last_variant().find("-quad"), std::string::npos) << c.last_variant();
            }
          }
          grads.push_back({r.at(0).to_double(), r.at(1).to_double(), r.at(2).to_double()});
        }
        ++checked;
        for (int g = 0; g < 3; ++g) {
          double most = 0;
          for (double x : grads[1][g]) most = std::max(most, std::fabs(x));
          int bad = 0;
          for (size_t e = 0; e < grads[0][g].size(); ++e)
            if (!(std::fabs(grads[0][g][e] - grads[1][g][e]) <= 2e-2 * most) && ++bad <= 5)
              ADD_FAILURE() << "magnitudes " << m.q << "/" << m.k << "/" << m.v << "/" << m.d << " gradient " << "qkv"[g] << " element "
                            << e << ": vulkan " << grads[0][g][e] << ", cpu " << grads[1][g][e] << " (largest " << most << ")";
          EXPECT_EQ(bad, 0);
          EXPECT_GT(most, 0.0) << "gradient " << "qkv"[g];
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no Vulkan device with NV or KHR cooperative matrices for attention";
}

// ---- attention_backward on the CUDA backend (PRE, dK/dV, dQ passes; the tensor-core kernels of
// attention_bwd_mma.cu where they apply, else the portable ones of attention_bwd.cu): every registry case in
// every dtype automatically, with the portable kernels forced (KF_TUNE attn_path=1), with their 8 x 8 tiles
// (attn_rows=8) and with the tensor-core kernels forced (attn_path=2: refused, saying why, where they do
// not apply), the same bits twice, against the float64 reference; then awkward shapes (odd lengths
// spanning several tiles, GQA with 3 heads a group, Sq != Sk both ways, D = 8 and D = 256 (whose f64 tiles
// need more than 48 KiB of shared memory: the opt-in path), dropout, RoPE, window, ALiBi, soft-capping,
// and several 64-row / 64-key tiles of the tensor-core kernels with GQA, causal, window and key lengths).

std::vector<Shape> bwd_shapes(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D) {
  return {{B, Hq, Sq, D}, {B, Hkv, Sk, D}, {B, Hkv, Sk, D}, {B, Hq, Sq, D}, {B, Hq, Sq, D}, {B, Hq, Sq}};
}

// Why the tensor-core backward does not take the case ("" where it does): f16 / bf16, D 32, 64, 80, 96 or
// 128, no block mask or RoPE (the order of hal/cuda/kernels.cpp's checks).
std::string bwd_mma_refusal(const TestCase& tc, DType t) {
  const Attrs& a = tc.attrs;
  const int64_t D = tc.inputs[0][3];
  const auto given = [&](size_t k) { return tc.inputs.size() > k && !tc.inputs[k].empty(); };
  if (t != DType::f16 && t != DType::bf16) return "it takes f16 and bf16 only";
  if (D != 32 && D != 64 && D != 80 && D != 96 && D != 128) return "it takes head dimensions 32, 64, 80, 96 and 128";
  if (given(11)) return "it does not take a block mask";
  if (a.rope) return "it does not apply RoPE";
  return "";
}

// kernel: "auto" (the tensor-core kernels where bwd_mma_refusal says they apply and the device runs them,
// mma_runs), "simt" or "mma" (forced: refused, saying why, where they do not apply). wg: the tensor-core
// kernels run in their warpgroup form (flash-wgmma) at D 64 and 128 (an sm_90 GPU, not KF_TUNE attn_wmma=mma).
void run_backward_cases(Context& ctx, const std::vector<TestCase>& cases, const std::vector<DType>& dtypes,
                        const std::string& what, const std::string& want_tile, const std::string& kernel = "simt",
                        bool mma_runs = true, bool wg = false) {
  for (DType t : dtypes)
    for (const TestCase& tc : cases) {
      const uint64_t seed = fresh_seed();
      check::CaseOptions o;
      o.repeat = true;  // fixed summation order: the same bits twice
      const check::CaseResult r = check::run_case(ctx, attention_backward_op(), t, tc, seed, o);
      if (!tc.attrs.score_mod.empty()) {  // no run-time compilation on this backend: refused, saying so
        EXPECT_TRUE(r.unsupported) << what << " " << tc.label << ": " << r.variant << " " << r.message;
        EXPECT_NE(r.message.find("custom score function (score_mod)"), std::string::npos) << r.message;
        continue;
      }
      const std::string why = bwd_mma_refusal(tc, t);
      if (kernel == "mma" && !why.empty()) {
        EXPECT_FALSE(r.pass) << what << " " << to_string(t) << " " << tc.label << ": ran " << r.variant;
        EXPECT_NE(r.message.find("the tensor-core kernel was forced (KF_TUNE attn_path=2) but " + why), std::string::npos)
            << what << " " << to_string(t) << " " << tc.label << ": " << r.message;
        continue;
      }
      EXPECT_TRUE(r.pass) << what << " " << to_string(t) << " " << tc.label << " (variant " << r.variant << "), seed "
                          << seed << ":\n" << r.message;
      const bool mma = kernel == "mma" || (kernel == "auto" && why.empty() && mma_runs);
      const int64_t D = tc.inputs[0][3];
      const char* tc_kernel = wg && (D == 64 || D == 128) ? "attention_backward/flash-wgmma,bq=64,bk=64" : "attention_backward/flash-mma,bq=64,bk=64";
      EXPECT_NE(r.variant.find(mma ? tc_kernel : "attention_backward/simt,"), std::string::npos)
          << what << " " << to_string(t) << " " << tc.label << ": " << r.variant;
      if (!want_tile.empty()) {
        EXPECT_NE(r.variant.find(want_tile), std::string::npos) << what << ": " << r.variant;
      }
    }
}

// Whether this device runs the tensor-core backward (compute capability 8.0 or newer; a CUDA build).
bool bwd_mma_runs(const DeviceRef& d) {
  Context ctx = tuned(d, "attn_path=2");
  const check::CaseResult r = check::run_case(ctx, attention_backward_op(), DType::f16, attention_backward_op().tests[0], fresh_seed());
  if (r.pass) return true;
  EXPECT_NE(r.message.find("compute capability"), std::string::npos) << r.message;
  return false;
}

// Whether this device runs the tensor-core backward's warpgroup form (an sm_90 GPU and a build with sm_90a
// code); where it does not, forcing it is refused saying why.
bool bwd_wg_runs(const DeviceRef& d) {
  Context ctx = tuned(d, "attn_path=2,attn_wmma=wgmma");
  TestCase tc{"wg_check_d64", bwd_shapes(1, 2, 1, 70, 90, 64), {}, 2};
  tc.attrs.causal = true;
  const check::CaseResult r = check::run_case(ctx, attention_backward_op(), DType::f16, tc, fresh_seed());
  if (r.pass) return true;
  EXPECT_NE(r.message.find("the warpgroup kernel was forced (KF_TUNE attn_wmma=wgmma) but "), std::string::npos) << r.message;
  return false;
}

// Dropout's keep bits in the tensor-core backward: drawn by the dK/dV pass and kept for the dQ pass (the default
// for these sizes, KF_TUNE attn_bwd_bits=2: the variant ends in ",bits=kept"), or drawn in both passes (=1): the
// same bits out either way, in each form the device runs (`forms`: extra knobs).
void expect_kept_bits_match_drawn(const DeviceRef& d, const std::vector<TestCase>& cases, const std::vector<std::string>& forms) {
  for (const std::string& form : forms) {
    Context drawn = tuned(d, "attn_bwd_bits=1" + form), kept = tuned(d, "attn_bwd_bits=2" + form);
    for (const TestCase& tc : cases)
      for (DType t : {DType::f16, DType::bf16}) {
        const uint64_t seed = fresh_seed();
        std::string vd, vk;
        const auto b = bwd_outputs(drawn, tc, t, seed, vd), k = bwd_outputs(kept, tc, t, seed, vk);
        const std::string what = tc.label + " " + to_string(t) + form + ", seed " + std::to_string(seed);
        EXPECT_EQ(vd.find(",bits="), std::string::npos) << what << ": " << vd;
        EXPECT_NE(vk.find(",bits=kept"), std::string::npos) << what << ": " << vk;
        EXPECT_TRUE(k == b) << what << ": the outputs with the kept bits differ from those with the bits drawn twice";
      }
  }
}

TEST(AttentionCuda, BackwardOnEveryCase) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  for (const auto& d : devs) {
    Context& ctx = context_for(d);
    const bool mma_runs = bwd_mma_runs(d), wg_runs = mma_runs && bwd_wg_runs(d);
    run_backward_cases(ctx, attention_backward_op().tests, {DType::f32, DType::f16, DType::bf16, DType::f64}, "automatic",
                       "", "auto", mma_runs, wg_runs);
    Context simt = tuned(d, "attn_path=1");
    run_backward_cases(simt, attention_backward_op().tests, {DType::f16, DType::bf16}, "attn_path=1", "");
    if (mma_runs) {
      Context mma = tuned(d, "attn_path=2");
      run_backward_cases(mma, attention_backward_op().tests, {DType::f32, DType::f16, DType::bf16}, "attn_path=2", "", "mma", true,
                         wg_runs);
    }
    if (wg_runs) {  // the mma.sync kernels where the warpgroup form would serve
      Context mma = tuned(d, "attn_path=2,attn_wmma=mma");
      run_backward_cases(mma, attention_backward_op().tests, {DType::f16, DType::bf16}, "attn_path=2,attn_wmma=mma", "", "mma");
    }
    Context small = tuned(d, "attn_rows=8");
    run_backward_cases(small, attention_backward_op().tests, {DType::f32, DType::f16, DType::bf16, DType::f64}, "attn_rows=8",
                       "bq=8,bk=8");
  }
}

TEST(AttentionCuda, BackwardAwkwardShapes) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  std::vector<TestCase> cases = {
      {"gqa_h6_kv2_sq37_sk51_d40_causal", bwd_shapes(1, 6, 2, 37, 51, 40), {}, 2},
      {"b2_sq50_sk23_d8_dropout_window", bwd_shapes(2, 2, 1, 50, 23, 8), {}, 2},
      {"sq19_sk45_d256_rope_alibi_softcap", bwd_shapes(1, 2, 1, 19, 45, 256), {}, 2},
      {"sq3_sk70_d24_rope_interleaved_dropout_causal", bwd_shapes(1, 3, 3, 3, 70, 24), {}, 2},
      {"gqa_h4_kv2_sq150_sk200_d128_causal_dropout", bwd_shapes(1, 4, 2, 150, 200, 128), {}, 2},
      // The tensor-core kernels' tiles of 64: several of each, partial ones, rows of a group in one tile.
      {"gqa_h4_kv1_sq70_sk150_d64_causal", bwd_shapes(1, 4, 1, 70, 150, 64), {}, 2},
      {"b2_sq100_sk90_d128_window_key_lengths", bwd_shapes(2, 2, 2, 100, 90, 128), {}, 2},
      {"sq130_sk130_d64", bwd_shapes(1, 1, 1, 130, 130, 64), {}, 2},
      {"gqa_h6_kv2_sq65_sk200_d128_causal", bwd_shapes(1, 6, 2, 65, 200, 128), {}, 2},
      {"gqa_h3_kv1_sq70_sk90_d96_window", bwd_shapes(1, 3, 1, 70, 90, 96), {}, 2},
      {"b2_sq66_sk130_d80_causal", bwd_shapes(2, 2, 2, 66, 130, 80), {}, 2},
      {"sq129_sk65_d32_causal", bwd_shapes(1, 2, 2, 129, 65, 32), {}, 2},
      {"gqa_h4_kv2_sq90_sk130_d64_dropout", bwd_shapes(1, 4, 2, 90, 130, 64), {}, 2},
      {"b2_sq70_sk67_d128_causal_dropout_key_lengths", bwd_shapes(2, 2, 2, 70, 67, 128), {}, 2},
      {"gqa_h6_kv2_sq80_sk100_d64_alibi_softcap_window", bwd_shapes(1, 6, 2, 80, 100, 64), {}, 2},
      {"sq75_sk140_d128_slopes_causal_dropout", bwd_shapes(1, 3, 3, 75, 140, 128), {}, 2},
      // Dropout where the dQ pass's key tiles start off a 32-key word (a window) and in packed sequences.
      {"gqa_h2_kv1_sq100_sk150_d64_window_dropout", bwd_shapes(1, 2, 1, 100, 150, 64), {}, 2},
      {"varlen_3seq_sq90_sk140_d128_causal_dropout", bwd_shapes(1, 2, 2, 90, 140, 128), {}, 2},
  };
  cases[16].attrs.window = 37, cases[16].attrs.p = 0.25, cases[16].attrs.seed = 12, cases[16].attrs.offset = 3;
  cases[17].inputs.resize(10);
  cases[17].inputs[8] = {4}, cases[17].inputs[9] = {4};  // cu_seqlens of 3 packed sequences
  cases[17].attrs.causal = true, cases[17].attrs.p = 0.3, cases[17].attrs.seed = 4, cases[17].attrs.offset = 2;
  cases[14].attrs.alibi = true, cases[14].attrs.softcap = 3, cases[14].attrs.window = 40;
  cases[15].inputs.resize(7);
  cases[15].inputs[6] = {3};  // ALiBi slopes given
  cases[15].attrs.causal = true, cases[15].attrs.p = 0.15, cases[15].attrs.seed = 8, cases[15].attrs.softcap = 5;
  cases[12].attrs.p = 0.2, cases[12].attrs.seed = 77, cases[12].attrs.offset = 5;
  cases[13].attrs.p = 0.4, cases[13].attrs.seed = 3, cases[13].attrs.offset = 11, cases[13].attrs.causal = true;
  cases[13].inputs.resize(8);
  cases[13].inputs[7] = {2};  // key lengths
  cases[9].attrs.window = 33, cases[10].attrs.causal = true, cases[11].attrs.causal = true;
  cases[6].inputs.resize(8);
  cases[6].inputs[7] = {2};  // key lengths
  cases[5].attrs.causal = true, cases[6].attrs.window = 20, cases[8].attrs.causal = true;
  cases[0].attrs.causal = true;
  cases[1].attrs.p = 0.3, cases[1].attrs.seed = 99, cases[1].attrs.offset = 7, cases[1].attrs.window = 11;
  cases[2].attrs.rope = 1, cases[2].attrs.alibi = true, cases[2].attrs.softcap = 2.5;
  cases[3].attrs.rope = 2, cases[3].attrs.p = 0.2, cases[3].attrs.seed = 5, cases[3].attrs.causal = true;
  cases[4].attrs.causal = true, cases[4].attrs.p = 0.1, cases[4].attrs.seed = 31, cases[4].attrs.offset = 1;
  for (const auto& d : devs) {
    Context& ctx = context_for(d);
    const bool mma_runs = bwd_mma_runs(d), wg_runs = mma_runs && bwd_wg_runs(d);
    run_backward_cases(ctx, cases, {DType::f32, DType::f16, DType::bf16, DType::f64}, "awkward", "", "auto", mma_runs, wg_runs);
    if (wg_runs) {
      Context mma = tuned(d, "attn_wmma=mma");
      run_backward_cases(mma, {cases.begin() + 5, cases.end()}, {DType::f16, DType::bf16}, "awkward, attn_wmma=mma", "", "auto");
      // The warpgroup form forced where it does not apply (D 96) is refused before anything runs, saying why,
      // and the context stays usable: the next call on it (D 64) runs that form.
      Context wg = tuned(d, "attn_wmma=wgmma");
      const check::CaseResult refused = check::run_case(wg, attention_backward_op(), DType::f16, cases[9], fresh_seed());
      EXPECT_FALSE(refused.pass) << refused.variant;
      EXPECT_NE(refused.message.find("attention_backward: the warpgroup kernel was forced (KF_TUNE attn_wmma=wgmma) but it takes "
                                     "head dimensions 64 and 128 (D = 96)"),
                std::string::npos)
          << refused.message;
      const check::CaseResult after = check::run_case(wg, attention_backward_op(), DType::f16, cases[5], fresh_seed());
      EXPECT_TRUE(after.pass) << after.message;
      EXPECT_NE(after.variant.find("attention_backward/flash-wgmma,bq=64,bk=64"), std::string::npos) << after.variant;
    }
    if (mma_runs) {  // the dropout cases the tensor-core kernels take (D 64 and 128, no RoPE)
      std::vector<std::string> forms = {""};
      if (wg_runs) forms.push_back(",attn_wmma=mma");
      expect_kept_bits_match_drawn(d, {cases[4], cases[12], cases[13], cases[15], cases[16], cases[17]}, forms);
    }
    Context simt = tuned(d, "attn_path=1");
    run_backward_cases(simt, {cases.begin() + 5, cases.end()}, {DType::f16, DType::bf16}, "awkward, attn_path=1", "");
    // D = 256 in f64: even the 8 x 8 tile takes 65 KiB, so the automatic choice opts in above 48 KiB and
    // takes the largest tile under the device's opt-in limit (16 x 16, 133 KiB, on an A100 / H100).
    const check::CaseResult r = check::run_case(ctx, attention_backward_op(), DType::f64, cases[2], fresh_seed());
    EXPECT_TRUE(r.pass) << r.message;
    EXPECT_NE(r.variant.find("bq=16,bk=16"), std::string::npos) << r.variant;
  }
}

}  // namespace
}  // namespace kf::test
