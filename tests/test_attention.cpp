// Attention (docs/ops.md section 5) beyond the registry cases that test_ops runs: each Vulkan path forced
// in turn (one pass and key splits with a combine pass, each tile height), the decode kernel forced and
// chosen automatically, the automatic choice of the split (decode) path, determinism, the argument checks, and the float64 reference against the same
// computation composed of other ops.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common.hpp"
#include "ops/reference_math.hpp"

namespace kf::test {
namespace {

const OpDef& attention_op() { return get_op("attention"); }

Context& cpu() {
  static Context ctx = Context::create(ContextOptions{.backend = "cpu"});
  return ctx;
}

// A Vulkan context of device d with KF_TUNE knobs.
Context tuned(const DeviceRef& d, const std::string& tuning) {
  ContextOptions o = options_for(d);
  o.tuning = tuning;
  return Context::create(o);
}

std::vector<Shape> qkv(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D) {
  return std::vector<Shape>{{B, Hq, Sq, D}, {B, Hkv, Sk, D}, {B, Hkv, Sk, D}};
}

// Cases spanning several 64-row query tiles and key tiles, for the tensor-core kernels (Vulkan, CUDA).
std::vector<TestCase> multi_tile_cases() {
  std::vector<TestCase> big = {
      {"gqa_h4_kv2_sq150_sk200_d128_causal_rope", qkv(1, 4, 2, 150, 200, 128), {}, 2},
      {"sq70_sk130_d256_dropout_lse", qkv(1, 2, 2, 70, 130, 256), {}, 2},
      {"b2_sq100_sk300_d64_window_alibi_softcap", qkv(2, 2, 2, 100, 300, 64), {}, 2},
      {"sq65_sk129_d80_rope_interleaved", qkv(1, 3, 1, 65, 129, 80), {}, 2},
  };
  big[0].attrs.causal = true, big[0].attrs.rope = 1;
  big[1].attrs.p = 0.25, big[1].attrs.return_lse = true;
  big[2].attrs.window = 40, big[2].attrs.alibi = true, big[2].attrs.softcap = 3;
  big[3].attrs.rope = 2;
  return big;
}

// The cases without a custom score function (for the kernels that do not take one).
std::vector<TestCase> without_score_mod(const std::vector<TestCase>& cases) {
  std::vector<TestCase> v;
  for (const TestCase& tc : cases)
    if (tc.attrs.score_mod.empty()) v.push_back(tc);
  return v;
}

// Every registry case of attention in `dtypes` on ctx; returns the variants seen (a case with a custom
// score function must run its run-time-compiled kernel on Vulkan, and be refused elsewhere but the CPU).
std::vector<std::string> run_all_cases(Context& ctx, const std::vector<DType>& dtypes, const std::string& what) {
  std::vector<std::string> variants;
  for (DType t : dtypes)
    for (const TestCase& tc : attention_op().tests) {
      const uint64_t seed = fresh_seed();
      check::CaseOptions o;
      o.repeat = true;  // fixed summation order: the same bits twice
      const check::CaseResult r = check::run_case(ctx, attention_op(), t, tc, seed, o);
      if (!tc.attrs.score_mod.empty() && ctx.backend() != "vulkan" && ctx.backend() != "cpu") {
        // Custom score functions are compiled at run time: Vulkan and the CPU only; the others refuse.
        EXPECT_TRUE(r.unsupported) << what << " " << tc.label << ": " << r.variant << " " << r.message;
        EXPECT_NE(r.message.find("custom score function (score_mod)"), std::string::npos) << r.message;
        continue;
      }
      EXPECT_TRUE(r.pass) << what << " " << to_string(t) << " " << tc.label << " (variant " << r.variant << "), seed "
                          << seed << ":\n" << r.message;
      if (!tc.attrs.score_mod.empty()) {
        EXPECT_NE(r.variant.find(",score_mod"), std::string::npos) << what << " " << tc.label << ": " << r.variant;
      }
      variants.push_back(r.variant);
    }
  return variants;
}

// The one-pass kernel, then key splits (3 and 7 parts, so that some splits of short rows are empty), on
// every case; each tile height forced once.
TEST(AttentionPaths, EachPathOnEveryCase) {
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    ++checked;
    for (const char* tuning : {"attn_split=1", "attn_split=3", "attn_split=7,attn_rows=8", "attn_rows=32,attn_split=1"}) {
      Context ctx = tuned(d, tuning);
      ValidationCheck vc(ctx);
      const auto variants = run_all_cases(ctx, {DType::f32}, tuning);
      const bool forced_split = std::string(tuning).find("attn_split=1") == std::string::npos;
      for (const auto& v : variants) {
        EXPECT_EQ(v.find(",split=") != std::string::npos, forced_split) << tuning << ": " << v;
        if (std::string(tuning).find("attn_rows=8") != std::string::npos) {
          EXPECT_NE(v.find("bq=8,"), std::string::npos) << v;
        }
      }
    }
    // 16-bit dtypes through the split path.
    Context ctx = tuned(d, "attn_split=4");
    ValidationCheck vc(ctx);
    if (ctx.device().caps.storage16 || true) run_all_cases(ctx, {DType::f16, DType::bf16}, "attn_split=4");
  }
  if (checked == 0) GTEST_SKIP() << "no usable Vulkan device";
}

// The tensor-core path (attention_coopmat.comp, f16, and bf16 staged as scaled f16) forced on every
// registry case whose head dimension it is built for, in one pass and with key splits, each softmax
// variant, and on cases spanning several 64-row query tiles and key tiles; skipped where the device has
// no NV cooperative matrices. (bf16: the workgroup shapes it is built for.)
TEST(AttentionPaths, CooperativeMatrixF16) {
  int checked = 0;
  std::vector<TestCase> big = multi_tile_cases();
  big.push_back({"sq70_sk90_d64_dropout97", qkv(1, 2, 2, 70, 90, 64), {}, 2});  // 1 / (1 - p) = 33: a smaller P scale
  big.back().attrs.p = 0.97;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    // (attn_quad=1: the generic softmax through shared memory where the device would take the
    // softmax on the accumulators.)
    // (attn_cm: the QUAD variant's other workgroups, 8 subgroups and register prefetch.)
    for (const char* tuning : {"attn_path=2,attn_split=1", "attn_path=2,attn_split=3", "attn_path=2,attn_quad=1,attn_split=2",
                               "attn_path=2,attn_cm=2,attn_split=1", "attn_path=2,attn_cm=3,attn_split=3",
                               "attn_path=2,attn_cm=4,attn_split=1"}) {
      Context ctx = tuned(d, tuning);
      if (!ctx.device().caps.coopmat_nv) break;
      ValidationCheck vc(ctx);
      std::vector<TestCase> cases = attention_op().tests;
      cases.insert(cases.end(), big.begin(), big.end());
      for (DType t : {DType::f16, DType::bf16})
        for (const TestCase& tc : cases) {
          const uint64_t seed = fresh_seed();
          check::CaseOptions o;
          o.repeat = true;
          const check::CaseResult r = check::run_case(ctx, attention_op(), t, tc, seed, o);
          if (!r.pass && (r.message.find("is not built for head dimension") != std::string::npos ||
                          r.message.find("does not serve this call") != std::string::npos))
            continue;
          ++checked;
          EXPECT_TRUE(r.pass) << tuning << " " << to_string(t) << " " << tc.label << " (variant " << r.variant
                              << "), seed " << seed << ":\n" << r.message;
          EXPECT_NE(r.variant.find("coopmat-nv"), std::string::npos) << tuning << " " << tc.label << ": " << r.variant;
          EXPECT_EQ(r.variant.find("bf16-staged-as-f16") != std::string::npos, t == DType::bf16) << r.variant;
        }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no Vulkan device with NV cooperative matrices";
}

// attention_backward's tensor-core passes (attention_bwd_coopmat.comp: f16 and bf16, D 32 to 128) forced
// (KF_TUNE attn_path=2), in the QUAD form where the device has its layout and in the generic form
// (attn_quad=1: f16, D 64 and 128, without dropout, soft-capping or ALiBi), on every registry case, refused where they do
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
    Context forced = tuned(d, "attn_path=2");
    if (!forced.device().caps.coopmat_nv) continue;
    Context generic = tuned(d, "attn_path=2,attn_quad=1");
    Context automatic = tuned(d, "");
    ValidationCheck vc(forced), vg(generic), va(automatic);
    for (const DType t : {DType::f16, DType::bf16})
      for (const TestCase& tc : cases) {
        const Attrs& a = tc.attrs;
        const int64_t D = tc.inputs[0][3];
        const auto given = [&](size_t k) { return tc.inputs.size() > k && !tc.inputs[k].empty(); };
        const bool applies = (D == 32 || D == 64 || D == 80 || D == 96 || D == 128) && a.rope == 0 && !given(8) && !given(11);
        const bool quad_options = a.p > 0 || a.softcap > 0 || a.alibi || given(6) || !a.score_mod.empty() ||
                                  (D != 64 && D != 128);  // (the QUAD form's only)
        for (Context* ctx : {&forced, &generic, &automatic}) {
          const uint64_t seed = fresh_seed();
          check::CaseOptions o;
          o.repeat = true;  // no atomics: the same bits twice
          const check::CaseResult r = check::run_case(*ctx, op, t, tc, seed, o);
          // bf16 runs in the QUAD form only: refused in the generic one (and where the device's
          // accumulator layout was not found), portable in the automatic choice there.
          const bool quad_only = t == DType::bf16 && r.message.find("it takes bf16 in its QUAD form only") != std::string::npos;
          const bool runs = applies && !((t == DType::bf16 || quad_options) && (ctx == &generic || quad_only)) &&
                            r.message.find("its generic form does not apply") == std::string::npos &&
                            r.message.find("its generic form takes head dimensions") == std::string::npos;
          if (ctx != &automatic && !runs) {
            EXPECT_FALSE(r.pass) << to_string(t) << " " << tc.label << ": ran " << r.variant;
            EXPECT_NE(r.message.find("the cooperative-matrix path was forced (KF_TUNE attn_path=2) but "), std::string::npos)
                << tc.label << ": " << r.message;
            if (applies) {
              EXPECT_TRUE(r.message.find("it takes bf16 in its QUAD form only") != std::string::npos ||
                          r.message.find("its generic form does not apply dropout, soft-capping, ALiBi or a custom score function") !=
                              std::string::npos ||
                          r.message.find("its generic form takes head dimensions 64 and 128") != std::string::npos)
                  << r.message;
            }
            continue;
          }
          ++checked;
          EXPECT_TRUE(r.pass) << to_string(t) << " " << tc.label << " (variant " << r.variant << "), seed " << seed << ":\n"
                              << r.message;
          if (ctx == &automatic && (t == DType::bf16 || quad_options)) continue;  // (the QUAD form where the device has it)
          EXPECT_EQ(r.variant.find("attention_backward/coopmat-nv") != std::string::npos, applies) << tc.label << ": " << r.variant;
          EXPECT_EQ(r.variant.find("bf16-staged-as-f16") != std::string::npos, applies && t == DType::bf16) << r.variant;
          if (ctx == &generic) {
            EXPECT_EQ(r.variant.find("coopmat-nv-quad"), std::string::npos) << tc.label << ": " << r.variant;
          }
        }
      }
    const check::CaseResult r32 = check::run_case(forced, op, DType::f32, op.tests[0], fresh_seed());
    EXPECT_FALSE(r32.pass);
    EXPECT_NE(r32.message.find("it takes f16 and bf16 only"), std::string::npos) << r32.message;
  }
  if (checked == 0) GTEST_SKIP() << "no Vulkan device with NV cooperative matrices";
}

