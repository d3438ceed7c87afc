// Section 5 of docs/ops.md: attention, declared once for every backend.
//
// attention_scores(q, k) = q k^T * scale, q [B, Hq, Sq, D], k [B, Hkv, Sk, D] (Hq a multiple of Hkv).
// attention(q, k, v, alibi_slopes?, key_lengths?, cu_seqlens_q?, cu_seqlens_k?, sinks?, block_mask?) =
//   softmax(q k^T * scale + bias) v, with the options of kf::Attrs (causal, window, alibi, softcap, rope,
//   dropout p/seed/offset, return_lse, block_size) and the optional inputs:
//   - alibi_slopes [Hq]: per-head ALiBi slopes (their presence turns ALiBi on);
//   - key_lengths [B] i32: per batch (per sequence when packed), keys at or past the length are masked;
//   - cu_seqlens_q, cu_seqlens_k [N + 1] i32: N packed sequences; q [1, Hq, Tq, D], k/v [1, Hkv, Tk, D];
//     sequence s owns query rows [cu_q[s], cu_q[s+1]) and keys [cu_k[s], cu_k[s+1]) and attends only to
//     itself; Sq, Sk in the formulas below are then the sequence's lengths, i and j local indices.
//     cu_seqlens must rise from 0 to Tq (Tk): the reference raises kf::Error otherwise;
//   - sinks [Hq]: a logit per head that joins each row's softmax denominator and adds no value;
//   - block_mask [ceil(Sq / bs), ceil(Sk / bs)] i32 with bs = Attrs::block_size: block (I, J) is
//     computed only where it is nonzero (block-sparse attention; not with packed sequences).
// Block-sparse attention is an input of attention rather than a separate op: it is one more mask, so it
// composes with every other option and the same kernel (which skips the masked tiles) serves it.
//
// Choices where docs/ops.md is silent (written down here and in docs):
// - score order: s = scale q.k; soft-capping c tanh(s / c); + ALiBi bias; the custom score function
//   (Attrs::score_mod, src/ops/score_mod.hpp: an expression of score, b, h, i, j; b is the sequence
//   when packed, i and j the indices within it; -inf masks the key); then masks (-inf).
// - window w applies on its own (without causal it masks only keys more than w - 1 behind the
//   aligned diagonal, as FlashAttention's window_size = (w - 1, -1)); causal adds the future mask.
// - causal, window and ALiBi use the tensor's (or the packed sequence's) Sk, not key_lengths.
// - default ALiBi slopes for H not a power of two: the ALiBi paper's rule (the 2^floor(log2 H) slopes,
//   then every other slope of the 2 * 2^floor(log2 H) series), as its reference code and PyTorch models.
// - RoPE positions: key j at position j, query i at position i + (Sk - Sq) (the same alignment as
//   causal: in decoding the query is the newest token); rotary dimension = D; theta_d = pos base^(-2d/D).
// - dropout: keep(i) of the Philox generator with i the linear index of the probability (b, h, i, j)
//   in the [B, Hq, Sq, Sk] matrix of the tensors' shapes (packed: [1, Hq, Tq, Tk] with global rows and
//   columns); the kept probabilities are divided by (1 - p). The log-sum-exp is that of the undropped
//   softmax.
// - sinks: the sink logit is used as given (not scaled, capped or biased); lse includes it.
// - a row with no visible key outputs zeros; its lse is -inf (the sink when there is one).
// - the lse output has the op's dtype (every output of an op shares it).
#include "ops/attention_ref.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/op_checks.hpp"
#include "ops/parallel.hpp"
#include "ops/reference_math.hpp"
#include "ops/score_mod.hpp"

