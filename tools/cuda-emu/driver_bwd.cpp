// Part of tools/cuda-emu (see run.sh): hal/cuda/attention_bwd.cu's kernels under the host emulation on
// the registry's attention_backward cases and a few awkward shapes (odd lengths, several tiles, GQA with
// 3 heads a group, Sq != Sk, D 8 and 256), each tile (16 x 16 and 8 x 8), every dtype, compared with the
// CPU backend by check::compare (the tests' own comparison). The parameters are built as
// CudaDevice::dispatch_attention_backward builds them (hal/cuda/kernels.cpp; keep the two in step).
#include <cmath>
#include <cstdio>
#include <cstring>
#include "hal/cuda/gpu_compat.hpp"
#include <string>
#include "hal/cuda/kernels.hpp"
#include "kf/kf.hpp"
#include "ops/registry.hpp"
#include "ops/attention_ref.hpp"
#include "plan/attention.hpp"
#include "ops/reference_math.hpp"
#include "check/conformance.hpp"

using namespace kf;
namespace hc = kf::hal::emucuda;

// driver.cpp's
std::vector<unsigned char> to_dev(const std::vector<double>& v, DType t);
double from_dev(const std::vector<unsigned char>& b, size_t i, DType t);
hc::Dt dt_of(DType t);