// bf16 on the tensor-core path runs on f16 times a power of two per tensor: magnitudes beyond
// f16's 65504 (K and V up to 3e5) and far below its normal range (everything near 1e-6) come out as
// the CPU backend computes them from the same bf16 inputs, with and without key splits, in both softmax
// forms; causal, with RoPE (which rotates the scaled values) and lse.
TEST(AttentionPaths, CooperativeMatrixBf16Magnitudes) {
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    for (const char* tuning : {"attn_path=2,attn_split=1", "attn_path=2,attn_split=3", "attn_path=2,attn_quad=1,attn_split=1"}) {
      Context ctx = tuned(d, tuning);
      if (!ctx.device().caps.coopmat_nv) break;
      ValidationCheck vc(ctx);
      struct Mag {
        double q, k, v;
      };
      for (const Mag m : {Mag{1e-4, 2e5, 3e5}, Mag{1e-6, 1e-6, 1e-6}, Mag{3e-4, 7e4, 1e-30}})
        for (const int rope : {0, 1}) {
          const Shape qs{2, 4, 70, 64}, ks{2, 2, 90, 64};
          std::mt19937_64 rng(fresh_seed());
          const std::vector<double> qv = uniform(numel(qs), m.q, rng), kv = uniform(numel(ks), m.k, rng),
                                    vv = uniform(numel(ks), m.v, rng);
          Attrs a;
          a.causal = true;
          a.rope = rope;
          a.return_lse = true;
          std::vector<std::vector<double>> outs, lses;
          for (int which = 0; which < 2; ++which) {
            Context& c = which == 0 ? ctx : cpu();
            Tensor q = c.from_host(qs, DType::bf16, qv), k = c.from_host(ks, DType::bf16, kv), v = c.from_host(ks, DType::bf16, vv);
            const std::vector<Tensor> r = c.call("attention", {q, k, v}, a);
            outs.push_back(r.at(0).to_double());
            lses.push_back(r.at(1).to_double());
            if (which == 0) {
              EXPECT_NE(c.last_variant().find("bf16-staged-as-f16"), std::string::npos) << c.last_variant();
            }
          }
          ++checked;
          double most = 0;
          for (double x : outs[1]) most = std::max(most, std::fabs(x));
          int bad = 0;
          for (size_t e = 0; e < outs[0].size(); ++e)
            if (!(std::fabs(outs[0][e] - outs[1][e]) <= 2e-2 * most) && ++bad <= 5)
              ADD_FAILURE() << tuning << " magnitudes " << m.q << "/" << m.k << "/" << m.v << " rope " << rope << " element " << e
                            << ": vulkan " << outs[0][e] << ", cpu " << outs[1][e] << " (largest " << most << ")";
          for (size_t e = 0; e < lses[0].size(); ++e)
            if (!(std::fabs(lses[0][e] - lses[1][e]) <= 2e-2 * std::max(1.0, std::fabs(lses[1][e]))) && ++bad <= 5)
              ADD_FAILURE() << tuning << " lse row " << e << ": vulkan " << lses[0][e] << ", cpu " << lses[1][e];
          EXPECT_EQ(bad, 0);
        }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no Vulkan device with NV cooperative matrices";
}

// bf16 on the tensor-core backward runs on f16 copies times a power of two per tensor, dS times one from
// its bound: magnitudes beyond f16's range (K and V up to 3e5), far below it (everything near 1e-6) and
// apart (V near 1e-30 with dO near 5e3) give the gradients the CPU backend computes from the same bf16
// inputs (within 2e-2 of each gradient's largest magnitude); causal, GQA.
TEST(AttentionPaths, BackwardBf16Magnitudes) {
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    Context ctx = tuned(d, "attn_path=2");
    if (!ctx.device().caps.coopmat_nv) continue;
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
        std::vector<Tensor> r;
        try {
          r = c.call("attention_backward", in, b);
        } catch (const Error& e) {
          if (std::string(e.what()).find("it takes bf16 in its QUAD form only") != std::string::npos) break;
          throw;
        }
        if (which == 0) {
          EXPECT_NE(c.last_variant().find("bf16-staged-as-f16"), std::string::npos) << c.last_variant();
        }
        grads.push_back({r.at(0).to_double(), r.at(1).to_double(), r.at(2).to_double()});
      }
      if (grads.size() < 2) break;
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
  if (checked == 0) GTEST_SKIP() << "no Vulkan device with NV cooperative matrices and their QUAD layout";
}

// A decode call's q, k, v shapes (one query row per sequence), and shapes with input k set to x.
std::vector<Shape> decode_qkv(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sk, int64_t D) { return qkv(B, Hq, Hkv, 1, Sk, D); }
std::vector<Shape> with(std::vector<Shape> s, size_t k, const Shape& x) {
  s.resize(std::max(s.size(), k + 1));
  s[k] = x;
  return s;
}

// The one-query-row cases of the decode kernels (Vulkan's attention_decode.comp, CUDA's attn_decode):
// head dimensions 8 to 256, G = Hq / Hkv of 1, 4, 8 and above 8, key counts 1, 7, 1000, 4099, key
// lengths (one sequence empty), windows, ALiBi (default slopes, H a power of two or not, and given
// slopes), soft-capping, causal, sinks and lse.
std::vector<TestCase> decode_cases() {
  std::vector<TestCase> cases = {
      {"g1_d64_sk1", decode_qkv(2, 2, 2, 1, 64), {}, 2},
      {"g4_d80_sk7_lens", with(decode_qkv(3, 4, 1, 7, 80), 4, {3}), {}, 2},
      {"g8_d128_sk1000_window_alibi", decode_qkv(1, 8, 1, 1000, 128), {}, 1},
      // Not key lengths with ALiBi over 4099 keys: the nearest visible key's bias reaches -2000, where
      // f32 rounds the scores to 1e-4 (any f32 kernel fails the 1e-6 tolerance there).
      {"g4_d256_sk4099_slopes_lse", with(decode_qkv(2, 8, 2, 4099, 256), 3, {8}), {}, 1},
      {"g1_d128_sk4099_softcap_sinks_lens_lse", with(with(decode_qkv(2, 2, 2, 4099, 128), 7, {2}), 4, {2}), {}, 1},
      {"g8_d64_sk1000_causal_sinks_lens", with(with(decode_qkv(2, 8, 1, 1000, 64), 7, {8}), 4, {2}), {}, 1},
      {"g12_d80_sk1000_alibi_window_softcap", decode_qkv(1, 12, 1, 1000, 80), {}, 1},
      {"g16_d64_sk7_lse", decode_qkv(1, 16, 1, 7, 64), {}, 2},
      {"g4_d8_sk7_causal", decode_qkv(2, 4, 1, 7, 8), {}, 2},
  };
  cases[2].attrs.window = 300, cases[2].attrs.alibi = true;
  cases[3].attrs.return_lse = true;
  cases[4].attrs.softcap = 3, cases[4].attrs.return_lse = true;
  cases[5].attrs.causal = true;
  cases[6].attrs.alibi = true, cases[6].attrs.window = 100, cases[6].attrs.softcap = 4;
  cases[7].attrs.return_lse = true;
  cases[8].attrs.causal = true;
  return cases;
}