namespace kf {

double alibi_default_slope(int64_t h, int64_t H) {
  int64_t c = 1;
  while (c * 2 <= H) c *= 2;
  if (h < c) return std::exp2(-8.0 * double(h + 1) / double(c));
  return std::exp2(-8.0 * double(2 * (h - c) + 1) / double(2 * c));
}

void rope_rotate(double* x, int64_t D, double pos, int64_t layout, double base) {
  const int64_t half = D / 2;
  for (int64_t d = 0; d < half; ++d) {
    const double theta = pos * std::pow(base, -2.0 * double(d) / double(D));
    const double c = std::cos(theta), s = std::sin(theta);
    const int64_t i0 = layout == 1 ? d : 2 * d, i1 = layout == 1 ? d + half : 2 * d + 1;
    const double a = x[i0], b = x[i1];
    x[i0] = a * c - b * s;
    x[i1] = b * c + a * s;
  }
}

void check_cu_seqlens(const std::string& op, const AttnGeometry& g, const HostTensor& cuq, const HostTensor& cuk) {
  for (const HostTensor* cu : {&cuq, &cuk}) {
    const int64_t T = cu == &cuq ? g.SqT : g.SkT;
    const char* name = cu == &cuq ? "cu_seqlens_q" : "cu_seqlens_k";
    if (cu->data[0] != 0 || cu->data.back() != double(T))
      throw Error(ErrorCode::InvalidArgument, op + ": argument '" + name + "' must start at 0 and end at " +
                                                  std::to_string(T) + " (the packed length)");
    for (size_t s = 1; s < cu->data.size(); ++s)
      if (cu->data[s] < cu->data[s - 1])
        throw Error(ErrorCode::InvalidArgument, op + ": argument '" + name + "' decreases at index " + std::to_string(s));
  }
}

namespace {

using namespace opcheck;

std::string str(int64_t v) { return std::to_string(v); }

void check_qkv(const OpDef& d, const std::vector<Shape>& in, bool need_v) {
  const Shape& q = in[0];
  const Shape& k = in[1];
  if (q.size() != 4) shape_error(d, "q", q, "[B, Hq, Sq, D] (4 dimensions)");
  if (k.size() != 4 || k[0] != q[0] || k[3] != q[3])
    shape_error(d, "k", k, "[" + str(q[0]) + ", Hkv, Sk, " + str(q[3]) + "] (B and D of q)");
  if (k[1] < 1 || q[1] % k[1] != 0)  // Hkv 0 too: no heads to share
    shape_error(d, "k", k, "Hkv dividing Hq = " + str(q[1]) + " (grouped-query attention: Hq a multiple of Hkv)");
  if (need_v && in[2] != k) shape_error(d, "v", in[2], to_string(k) + " (the shape of 'k')");
  const int64_t D = q[3];
  if (D % 8 != 0 || D > 256)
    shape_error(d, "q", q, "a head dimension D that is a multiple of 8 and at most 256 (got D = " + str(D) + ")");
}

double scale_of(const Attrs& a, int64_t D) { return a.attn_scale != 0 ? a.attn_scale : 1.0 / std::sqrt(double(D)); }

// The row-by-row float64 attention: o (and lse) of every query row.
void reference_attention(const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
  std::vector<Shape> shapes;
  for (const auto& t : in) shapes.push_back(t.shape);
  const AttnGeometry g = attn_geometry(shapes);
  const int64_t D = g.D, G = g.Hq / g.Hkv;
  const double scale = scale_of(a, D);
  const auto opt = [&](size_t k) -> const HostTensor* { return in.size() > k && in[k].present() ? &in[k] : nullptr; };
  const HostTensor *slopes = opt(3), *lens = opt(4), *cuq = opt(5), *cuk = opt(6), *sinks = opt(7), *bmask = opt(8);
  const bool alibi = a.alibi || slopes;
  if (g.varlen) check_cu_seqlens("attention", g, *cuq, *cuk);
  const ScoreMod fn = a.score_mod.empty() ? ScoreMod() : ScoreMod::parse("attention", a.score_mod);
  const uint32_t thr = ref::dropout_threshold(a.p);
  const double keep_scale = 1.0 / (1.0 - a.p);
  HostTensor& o = out[0];
  HostTensor* lse = out.size() > 1 ? &out[1] : nullptr;
  const int64_t nrows = g.nseq * g.Hq;
  parallel_for(nrows, [&](int64_t r0, int64_t r1) {
    std::vector<double> qv(D), kv(D), s;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t seq = r / g.Hq, h = r % g.Hq, hk = h / G;
      const int64_t b = g.varlen ? 0 : seq;
      const int64_t qbeg = g.varlen ? int64_t(cuq->data[seq]) : 0, qlen = g.varlen ? int64_t(cuq->data[seq + 1]) - qbeg : g.SqT;
      const int64_t kbeg = g.varlen ? int64_t(cuk->data[seq]) : 0, klen = g.varlen ? int64_t(cuk->data[seq + 1]) - kbeg : g.SkT;
      const int64_t off = klen - qlen;
      const int64_t kl = lens ? std::clamp<int64_t>(int64_t(lens->data[seq]), 0, klen) : klen;
      const double slope = alibi ? (slopes ? slopes->data[h] : alibi_default_slope(h, g.Hq)) : 0.0;
      s.assign(static_cast<size_t>(klen), 0.0);
      for (int64_t i = 0; i < qlen; ++i) {
        const int64_t row = qbeg + i;
        const double* qp = in[0].data.data() + ((b * g.Hq + h) * g.SqT + row) * D;
        std::copy(qp, qp + D, qv.begin());
        if (a.rope) rope_rotate(qv.data(), D, double(i + off), a.rope, a.rope_base);
        double m = -std::numeric_limits<double>::infinity();
        std::vector<char> vis(static_cast<size_t>(klen), 0);
        for (int64_t j = 0; j < klen; ++j) {
          bool ok = j < kl;
          if (a.causal && j > i + off) ok = false;
          if (a.window > 0 && i + off - j >= a.window) ok = false;
          if (bmask && bmask->data[(row / a.block_size) * bmask->shape[1] + (kbeg + j) / a.block_size] == 0) ok = false;
          if (!ok) continue;
          const double* kp = in[1].data.data() + ((b * g.Hkv + hk) * g.SkT + kbeg + j) * D;
          std::copy(kp, kp + D, kv.begin());
          if (a.rope) rope_rotate(kv.data(), D, double(j), a.rope, a.rope_base);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qv[d] * kv[d];
          double sc = dot * scale;
          if (a.softcap > 0) sc = a.softcap * std::tanh(sc / a.softcap);
          if (alibi) sc -= slope * std::fabs(double(i + off - j));
          if (!fn.empty()) {
            sc = fn.eval(sc, seq, h, i, j);
            if (sc == -std::numeric_limits<double>::infinity()) continue;  // masked by the function
          }
          s[j] = sc;
          vis[j] = 1;
          m = std::max(m, sc);
        }
        const double sink = sinks ? sinks->data[h] : -std::numeric_limits<double>::infinity();
        const double mm = std::max(m, sink);
        double l = 0;
        if (mm > -std::numeric_limits<double>::infinity()) {
          for (int64_t j = 0; j < klen; ++j)
            if (vis[j]) l += std::exp(s[j] - mm);
          if (sinks) l += std::exp(sink - mm);
        }
        double* op = o.data.data() + ((b * g.Hq + h) * g.SqT + row) * D;
        std::fill(op, op + D, 0.0);
        if (lse) lse->data[(b * g.Hq + h) * g.SqT + row] = l > 0 ? mm + std::log(l) : -std::numeric_limits<double>::infinity();
        if (l == 0) continue;
        const uint64_t rowidx = uint64_t((b * g.Hq + h) * g.SqT + row) * uint64_t(g.SkT);
        for (int64_t j = 0; j < klen; ++j) {
          if (!vis[j]) continue;
          double p = std::exp(s[j] - mm) / l;
          if (a.p > 0) p = ref::dropout_keep(rowidx + uint64_t(kbeg + j), a.seed, a.offset, thr) ? p * keep_scale : 0.0;
          if (p == 0) continue;
          const double* vp = in[2].data.data() + ((b * g.Hkv + hk) * g.SkT + kbeg + j) * D;
          for (int64_t d = 0; d < D; ++d) op[d] += p * vp[d];
        }
      }
    }
  }, 1);
}

// Valid values for the optional integer inputs, drawn from the uniform ones (deterministic per seed).
void prepare_attention_inputs(const std::vector<Shape>& shapes, const Attrs&, std::vector<std::vector<double>>& v) {
  const auto has = [&](size_t k) { return shapes.size() > k && !shapes[k].empty(); };
  const auto frac = [](double u, double mul) { const double t = std::fabs(u) * mul; return t - std::floor(t); };
  if (has(3))  // slopes in [2^-8, 2^-1]
    for (auto& x : v[3]) x = std::exp2(-(1.0 + 7.0 * frac(x, 3.7)));
  const bool varlen = has(5) && has(6);
  if (varlen) {
    for (size_t k : {size_t(5), size_t(6)}) {
      const int64_t T = shapes[k == 5 ? 0 : 1][2];
      auto& cu = v[k];
      const size_t n = cu.size();
      std::vector<double> cuts;
      for (size_t s = 1; s + 1 < n; ++s) cuts.push_back(std::floor(frac(cu[s], 7.3) * double(T + 1)));
      std::sort(cuts.begin(), cuts.end());
      cu[0] = 0;
      for (size_t s = 1; s + 1 < n; ++s) cu[s] = std::min<double>(cuts[s - 1], double(T));
      cu[n - 1] = double(T);
    }
  }
  if (has(4)) {  // key lengths in [0, Sk]; one batch full-length-ish, one empty when there are 3 or more
    const int64_t Sk = shapes[1][2];
    auto& len = v[4];
    for (size_t s = 0; s < len.size(); ++s) len[s] = std::floor(frac(len[s], 5.1) * double(Sk + 1));
    if (!len.empty()) len[0] = std::max(len[0], 1.0);
    if (len.size() >= 3) len[1] = 0;
  }
  if (has(8)) {  // mostly computed blocks, some skipped
    double mx = 0;
    for (double x : v[8]) mx = std::max(mx, std::fabs(x));
    for (auto& x : v[8]) x = x > -0.4 * mx ? 1.0 : 0.0;
  }
}

Attrs with_mod(Attrs a, const char* fn) {
  a.score_mod = fn;
  return a;
}

Attrs attn(std::initializer_list<std::pair<const char*, double>> kv) {
  Attrs a;
  for (const auto& [k, x] : kv) {
    const std::string n = k;
    if (n == "causal") a.causal = x != 0;
    else if (n == "window") a.window = int64_t(x);
    else if (n == "alibi") a.alibi = x != 0;
    else if (n == "softcap") a.softcap = x;
    else if (n == "rope") a.rope = int64_t(x);
    else if (n == "lse") a.return_lse = x != 0;
    else if (n == "bs") a.block_size = int64_t(x);
    else if (n == "p") a.p = x, a.seed = 0x5eed1234abcdull, a.offset = 77;
    else if (n == "scale") a.attn_scale = x;
  }
  return a;
}

}  // namespace