namespace {

int bwd_fails = 0;

// bq == 0: the tensor-core passes (attention_bwd_mma.cu, tiles of 64) after the PRE pass; bq == -1: the same
// with dropout's keep words kept between them (AttnParams::keep_words, poisoned first).
void run_bwd(const TestCase& tc, DType dt, int bq, int bk) {
  const OpDef& op = get_op("attention_backward");
  Context cpu = Context::create(ContextOptions{.backend = "cpu"});
  std::vector<Shape> shapes = tc.inputs;
  shapes.resize(op.inputs.size());
  auto v = check::random_inputs(shapes, tc.range, 4321);
  if (op.prepare_inputs) op.prepare_inputs(shapes, tc.attrs, v);
  std::vector<Tensor> rin64;
  std::vector<std::vector<double>> vals(shapes.size());
  std::vector<std::vector<unsigned char>> dev(shapes.size());
  for (size_t k = 0; k < shapes.size(); ++k) {
    if (shapes[k].empty()) { rin64.push_back(Tensor()); continue; }
    const DType t = op.input_dtype(k, dt, Attrs{});
    vals[k] = cpu.from_host(shapes[k], t, v[k]).to_double();
    rin64.push_back(cpu.from_host(shapes[k], t == DType::i32 ? t : DType::f64, vals[k]));
    dev[k] = to_dev(vals[k], t);
  }
  const auto ref = cpu.call("attention_backward", rin64, tc.attrs);

  // As CudaDevice::dispatch_attention_backward.
  std::vector<Shape> fs = {shapes[0], shapes[1], shapes[2]};
  for (size_t k = 6; k < shapes.size(); ++k) fs.push_back(shapes[k]);
  const AttnGeometry g = attn_geometry(fs);
  const Attrs& a = tc.attrs;
  auto P_ = [&](size_t k) -> void* { return shapes[k].empty() ? nullptr : dev[k].data(); };
  hc::AttnBwdParams P;
  hc::AttnParams& p = P.a;
  p.q = P_(0), p.k = P_(1), p.v = P_(2);
  P.o = P_(3), P.dout = P_(4), P.lse = P_(5);
  const size_t es = dtype_size(dt);
  std::vector<std::vector<unsigned char>> outs(3);
  for (int k = 0; k < 3; ++k) outs[k].assign(numel(ref[k].shape()) * es + 16, g.varlen ? 0 : 0xff);  // the host zero-fills (varlen)
  P.dq = outs[0].data(), P.dk = outs[1].data(), P.dv = outs[2].data();
  p.B = g.B, p.Hq = g.Hq, p.Hkv = g.Hkv, p.SqT = g.SqT, p.SkT = g.SkT, p.G = g.Hq / g.Hkv, p.D = g.D, p.nseq = g.nseq;
  p.scale = a.attn_scale != 0 ? a.attn_scale : 1.0 / std::sqrt(double(g.D));
  p.slopes = P_(6);
  p.lens = (const int32_t*)P_(7);
  if (g.varlen) p.cuq = (const int32_t*)P_(8), p.cuk = (const int32_t*)P_(9);
  if (!shapes[11].empty()) p.bmask = (const int32_t*)P_(11), p.block_size = a.block_size, p.nkb = shapes[11][1];
  p.causal = a.causal, p.window = a.window, p.alibi = !shapes[6].empty() ? 2 : a.alibi ? 1 : 0, p.softcap = a.softcap;
  p.rope_mode = a.rope, p.dropout = a.p > 0;
  p.seed_lo = uint32_t(a.seed), p.seed_hi = uint32_t(a.seed >> 32), p.off_lo = uint32_t(a.offset), p.off_hi = uint32_t(a.offset >> 32);
  p.thr = ref::dropout_threshold(a.p), p.keep_scale = 1.0 / (1.0 - a.p);
  hc::philox_round_keys(p.seed_lo, p.seed_hi, p.rk);
  const int64_t D = g.D;
  std::vector<double> td;
  std::vector<float> tf;
  if (a.rope) {
    const plan::RopePositions rp = plan::rope_positions(g);
    const int64_t pmin = rp.pmin, npos = rp.npos, half = D / 2;
    td.resize(npos * half * 2);
    for (int64_t q = 0; q < npos; ++q)
      for (int64_t d = 0; d < half; ++d) {
        const double th = double(q + pmin) * std::pow(a.rope_base, -2.0 * double(d) / double(D));
        td[(q * half + d) * 2] = std::cos(th), td[(q * half + d) * 2 + 1] = std::sin(th);
      }
    tf.assign(td.begin(), td.end());
    p.rope = dt == DType::f64 ? (const void*)td.data() : (const void*)tf.data();
    p.rope_pos0 = -pmin;
  }
  std::vector<unsigned char> dsum(g.B * g.Hq * g.SqT * 8 + 16, 0xcd);
  P.dsum = dsum.data();
  std::vector<unsigned> kept;
  if (bq < 0) {
    p.keep_rows = g.B * g.Hq * g.SqT;
    kept.assign(hc::attn_keep_words_bytes(p.keep_rows, g.SkT) / 4, 0x5a5a5a5au);
    p.keep_words = kept.data();
  }
  int err = 0;
  if (bq <= 0) {
    err = hc::launch_attention_backward_pre(dt_of(dt), P, nullptr);
    if (err == 0) err = hc::launch_attention_backward_mma(dt_of(dt), P, nullptr);
  } else {
    err = hc::launch_attention_backward(dt_of(dt), P, bq, bk, nullptr);
  }
  const double terms = op.terms(shapes);
  const char* names[3] = {"dq", "dk", "dv"};
  for (int k = 0; k < 3; ++k) {
    const std::vector<double> r = ref[k].to_double();
    std::vector<double> o(r.size());
    for (size_t i = 0; i < r.size(); ++i) o[i] = from_dev(outs[k], i, dt);
    const check::Comparison c = check::compare(o, r, dt, terms);
    const bool ok = c.pass && err == 0;
    bwd_fails += !ok;
    std::printf("%s %-34s %-5s %s bq=%d bk=%d: err %.3g (limit %.3g) worst %.3g at %lld (got %g want %g)\n",
                ok ? "ok  " : "FAIL", tc.label.c_str(), to_string(dt), names[k], bq, bk, c.err, c.err_limit, c.worst,
                (long long)c.worst_index, c.worst_out, c.worst_ref);
  }
}

std::vector<Shape> qkv(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D) {
  return {{B, Hq, Sq, D}, {B, Hkv, Sk, D}, {B, Hkv, Sk, D}, {B, Hq, Sq, D}, {B, Hq, Sq, D}, {B, Hq, Sq}};
}

// Key lengths [B] (1 to Sk) as the last forward input before cu_seqlens.
std::vector<Shape> with_lens(std::vector<Shape> s) {
  s.resize(8);
  s[7] = {s[0][0]};
  return s;
}

}  // namespace