// Cases for the decode kernels' reduce-scatter form (a key group's lanes = 4 x its query heads): with
// 8-lane subgroups (lavapipe) G 2 at D 64 (16 packs in f32, 8 in 16-bit: 8 lanes a key) and G 1 at
// 16-bit D 32 or f32 D 16 (4 packs: 4 lanes); with 32-lane subgroups the 16-bit G 2 D 64 and the G 1
// cases. ALiBi's bias stays small (default slopes under a window of 48 keys; given slopes with at most
// 200 keys, and over 33 keys where D is 16), where f32 holds its 1e-6 tolerance (with a window of 200
// and key lengths, the all-reduce form failed it as the reduce-scatter one did, 1.35e-6; given slopes
// over 77 keys at D 16 failed 2 of 200 seeds on lavapipe, up to 1.58e-6, and the portable flash kernel
// errs alike there: f32's error, not the decode kernel's; over 33 keys the worst of 200 was 3.8e-7); key
// lengths leave one batch empty.
std::vector<TestCase> decode_rs_cases() {
  std::vector<TestCase> cases = {
      {"rs_g2_d64_sk300_alibi_window_softcap_lse", decode_qkv(2, 4, 2, 300, 64), {}, 1},
      {"rs_g1_d32_sk200_slopes_causal_sinks_lse", with(with(decode_qkv(2, 3, 3, 200, 32), 3, {3}), 7, {3}), {}, 1},
      {"rs_g1_d16_sk33_softcap_slopes_lens_lse", with(with(decode_qkv(2, 2, 2, 33, 16), 3, {2}), 4, {2}), {}, 1},
      {"rs_g2_d64_sk70_window_lens", with(decode_qkv(3, 4, 2, 70, 64), 4, {3}), {}, 2},
      // Many steps a key group (the heads' rescale factors gathered back to every lane). No ALiBi here:
      // with slopes drawn near 2^-8 all 1000 keys weigh alike under biases to -4, and f32's error comes
      // near its 1e-6 tolerance (the likeliest cause of one failure, its message not kept, in about 40
      // lavapipe runs of an earlier form of this case with slopes).
      {"rs_g2_d64_sk1000_softcap_lse", decode_qkv(1, 4, 2, 1000, 64), {}, 1},
  };
  cases[0].attrs.alibi = true, cases[0].attrs.window = 48, cases[0].attrs.softcap = 5, cases[0].attrs.return_lse = true;
  cases[1].attrs.causal = true, cases[1].attrs.return_lse = true;
  cases[2].attrs.softcap = 3, cases[2].attrs.return_lse = true;
  cases[3].attrs.window = 60;
  cases[4].attrs.softcap = 4, cases[4].attrs.return_lse = true;
  return cases;
}

// Whether a decode variant "...,lk=L,heads=G[xN],..." qualifies for the reduce-scatter form (L = 4 G).
bool decode_rs_shape(const std::string& variant) {
  const auto num = [&](const char* key) {
    const size_t at = variant.find(key);
    return at == std::string::npos ? -1 : std::atoi(variant.c_str() + at + std::strlen(key));
  };
  return num(",lk=") > 0 && num(",lk=") == 4 * num(",heads=");
}

// Calls a forced decode kernel (KF_TUNE attn_decode=2) does not take: each an Unsupported error naming
// the reason, nothing written.
void expect_decode_refusals(const DeviceRef& d) {
  Context ctx = tuned(d, "attn_decode=2");
  const auto t = [&](const Shape& s) {
    std::vector<double> v(static_cast<size_t>(numel(s)), 0.25);
    return ctx.from_host(s, DType::f32, v);
  };
  Tensor q1 = t({1, 2, 1, 64}), q2 = t({1, 2, 2, 64}), k = t({1, 1, 9, 64}), v = t({1, 1, 9, 64});
  Tensor o1 = t({1, 2, 1, 64}), o2 = t({1, 2, 2, 64});
  o1.fill_bytes(kPoison);
  o2.fill_bytes(kPoison);
  Attrs rope, drop;
  rope.rope = 1;
  drop.p = 0.1;
  expect_rejected(ctx, [&] { ctx.run("attention", {q2, k, v}, {o2}); }, ErrorCode::Unsupported,
                  {"attention", "attn_decode=2", "one query row", "Sq = 2"}, {o2});
  expect_rejected(ctx, [&] { ctx.run("attention", {q1, k, v}, {o1}, rope); }, ErrorCode::Unsupported,
                  {"attention", "attn_decode=2", "RoPE"}, {o1});
  expect_rejected(ctx, [&] { ctx.run("attention", {q1, k, v}, {o1}, drop); }, ErrorCode::Unsupported,
                  {"attention", "attn_decode=2", "dropout"}, {o1});
}

// The Vulkan decode kernel (attention_decode.comp) forced (KF_TUNE attn_decode=2) on decode_cases() and
// decode_rs_cases() in f32, f16 and bf16; then with forced key splits (some empty, some one key long);
// then the reduce-scatter cases with that form turned off (KF_TUNE attn_decode_rs=1). The variant ends
// in ",reduce-scatter" exactly where its lanes per key are 4 x its heads and the form is allowed, and
// the reduce-scatter cases take that form on a device whose subgroups have 4 lanes or more.
TEST(AttentionPaths, DecodeKernel) {
  std::vector<TestCase> cases = decode_cases();
  const std::vector<TestCase> rs_cases = decode_rs_cases();
  cases.insert(cases.end(), rs_cases.begin(), rs_cases.end());
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    int rs_runs = 0;
    uint32_t subgroup = 0;
    for (const char* tuning : {"attn_decode=2", "attn_decode=2,attn_split=5", "attn_decode=2,attn_decode_rs=1"}) {
      Context ctx = tuned(d, tuning);
      ValidationCheck vc(ctx);
      const bool forced_split = std::string(tuning).find("attn_split") != std::string::npos;
      const bool no_rs = std::string(tuning).find("attn_decode_rs=1") != std::string::npos;
      subgroup = ctx.device().caps.subgroup_size;
      for (DType t : forced_split ? std::vector<DType>{DType::f32} : std::vector<DType>{DType::f32, DType::f16, DType::bf16})
        for (const TestCase& tc : no_rs ? rs_cases : cases) {
          const uint64_t seed = fresh_seed();
          check::CaseOptions o;
          o.repeat = true;
          const check::CaseResult r = check::run_case(ctx, attention_op(), t, tc, seed, o);
          if (!r.pass && r.message.find("subgroup") != std::string::npos) GTEST_SKIP() << r.message;
          ++checked;
          EXPECT_TRUE(r.pass) << tuning << " " << to_string(t) << " " << tc.label << " (variant " << r.variant << "), seed "
                              << seed << ":\n" << r.message;
          EXPECT_EQ(r.variant.rfind("vulkan:attention/decode,", 0), 0u) << tc.label << ": " << r.variant;
          if (forced_split) EXPECT_NE(r.variant.find(",split=" + std::to_string(std::min<int64_t>(5, tc.inputs[1][2])) + "x"),
                                      std::string::npos) << r.variant;
          const bool rs = r.variant.find(",reduce-scatter") != std::string::npos;
          EXPECT_EQ(rs, !no_rs && decode_rs_shape(r.variant)) << tuning << " " << tc.label << ": " << r.variant;
          rs_runs += rs;
        }
    }
    if (subgroup >= 4) EXPECT_GT(rs_runs, 0) << "no case took the reduce-scatter form";
    expect_decode_refusals(d);
  }
  if (checked == 0) GTEST_SKIP() << "no usable Vulkan device";
}