std::vector<Shape> attention_infer(const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
  check_qkv(d, in, true);
  if (!(a.p >= 0.0 && a.p < 1.0)) value_error(d, "p", a.p, "a dropout probability in [0, 1)");
  if (a.window < 0) value_error(d, "window", double(a.window), "a window of at least 1 key (0 turns it off)");
  if (!(a.softcap >= 0) || !std::isfinite(a.softcap)) value_error(d, "softcap", a.softcap, "c > 0 (0 turns soft-capping off)");
  if (a.rope < 0 || a.rope > 2) value_error(d, "rope", double(a.rope), "0 (none), 1 (half, GPT-NeoX) or 2 (interleaved)");
  if (a.rope && (!(a.rope_base > 0) || !std::isfinite(a.rope_base))) value_error(d, "rope_base", a.rope_base, "a positive base");
  if (!std::isfinite(a.attn_scale)) value_error(d, "attn_scale", a.attn_scale, "a finite scale (0 means 1/sqrt(D))");
  if (a.block_size < 0) value_error(d, "block_size", double(a.block_size), "a positive block edge");
  if (!a.score_mod.empty()) ScoreMod::parse(d.name, a.score_mod);  // throws naming what is wrong
  const AttnGeometry g = attn_geometry(in);
  const auto has = [&](size_t k) { return in.size() > k && !in[k].empty(); };
  if (has(3)) expect_shape(d, in, 3, {g.Hq});
  if (has(7)) expect_shape(d, in, 7, {g.Hq});
  if (has(5) != has(6))
    throw Error(ErrorCode::InvalidArgument, d.name + ": packed sequences need both 'cu_seqlens_q' and 'cu_seqlens_k' (got only '" +
                                                (has(5) ? "cu_seqlens_q" : "cu_seqlens_k") + "')");
  if (g.varlen) {
    if (in[5].size() != 1 || in[5][0] < 2) shape_error(d, "cu_seqlens_q", in[5], "[N + 1] with N >= 1 sequences");
    if (in[6] != in[5]) shape_error(d, "cu_seqlens_k", in[6], to_string(in[5]) + " (the shape of 'cu_seqlens_q')");
    if (g.B != 1) shape_error(d, "q", in[0], "[1, Hq, Tq, D] with packed sequences (cu_seqlens given)");
    if (has(8)) throw Error(ErrorCode::InvalidArgument, d.name + ": 'block_mask' does not combine with packed sequences (cu_seqlens)");
  }
  if (has(4)) expect_shape(d, in, 4, {g.nseq});
  if (has(8)) {
    if (a.block_size <= 0) value_error(d, "block_size", double(a.block_size), "a positive block edge (a block_mask is given)");
    const int64_t bs = a.block_size;
    expect_shape(d, in, 8, {(g.SqT + bs - 1) / bs, (g.SkT + bs - 1) / bs});
  }
  std::vector<Shape> out = {in[0]};
  if (a.return_lse) out.push_back({g.B, g.Hq, g.SqT});
  return out;
}