int bwd_main(const std::string& only) {
  const OpDef& op = get_op("attention_backward");
  std::vector<TestCase> cases;
  for (const TestCase& tc : op.tests)  // (custom score functions: not on this backend, refused)
    if ((only.empty() || tc.label.find(only) != std::string::npos) && tc.attrs.score_mod.empty()) cases.push_back(tc);
  if (only.empty() || only == "extra") {
    std::vector<TestCase> extra = {
        {"gqa_h6_kv2_sq37_sk51_d40_causal", qkv(1, 6, 2, 37, 51, 40), {}, 2},
        {"b2_sq50_sk23_d8_dropout_window", qkv(2, 2, 1, 50, 23, 8), {}, 2},
        {"sq19_sk45_d256_rope_alibi_softcap", qkv(1, 2, 1, 19, 45, 256), {}, 2},
        {"sq3_sk70_d24_rope_interleaved_drop", qkv(1, 3, 3, 3, 70, 24), {}, 2},
    };
    extra[0].attrs.causal = true;
    extra[1].attrs.p = 0.3, extra[1].attrs.seed = 99, extra[1].attrs.offset = 7, extra[1].attrs.window = 11;
    extra[2].attrs.rope = 1, extra[2].attrs.alibi = true, extra[2].attrs.softcap = 2.5;
    extra[3].attrs.rope = 2, extra[3].attrs.p = 0.2, extra[3].attrs.seed = 5, extra[3].attrs.causal = true;
    if (only == "extra") cases.clear();
    cases.insert(cases.end(), extra.begin(), extra.end());
  }
  if (only.empty() || only == "extra" || only == "mma") {
    // Several 64-row / 64-key tiles for the tensor-core passes.
    std::vector<TestCase> more = {
        {"gqa_h4_kv1_sq70_sk150_d64_causal", qkv(1, 4, 1, 70, 150, 64), {}, 2},
        {"b2_sq100_sk90_d128_window_lens", with_lens(qkv(2, 2, 2, 100, 90, 128)), {}, 2},
        {"sq130_sk130_d64", qkv(1, 1, 1, 130, 130, 64), {}, 2},
        {"gqa_h6_kv2_sq65_sk200_d128_causal", qkv(1, 6, 2, 65, 200, 128), {}, 2},
        {"gqa_h3_kv1_sq70_sk90_d96_window", qkv(1, 3, 1, 70, 90, 96), {}, 2},
        {"b2_sq66_sk130_d80_causal", qkv(2, 2, 2, 66, 130, 80), {}, 2},
        {"sq129_sk65_d32_causal", qkv(1, 2, 2, 129, 65, 32), {}, 2},
        {"gqa_h4_kv2_sq90_sk130_d64_dropout", qkv(1, 4, 2, 90, 130, 64), {}, 2},
        {"b2_sq70_sk67_d128_causal_dropout_lens", with_lens(qkv(2, 2, 2, 70, 67, 128)), {}, 2},
        {"gqa_h6_kv2_sq80_sk100_d64_alibi_softcap_window", qkv(1, 6, 2, 80, 100, 64), {}, 2},
        {"sq75_sk140_d128_slopes_causal_dropout_softcap", qkv(1, 3, 3, 75, 140, 128), {}, 2},
        {"gqa_h2_kv1_sq100_sk150_d64_window_dropout", qkv(1, 2, 1, 100, 150, 64), {}, 2},
        {"varlen_3seq_sq90_sk140_d128_causal_dropout", qkv(1, 2, 2, 90, 140, 128), {}, 2},
    };
    more[11].attrs.window = 37, more[11].attrs.p = 0.25, more[11].attrs.seed = 12, more[11].attrs.offset = 3;
    more[12].inputs.resize(10);
    more[12].inputs[8] = {4}, more[12].inputs[9] = {4};  // cu_seqlens of 3 packed sequences
    more[12].attrs.causal = true, more[12].attrs.p = 0.3, more[12].attrs.seed = 4, more[12].attrs.offset = 2;
    more[9].attrs.alibi = true, more[9].attrs.softcap = 3, more[9].attrs.window = 40;
    more[10].inputs.resize(7);
    more[10].inputs[6] = {3};  // ALiBi slopes given
    more[10].attrs.causal = true, more[10].attrs.p = 0.15, more[10].attrs.seed = 8, more[10].attrs.softcap = 5;
    more[7].attrs.p = 0.2, more[7].attrs.seed = 77, more[7].attrs.offset = 5;
    more[8].attrs.p = 0.4, more[8].attrs.seed = 3, more[8].attrs.offset = 11, more[8].attrs.causal = true;
    more[4].attrs.window = 33, more[5].attrs.causal = true, more[6].attrs.causal = true;
    more[0].attrs.causal = true;
    more[1].attrs.window = 20;
    more[3].attrs.causal = true;
    if (only == "mma") cases.clear();
    cases.insert(cases.end(), more.begin(), more.end());
  }
  for (const TestCase& tc : cases) {
    const Attrs& a = tc.attrs;
    const int64_t D = tc.inputs[0][3];
    const bool plain = a.rope == 0 && (tc.inputs.size() <= 11 || tc.inputs[11].empty());
    if (plain && (D == 32 || D == 64 || D == 80 || D == 96 || D == 128)) {
      run_bwd(tc, DType::f16, 0, 0);
      run_bwd(tc, DType::bf16, 0, 0);
      if (a.p > 0) run_bwd(tc, DType::f16, -1, 0), run_bwd(tc, DType::bf16, -1, 0);
    }
    if (only == "mma") continue;
    run_bwd(tc, DType::f32, 16, 16);
    run_bwd(tc, DType::f32, 8, 8);
    run_bwd(tc, DType::f64, 8, 16);
    run_bwd(tc, DType::f16, 16, 8);
    run_bwd(tc, DType::bf16, 16, 16);
  }
  std::printf("fails: %d\n", bwd_fails);
  return bwd_fails != 0;
}