// The automatic choice: the registry's one-query-row cases and its decode bench shapes (with a short
// cache: the choice does not depend on Sk, and lavapipe is slow) take the decode kernel;
// KF_TUNE attn_decode=1 keeps them on the portable kernel with key splits.
TEST(AttentionPaths, AutomaticDecodeKernel) {
  std::vector<TestCase> cases;
  for (const TestCase& tc : attention_op().tests)
    if (tc.inputs[0][2] == 1) cases.push_back(tc);
  for (const TestCase& bc : attention_op().bench)
    if (bc.label.rfind("decode", 0) == 0) {
      TestCase tc = bc;
      tc.inputs[1][2] = tc.inputs[2][2] = 600;
      cases.push_back(tc);
    }
  ASSERT_GE(cases.size(), 6u);
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    for (const char* tuning : {"", "attn_decode=1"}) {
      Context ctx = tuned(d, tuning);
      if (!ctx.device().caps.subgroup_shuffle) break;
      ++checked;
      ValidationCheck vc(ctx);
      const bool never = *tuning != '\0';
      for (const TestCase& tc : cases) {
        const uint64_t seed = fresh_seed();
        const check::CaseResult r = check::run_case(ctx, attention_op(), DType::f16, tc, seed);
        EXPECT_TRUE(r.pass) << tuning << " " << tc.label << " (variant " << r.variant << "), seed " << seed << ":\n"
                            << r.message;
        EXPECT_EQ(r.variant.rfind("vulkan:attention/decode,", 0) == 0, !never) << tuning << " " << tc.label << ": " << r.variant;
        if (never && tc.inputs[1][2] >= 600) EXPECT_NE(r.variant.find(",split="), std::string::npos) << r.variant;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no Vulkan device with subgroup shuffles";
}

// KF_TUNE set for its lifetime; then the process's own value (or none) again.
class ScopedKfTune {
 public:
  explicit ScopedKfTune(const char* value) {
    if (const char* v = std::getenv("KF_TUNE")) had_ = true, old_ = v;
    setenv("KF_TUNE", value, 1);
  }
  ~ScopedKfTune() {
    if (had_) setenv("KF_TUNE", old_.c_str(), 1);
    else unsetenv("KF_TUNE");
  }
  ScopedKfTune(const ScopedKfTune&) = delete;
  ScopedKfTune& operator=(const ScopedKfTune&) = delete;

 private:
  bool had_ = false;
  std::string old_;
};

// Knobs given through ContextOptions::tuning (as tuned() gives them) replace KF_TUNE's, so that the tests
// here run the paths they name whatever KF_TUNE is set to; a context given no knobs takes KF_TUNE's.
// Under KF_TUNE=no_such_knob=1 a context with knobs of its own opens and one without raises
// InvalidArgument naming the knob; under KF_TUNE=attn_decode=1 a context with attn_decode=2 runs a
// one-query-row case on the decode kernel, and one without knobs does not.
TEST(AttentionPaths, OptionKnobsReplaceKfTune) {
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    ++checked;
    {
      ScopedKfTune env("no_such_knob=1");
      EXPECT_NO_THROW(tuned(d, "attn_split=1"));
      try {
        tuned(d, "");
        ADD_FAILURE() << "KF_TUNE=no_such_knob=1 raised nothing: KF_TUNE was not read";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
        EXPECT_NE(std::string(e.what()).find("no_such_knob"), std::string::npos) << e.what();
      }
    }
    ScopedKfTune env("attn_decode=1");
    const TestCase tc = decode_cases()[0];  // g1_d64_sk1
    for (const char* tuning : {"attn_decode=2", ""}) {
      Context ctx = tuned(d, tuning);
      if (!ctx.device().caps.subgroup_shuffle) break;  // (no decode kernel)
      ValidationCheck vc(ctx);
      const bool own = *tuning != '\0';
      const uint64_t seed = fresh_seed();
      const check::CaseResult r = check::run_case(ctx, attention_op(), DType::f32, tc, seed);
      EXPECT_TRUE(r.pass) << "'" << tuning << "' (variant " << r.variant << "), seed " << seed << ":\n" << r.message;
      EXPECT_EQ(r.variant.rfind("vulkan:attention/decode,", 0) == 0, own) << "'" << tuning << "': " << r.variant;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no usable Vulkan device";
}

// Decoding (one query row, a long cache) takes the key-split path by itself (the decode kernel, which
// always splits, or the portable kernel with splits where the decode kernel is not taken); a prefill
// does not.
TEST(AttentionPaths, AutomaticSplitForDecode) {
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    ++checked;
    Context& ctx = context_for(d);
    ValidationCheck vc(ctx);
    const OpDef& op = attention_op();
    TestCase decode{"decode", {{1, 4, 1, 64}, {1, 2, 2048, 64}, {1, 2, 2048, 64}}, {}, 2};
    decode.attrs.return_lse = true;
    check::CaseResult r = check::run_case(ctx, op, DType::f32, decode, fresh_seed());
    EXPECT_TRUE(r.pass) << r.message;
    EXPECT_NE(r.variant.find(",split="), std::string::npos) << r.variant;
    TestCase prefill{"prefill", {{1, 8, 128, 64}, {1, 8, 128, 64}, {1, 8, 128, 64}}, {}, 2};
    prefill.attrs.causal = true;
    r = check::run_case(ctx, op, DType::f32, prefill, fresh_seed());
    EXPECT_TRUE(r.pass) << r.message;
    EXPECT_EQ(r.variant.find(",split="), std::string::npos) << r.variant;
  }
  if (checked == 0) GTEST_SKIP() << "no usable Vulkan device";
}

// The float64 reference against the unfused computation: attention_scores, softmax, matmul (CPU).
TEST(AttentionReference, MatchesScoresSoftmaxMatmul) {
  Context& c = cpu();
  std::mt19937_64 rng(7);
  const Shape qs{2, 3, 5, 16}, ks{2, 3, 9, 16};
  Tensor q = c.from_host(qs, DType::f64, uniform(numel(qs), 2, rng));
  Tensor k = c.from_host(ks, DType::f64, uniform(numel(ks), 2, rng));
  Tensor v = c.from_host(ks, DType::f64, uniform(numel(ks), 2, rng));
  Attrs a;
  a.return_lse = true;
  const auto outs = c.call("attention", {q, k, v}, a);
  Tensor s = c.call("attention_scores", {q, k}).at(0);
  Tensor p = c.call("softmax", {s}).at(0);
  Tensor o = c.call("matmul", {p, v}).at(0);
  EXPECT_EQ(compare(outs[0].to_double(), o.to_double(), DType::f64, 16), "");
  // lse = log sum exp of the scores.
  const auto sv = s.to_double(), lse = outs[1].to_double();
  for (size_t r = 0; r < lse.size(); ++r) {
    double m = -INFINITY, l = 0;
    for (int j = 0; j < 9; ++j) m = std::max(m, sv[r * 9 + j]);
    for (int j = 0; j < 9; ++j) l += std::exp(sv[r * 9 + j] - m);
    EXPECT_NEAR(lse[r], m + std::log(l), 1e-12);
  }
}

// Causal alignment (bottom right), fully masked rows, sinks and key lengths on a hand-checked case.
TEST(AttentionReference, MaskSemantics) {
  Context& c = cpu();
  // Sq = 3, Sk = 2, causal: query i sees keys j <= i - 1; row 0 sees nothing -> zeros, lse -inf.
  std::vector<double> qv(3 * 8, 0.0), kv(2 * 8, 0.0), vv(2 * 8);
  for (int j = 0; j < 2; ++j)
    for (int d = 0; d < 8; ++d) vv[j * 8 + d] = j + 1;  // v rows all 1s and all 2s
  Tensor q = c.from_host({1, 1, 3, 8}, DType::f64, qv), k = c.from_host({1, 1, 2, 8}, DType::f64, kv),
         v = c.from_host({1, 1, 2, 8}, DType::f64, vv);
  Attrs a;
  a.causal = true;
  a.return_lse = true;
  auto outs = c.call("attention", {q, k, v}, a);
  auto o = outs[0].to_double(), lse = outs[1].to_double();
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(o[d], 0.0);              // row 0: no key
    EXPECT_NEAR(o[8 + d], 1.0, 1e-15); // row 1: key 0 only
    EXPECT_NEAR(o[16 + d], 1.5, 1e-15); // row 2: keys 0 and 1, equal scores
  }
  EXPECT_EQ(lse[0], -std::numeric_limits<double>::infinity());
  EXPECT_NEAR(lse[2], std::log(2.0), 1e-15);
  // A sink of logit 0 joins the denominator: row 2 -> (1 + 2) / 3, row 0 stays zero, lse(0) = 0.
  Tensor sinks = c.from_host({1}, DType::f64, {0.0});
  outs = c.call("attention", {q, k, v, Tensor(), Tensor(), Tensor(), Tensor(), sinks}, a);
  o = outs[0].to_double();
  lse = outs[1].to_double();
  EXPECT_EQ(o[0], 0.0);
  EXPECT_NEAR(o[16], 1.0, 1e-15);
  EXPECT_NEAR(lse[0], 0.0, 1e-15);
  // Key length 1: row 2 sees key 0 only.
  Tensor len = c.from_host({1}, DType::i32, {1});
  o = c.call("attention", {q, k, v, Tensor(), len}, a)[0].to_double();
  EXPECT_NEAR(o[16], 1.0, 1e-15);
}

// Bad arguments: a clear kf::Error naming the argument, and the output left untouched.
TEST(AttentionErrors, ArgumentsAreChecked) {
  for (const auto& d : devices()) {
    Context& c = context_for(d);
    const auto t = [&](const Shape& s, DType dt = DType::f32) {
      std::vector<double> v(static_cast<size_t>(numel(s)), 0.25);
      return c.from_host(s, dt, v);
    };
    Tensor q = t({1, 4, 5, 16}), k = t({1, 2, 7, 16}), v = t({1, 2, 7, 16});
    Tensor o = t({1, 4, 5, 16});
    o.fill_bytes(0x7F);
    const auto before = raw_bytes(o);
    struct Bad {
      std::vector<Tensor> in;
      Attrs a;
      std::string needle;
    };
    Attrs win, rope, p1, cap, bs, lse;
    win.window = -1;
    rope.rope = 3;
    p1.p = 1.0;
    cap.softcap = -1;
    bs.block_size = 0;
    const std::vector<Bad> bad = {
        {{q, t({1, 3, 7, 16}), t({1, 3, 7, 16})}, {}, "Hkv dividing"},
        {{t({1, 4, 5, 12}), t({1, 2, 7, 12}), t({1, 2, 7, 12})}, {}, "multiple of 8"},
        {{t({1, 4, 5, 264}), t({1, 2, 7, 264}), t({1, 2, 7, 264})}, {}, "at most 256"},
        {{q, k, t({1, 2, 6, 16})}, {}, "'v'"},
        {{q, k, v}, win, "'window'"},
        {{q, k, v}, rope, "'rope'"},
        {{q, k, v}, p1, "'p'"},
        {{q, k, v}, cap, "'softcap'"},
        {{q, k, v, t({3})}, {}, "'alibi_slopes'"},
        {{q, k, v, Tensor(), t({2}, DType::i32)}, {}, "'key_lengths'"},
        {{q, k, v, Tensor(), Tensor(), t({2}, DType::i32)}, {}, "cu_seqlens"},
        {{q, k, v, Tensor(), Tensor(), Tensor(), Tensor(), t({4}), t({1, 1}, DType::i32)}, bs, "'block_size'"},
        {{q, k, v, Tensor(), Tensor(), Tensor(), Tensor(), t({3})}, {}, "'sinks'"},
        {{q, k, v, Tensor(), t({1})}, {}, "'key_lengths' has dtype f32"},
    };
    for (const auto& b : bad) {
      try {
        c.run("attention", b.in, {o}, b.a);
        ADD_FAILURE() << "no error for a case expecting " << b.needle << " on " << d.name;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(b.needle), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("attention"), std::string::npos) << e.what();
      }
    }
    lse.return_lse = true;
    EXPECT_THROW(c.run("attention", {q, k, v}, {o}, lse), Error);  // lse asked for, one output given
    EXPECT_EQ(raw_bytes(o), before) << "an output was written by a rejected call on " << d.name;
    EXPECT_THROW(c.call("attention_scores", {q, t({1, 3, 7, 16})}), Error);
    // attention_backward: its own tensors, and the forward's checks under its own name.
    Tensor lse_t = t({1, 4, 5}), dq = t({1, 4, 5, 16}), dk = t({1, 2, 7, 16}), dv = t({1, 2, 7, 16});
    const std::vector<std::pair<std::vector<Tensor>, std::string>> bad_bwd = {
        {{q, k, v, o, o, t({1, 4, 4})}, "'lse'"},
        {{q, k, v, t({1, 4, 5, 8}), o, lse_t}, "'o'"},
        {{q, k, v, o, o, lse_t, t({3})}, "'alibi_slopes'"},
        {{q, k, t({1, 2, 6, 16}), o, o, lse_t}, "'v'"},
    };
    for (const auto& [in, needle] : bad_bwd) {
      try {
        c.run("attention_backward", in, {dq, dk, dv});
        ADD_FAILURE() << "no error for a case expecting " << needle;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("attention_backward: "), std::string::npos) << e.what();
      }
    }
  }
}


