// Attention's decode kernels (one query row a sequence against a long K/V cache): Vulkan's
// attention_decode.comp and CUDA's attn_decode, forced on the decode cases (every dtype, key splits, the
// reduce-scatter form), chosen automatically, and refused with the reason where a call does not qualify.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "attention_common.hpp"

namespace kf::test {
namespace {

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
  Attrs drop;
  drop.p = 0.1;
  expect_rejected(ctx, [&] { ctx.run("attention", {q2, k, v}, {o2}); }, ErrorCode::Unsupported,
                  {"attention", "attn_decode=2", "one query row", "Sq = 2"}, {o2});
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
          if (forced_split) {
            EXPECT_NE(r.variant.find(",split=" + std::to_string(std::min<int64_t>(5, tc.inputs[1][2])) + "x"),
                      std::string::npos) << r.variant;
          }
          const bool rs = r.variant.find(",reduce-scatter") != std::string::npos;
          EXPECT_EQ(rs, !no_rs && decode_rs_shape(r.variant)) << tuning << " " << tc.label << ": " << r.variant;
          rs_runs += rs;
        }
    }
    if (subgroup >= 4) {
      EXPECT_GT(rs_runs, 0) << "no case took the reduce-scatter form";
    }
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
        if (never && tc.inputs[1][2] >= 600) {
          EXPECT_NE(r.variant.find(",split="), std::string::npos) << r.variant;
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no Vulkan device with subgroup shuffles";
}

// The rotary table a context keeps across calls (plan::rope_table_for): a decoding loop whose cache grows,
// then shrinks, queries before the first key (positions below zero), a prefill and another head size, one
// after another on one context, each against the reference. A table kept past a change of head size, or
// one that no longer covers a grown cache, fails here. (An index off by the same number of positions for
// the query and every key would not: RoPE's scores depend on relative positions only.)
TEST(AttentionPaths, RopeTableAcrossCalls) {
  // First queries before the first key (positions from -4), so that the decode calls after it read a kept
  // table that starts below their own first position.
  std::vector<TestCase> cases = {{"sq9_sk5", qkv(1, 2, 2, 9, 5, 64), {}, 1}};
  for (int64_t sk : {40, 41, 42, 300, 301, 39, 1})
    cases.push_back({"decode_sk" + std::to_string(sk), decode_qkv(1, 4, 2, sk, 64), {}, 1});
  cases.push_back({"prefill_s17_causal", qkv(1, 2, 1, 17, 17, 64), {}, 1});
  cases.push_back({"decode_sk50_d32", decode_qkv(1, 2, 2, 50, 32), {}, 1});
  for (auto& tc : cases) tc.attrs.rope = 1;
  cases[4].attrs.rope = 2;
  cases[8].attrs.causal = true;
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend == "cpu") continue;
    Context& ctx = context_for(d);
    for (DType t : {DType::f32, DType::f16})
      for (const TestCase& tc : cases) {
        const uint64_t seed = fresh_seed();
        const check::CaseResult r = check::run_case(ctx, attention_op(), t, tc, seed);
        ++checked;
        EXPECT_TRUE(r.pass) << d.tag << " " << to_string(t) << " " << tc.label << " (variant " << r.variant
                            << "), seed " << seed << ":\n" << r.message;
      }
  }
  if (checked == 0) GTEST_SKIP() << "no GPU or Vulkan device";
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

}  // namespace
}  // namespace kf::test
