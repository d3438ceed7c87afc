// Part of tools/cuda-emu (see run.sh). Runs hal/cuda/attention.cu's kernels under the host emulation on
// the registry's attention cases (each kernel, with and without key splits, several dtypes) and compares
// them with the CPU backend (the float64 reference on the same rounded inputs). The parameters are built
// as CudaDevice::dispatch_attention builds them (hal/cuda/kernels.cpp; keep the two in step), for an
// H100's 132 multiprocessors.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "hal/cuda/gpu_compat.hpp"
#include <random>
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

std::vector<unsigned char> to_dev(const std::vector<double>& v, DType t) {
  std::vector<unsigned char> b;
  for (double x : v) {
    unsigned char tmp[8];
    size_t n = 0;
    if (t == DType::f32) { float f = float(x); std::memcpy(tmp, &f, 4); n = 4; }
    else if (t == DType::f64) { std::memcpy(tmp, &x, 8); n = 8; }
    else if (t == DType::f16) { unsigned short h = kf_float_to_half(float(x)); std::memcpy(tmp, &h, 2); n = 2; }
    else if (t == DType::bf16) { float f = float(x); unsigned u; std::memcpy(&u, &f, 4); unsigned short h = u >> 16; std::memcpy(tmp, &h, 2); n = 2; }
    else if (t == DType::i32) { int32_t i = int32_t(x); std::memcpy(tmp, &i, 4); n = 4; }
    b.insert(b.end(), tmp, tmp + n);
  }
  while (b.size() % 16) b.push_back(0);
  return b;
}
double from_dev(const std::vector<unsigned char>& b, size_t i, DType t) {
  if (t == DType::f32) { float f; std::memcpy(&f, &b[i * 4], 4); return f; }
  if (t == DType::f64) { double d; std::memcpy(&d, &b[i * 8], 8); return d; }
  unsigned short h; std::memcpy(&h, &b[i * 2], 2);
  if (t == DType::f16) return kf_half_to_float(h);
  unsigned u = unsigned(h) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
hc::Dt dt_of(DType t) { return t == DType::f32 ? hc::Dt::f32 : t == DType::f16 ? hc::Dt::f16 : t == DType::bf16 ? hc::Dt::bf16 : hc::Dt::f64; }

int fails = 0;


// Compares o (and lse) with the reference; a, b: the tile (bq, bk) or the decode plan (lk, heads).
void compare(const std::vector<double>& ro, const std::vector<double>& rl, const std::vector<unsigned char>& o,
             const std::vector<unsigned char>& lse, DType dt, int err, const std::string& label, int a, int b,
             int64_t nsplit, const std::string& tag) {
  auto cmp = [&](const std::vector<double>& r, const std::vector<unsigned char>& bytes, const char* what) {
    double num = 0, den = 0, worst = 0; size_t wi = 0; bool nan = false;
    for (size_t i = 0; i < r.size(); ++i) {
      const double x = from_dev(bytes, i, dt);
      if (std::isinf(r[i])) { if (x != r[i]) { nan = true; wi = i; } continue; }
      if (std::isnan(x)) { nan = true; wi = i; continue; }
      num += (x - r[i]) * (x - r[i]); den += r[i] * r[i];
      if (std::fabs(x - r[i]) > worst) worst = std::fabs(x - r[i]), wi = i;
    }
    const double e = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    const double lim = dt == DType::f32 ? 1e-6 : dt == DType::f16 ? 1e-3 : dt == DType::bf16 ? 8e-3 : 1e-12;
    const bool ok = !nan && e <= lim * 1.5 && err == 0;
    if (!ok) ++fails;
    std::printf("%s %-40s %-5s %-4s %d,%d split=%lld: %s err %.3g (limit %.1g) worst %.3g at %zu (got %g want %g)%s\n", ok ? "ok  " : "FAIL", label.c_str(),
                to_string(dt), what, a, b, (long long)nsplit, tag.c_str(), e, lim, worst, wi, from_dev(bytes, wi, dt), r[wi], nan ? " NaN/inf mismatch" : "");
  };
  cmp(ro, o, "o");
  if (!rl.empty()) cmp(rl, lse, "lse");
}

// path: 1 simt, 2 wmma, 3 wmma-regs, 4 decode, 5 mma (flash-mma); split: 0 automatic, N forced; rows_cap: attn_rows
// (simt), or for mma KF_TUNE attn_rows_per_warp (16 or 32; 0: the default, 16, as dispatch_attention)
void run(const TestCase& tc, DType dt, int path, int split_force, int rows_cap, const std::string& tag) {
  const OpDef& op = get_op("attention");
  Context cpu = Context::create(ContextOptions{.backend = "cpu"});
  std::vector<Shape> shapes = tc.inputs;
  shapes.resize(op.inputs.size());
  auto v = check::random_inputs(shapes, tc.range, 1234);
  if (op.prepare_inputs) op.prepare_inputs(shapes, tc.attrs, v);
  std::vector<Tensor> rin, rin64;
  std::vector<std::vector<double>> vals(shapes.size());
  for (size_t k = 0; k < shapes.size(); ++k) {
    if (shapes[k].empty()) { rin64.push_back(Tensor()); continue; }
    DType t = op.input_dtype(k, dt, Attrs{});
    Tensor x = cpu.from_host(shapes[k], t, v[k]);
    vals[k] = x.to_double();
    rin64.push_back(cpu.from_host(shapes[k], t == DType::i32 ? t : DType::f64, vals[k]));
  }
  auto ref = cpu.call("attention", rin64, tc.attrs);
  std::vector<double> ro = ref[0].to_double(), rl;
  if (ref.size() > 1) rl = ref[1].to_double();

  // The dispatch (as CudaDevice::dispatch_attention).
  const AttnGeometry g = attn_geometry(shapes);
  const Attrs& a = tc.attrs;
  std::vector<std::vector<unsigned char>> dev(shapes.size());
  for (size_t k = 0; k < shapes.size(); ++k) if (!shapes[k].empty()) dev[k] = to_dev(vals[k], op.input_dtype(k, dt, Attrs{}));
  const size_t es = dtype_size(dt);
  std::vector<unsigned char> o(ro.size() * es + 16, 0xff), lse(std::max<size_t>(rl.size(), 1) * es + 16, 0xff);
  hc::AttnParams p;
  auto P = [&](size_t k) -> void* { return shapes[k].empty() ? nullptr : dev[k].data(); };
  p.q = P(0), p.k = P(1), p.v = P(2), p.o = o.data();
  p.lse = rl.empty() ? nullptr : lse.data();
  p.B = g.B, p.Hq = g.Hq, p.Hkv = g.Hkv, p.SqT = g.SqT, p.SkT = g.SkT, p.G = g.Hq / g.Hkv, p.D = g.D, p.nseq = g.nseq;
  p.scale = a.attn_scale != 0 ? a.attn_scale : 1.0 / std::sqrt(double(g.D));
  p.slopes = P(3);
  p.lens = (const int32_t*)P(4);
  if (g.varlen) p.cuq = (const int32_t*)P(5), p.cuk = (const int32_t*)P(6);
  p.sinks = P(7);
  if (!shapes[8].empty()) p.bmask = (const int32_t*)P(8), p.block_size = a.block_size, p.nkb = shapes[8][1];
  p.causal = a.causal, p.window = a.window, p.alibi = !shapes[3].empty() ? 2 : a.alibi ? 1 : 0, p.softcap = a.softcap;
  p.rope_mode = a.rope, p.dropout = a.p > 0;
  p.seed_lo = uint32_t(a.seed), p.seed_hi = uint32_t(a.seed >> 32), p.off_lo = uint32_t(a.offset), p.off_hi = uint32_t(a.offset >> 32);
  p.thr = ref::dropout_threshold(a.p), p.keep_scale = 1.0 / (1.0 - a.p);
  hc::philox_round_keys(p.seed_lo, p.seed_hi, p.rk);
  const int64_t D = g.D, rows_needed = (g.Hq / g.Hkv) * g.SqT;
  std::vector<double> td; std::vector<float> tf;
  if (a.rope) {
    const plan::RopePositions rp = plan::rope_positions(g);
    const int64_t pmin = rp.pmin, npos = rp.npos, half = D / 2;
    td.resize(npos * half * 2);
    for (int64_t q = 0; q < npos; ++q) for (int64_t d = 0; d < half; ++d) {
      const double th = double(q + pmin) * std::pow(a.rope_base, -2.0 * double(d) / double(D));
      td[(q * half + d) * 2] = std::cos(th), td[(q * half + d) * 2 + 1] = std::sin(th);
    }
    tf.assign(td.begin(), td.end());
    p.rope = dt == DType::f64 ? (const void*)td.data() : (const void*)tf.data();
    p.rope_pos0 = -pmin;
  }
  if (path == 4) {  // the decode kernel, as CudaDevice::dispatch_attention plans it (src/plan/attention.hpp)
    const int64_t vw = 16 / int64_t(dtype_size(dt));
    const plan::DecodeShape ds = plan::decode_shape(D, vw, g.Hq / g.Hkv, 8);
    const int lk = ds.lanes;
    p.dec_lk = lk, p.dec_ppl = ds.packs_per_lane, p.dec_nchunk = ds.nchunk, p.dec_ng = ds.heads;
    p.dec_gc = 1;
    while (p.dec_gc < p.dec_ng) p.dec_gc *= 2;
    const int64_t base = g.B * g.Hkv * p.dec_nchunk;
    const int64_t per_sm = std::clamp(hc::attn_decode_blocks_per_sm(dt_of(dt), p), 1, 8);
    const plan::KeySplit ks = plan::decode_split(g.SkT, base, 132 * per_sm, (128 / lk) * 4, split_force);
    const int64_t nsplit = ks.n;
    p.nsplit = int(nsplit), p.split_len = int(ks.len);
    std::vector<unsigned char> part(nsplit * g.B * g.Hq * (D + 2) * 4, 0xcd);
    p.part = part.data();
    const int err = hc::launch_attention(hc::AttnKernel::Decode, dt_of(dt), p, 0, 0, 0, nullptr);
    compare(ro, rl, o, lse, dt, err, tc.label, lk, p.dec_ng, nsplit, tag);
    return;
  }
  int bq = 0, bk = 0;
  if (path == 5) { bq = 4 * (rows_cap == 32 ? 32 : 16), bk = 64; }
  else if (path >= 2) { bq = 64, bk = D > 128 ? 32 : 64; }
  else {
    const int cap = rows_cap ? rows_cap : rows_needed >= 32 ? 32 : rows_needed >= 16 ? 16 : 8;
    for (int q = 32; q >= 8 && bq == 0; q /= 2) {
      if (q > cap) continue;
      for (int k : {32, 16, 8}) if (hc::attn_simt_shared_bytes(dt_of(dt), q, k, D) <= 48 * 1024) { bq = q, bk = k; break; }
    }
  }
  const int64_t qtiles = (rows_needed + bq - 1) / bq;
  const int64_t base_blocks = qtiles * g.Hkv * g.nseq;
  const plan::KeySplit ks = plan::flash_split(g.SkT, base_blocks, 4 * 132, bk, split_force);
  const int64_t nsplit = ks.n;
  std::vector<unsigned char> part;
  if (nsplit > 1) {
    p.nsplit = nsplit;
    p.split_len = ks.len;
    part.assign(nsplit * g.B * g.Hq * g.SqT * (D + 2) * (dt == DType::f64 ? 8 : 4), 0xcd);
    p.part = part.data();
  }
  const int err = hc::launch_attention(path == 5 ? hc::AttnKernel::Mma : path == 3 ? hc::AttnKernel::WmmaRegs : path == 2 ? hc::AttnKernel::Wmma : hc::AttnKernel::Simt, dt_of(dt), p, bq, bk, qtiles, nullptr);
  compare(ro, rl, o, lse, dt, err, tc.label, bq, bk, nsplit, tag);
}


void scores_and_embedding() {
  Context cpu = Context::create(ContextOptions{.backend = "cpu"});
  for (const char* name : {"attention_scores", "embedding"}) {
    const OpDef& op = get_op(name);
    for (const TestCase& tc : op.tests)
      for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
        std::vector<Shape> shapes = tc.inputs;
        shapes.resize(op.inputs.size());
        auto v = check::random_inputs(shapes, tc.range, 99);
        if (op.prepare_inputs) op.prepare_inputs(shapes, tc.attrs, v);
        std::vector<Tensor> rin;
        std::vector<std::vector<double>> vals(shapes.size());
        std::vector<std::vector<unsigned char>> dev(shapes.size());
        for (size_t k = 0; k < shapes.size(); ++k) {
          if (shapes[k].empty()) { rin.push_back(Tensor()); continue; }
          DType t = op.input_dtype(k, dt, Attrs{});
          vals[k] = cpu.from_host(shapes[k], t, v[k]).to_double();
          rin.push_back(cpu.from_host(shapes[k], t == DType::i32 ? t : DType::f64, vals[k]));
          dev[k] = to_dev(vals[k], t);
        }
        const auto ro = cpu.call(name, rin, tc.attrs)[0].to_double();
        std::vector<unsigned char> o(ro.size() * dtype_size(dt) + 16, 0xff);
        if (std::string(name) == "embedding") {
          hc::EmbeddingParams p;
          p.tokens = (const int32_t*)dev[0].data(); p.table = dev[1].data(); p.pos = shapes[2].empty() ? nullptr : dev[2].data();
          p.y = o.data(); p.rows = numel(shapes[0]); p.d = shapes[1][1]; p.L = shapes[0].back(); p.V = shapes[1][0];
          p.wide = p.d % (16 / int64_t(dtype_size(dt))) == 0;
          hc::launch_embedding(dt_of(dt), p, 3, nullptr);
        } else {
          const AttnGeometry g = attn_geometry(shapes);
          hc::AttnParams p;
          p.q = dev[0].data(), p.k = dev[1].data(), p.o = o.data();
          p.B = g.B, p.Hq = g.Hq, p.Hkv = g.Hkv, p.SqT = g.SqT, p.SkT = g.SkT, p.G = g.Hq / g.Hkv, p.D = g.D;
          p.scale = tc.attrs.attn_scale != 0 ? tc.attrs.attn_scale : 1.0 / std::sqrt(double(g.D));
          hc::launch_attention_scores(dt_of(dt), p, nullptr);
        }
        double num = 0, den = 0;
        for (size_t i = 0; i < ro.size(); ++i) { const double x = from_dev(o, i, dt); num += (x - ro[i]) * (x - ro[i]); den += ro[i] * ro[i]; }
        const double e = std::sqrt(num / std::max(den, 1e-300));
        const double lim = dt == DType::f32 ? 1e-6 : dt == DType::f16 ? 1e-3 : dt == DType::bf16 ? 8e-3 : 1e-12;
        const bool ok = e <= lim;
        fails += !ok;
        std::printf("%s %s %s %s err %.3g\n", ok ? "ok  " : "FAIL", name, tc.label.c_str(), to_string(dt), e);
      }
  }
}