// ---- Custom score functions (Attrs::score_mod, compiled into the kernel at run time).

// The reference's semantics against options it must equal: a -0.3 |i - j| bias is ALiBi with slopes
// 0.3, and "j > i ? -inf : score" is the causal mask when Sq == Sk (float64, to 1e-12).
TEST(AttentionScoreMod, ReferenceMatchesEquivalentOptions) {
  Context& c = cpu();
  const auto run = [&](const std::vector<Tensor>& in, const Attrs& a) { return c.call("attention", in, a)[0].to_double(); };
  const auto rand = [&](const Shape& s, uint64_t seed) {
    std::vector<double> v(static_cast<size_t>(numel(s)));
    for (size_t k = 0; k < v.size(); ++k) v[k] = std::sin(1.0 + 0.37 * double(k) + double(seed));
    return c.from_host(s, DType::f64, v);
  };
  Tensor q = rand({1, 2, 9, 16}, 1), k = rand({1, 2, 9, 16}, 2), v = rand({1, 2, 9, 16}, 3);
  Tensor slopes = c.from_host({2}, DType::f64, {0.3, 0.3});
  Attrs fn, causal, fn_mask;
  fn.score_mod = "score - 0.3 * float(abs(i - j))";
  causal.causal = true;
  fn_mask.score_mod = "j > i ? -inf : score";
  const auto a = run({q, k, v}, fn), b = run({q, k, v, slopes}, {});
  const auto m = run({q, k, v}, fn_mask), n = run({q, k, v}, causal);
  for (size_t e = 0; e < a.size(); ++e) {
    EXPECT_NEAR(a[e], b[e], 1e-12) << e;
    EXPECT_NEAR(m[e], n[e], 1e-12) << e;
  }
}

// A Vulkan device runs the registry's score_mod cases on its run-time-compiled kernels (the forward with
// and without key splits, the backward, the decode kernel; the tensor-core ones where the device has
// them, the portable ones elsewhere), so that a missing shader compiler fails here rather than passing
// as "unsupported".
TEST(AttentionScoreMod, VulkanCompilesAndRuns) {
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    ++checked;
    for (const char* tuning : {"", "attn_split=3"}) {
      Context ctx = tuned(d, tuning);
      ValidationCheck vc(ctx);
      for (const auto* op : {&attention_op(), &get_op("attention_backward")})
        for (const TestCase& tc : op->tests) {
          if (tc.attrs.score_mod.empty()) continue;
          for (DType t : {DType::f32, DType::f16}) {
            const uint64_t seed = fresh_seed();
            check::CaseOptions o;
            o.repeat = true;
            const check::CaseResult r = check::run_case(ctx, *op, t, tc, seed, o);
            EXPECT_TRUE(r.pass) << op->name << " " << tuning << " " << to_string(t) << " " << tc.label << " (variant "
                                << r.variant << "), seed " << seed << ":\n" << r.message;
            EXPECT_NE(r.variant.find(",score_mod"), std::string::npos) << tc.label << ": " << r.variant;
          }
        }
    }
    // One query row: the decode kernel with the function (forced, and in both its forms), and the flash
    // kernel with key splits when the decode kernel is turned off.
    TestCase one{"decode_score_mod", qkv(2, 8, 2, 1, 200, 64), {}, 1.5};
    one.attrs.score_mod = "(j + h) % 5 == 0 ? -inf : score + 0.01 * float(j - 3 * h)";
    for (const char* tuning : {"attn_decode=2", "attn_decode=2,attn_decode_rs=1", "attn_decode=1,attn_split=3"}) {
      Context ctx = tuned(d, tuning);
      ValidationCheck vc(ctx);
      const uint64_t seed = fresh_seed();
      const check::CaseResult r = check::run_case(ctx, attention_op(), DType::f16, one, seed, {});
      if (r.unsupported) continue;  // (a device without the decode kernel's subgroup operations)
      EXPECT_TRUE(r.pass) << tuning << " (variant " << r.variant << "), seed " << seed << ":\n" << r.message;
      const bool decode = std::string(tuning).find("attn_decode=2") != std::string::npos;
      EXPECT_NE(r.variant.find(decode ? "attention/decode,score_mod" : "attention/portable,score_mod"), std::string::npos)
          << tuning << ": " << r.variant;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no usable Vulkan device";
}

// A function that does not parse is an InvalidArgument naming the op, 'score_mod' and the column, on
// every device; nothing is written and the context runs the next call. A backend without run-time
// compilation (CUDA) refuses a valid one as Unsupported, and the CPU fallback then serves it.
TEST(AttentionScoreMod, ErrorsAndRefusals) {
  for (const auto& d : devices()) {
    Context& c = context_for(d);
    Tensor q = c.from_host({1, 2, 3, 16}, DType::f32, std::vector<double>(96, 0.5));
    Tensor kv = c.from_host({1, 2, 5, 16}, DType::f32, std::vector<double>(160, 0.25));
    Tensor o = c.empty({1, 2, 3, 16}, DType::f32);
    o.fill_bytes(kPoison);
    for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
             {"score +", "column"}, {"score * k", "'k'"}, {"max(score)", "max"}, {"score && 1", "column"}}) {
      Attrs bad;
      bad.score_mod = text;
      expect_rejected(c, [&] { c.run("attention", {q, kv, kv}, {o}, bad); }, ErrorCode::InvalidArgument,
                      {"attention: argument 'score_mod'", needle}, {o});
      Tensor lse = c.empty({1, 2, 3}, DType::f32), dq = c.empty({1, 2, 3, 16}, DType::f32);
      Tensor dk = c.empty({1, 2, 5, 16}, DType::f32), dv = c.empty({1, 2, 5, 16}, DType::f32);
      for (Tensor* t : {&dq, &dk, &dv}) t->fill_bytes(kPoison);
      expect_rejected(c, [&] { c.run("attention_backward", {q, kv, kv, q, q, lse}, {dq, dk, dv}, bad); },
                      ErrorCode::InvalidArgument, {"attention_backward: argument 'score_mod'"}, {dq, dk, dv});
    }
    Attrs fn;
    fn.score_mod = "i == 0 ? score : score - 0.5";
    if (c.backend() == "vulkan" || c.backend() == "cpu") {
      c.run("attention", {q, kv, kv}, {o}, fn);
      EXPECT_EQ(c.last_variant().find("cpu-fallback"), std::string::npos) << c.last_variant();
      continue;
    }
    expect_rejected(c, [&] { c.run("attention", {q, kv, kv}, {o}, fn); }, ErrorCode::Unsupported,
                    {"custom score function (score_mod)"}, {o});
    ContextOptions fo = options_for(d);
    fo.allow_cpu_fallback = true;
    Context fb = Context::create(fo);
    Tensor qf = fb.from_host({1, 2, 3, 16}, DType::f32, std::vector<double>(96, 0.5));
    Tensor kvf = fb.from_host({1, 2, 5, 16}, DType::f32, std::vector<double>(160, 0.25));
    const auto out = fb.call("attention", {qf, kvf, kvf}, fn);
    EXPECT_NE(fb.last_variant().find("cpu-fallback"), std::string::npos) << fb.last_variant();
    const auto ref = cpu().call("attention", {cpu().from_host({1, 2, 3, 16}, DType::f32, std::vector<double>(96, 0.5)),
                                              cpu().from_host({1, 2, 5, 16}, DType::f32, std::vector<double>(160, 0.25)),
                                              cpu().from_host({1, 2, 5, 16}, DType::f32, std::vector<double>(160, 0.25))}, fn);
    EXPECT_EQ(out[0].to_double(), ref[0].to_double());
  }
}

// ---- The CUDA backend (hal/cuda/attention.cu): each kernel forced on every registry case, the
// automatic choice, and the dropout mask against the generator and the CPU backend. Skipped, saying why,
// where the build or the machine has no usable CUDA device.

