// Attention (docs/ops.md section 5) beyond the registry cases that test_ops runs: each Vulkan forward path
// forced in turn (one pass and key splits with a combine pass, each tile height, the cooperative-matrix
// kernels), the options that replace KF_TUNE, the automatic choice of the split (decode) path, determinism,
// the dropout mask, the argument checks, and the float64 reference against the same computation composed
// of other ops. The decode kernels, the backward, custom score functions and the CUDA kernels have suites of
// their own (test_attention_decode, _backward, _score_mod, _cuda).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "attention_common.hpp"

namespace kf::test {
namespace {

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
    // (attn_coopmat=nv: where a device has both, attention's default is KHR; test_coopmat covers KHR.)
    if (!tuned(d, "").device().caps.coopmat_nv) continue;
    for (const char* tuning : {"attn_coopmat=nv,attn_path=2,attn_split=1", "attn_coopmat=nv,attn_path=2,attn_split=3",
                               "attn_coopmat=nv,attn_path=2,attn_quad=1,attn_split=2", "attn_coopmat=nv,attn_path=2,attn_cm=2,attn_split=1",
                               "attn_coopmat=nv,attn_path=2,attn_cm=3,attn_split=3", "attn_coopmat=nv,attn_path=2,attn_cm=4,attn_split=1"}) {
      Context ctx = tuned(d, tuning);
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

// bf16 on the tensor-core path runs on f16 times a power of two per tensor: magnitudes beyond
// f16's 65504 (K and V up to 3e5) and far below its normal range (everything near 1e-6) come out as
// the CPU backend computes them from the same bf16 inputs, with and without key splits, in both softmax
// forms; causal, with RoPE (which rotates the scaled values) and lse.
TEST(AttentionPaths, CooperativeMatrixBf16Magnitudes) {
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    if (!tuned(d, "").device().caps.coopmat_nv) continue;
    for (const char* tuning : {"attn_coopmat=nv,attn_path=2,attn_split=1", "attn_coopmat=nv,attn_path=2,attn_split=3",
                               "attn_coopmat=nv,attn_path=2,attn_quad=1,attn_split=1"}) {
      Context ctx = tuned(d, tuning);
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
      for (const char* t : {"attn_coopmat=nv,attn_path=2,attn_split=1", "attn_coopmat=nv,attn_path=2,attn_cm=1,attn_split=2",
                            "attn_coopmat=nv,attn_path=2,attn_quad=1,attn_split=1"}) {
        geos.push_back({2, 4, 2, 40, 64, 64, t, DType::f16, "coopmat-nv"});
        geos.push_back({1, 4, 2, 100, 128, 128, t, DType::bf16, "coopmat-nv"});
        geos.push_back({1, 2, 1, 70, 126, 128, t, DType::f16, "coopmat-nv"});  // Sk % 4 == 2
      }
    check_dropout_masks(d, geos);
    checked += static_cast<int>(geos.size());
  }
  if (checked == 0) GTEST_SKIP() << "no usable Vulkan device";
}

}  // namespace
}  // namespace kf::test
