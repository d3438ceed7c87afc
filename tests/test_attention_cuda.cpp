// Attention's forward on the CUDA backend: each kernel (portable, flash-wmma, flash-mma, flash-wgmma)
// forced on every registry case and on multi-tile cases, the knobs that pick them, the automatic choice,
// and dropout (the mask against the generator and the CPU, the keep words drawn ahead).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "attention_common.hpp"

namespace kf::test {
namespace {

// The cases without a custom score function (for the kernels that do not take one).
std::vector<TestCase> without_score_mod(const std::vector<TestCase>& cases) {
  std::vector<TestCase> v;
  for (const TestCase& tc : cases)
    if (tc.attrs.score_mod.empty()) v.push_back(tc);
  return v;
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

// The automatic choice: decoding (one query row, a long cache) takes the decode kernel with key splits (with
// RoPE too); an f16 / bf16 prefill with D = 64 takes a tensor-core flash kernel (flash-wgmma on an sm_90 GPU, else
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
    // With RoPE the decode kernel rotates the keys itself (before, the tiled kernel served the one row).
    decode.attrs.rope = 1;
    const check::CaseResult rr = check::run_case(ctx, attention_op(), DType::f16, decode, fresh_seed());
    EXPECT_TRUE(rr.pass) << rr.message;
    EXPECT_NE(rr.variant.find("attention/decode,"), std::string::npos) << rr.variant;
    EXPECT_NE(rr.variant.find(",rope=half"), std::string::npos) << rr.variant;
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

}  // namespace
}  // namespace kf::test