// The portable flash kernel (KF_TUNE attn_path=1) in one pass and with key splits (3 and 7 parts, so
// that some splits of short rows are empty), each tile height; f16, bf16 and f64 through the splits.
TEST(AttentionCuda, PortableKernelOnEveryCase) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  for (const auto& d : devs) {
    for (const char* tuning : {"attn_path=1,attn_split=1", "attn_path=1,attn_split=3", "attn_path=1,attn_split=7,attn_rows=8",
                               "attn_path=1,attn_rows=32,attn_split=1"}) {
      Context ctx = tuned(d, tuning);
      const auto variants = run_all_cases(ctx, {DType::f32}, tuning);
      const bool forced_split = std::string(tuning).find("attn_split=1") == std::string::npos;
      for (const auto& v : variants) {
        EXPECT_NE(v.find("attention/flash-simt"), std::string::npos) << tuning << ": " << v;
        EXPECT_EQ(v.find(",split=") != std::string::npos, forced_split) << tuning << ": " << v;
        if (std::string(tuning).find("attn_rows=8") != std::string::npos) {
          EXPECT_NE(v.find("bq=8,"), std::string::npos) << v;
        }
      }
    }
    Context ctx = tuned(d, "attn_path=1,attn_split=4");
    run_all_cases(ctx, {DType::f16, DType::bf16, DType::f64}, "attn_path=1,attn_split=4");
    Context one = tuned(d, "attn_path=1,attn_split=1");
    run_all_cases(one, {DType::f16, DType::bf16, DType::f64}, "attn_path=1,attn_split=1");
  }
}

// Whether the device runs the warpgroup kernel (flash-wgmma: an sm_90 GPU and a build with sm_90a code),
// asked by forcing it on a small case; where it does not run, the refusal must say why.
bool wgmma_runs(const DeviceRef& d) {
  Context ctx = tuned(d, "attn_path=2,attn_wmma=wgmma,attn_split=1");
  const check::CaseResult r = check::run_case(ctx, attention_op(), DType::f16, attention_op().tests[0], fresh_seed());
  if (r.pass) {
    EXPECT_NE(r.variant.find("attention/flash-wgmma,bq=128,bk=128"), std::string::npos) << r.variant;
    return true;
  }
  EXPECT_NE(r.message.find("warpgroup kernel was forced"), std::string::npos) << r.message;
  // An sm_90 GPU refuses it only for a build without sm_90a code.
  const std::string driver = ctx.device().driver;
  if (driver.find(", sm_90,") != std::string::npos) {
    EXPECT_NE(r.message.find("no sm_90a code"), std::string::npos) << driver << ": " << r.message;
  }
  return false;
}

// The tensor-core kernels (KF_TUNE attn_path=2, f16 and bf16) on every registry case whose head dimension
// is a multiple of 16, in one pass and with key splits, and on cases spanning several query and key tiles;
// D = 8 must be refused (Unsupported, saying why). Which kernel: by default flash-wgmma where it runs and
// applies (D <= 256, no RoPE, soft-capping, ALiBi or block mask, dropout up to D 128), else flash-mma where that
// applies (D 64 / 128, no RoPE), else flash-wmma-regs; attn_wmma=wgmma / mma force those two (refused,
// saying why, where they do not apply), regs flash-wmma-regs, smem flash-wmma. flash-wgmma takes head
// dimensions that are multiples of 8 up to 256 (80 and 96 zero-padded to 128).
TEST(AttentionCuda, TensorCoreKernelF16BF16) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  std::vector<TestCase> big = multi_tile_cases();
  big.push_back({"sq200_sk200_d128_causal_lse", qkv(1, 1, 1, 200, 200, 128), {}, 2});
  big.back().attrs.causal = true, big.back().attrs.return_lse = true;
  // flash-mma's and flash-wgmma's awkward shapes: GQA over several query tiles with Sq != Sk, causal both
  // ways, windows, key lengths, sinks, packed sequences, dropout.
  big.push_back({"gqa_h6_kv2_sq150_sk200_d128_causal", qkv(2, 6, 2, 150, 200, 128), {}, 2});
  big.back().attrs.causal = true;
  big.push_back({"sq200_sk70_d64_causal_lse", qkv(1, 2, 1, 200, 70, 64), {}, 2});
  big.back().attrs.causal = true, big.back().attrs.return_lse = true;
  big.push_back({"sq70_sk190_d128_dropout_lse", qkv(1, 2, 2, 70, 190, 128), {}, 2});
  big.back().attrs.p = 0.25, big.back().attrs.return_lse = true;
  big.push_back({"gqa_h6_kv2_sq300_sk333_d128_causal_window100", qkv(1, 6, 2, 300, 333, 128), {}, 2});
  big.back().attrs.causal = true, big.back().attrs.window = 100;
  // Dropout over several key tiles with tiles a warpgroup skips (before a window's start, past the diagonal):
  // flash-wgmma draws a tile's keep bits while the previous tile's P V runs, where it saw that tile.
  big.push_back({"gqa_h6_kv2_sq300_sk600_d128_causal_window150_dropout", qkv(1, 6, 2, 300, 600, 128), {}, 2});
  big.back().attrs.causal = true, big.back().attrs.window = 150, big.back().attrs.p = 0.2, big.back().attrs.seed = 21;
  big.push_back({"sq300_sk520_d64_causal_dropout", qkv(1, 2, 2, 300, 520, 64), {}, 2});
  big.back().attrs.causal = true, big.back().attrs.p = 0.3, big.back().attrs.seed = 9, big.back().attrs.offset = 6;
  big.push_back({"b2_sq260_sk520_d64_key_lengths_sinks_lse",
                 {{2, 4, 260, 64}, {2, 4, 520, 64}, {2, 4, 520, 64}, {}, {2}, {}, {}, {4}}, {}, 2});
  big.back().attrs.return_lse = true;
  big.push_back({"gqa_h4_kv2_sq200_sk300_d96_window50_lse", qkv(1, 4, 2, 200, 300, 96), {}, 2});
  big.back().attrs.window = 50, big.back().attrs.return_lse = true;
  big.push_back({"sq150_sk260_d80_causal", qkv(2, 2, 2, 150, 260, 80), {}, 2});
  big.back().attrs.causal = true;
  big.push_back({"sq130_sk140_d32", qkv(1, 3, 3, 130, 140, 32), {}, 2});
  big.push_back({"gqa_h4_kv2_sq150_sk270_d256_causal_lse", qkv(1, 4, 2, 150, 270, 256), {}, 2});
  big.back().attrs.causal = true, big.back().attrs.return_lse = true;
  big.push_back({"varlen_4seq_sq400_sk500_d128_causal", {{1, 2, 400, 128}, {1, 2, 500, 128}, {1, 2, 500, 128}, {}, {}, {5}, {5}}, {}, 2});
  big.back().attrs.causal = true;
  int checked = 0, refused = 0, wgmma_checked = 0;
  for (const auto& d : devs) {
    const bool wg_runs = wgmma_runs(d);
    for (const char* tuning : {"attn_path=2,attn_wmma=smem,attn_split=1", "attn_path=2,attn_wmma=smem,attn_split=3",
                               "attn_path=2,attn_wmma=regs,attn_split=1", "attn_path=2,attn_wmma=regs,attn_split=2",
                               "attn_path=2,attn_split=1", "attn_path=2,attn_split=3",
                               "attn_path=2,attn_wmma=wgmma,attn_split=1", "attn_path=2,attn_wmma=wgmma,attn_split=2",
                               "attn_path=2,attn_wmma=mma,attn_split=1", "attn_path=2,attn_wmma=mma,attn_split=3",
                               "attn_path=2,attn_wmma=mma,attn_rows_per_warp=16,attn_split=1",
                               "attn_path=2,attn_wmma=mma,attn_rows_per_warp=16,attn_split=2"}) {
      Context ctx = tuned(d, tuning);
      const std::string tn(tuning);
      const bool f_smem = tn.find("attn_wmma=smem") != std::string::npos, f_regs = tn.find("attn_wmma=regs") != std::string::npos;
      const bool f_wg = tn.find("attn_wmma=wgmma") != std::string::npos, f_mma = tn.find("attn_wmma=mma") != std::string::npos;
      std::vector<TestCase> cases = without_score_mod(attention_op().tests);
      cases.insert(cases.end(), big.begin(), big.end());
      for (DType t : {DType::f16, DType::bf16})
        for (const TestCase& tc : cases) {
          const uint64_t seed = fresh_seed();
          check::CaseOptions o;
          o.repeat = true;
          const check::CaseResult r = check::run_case(ctx, attention_op(), t, tc, seed, o);
          if (!r.pass && r.message.find("this build has no tensor-core") != std::string::npos)
            GTEST_SKIP() << d.name << ": " << r.message;
          const int64_t D = tc.inputs[0][3];
          if (D % 16 != 0) {
            EXPECT_FALSE(r.pass) << tc.label << ": forced onto the tensor-core kernel with D % 16 != 0";
            EXPECT_NE(r.message.find("multiple of 16"), std::string::npos) << r.message;
            ++refused;
            continue;
          }
          const auto has = [&](size_t k) { return tc.inputs.size() > k && !tc.inputs[k].empty(); };
          const bool mma_ok = (D == 64 || D == 128) && tc.attrs.rope == 0;
          const bool wg_ok = wg_runs && D % 8 == 0 && D <= 256 && tc.attrs.rope == 0 && (tc.attrs.p == 0 || D <= 128) &&
                             tc.attrs.softcap == 0 && !tc.attrs.alibi && !has(3) && !has(8);
          if ((f_wg && !wg_ok) || (f_mma && !mma_ok)) {
            EXPECT_FALSE(r.pass) << tuning << " " << tc.label << ": ran (" << r.variant << ") where it should be refused";
            EXPECT_NE(r.message.find(f_wg ? "warpgroup kernel was forced" : "FlashAttention-2 kernel was forced"), std::string::npos)
                << r.message;
            if (f_wg && wg_runs && tc.attrs.p > 0 && D > 128 && D <= 256 && tc.attrs.rope == 0 && tc.attrs.softcap == 0 && !tc.attrs.alibi &&
                !has(3) && !has(8)) {  // (the last of the refusal's checks: hal/cuda/kernels.cpp)
              EXPECT_NE(r.message.find("it applies dropout at head dimensions up to 128 only"), std::string::npos) << r.message;
            }
            ++refused;
            continue;
          }
          ++checked;
          EXPECT_TRUE(r.pass) << tuning << " " << to_string(t) << " " << tc.label << " (variant " << r.variant
                              << "), seed " << seed << ":\n" << r.message;
          const std::string want = f_smem ? "attention/flash-wmma,"
                                   : f_regs ? "attention/flash-wmma-regs,"
                                   : f_wg || (!f_mma && wg_ok) ? (D > 128 ? "attention/flash-wgmma,bq=128,bk=64" : "attention/flash-wgmma,bq=128,bk=128")
                                   : f_mma || mma_ok ? (tn.find("attn_rows_per_warp=16") != std::string::npos
                                                           ? "attention/flash-mma,bq=64,bk=64,warp_rows=16"
                                                           : "attention/flash-mma,bq=128,bk=64,warp_rows=32")
                                                     : "attention/flash-wmma-regs,";
          EXPECT_NE(r.variant.find(want), std::string::npos) << tuning << " " << tc.label << ": " << r.variant << ", wanted " << want;
          wgmma_checked += want.find("wgmma") != std::string::npos;
        }
      // f32 is refused by the forced tensor-core kernel.
      const check::CaseResult r = check::run_case(ctx, attention_op(), DType::f32, attention_op().tests[0], fresh_seed());
      EXPECT_FALSE(r.pass);
      EXPECT_NE(r.message.find("f16 and bf16 only"), std::string::npos) << r.message;
    }
    if (wg_runs) {
      EXPECT_GT(wgmma_checked, 0);
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(refused, 0);
}

// A KF_TUNE attn_wmma value the options table does not know is refused (InvalidArgument naming the knob
// and the values it takes) when the context is made; a context with a known value still works.
TEST(AttentionCuda, UnknownKernelKnobRefused) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  for (const auto& d : devs) {
    try {
      Context bad = tuned(d, "attn_wmma=wgmmma");
      ADD_FAILURE() << "KF_TUNE attn_wmma=wgmmma was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("attn_wmma=wgmmma"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("attn_wmma takes auto, regs, smem, mma or wgmma"), std::string::npos) << e.what();
    }
    Context ok = tuned(d, "attn_path=2,attn_wmma=mma");
    const check::CaseResult r = check::run_case(ok, attention_op(), DType::f16, attention_op().tests[0], fresh_seed());
    EXPECT_TRUE(r.pass) << r.message;
  }
}

