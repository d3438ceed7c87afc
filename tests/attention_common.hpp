// Helpers shared by the attention suites (test_attention*.cpp): contexts, shapes, the cases beyond the
// registry's, and the checks more than one suite runs.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common.hpp"
#include "ops/reference_math.hpp"

namespace kf::test {

inline const OpDef& attention_op() { return get_op("attention"); }

// The CPU context. devices() first: it reads KF_BACKEND / KF_DEVICE (which would otherwise pick this
// context's device too) and unsets them, whichever test of a suite runs first.
inline Context& cpu() {
  (void)devices();
  static Context ctx = Context::create(ContextOptions{.backend = "cpu"});
  return ctx;
}

// A Vulkan context of device d with KF_TUNE knobs.
inline Context tuned(const DeviceRef& d, const std::string& tuning) {
  ContextOptions o = options_for(d);
  o.tuning = tuning;
  return Context::create(o);
}

inline std::vector<Shape> qkv(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D) {
  return std::vector<Shape>{{B, Hq, Sq, D}, {B, Hkv, Sk, D}, {B, Hkv, Sk, D}};
}

// Cases spanning several 64-row query tiles and key tiles, for the tensor-core kernels (Vulkan, CUDA).
inline std::vector<TestCase> multi_tile_cases() {
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

// Every registry case of attention in `dtypes` on ctx; returns the variants seen (a case with a custom
// score function must run its run-time-compiled kernel on Vulkan, and be refused elsewhere but the CPU).
inline std::vector<std::string> run_all_cases(Context& ctx, const std::vector<DType>& dtypes, const std::string& what) {
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

// A decode call's q, k, v shapes (one query row per sequence), and shapes with input k set to x.
inline std::vector<Shape> decode_qkv(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sk, int64_t D) { return qkv(B, Hq, Hkv, 1, Sk, D); }
inline std::vector<Shape> with(std::vector<Shape> s, size_t k, const Shape& x) {
  s.resize(std::max(s.size(), k + 1));
  s[k] = x;
  return s;
}

// The one-query-row cases of the decode kernels (Vulkan's attention_decode.comp, CUDA's attn_decode):
// head dimensions 8 to 256, G = Hq / Hkv of 1, 4, 8 and above 8, key counts 1, 7, 1000, 4099, key
// lengths (one sequence empty), windows, ALiBi (default slopes, H a power of two or not, and given
// slopes), soft-capping, causal, sinks and lse.
inline std::vector<TestCase> decode_cases() {
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
      // RoPE: every cached key rotated at its position in the kernel, the query at Sk - 1.
      {"g4_d128_sk1000_rope_half_lens", with(decode_qkv(2, 8, 2, 1000, 128), 4, {2}), {}, 1},
      {"g1_d80_sk300_rope_interleaved_window_lse", decode_qkv(2, 2, 2, 300, 80), {}, 1},
      {"g8_d64_sk77_rope_half_alibi_softcap", decode_qkv(1, 8, 1, 77, 64), {}, 1},
  };
  cases[2].attrs.window = 300, cases[2].attrs.alibi = true;
  cases[3].attrs.return_lse = true;
  cases[4].attrs.softcap = 3, cases[4].attrs.return_lse = true;
  cases[5].attrs.causal = true;
  cases[6].attrs.alibi = true, cases[6].attrs.window = 100, cases[6].attrs.softcap = 4;
  cases[7].attrs.return_lse = true;
  cases[8].attrs.causal = true;
  cases[9].attrs.rope = 1;
  cases[10].attrs.rope = 2, cases[10].attrs.window = 100, cases[10].attrs.return_lse = true;
  cases[11].attrs.rope = 1, cases[11].attrs.alibi = true, cases[11].attrs.softcap = 4;
  return cases;
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
inline void check_dropout_masks(const DeviceRef& d, const std::vector<MaskGeometry>& geos) {
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
      if (which == 0) {
        EXPECT_NE(c.last_variant().find(g.variant), std::string::npos) << g.tuning << ": " << c.last_variant();
      }
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

inline const OpDef& attention_backward_op() { return get_op("attention_backward"); }

// An op's outputs on a context, on the inputs check::run_case draws from `seed`; `variant` gets the kernel that ran.
inline std::vector<std::vector<double>> op_outputs(Context& ctx, const OpDef& op, const TestCase& tc, DType t, uint64_t seed,
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
inline std::vector<std::vector<double>> bwd_outputs(Context& ctx, const TestCase& tc, DType t, uint64_t seed, std::string& variant) {
  return op_outputs(ctx, attention_backward_op(), tc, t, seed, variant);
}

}  // namespace kf::test