int bwd_main(const std::string& only);  // driver_bwd.cpp
int lce_main(const std::string& only);  // driver_lce.cpp

int main(int argc, char** argv) {
  const OpDef& op = get_op("attention");
  const std::string only = argc > 1 ? argv[1] : "";
  if (only.rfind("bwd", 0) == 0) return bwd_main(only.size() > 4 ? only.substr(4) : "");
  if (only.rfind("lce", 0) == 0) return lce_main(only.size() > 4 ? only.substr(4) : "");
  if (only == "decode" || only.rfind("decode:", 0) == 0) {  // the decode kernel on the Vulkan DecodeKernel test's cases and the registry's Sq = 1 ones
    const auto qkv = [](int64_t B, int64_t Hq, int64_t Hkv, int64_t Sk, int64_t D) {
      return std::vector<Shape>{{B, Hq, 1, D}, {B, Hkv, Sk, D}, {B, Hkv, Sk, D}};
    };
    const auto with = [](std::vector<Shape> s, size_t k, const Shape& x) {
      s.resize(std::max(s.size(), k + 1));
      s[k] = x;
      return s;
    };
    std::vector<TestCase> cases = {
        {"g1_d64_sk1", qkv(2, 2, 2, 1, 64), {}, 2},
        {"g4_d80_sk7_lens", with(qkv(3, 4, 1, 7, 80), 4, {3}), {}, 2},
        {"g8_d128_sk1000_window_alibi", qkv(1, 8, 1, 1000, 128), {}, 1},
        {"g4_d256_sk4099_slopes_lse", with(qkv(2, 8, 2, 4099, 256), 3, {8}), {}, 1},
        {"g1_d128_sk4099_softcap_sinks_lens_lse", with(with(qkv(2, 2, 2, 4099, 128), 7, {2}), 4, {2}), {}, 1},
        {"g8_d64_sk1000_causal_sinks_lens", with(with(qkv(2, 8, 1, 1000, 64), 7, {8}), 4, {2}), {}, 1},
        {"g12_d80_sk1000_alibi_window_softcap", qkv(1, 12, 1, 1000, 80), {}, 1},
        {"g16_d64_sk7_lse", qkv(1, 16, 1, 7, 64), {}, 2},
        {"g4_d8_sk7_causal", qkv(2, 4, 1, 7, 8), {}, 2},
        {"g3_d96_sk777", qkv(1, 6, 2, 777, 96), {}, 2},
        {"g4_d128_sk2500_bench_like", qkv(1, 8, 2, 2500, 128), {}, 2},
        // the reduce-scatter form (LK = 4 x heads a block: 16-bit D = 128 with 4 heads, D = 64 with 2)
        // (a window of 60 keys: ALiBi over hundreds of keys makes scores of -100s, where f32's rounding
        // of the scores alone exceeds its 1e-6 tolerance on the output, in either form)
        {"g4_d128_sk999_slopes_softcap_window_lens_lse", with(with(qkv(2, 8, 2, 999, 128), 4, {2}), 3, {8}), {}, 1},
        {"g2_d64_sk1500_sinks_lse", with(qkv(2, 4, 2, 1500, 64), 7, {4}), {}, 1},
    };
    cases[11].attrs.softcap = 5, cases[11].attrs.window = 60, cases[11].attrs.return_lse = true;
    cases[12].attrs.return_lse = true;
    cases[2].attrs.window = 300, cases[2].attrs.alibi = true;
    cases[3].attrs.return_lse = true;
    cases[4].attrs.softcap = 3, cases[4].attrs.return_lse = true;
    cases[5].attrs.causal = true;
    cases[6].attrs.alibi = true, cases[6].attrs.window = 100, cases[6].attrs.softcap = 4;
    cases[7].attrs.return_lse = true;
    cases[8].attrs.causal = true;
    // RoPE, half and interleaved: D 8 to 256, odd slot counts (D 80, 96: half a row is no whole
    // number of 16-byte packs), G 1 to 16 (chunks), one key, key lengths, window, ALiBi, soft-capping,
    // sinks, lse, the reduce-scatter forms (16-bit D 128 with 4 heads, D 64 with 2) and PPL 2 (f32 D 256).
    const std::vector<TestCase> rope = {
        {"rope_g1_d64_sk1", qkv(2, 2, 2, 1, 64), {}, 2},
        {"rope_g4_d128_sk300", qkv(2, 8, 2, 300, 128), {}, 1.5},
        {"rope_g8_d128_sk1000_window_alibi", qkv(1, 8, 1, 1000, 128), {}, 1},
        {"rope_g4_d80_sk7_lens", with(qkv(3, 4, 1, 7, 80), 4, {3}), {}, 2},
        {"rope_g2_d64_sk1500_sinks_lse", with(qkv(2, 4, 2, 1500, 64), 7, {4}), {}, 1},
        {"rope_g1_d256_sk777_softcap_lse", qkv(1, 2, 2, 777, 256), {}, 1},
        {"rope_g16_d64_sk200_causal", qkv(1, 16, 1, 200, 64), {}, 1},
        {"rope_g3_d96_sk4099_lens", with(qkv(2, 6, 2, 4099, 96), 4, {2}), {}, 1},
        {"rope_g4_d8_sk33_slopes", with(qkv(2, 4, 1, 33, 8), 3, {4}), {}, 2},
        {"rope_g2_d16_sk9", qkv(1, 2, 1, 9, 16), {}, 2},
    };
    for (int mode : {1, 2})
      for (TestCase tc : rope) {
        tc.label += mode == 1 ? "_half" : "_interleaved";
        tc.attrs.rope = mode;
        if (tc.label.find("window") != std::string::npos) tc.attrs.window = 300, tc.attrs.alibi = true;
        if (tc.label.find("softcap") != std::string::npos) tc.attrs.softcap = 4;
        if (tc.label.find("causal") != std::string::npos) tc.attrs.causal = true;
        if (tc.label.find("lse") != std::string::npos) tc.attrs.return_lse = true;
        cases.push_back(tc);
      }
    for (const TestCase& tc : op.tests)
      if (tc.inputs[0][2] == 1 && tc.attrs.p == 0 && tc.attrs.score_mod.empty() &&
          (tc.inputs.size() <= 5 || tc.inputs[5].empty()) &&
          (tc.inputs.size() <= 8 || tc.inputs[8].empty()))
        cases.push_back(tc);
    const std::string sub = only.size() > 7 ? only.substr(7) : "";
    for (const TestCase& tc : cases) {
      if (!sub.empty() && tc.label.find(sub) == std::string::npos) continue;
      for (DType t : {DType::f32, DType::f16, DType::bf16}) {
        if (tc.inputs[0][3] % (16 / int64_t(dtype_size(t))) != 0) continue;
        run(tc, t, 4, 0, 0, "decode");
        run(tc, t, 4, 5, 0, "decode");
      }
      run(tc, DType::f32, 4, 1, 0, "decode");
    }
    std::printf("fails: %d\n", fails);
    return fails != 0;
  }
  if (only == "extra") {
    scores_and_embedding();
    const auto qkv = [](int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D) {
      return std::vector<Shape>{{B, Hq, Sq, D}, {B, Hkv, Sk, D}, {B, Hkv, Sk, D}};
    };
    std::vector<TestCase> big = {
        {"gqa_h4_kv2_sq150_sk200_d128_causal_rope", qkv(1, 4, 2, 150, 200, 128), {}, 2},
        {"sq70_sk130_d256_dropout_lse", qkv(1, 2, 2, 70, 130, 256), {}, 2},
        {"b2_sq100_sk300_d64_window_alibi_softcap", qkv(2, 2, 2, 100, 300, 64), {}, 2},
        {"sq65_sk129_d80_rope_interleaved", qkv(1, 3, 1, 65, 129, 80), {}, 2},
        {"decode_h4_kv2_sk2048_d64_lse", qkv(1, 4, 2, 1, 2048, 64), {}, 2},
    };
    big[0].attrs.causal = true, big[0].attrs.rope = 1;
    big[1].attrs.p = 0.25, big[1].attrs.return_lse = true, big[1].attrs.seed = 77, big[1].attrs.offset = 3;
    big[2].attrs.window = 40, big[2].attrs.alibi = true, big[2].attrs.softcap = 3;
    big[3].attrs.rope = 2;
    big[4].attrs.return_lse = true;
    for (const TestCase& tc : big) {
      run(tc, DType::f32, 1, 0, 0, "simt-auto");
      if (tc.inputs[0][2] > 1) {
        if ((tc.inputs[0][3] == 64 || tc.inputs[0][3] == 128) && tc.attrs.rope == 0) {  // flash-mma, each form
          run(tc, DType::f16, 5, 1, 16, "mma-rw16");
          run(tc, DType::bf16, 5, 0, 32, "mma-rw32");
          run(tc, DType::f16, 5, 2, 32, "mma-rw32");
        }
        run(tc, DType::f16, 2, 1, 0, "wmma");
        run(tc, DType::bf16, 2, 2, 0, "wmma");
        run(tc, DType::f16, 3, 2, 0, "wmma-regs");
        run(tc, DType::bf16, 3, 1, 0, "wmma-regs");
      } else {
        run(tc, DType::f16, 1, 0, 0, "simt-auto");
        run(tc, DType::f64, 1, 0, 0, "simt-auto");
      }
    }
    std::printf("fails: %d\n", fails);
    return fails != 0;
  }
  if (only.rfind("mma", 0) == 0) {  // the FlashAttention-2 kernel: registry cases with D 64 / 128 and no RoPE, then awkward shapes
    const auto qkv = [](int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D) {
      return std::vector<Shape>{{B, Hq, Sq, D}, {B, Hkv, Sk, D}, {B, Hkv, Sk, D}};
    };
    const std::string sub = only.size() > 4 ? only.substr(4) : "";
    std::vector<TestCase> cases;
    for (const TestCase& tc : op.tests)
      if ((tc.inputs[0][3] == 64 || tc.inputs[0][3] == 128) && tc.attrs.rope == 0 && tc.attrs.score_mod.empty()) cases.push_back(tc);
    std::vector<TestCase> big = {
        {"gqa_h4_kv2_sq150_sk200_d128_causal", qkv(1, 4, 2, 150, 200, 128), {}, 2},
        {"gqa_h6_kv2_sq70_sk45_d64_causal_lse", qkv(1, 6, 2, 70, 45, 64), {}, 2},
        {"sq130_sk130_d128", qkv(1, 1, 1, 130, 130, 128), {}, 2},
        {"b2_sq100_sk300_d64_window_alibi_softcap", qkv(2, 2, 2, 100, 300, 64), {}, 2},
        {"sq70_sk190_d128_dropout_lse", qkv(1, 2, 2, 70, 190, 128), {}, 2},
        {"sq200_sk100_d64_causal_sinks", qkv(1, 1, 1, 200, 100, 64), {}, 2},
        {"sq300_sk300_d128_causal_dropout", qkv(1, 2, 2, 300, 300, 128), {}, 2},
        {"gqa_h4_kv1_sq90_sk333_d128_window_alibi_softcap_lse", qkv(1, 4, 1, 90, 333, 128), {}, 2},
        {"sq260_sk300_d64_causal_window_lse", qkv(1, 1, 1, 260, 300, 64), {}, 2},
    };
    big[0].attrs.causal = true;
    big[1].attrs.causal = true, big[1].attrs.return_lse = true;
    big[3].attrs.window = 40, big[3].attrs.alibi = true, big[3].attrs.softcap = 3;
    big[4].attrs.p = 0.25, big[4].attrs.return_lse = true, big[4].attrs.seed = 77, big[4].attrs.offset = 3;
    big[5].attrs.causal = true;
    big[5].inputs.resize(8);
    big[5].inputs[7] = {1};
    big[6].attrs.causal = true, big[6].attrs.p = 0.1, big[6].attrs.seed = 5;
    big[7].attrs.window = 100, big[7].attrs.alibi = true, big[7].attrs.softcap = 5, big[7].attrs.return_lse = true;
    big[8].attrs.causal = true, big[8].attrs.window = 30, big[8].attrs.return_lse = true;
    cases.insert(cases.end(), big.begin(), big.end());
    // EMU_MMA_RW=16 or 32: only that form (KF_TUNE attn_rows_per_warp); absent: both.
    const char* rw_env = std::getenv("EMU_MMA_RW");
    const int only_rw = rw_env ? std::atoi(rw_env) : 0;
    for (const TestCase& tc : cases) {
      if (!sub.empty() && tc.label.find(sub) == std::string::npos) continue;
      if (only_rw != 32) {
        run(tc, DType::f16, 5, 1, 16, "mma-rw16");
        run(tc, DType::bf16, 5, 3, 16, "mma-rw16");
      }
      if (only_rw != 16) {
        run(tc, DType::f16, 5, 1, 32, "mma-rw32");
        run(tc, DType::bf16, 5, 3, 32, "mma-rw32");
        run(tc, DType::f16, 5, 0, 32, "mma-rw32");
      }
    }
    std::printf("fails: %d\n", fails);
    return fails != 0;
  }
  for (const TestCase& tc : op.tests) {
    if (!only.empty() && tc.label.find(only) == std::string::npos) continue;
    if (!tc.attrs.score_mod.empty()) continue;  // custom score functions: not on this backend (refused)
    run(tc, DType::f32, 1, 1, 0, "simt");
    run(tc, DType::f32, 1, 3, 8, "simt");
    run(tc, DType::f64, 1, 0, 0, "simt");
    run(tc, DType::f16, 1, 2, 0, "simt");
    if (tc.inputs[0][3] % 16 == 0) {
      run(tc, DType::f16, 2, 1, 0, "wmma");
      run(tc, DType::bf16, 2, 3, 0, "wmma");
      run(tc, DType::f16, 3, 2, 0, "wmma-regs");
      run(tc, DType::bf16, 3, 1, 0, "wmma-regs");
    }
  }
  std::printf("fails: %d\n", fails);
  return fails != 0;
}