// The decode kernel (attention.cu attn_decode) forced (KF_TUNE attn_decode=2) on one-query-row cases in
// f32, f16 and bf16, as AttentionPaths.DecodeKernel does for the Vulkan one (head dimensions 8 to 256, G
// of 1, 4, 8 and above 8, key lengths, windows, ALiBi, soft-capping, causal, sinks, lse), then with forced
// key splits (some empty); and the calls it does not take refused, saying why.
TEST(AttentionCuda, DecodeKernel) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  std::vector<TestCase> cases = decode_cases();
  cases.push_back({"g3_d96_sk30000", {{2, 6, 1, 96}, {2, 2, 30000, 96}, {2, 2, 30000, 96}}, {}, 1});
  for (const auto& d : devs) {
    for (const char* tuning : {"attn_decode=2", "attn_decode=2,attn_split=5"}) {
      Context ctx = tuned(d, tuning);
      const bool forced_split = std::string(tuning).find("attn_split") != std::string::npos;
      for (DType t : {DType::f32, DType::f16, DType::bf16})
        for (const TestCase& tc : cases) {
          if (t == DType::f32 && tc.inputs[0][3] % 4 != 0) continue;
          if (t != DType::f32 && tc.inputs[0][3] % 8 != 0) continue;
          const uint64_t seed = fresh_seed();
          check::CaseOptions o;
          o.repeat = true;
          const check::CaseResult r = check::run_case(ctx, attention_op(), t, tc, seed, o);
          EXPECT_TRUE(r.pass) << tuning << " " << to_string(t) << " " << tc.label << " (variant " << r.variant << "), seed "
                              << seed << ":\n" << r.message;
          EXPECT_EQ(r.variant.rfind("cuda:attention/decode,", 0), 0u) << tc.label << ": " << r.variant;
          if (forced_split) {
            EXPECT_NE(r.variant.find(",split=" + std::to_string(std::min<int64_t>(5, tc.inputs[1][2])) + "x"), std::string::npos)
                << r.variant;
          }
        }
    }
    expect_decode_refusals(d);
  }
}

// The automatic choice: decoding (one query row, a long cache) takes the decode kernel with key splits; an
// f16 / bf16 prefill with D = 64 takes a tensor-core flash kernel (flash-wgmma on an sm_90 GPU, else
// flash-mma) in one pass; f32 stays portable.
TEST(AttentionCuda, AutomaticChoice) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  for (const auto& d : devs) {
    Context& ctx = context_for(d);
    // range 1: over 2048 keys the f32 rounding alone comes near the 1e-6 tolerance for wider scores.
    TestCase decode{"decode", {{1, 4, 1, 64}, {1, 2, 2048, 64}, {1, 2, 2048, 64}}, {}, 1};
    decode.attrs.return_lse = true;
    for (DType t : {DType::f32, DType::f16}) {
      const check::CaseResult r = check::run_case(ctx, attention_op(), t, decode, fresh_seed());
      EXPECT_TRUE(r.pass) << r.message;
      EXPECT_NE(r.variant.find("attention/decode,"), std::string::npos) << r.variant;
      EXPECT_NE(r.variant.find(",split="), std::string::npos) << r.variant;
    }
    TestCase prefill{"prefill", {{2, 8, 128, 64}, {2, 8, 128, 64}, {2, 8, 128, 64}}, {}, 2};
    prefill.attrs.causal = true;
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      const check::CaseResult r = check::run_case(ctx, attention_op(), t, prefill, fresh_seed());
      EXPECT_TRUE(r.pass) << to_string(t) << ": " << r.message;
      EXPECT_EQ(r.variant.find(",split="), std::string::npos) << r.variant;
      if (t != DType::f32 && r.variant.find("flash-mma") == std::string::npos && r.variant.find("flash-wgmma") == std::string::npos &&
          d.backend == "cuda")
        ADD_FAILURE() << to_string(t) << " prefill did not take the tensor-core kernel: " << r.variant;
    }
  }
}

// Dropout inside attention keeps exactly the probabilities docs/ops.md's generator keeps at the
// (b, h, i, j) index of [B, Hq, Sq, Sk], on every CUDA path, as the CPU backend does: with q = 0 every
// visible score is equal and v = the identity (Sk = D), so o[b, h, i, d] = keep(b, h, i, d) / (Sk (1 - p))
// shows the mask element by element.
// Attention's dropout mask, bit for bit: with Q = 0 every visible probability is 1 / Sk and V's rows are
// one-hot (key j at column j, Sk <= D), so output (r, j) is 1 / (Sk (1 - p)) where keep(r Sk + j) and
// 0 where not: each element of the device's mask against docs/ops.md's generator and the CPU backend.
// Sk % 4 != 0 puts odd rows' Philox blocks across row ends (the tensor-core kernels' shared-block draws
// take each element's own block there).
struct MaskGeometry {
  int64_t B, Hq, Hkv, Sq, Sk, D;
  const char* tuning;
  DType dtype;
  const char* variant;  // what last_variant() must contain
};
void check_dropout_masks(const DeviceRef& d, const std::vector<MaskGeometry>& geos) {
  Attrs a;
  a.p = 0.3;
  a.seed = 0x9e3779b97f4a7c15ull;
  a.offset = 12345;
  const uint32_t thr = ref::dropout_threshold(a.p);
  for (const MaskGeometry& g : geos) {
    const Shape qs{g.B, g.Hq, g.Sq, g.D}, ks{g.B, g.Hkv, g.Sk, g.D};
    std::vector<double> vv(static_cast<size_t>(numel(ks)));
    for (int64_t r = 0; r < g.B * g.Hkv; ++r)
      for (int64_t j = 0; j < g.Sk; ++j) vv[size_t((r * g.Sk + j) * g.D + j)] = 1.0;
    std::mt19937_64 rng(11);
    const std::vector<double> kv = uniform(numel(ks), 1, rng);
    std::vector<std::vector<double>> outs;
    Context dev = tuned(d, g.tuning);
    for (int which = 0; which < 2; ++which) {
      Context& c = which == 0 ? dev : cpu();
      Tensor q = c.from_host(qs, g.dtype, std::vector<double>(static_cast<size_t>(numel(qs)), 0.0));
      Tensor k = c.from_host(ks, g.dtype, kv), v = c.from_host(ks, g.dtype, vv);
      outs.push_back(c.call("attention", {q, k, v}, a).at(0).to_double());
      if (which == 0) EXPECT_NE(c.last_variant().find(g.variant), std::string::npos) << g.tuning << ": " << c.last_variant();
    }
    const double kept = 1.0 / (double(g.Sk) * (1.0 - a.p));
    int64_t zeros = 0, bad = 0;
    for (int64_t r = 0; r < g.B * g.Hq * g.Sq; ++r)
      for (int64_t j = 0; j < g.Sk; ++j) {
        const size_t e = size_t(r * g.D + j);
        const bool keep = ref::dropout_keep(uint64_t(r) * uint64_t(g.Sk) + uint64_t(j), a.seed, a.offset, thr);
        zeros += !keep;
        const double tol = g.dtype == DType::f32 ? 1e-6 : 2e-2;
        if ((outs[0][e] != 0) != keep || (outs[1][e] != 0) != keep ||
            (keep && (std::fabs(outs[0][e] - kept) > tol * kept || std::fabs(outs[1][e] - kept) > tol * kept))) {
          if (++bad <= 5)
            ADD_FAILURE() << g.tuning << " " << to_string(g.dtype) << " row " << r << " key " << j << ": keep " << keep
                          << ", device " << outs[0][e] << ", cpu " << outs[1][e] << " (kept value " << kept << ")";
        }
      }
    EXPECT_EQ(bad, 0) << g.tuning;
    EXPECT_GT(zeros, 0);
    EXPECT_LT(zeros, g.B * g.Hq * g.Sq * g.Sk);
  }
}