void register_attention_ops(std::vector<OpDef>& ops) {
  {
    OpDef op;
    op.name = "attention_scores";
    op.family = Family::Attention;
    op.inputs = {"q", "k"};
    op.required_inputs = 2;
    op.outputs = {"s"};
    op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
      check_qkv(d, in, false);
      if (!std::isfinite(a.attn_scale)) value_error(d, "attn_scale", a.attn_scale, "a finite scale (0 means 1/sqrt(D))");
      return std::vector<Shape>{{in[0][0], in[0][1], in[0][2], in[1][2]}};
    };
    op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
      const int64_t B = in[0].shape[0], Hq = in[0].shape[1], Sq = in[0].shape[2], D = in[0].shape[3];
      const int64_t Hkv = in[1].shape[1], Sk = in[1].shape[2], G = Hq / Hkv;
      const double scale = scale_of(a, D);
      parallel_for(B * Hq * Sq, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t bh = r / Sq, b = bh / Hq, h = bh % Hq;
          const double* q = in[0].data.data() + r * D;
          for (int64_t j = 0; j < Sk; ++j) {
            const double* k = in[1].data.data() + ((b * Hkv + h / G) * Sk + j) * D;
            double s = 0;
            for (int64_t d = 0; d < D; ++d) s += q[d] * k[d];
            out[0].data[r * Sk + j] = s * scale;
          }
        }
      }, 1);
    };
    op.terms = [](const std::vector<Shape>& in) { return double(in[0][3]); };
    op.flops = [](const std::vector<Shape>& in, const Attrs&) {
      return 2.0 * double(numel(in[0])) * double(in[1][2]);
    };
    op.tests = {{"b2_h3_sq17_sk33_d64", {{2, 3, 17, 64}, {2, 3, 33, 64}}},
                {"sq1_sk65_d128_gqa", {{1, 4, 1, 128}, {1, 2, 65, 128}}, attn({{"scale", 0.3}})},
                {"sq33_sk1_d80", {{1, 2, 33, 80}, {1, 2, 1, 80}}},
                {"sq5_sk7_d8", {{3, 1, 5, 8}, {3, 1, 7, 8}}}};
    op.bench = {{"b4_h32_s1024_d128", {{4, 32, 1024, 128}, {4, 32, 1024, 128}}}};
    ops.push_back(op);
  }
  {
    OpDef op;
    op.name = "attention";
    op.family = Family::Attention;
    op.inputs = {"q", "k", "v", "alibi_slopes", "key_lengths", "cu_seqlens_q", "cu_seqlens_k", "sinks", "block_mask"};
    op.required_inputs = 3;
    op.outputs = {"o", "lse"};
    op.input_dtypes = {std::nullopt, std::nullopt, std::nullopt, std::nullopt, DType::i32, DType::i32, DType::i32,
                       std::nullopt, DType::i32};
    op.transcendental = true;
    op.infer = attention_infer;
    op.reference = reference_attention;
    op.prepare_inputs = prepare_attention_inputs;
    op.terms = [](const std::vector<Shape>& in) { return double(in[0][3]); };
    op.flops = [](const std::vector<Shape>& in, const Attrs& a) {
      const AttnGeometry g = attn_geometry(in);
      const double f = 4.0 * double(g.B) * double(g.Hq) * double(g.SqT) * double(g.SkT) * double(g.D);
      return a.causal ? f / 2 : f;
    };
    const auto qkv = [](int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D) {
      return std::vector<Shape>{{B, Hq, Sq, D}, {B, Hkv, Sk, D}, {B, Hkv, Sk, D}};
    };
    const auto with = [](std::vector<Shape> s, size_t k, const Shape& x) {
      s.resize(std::max(s.size(), k + 1));
      s[k] = x;
      return s;
    };
    op.tests = {
        {"b2_h3_s17_d64", qkv(2, 3, 3, 17, 17, 64), {}, 2},
        {"sq1_sk65_d128", qkv(1, 4, 4, 1, 65, 128), {}, 1.5},
        // range 1: over 1000 keys the f32 rounding of the scores and exp alone comes near the 1e-6 relative
        // L2 tolerance when the scores spread wider (the output is an average with much cancellation).
        {"sq1_sk1000_d64_decode", qkv(1, 2, 2, 1, 1000, 64), {}, 1},
        {"sq33_sk17_d80_causal", qkv(1, 2, 2, 33, 17, 80), attn({{"causal", 1}}), 2},
        {"sq17_sk33_d96_causal", qkv(2, 1, 1, 17, 33, 96), attn({{"causal", 1}}), 2},
        {"s65_d64_causal_window16", qkv(1, 2, 2, 65, 65, 64), attn({{"causal", 1}, {"window", 16}}), 2},
        {"sq17_sk33_d64_window8", qkv(1, 1, 1, 17, 33, 64), attn({{"window", 8}}), 2},
        {"h4_s33_d64_alibi_causal", qkv(1, 4, 4, 33, 33, 64), attn({{"causal", 1}, {"alibi", 1}}), 2},
        {"h6_sq17_sk33_d64_alibi", qkv(1, 6, 6, 17, 33, 64), attn({{"alibi", 1}}), 2},
        {"h3_sq17_sk33_d64_slopes", with(qkv(1, 3, 3, 17, 33, 64), 3, {3}), {}, 2},
        {"b3_s33_d64_key_lengths", with(qkv(3, 2, 2, 33, 33, 64), 4, {3}), {}, 2},
        {"s33_d64_dropout", qkv(2, 2, 2, 33, 33, 64), attn({{"p", 0.3}}), 2},
        {"gqa_h6_kv2_sq17_sk33_d64", qkv(1, 6, 2, 17, 33, 64), attn({{"causal", 1}}), 2},
        {"mqa_h4_kv1_sq1_sk65_d128", qkv(2, 4, 1, 1, 65, 128), {}, 1.5},
        {"s33_d64_rope_half", qkv(1, 2, 2, 33, 33, 64), attn({{"rope", 1}}), 2},
        {"sq17_sk33_d80_rope_interleaved_causal", qkv(1, 2, 1, 17, 33, 80), attn({{"rope", 2}, {"causal", 1}}), 2},
        // RoPE on the decode kernels: every cached key rotated at its position, the query at Sk - 1.
        {"gqa_h8_kv2_sq1_sk300_d128_rope_half_decode", qkv(2, 8, 2, 1, 300, 128), attn({{"rope", 1}}), 1.5},
        {"sq1_sk200_d64_rope_interleaved_lengths_decode", with(qkv(3, 4, 4, 1, 200, 64), 4, {3}), attn({{"rope", 2}}), 1.5},
        {"s17_d64_softcap", qkv(1, 2, 2, 17, 17, 64), attn({{"softcap", 2}}), 3},
        {"h3_sq33_sk17_d64_sinks_causal", with(qkv(1, 3, 3, 33, 17, 64), 7, {3}), attn({{"causal", 1}}), 2},
        {"varlen_3seq_d64_causal", with(with(qkv(1, 2, 2, 40, 50, 64), 5, {4}), 6, {4}), attn({{"causal", 1}}), 2},
        {"sq17_sk33_d64_lse_causal", qkv(2, 2, 2, 17, 33, 64), attn({{"causal", 1}, {"lse", 1}}), 2},
        {"s65_d64_block_mask16", with(qkv(1, 2, 2, 65, 65, 64), 8, {5, 5}), attn({{"bs", 16}, {"lse", 1}}), 2},
        // A negative scale (legal, if odd): kernels that take the row max on unscaled scores must flip it.
        {"sq33_sk65_d64_negscale_causal", qkv(1, 2, 2, 33, 65, 64), attn({{"causal", 1}, {"scale", -0.2}}), 2},
        {"s17_d256", qkv(1, 1, 1, 17, 17, 256), {}, 2},
        {"s3_d8", qkv(1, 1, 1, 3, 3, 8), {}, 2},
        {"combined", {{2, 4, 17, 64}, {2, 2, 33, 64}, {2, 2, 33, 64}, {}, {2}, {}, {}, {4}},
         attn({{"causal", 1}, {"window", 12}, {"alibi", 1}, {"rope", 1}, {"softcap", 4}, {"p", 0.2}, {"lse", 1}}), 2},
        // Custom score functions (compiled into the kernel at run time): a relative-position bias, a
        // mask of its own (rows 0-2 see nothing: zeros, lse -inf), heads and batches scaled apart with
        // integer arithmetic, a decode-shaped call with key lengths (the decode kernel where there is one),
        // and one combined with GQA, packed sequences, soft-capping and dropout.
        {"s33_d64_score_mod_bias_causal", qkv(2, 2, 2, 33, 33, 64),
         with_mod(attn({{"causal", 1}}), "score - 0.05 * float(abs(i - j))"), 2},
        {"sq17_sk33_d64_score_mod_mask", qkv(1, 3, 3, 17, 33, 64),
         with_mod(attn({{"lse", 1}}), "i < 3 || (i + j) % 5 == 0 ? -inf : score"), 2},
        {"b2_h4_kv2_s17_d80_score_mod_heads", qkv(2, 4, 2, 17, 25, 80),
         with_mod(attn({{"causal", 1}}), "score * (1.0 + 0.25 * float(h)) - float(b) * 0.5 + (j / 4 == i / 4 ? 0.3 : 0.0)"), 2},
        {"sq1_sk300_d64_gqa_score_mod_decode", with(qkv(2, 4, 2, 1, 300, 64), 4, {2}),
         with_mod(attn({{"lse", 1}}), "j % 7 == 3 ? -inf : score - 0.002 * float(h * j) + 0.1 * float(b)"), 1.5},
        {"varlen_score_mod_softcap_dropout", with(with(qkv(1, 4, 2, 40, 50, 64), 5, {4}), 6, {4}),
         with_mod(attn({{"softcap", 3}, {"p", 0.2}, {"lse", 1}}), "b == 1 ? score : max(score, -1.5) + 0.1 * tanh(float(j - i))"), 2},
    };
    op.bench = {
        {"b4_h32_s1024_d128", qkv(4, 32, 32, 1024, 1024, 128)},
        {"b4_h32_s1024_d128_causal", qkv(4, 32, 32, 1024, 1024, 128), attn({{"causal", 1}})},
        {"b4_h32_s4096_d128", qkv(4, 32, 32, 4096, 4096, 128)},
        {"b4_h32_s4096_d128_causal", qkv(4, 32, 32, 4096, 4096, 128), attn({{"causal", 1}})},
        {"b4_h32_s16384_d128", qkv(4, 32, 32, 16384, 16384, 128)},
        {"b4_h32_s16384_d128_causal", qkv(4, 32, 32, 16384, 16384, 128), attn({{"causal", 1}})},
        // A head dimension between the native ones (the CUDA warpgroup kernel pads it to 128).
        {"b4_h32_s4096_d96_causal", qkv(4, 32, 32, 4096, 4096, 96), attn({{"causal", 1}})},
        {"b4_h16_s4096_d256_causal", qkv(4, 16, 16, 4096, 4096, 256), attn({{"causal", 1}})},
        // Training's attention dropout (the Philox bits per score).
        {"b4_h32_s4096_d128_causal_dropout", qkv(4, 32, 32, 4096, 4096, 128), attn({{"causal", 1}, {"p", 0.1}})},
        // ALiBi built in, and the same bias as a custom score function (compiled at run time): the cost of
        // the general form.
        {"b4_h32_s4096_d128_causal_alibi", qkv(4, 32, 32, 4096, 4096, 128), attn({{"causal", 1}, {"alibi", 1}})},
        {"b4_h32_s4096_d128_causal_score_mod_alibi", qkv(4, 32, 32, 4096, 4096, 128),
         with_mod(attn({{"causal", 1}}), "score - pow(2.0, -0.25 * float(h + 1)) * float(abs(i - j))")},
        {"decode_b4_h32_kv8_32k_d128", qkv(4, 32, 8, 1, 32768, 128)},
        {"decode_b1_h32_kv8_4k_d128_rope", qkv(1, 32, 8, 1, 4096, 128), attn({{"rope", 1}})},
        {"decode_b1_h32_32k_d128", qkv(1, 32, 32, 1, 32768, 128)},
        {"decode_b4_h32_kv8_128k_d128", qkv(4, 32, 8, 1, 131072, 128)},
        {"decode_b1_h32_128k_d128", qkv(1, 32, 32, 1, 131072, 128)},
    };
    ops.push_back(op);
  }
  register_attention_backward(ops);
}

}  // namespace kf