TEST(AttentionCuda, DropoutMaskMatchesGeneratorAndCpu) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  const std::vector<MaskGeometry> geos = {
      {2, 4, 2, 5, 64, 64, "attn_path=1,attn_split=1", DType::f32, "flash-simt"},
      {2, 4, 2, 5, 64, 64, "attn_path=1,attn_split=3", DType::f32, "flash-simt"},
      {2, 4, 2, 1, 256, 256, "attn_path=1,attn_split=5", DType::f32, "flash-simt"},  // decoding, keys split
      {2, 4, 2, 40, 64, 64, "attn_path=2,attn_wmma=smem,attn_split=1", DType::f16, "flash-wmma"},
      {1, 4, 2, 20, 256, 256, "attn_path=2,attn_wmma=smem,attn_split=2", DType::bf16, "flash-wmma"},
      {2, 4, 2, 40, 64, 64, "attn_path=2,attn_wmma=regs,attn_split=1", DType::bf16, "flash-wmma"},
      {1, 4, 2, 20, 256, 256, "attn_path=2,attn_wmma=regs,attn_split=3", DType::f16, "flash-wmma"},
      {2, 4, 2, 40, 64, 64, "attn_path=2,attn_wmma=mma,attn_split=1", DType::f16, "flash-mma"},
      {1, 4, 2, 100, 128, 128, "attn_path=2,attn_wmma=mma,attn_split=2", DType::bf16, "flash-mma"},
      {1, 2, 1, 70, 126, 128, "attn_path=2,attn_wmma=mma,attn_split=1", DType::f16, "flash-mma"},  // Sk % 4 == 2
      {2, 4, 2, 40, 64, 64, "attn_path=2,attn_wmma=mma,attn_rows_per_warp=16,attn_split=1", DType::bf16, "flash-mma"},
      {1, 4, 2, 300, 128, 128, "attn_path=2,attn_wmma=mma,attn_rows_per_warp=16,attn_split=2", DType::f16, "flash-mma"},
  };
  for (const auto& d : devs) {
    std::vector<MaskGeometry> all = geos;
    if (wgmma_runs(d))  // the warpgroup kernel (sm_90): 128-key tiles, 64 at D 256; Sk % 4 == 2; key splits
      all.insert(all.end(), {{2, 4, 2, 40, 64, 64, "attn_path=2,attn_wmma=wgmma,attn_split=1", DType::f16, "flash-wgmma"},
                             {1, 4, 2, 100, 128, 128, "attn_path=2,attn_wmma=wgmma,attn_split=2", DType::bf16, "flash-wgmma"},
                             {1, 2, 1, 70, 126, 128, "attn_path=2,attn_wmma=wgmma,attn_split=1", DType::f16, "flash-wgmma"},
                             {2, 2, 1, 150, 122, 128, "attn_path=2,attn_wmma=wgmma,attn_split=3", DType::bf16, "flash-wgmma"}});
    check_dropout_masks(d, all);
  }
}

// The same on Vulkan: the portable kernel (lavapipe too) and the tensor-core forward's workgroup forms
// (f16, bf16 staged as f16) where the device has NV cooperative matrices.
TEST(AttentionPaths, DropoutMaskMatchesGeneratorAndCpu) {
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    std::vector<MaskGeometry> geos = {
        {2, 4, 2, 5, 64, 64, "attn_path=1,attn_split=1", DType::f32, "portable"},
        {1, 2, 1, 9, 62, 64, "attn_path=1,attn_split=2", DType::f16, "portable"},
    };
    if (tuned(d, "").device().caps.coopmat_nv)
      for (const char* t : {"attn_path=2,attn_split=1", "attn_path=2,attn_cm=1,attn_split=2", "attn_path=2,attn_quad=1,attn_split=1"}) {
        geos.push_back({2, 4, 2, 40, 64, 64, t, DType::f16, "coopmat-nv"});
        geos.push_back({1, 4, 2, 100, 128, 128, t, DType::bf16, "coopmat-nv"});
        geos.push_back({1, 2, 1, 70, 126, 128, t, DType::f16, "coopmat-nv"});  // Sk % 4 == 2
      }
    check_dropout_masks(d, geos);
    checked += static_cast<int>(geos.size());
  }
  if (checked == 0) GTEST_SKIP() << "no usable Vulkan device";
}

// ---- attention_backward on the CUDA backend (PRE, dK/dV, dQ passes; the tensor-core kernels of
// attention_bwd_mma.cu where they apply, else the portable ones of attention_bwd.cu): every registry case in
// every dtype automatically, with the portable kernels forced (KF_TUNE attn_path=1), with their 8 x 8 tiles
// (attn_rows=8) and with the tensor-core kernels forced (attn_path=2: refused, saying why, where they do
// not apply), the same bits twice, against the float64 reference; then awkward shapes (odd lengths
// spanning several tiles, GQA with 3 heads a group, Sq != Sk both ways, D = 8 and D = 256 (whose f64 tiles
// need more than 48 KiB of shared memory: the opt-in path), dropout, RoPE, window, ALiBi, soft-capping,
// and several 64-row / 64-key tiles of the tensor-core kernels with GQA, causal, window and key lengths).
const OpDef& attention_backward_op() { return get_op("attention_backward"); }

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

// An op's outputs on a context, on the inputs check::run_case draws from `seed`; `variant` gets the kernel that ran.
std::vector<std::vector<double>> op_outputs(Context& ctx, const OpDef& op, const TestCase& tc, DType t, uint64_t seed,
                                            std::string& variant) {
  auto values = check::random_inputs(tc.inputs, tc.range, seed);
  if (op.prepare_inputs) op.prepare_inputs(tc.inputs, tc.attrs, values);
  std::vector<Tensor> in;
  for (size_t k = 0; k < tc.inputs.size(); ++k)
    in.push_back(tc.inputs[k].empty() ? Tensor() : ctx.from_host(tc.inputs[k], op.input_dtype(k, t, tc.attrs), values[k]));
  const std::vector<Tensor> out = ctx.call(op.name, in, tc.attrs);
  variant = ctx.last_variant();
  std::vector<std::vector<double>> v;
  for (const Tensor& o : out) v.push_back(o.to_double());
  return v;
}
std::vector<std::vector<double>> bwd_outputs(Context& ctx, const TestCase& tc, DType t, uint64_t seed, std::string& variant) {
  return op_outputs(ctx, attention_backward_op(), tc, t, seed, variant);
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

// flash-wgmma with dropout (an sm_90 GPU): the keep words drawn ahead by a kernel of their own (the default
// without packed sequences: the variant ends in ",bits=ahead") give the same bits out as the kernel drawing them
// itself (KF_TUNE attn_fwd_bits=1), with key splits too; the default also passes against the float64 reference.
TEST(AttentionCuda, ForwardDropoutBitsAhead) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  std::vector<TestCase> cases = {
      {"gqa_h6_kv2_sq300_sk600_d128_causal_window150_dropout", qkv(1, 6, 2, 300, 600, 128), {}, 2},
      {"sq300_sk520_d64_causal_dropout", qkv(1, 2, 2, 300, 520, 64), {}, 2},
      {"b2_sq130_sk333_d128_dropout", qkv(2, 2, 2, 130, 333, 128), {}, 2},
  };
  cases[0].attrs.causal = true, cases[0].attrs.window = 150, cases[0].attrs.p = 0.2, cases[0].attrs.seed = 21;
  cases[1].attrs.causal = true, cases[1].attrs.p = 0.3, cases[1].attrs.seed = 9, cases[1].attrs.offset = 6;
  cases[2].attrs.p = 0.1, cases[2].attrs.seed = 5;
  for (const auto& d : devs) {
    if (!wgmma_runs(d)) continue;
    for (const char* split : {"", ",attn_split=2"}) {
      Context ahead = tuned(d, std::string("attn_path=2") + split), drawn = tuned(d, std::string("attn_path=2,attn_fwd_bits=1") + split);
      for (const TestCase& tc : cases)
        for (DType t : {DType::f16, DType::bf16}) {
          const uint64_t seed = fresh_seed();
          const std::string what = tc.label + " " + to_string(t) + split + ", seed " + std::to_string(seed);
          const check::CaseResult r = check::run_case(ahead, attention_op(), t, tc, seed);
          EXPECT_TRUE(r.pass) << what << ":\n" << r.message;
          std::string va, vd;
          const auto a = op_outputs(ahead, attention_op(), tc, t, seed, va), b = op_outputs(drawn, attention_op(), tc, t, seed, vd);
          EXPECT_NE(va.find("attention/flash-wgmma"), std::string::npos) << what << ": " << va;
          EXPECT_NE(va.find(",bits=ahead"), std::string::npos) << what << ": " << va;
          EXPECT_EQ(vd.find(",bits="), std::string::npos) << what << ": " << vd;
          EXPECT_TRUE(a == b) << what << ": the output with the bits drawn ahead differs from the kernel's own";
        }
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
