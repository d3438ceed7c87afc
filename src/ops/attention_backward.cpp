// attention_backward (docs/ops.md section 5, training): the gradients dq, dk, dv of attention given the
// forward's output o and row log-sum-exp lse (Attrs::return_lse), as FlashAttention 2 computes them:
//   P = exp(s - lse) (the forward's probabilities, recomputed), Z = keep / (1 - p) (the same dropout mask),
//   dv_j = sum_i Z_ij P_ij do_i,  dP_ij = Z_ij do_i . v_j,  D_i = do_i . o_i,  dS_ij = P_ij (dP_ij - D_i),
//   through the custom score function f (Attrs::score_mod) and soft-capping dt = dS f'(s) (1 - tanh^2(t / c)),
//   then dq_i = scale sum_j dt_ij k_j and
//   dk_j = scale sum_i dt_ij q_i (rotated back when RoPE is on; summed over the heads that share a kv head).
// Inputs: q, k, v, o, do, lse, then attention's optional inputs in attention's order (alibi_slopes,
// key_lengths, cu_seqlens_q, cu_seqlens_k, sinks, block_mask); the attributes are the forward's
// (return_lse is ignored). The sinks enter only through lse (their own gradient is not returned).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/attention_ref.hpp"
#include "ops/op_checks.hpp"
#include "ops/parallel.hpp"
#include "ops/reference_math.hpp"
#include "ops/score_mod.hpp"

namespace kf {
namespace {

using namespace opcheck;

// Forward input k of attention is backward input fwd_index(k): q, k, v stay, the optional ones move by 3.
constexpr size_t kShift = 3;

std::vector<Shape> forward_shapes(const std::vector<Shape>& in) {
  std::vector<Shape> f = {in[0], in[1], in[2]};
  for (size_t k = 6; k < in.size(); ++k) f.push_back(in[k]);
  return f;
}

void reference_backward(const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
  std::vector<Shape> shapes;
  for (const auto& t : in) shapes.push_back(t.shape);
  const AttnGeometry g = attn_geometry(forward_shapes(shapes));
  const int64_t D = g.D, G = g.Hq / g.Hkv;
  const double scale = a.attn_scale != 0 ? a.attn_scale : 1.0 / std::sqrt(double(D));
  const auto opt = [&](size_t k) -> const HostTensor* {
    k += kShift;
    return in.size() > k && in[k].present() ? &in[k] : nullptr;
  };
  const HostTensor *slopes = opt(3), *lens = opt(4), *cuq = opt(5), *cuk = opt(6), *bmask = opt(8);
  const bool alibi = a.alibi || slopes;
  const HostTensor &Q = in[0], &K = in[1], &V = in[2], &O = in[3], &dO = in[4], &L = in[5];
  HostTensor &dQ = out[0], &dK = out[1], &dV = out[2];
  std::fill(dQ.data.begin(), dQ.data.end(), 0.0);
  std::fill(dK.data.begin(), dK.data.end(), 0.0);
  std::fill(dV.data.begin(), dV.data.end(), 0.0);
  if (g.varlen) check_cu_seqlens("attention_backward", g, *cuq, *cuk);
  const ScoreMod fn = a.score_mod.empty() ? ScoreMod() : ScoreMod::parse("attention_backward", a.score_mod);
  const uint32_t thr = ref::dropout_threshold(a.p);
  const double keep_scale = 1.0 / (1.0 - a.p);
  // One task per (sequence, kv head): it owns dk and dv of that head and dq of its G query heads.
  parallel_for(g.nseq * g.Hkv, [&](int64_t t0, int64_t t1) {
    std::vector<double> qv(D), kv(D), dqv(D);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t seq = t / g.Hkv, hk = t % g.Hkv;
      const int64_t b = g.varlen ? 0 : seq;
      const int64_t qbeg = g.varlen ? int64_t(cuq->data[seq]) : 0, qlen = g.varlen ? int64_t(cuq->data[seq + 1]) - qbeg : g.SqT;
      const int64_t kbeg = g.varlen ? int64_t(cuk->data[seq]) : 0, klen = g.varlen ? int64_t(cuk->data[seq + 1]) - kbeg : g.SkT;
      const int64_t off = klen - qlen;
      const int64_t kl = lens ? std::clamp<int64_t>(int64_t(lens->data[seq]), 0, klen) : klen;
      // Rotated keys of this head, and their gradients before the inverse rotation.
      std::vector<double> kr(static_cast<size_t>(klen * D)), dkr(static_cast<size_t>(klen * D), 0.0);
      for (int64_t j = 0; j < klen; ++j) {
        const double* kp = &K.data[((b * g.Hkv + hk) * g.SkT + kbeg + j) * D];
        std::copy(kp, kp + D, &kr[j * D]);
        if (a.rope) rope_rotate(&kr[j * D], D, double(j), a.rope, a.rope_base);
      }
      for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
        const double slope = alibi ? (slopes ? slopes->data[h] : alibi_default_slope(h, g.Hq)) : 0.0;
        for (int64_t i = 0; i < qlen; ++i) {
          const int64_t row = qbeg + i, rowidx = (b * g.Hq + h) * g.SqT + row;
          const double* qp = &Q.data[rowidx * D];
          std::copy(qp, qp + D, qv.begin());
          if (a.rope) rope_rotate(qv.data(), D, double(i + off), a.rope, a.rope_base);
          const double* dop = &dO.data[rowidx * D];
          const double* op = &O.data[rowidx * D];
          double Di = 0;
          for (int64_t d = 0; d < D; ++d) Di += dop[d] * op[d];
          const double lse = L.data[rowidx];
          std::fill(dqv.begin(), dqv.end(), 0.0);
          for (int64_t j = 0; j < klen; ++j) {
            bool ok = j < kl;
            if (a.causal && j > i + off) ok = false;
            if (a.window > 0 && i + off - j >= a.window) ok = false;
            if (bmask && bmask->data[(row / a.block_size) * bmask->shape[1] + (kbeg + j) / a.block_size] == 0) ok = false;
            if (!ok || !(lse > -std::numeric_limits<double>::infinity())) continue;
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += qv[d] * kr[j * D + d];
            const double traw = dot * scale;
            double s = traw, dcap = 1;
            if (a.softcap > 0) {
              const double th = std::tanh(traw / a.softcap);
              s = a.softcap * th;
              dcap = 1 - th * th;
            }
            if (alibi) s -= slope * std::fabs(double(i + off - j));
            if (!fn.empty()) {
              const double s0 = s;
              s = fn.eval(s0, seq, h, i, j);
              if (s == -std::numeric_limits<double>::infinity()) continue;  // masked by the function
              dcap *= fn.grad(s0, seq, h, i, j);
            }
            const double P = std::exp(s - lse);
            double Z = 1;
            if (a.p > 0)
              Z = ref::dropout_keep(uint64_t(rowidx) * uint64_t(g.SkT) + uint64_t(kbeg + j), a.seed, a.offset, thr) ? keep_scale : 0.0;
            const double* vp = &V.data[((b * g.Hkv + hk) * g.SkT + kbeg + j) * D];
            double* dvp = &dV.data[((b * g.Hkv + hk) * g.SkT + kbeg + j) * D];
            double dP = 0;
            for (int64_t d = 0; d < D; ++d) {
              dvp[d] += Z * P * dop[d];
              dP += dop[d] * vp[d];
            }
            dP *= Z;
            const double dt = P * (dP - Di) * dcap * scale;
            for (int64_t d = 0; d < D; ++d) {
              dqv[d] += dt * kr[j * D + d];
              dkr[j * D + d] += dt * qv[d];
            }
          }
          if (a.rope) rope_rotate(dqv.data(), D, -double(i + off), a.rope, a.rope_base);
          std::copy(dqv.begin(), dqv.end(), &dQ.data[rowidx * D]);
        }
      }
      for (int64_t j = 0; j < klen; ++j) {
        if (a.rope) rope_rotate(&dkr[j * D], D, -double(j), a.rope, a.rope_base);
        std::copy(&dkr[j * D], &dkr[(j + 1) * D], &dK.data[((b * g.Hkv + hk) * g.SkT + kbeg + j) * D]);
      }
    }
  }, 1);
}

// Random inputs made consistent: the optional ones as for attention, then o and lse computed by the
// forward reference from q, k, v (so that exp(s - lse) are probabilities, as in training).
void prepare_backward_inputs(const std::vector<Shape>& shapes, const Attrs& a, std::vector<std::vector<double>>& v) {
  const OpDef& fwd = get_op("attention");
  std::vector<Shape> fs = forward_shapes(shapes);
  std::vector<std::vector<double>> fv = {v[0], v[1], v[2]};
  for (size_t k = 6; k < v.size(); ++k) fv.push_back(v[k]);
  fwd.prepare_inputs(fs, a, fv);
  for (size_t k = 6; k < v.size(); ++k) v[k] = fv[k - kShift];
  std::vector<HostTensor> in(fs.size());
  for (size_t k = 0; k < fs.size(); ++k) in[k] = HostTensor{fs[k], fv[k]};
  Attrs fa = a;
  fa.return_lse = true;
  const auto outs = fwd.infer(fwd, fs, fa);
  std::vector<HostTensor> out(2);
  for (size_t k = 0; k < 2; ++k) out[k] = HostTensor{outs[k], std::vector<double>(size_t(numel(outs[k])))};
  fwd.reference(in, out, fa);
  v[3] = out[0].data;
  v[5] = out[1].data;
}

}  // namespace

void register_attention_backward(std::vector<OpDef>& ops) {
  OpDef op;
  op.name = "attention_backward";
  op.family = Family::Attention;
  op.inputs = {"q", "k", "v", "o", "do", "lse", "alibi_slopes", "key_lengths", "cu_seqlens_q", "cu_seqlens_k",
               "sinks", "block_mask"};
  op.required_inputs = 6;
  op.outputs = {"dq", "dk", "dv"};
  op.input_dtypes = {std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                     std::nullopt, DType::i32,   DType::i32,   DType::i32,   std::nullopt, DType::i32};
  op.transcendental = true;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
    Attrs fa = a;
    fa.return_lse = true;
    // The forward's checks, with attention's argument names (the same names here), reported as ours.
    std::vector<Shape> fwd;
    try {
      fwd = attention_infer(get_op("attention"), forward_shapes(in), fa);
    } catch (const Error& e) {
      std::string m = e.what();
      const std::string code = std::string(to_string(e.code())) + ": ", name = "attention: ";
      if (m.rfind(code, 0) == 0) m = m.substr(code.size());
      if (m.rfind(name, 0) == 0) m = m.substr(name.size());
      throw Error(e.code(), d.name + ": " + m);
    }
    if (in[3] != fwd[0]) shape_error(d, "o", in[3], to_string(fwd[0]) + " (the shape of 'q')");
    if (in[4] != fwd[0]) shape_error(d, "do", in[4], to_string(fwd[0]) + " (the shape of 'q')");
    if (in[5] != fwd[1]) shape_error(d, "lse", in[5], to_string(fwd[1]) + " ([B, Hq, Sq])");
    return std::vector<Shape>{in[0], in[1], in[2]};
  };
  op.reference = reference_backward;
  op.prepare_inputs = prepare_backward_inputs;
  op.terms = [](const std::vector<Shape>& in) { return double(std::max(in[0][2], in[1][2])); };
  op.flops = [](const std::vector<Shape>& in, const Attrs& a) {
    const AttnGeometry g = attn_geometry(forward_shapes(in));
    const double f = 10.0 * double(g.B) * double(g.Hq) * double(g.SqT) * double(g.SkT) * double(g.D);
    return a.causal ? f / 2 : f;
  };
  const auto qkv = [](int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D) {
    return std::vector<Shape>{{B, Hq, Sq, D}, {B, Hkv, Sk, D}, {B, Hkv, Sk, D}, {B, Hq, Sq, D}, {B, Hq, Sq, D}, {B, Hq, Sq}};
  };
  const auto with = [](std::vector<Shape> s, size_t k, const Shape& x) {
    s.resize(std::max(s.size(), k + 1));
    s[k] = x;
    return s;
  };
  Attrs causal, mix, drop;
  causal.causal = true;
  mix.causal = true;
  mix.window = 9;
  mix.alibi = true;
  mix.softcap = 3;
  mix.rope = 1;
  drop.p = 0.25;
  drop.seed = 1234;
  drop.offset = 3;
  Attrs inter = causal;
  inter.rope = 2;
  Attrs causal_drop = causal;  // training's attention dropout
  causal_drop.p = 0.1;
  causal_drop.seed = 42;
  op.tests = {
      {"b2_h3_s17_d64", qkv(2, 3, 3, 17, 17, 64), {}, 2},
      {"sq17_sk33_d80_causal", qkv(1, 2, 2, 17, 33, 80), causal, 2},
      {"sq33_sk17_d64_causal", qkv(1, 2, 2, 33, 17, 64), causal, 2},
      {"gqa_h4_kv2_s33_d64_mix", qkv(1, 4, 2, 33, 33, 64), mix, 2},
      {"sq1_sk65_d128", qkv(2, 2, 1, 1, 65, 128), {}, 1.5},
      {"s33_d64_dropout", qkv(1, 2, 2, 33, 33, 64), drop, 2},
      {"s17_d96_rope_interleaved_causal", qkv(1, 1, 1, 17, 17, 96), inter, 2},
      {"b3_s33_d64_key_lengths_sinks", with(with(qkv(3, 2, 2, 33, 33, 64), 7, {3}), 10, {2}), causal, 2},
      {"varlen_3seq_d64", with(with(qkv(1, 2, 2, 40, 50, 64), 8, {4}), 9, {4}), causal, 2},
      // Range 1: with 3 keys dq = sum_j P_j (dP_j - D) k_j cancels almost entirely; f32 keeps ~6 digits.
      {"s5_d8", qkv(1, 1, 1, 5, 5, 8), {}, 1},
  };
  {
    Attrs bm;
    bm.block_size = 16;
    op.tests.push_back({"s65_d64_block_mask16", with(qkv(1, 2, 2, 65, 65, 64), 11, {5, 5}), bm, 2});
    // Custom score functions: the gradient flows through f'(score) (a bias: f' = 1; a scaled tanh with a
    // mask of its own; a per-sequence slope with packed sequences and soft-capping).
    Attrs bias = causal, curve = mix, packed;
    bias.score_mod = "score - 0.05 * float(abs(i - j))";
    curve.score_mod = "j % 3 == 1 ? -inf : 2.0 * tanh(0.5 * score) + 0.1 * float(h)";
    packed.softcap = 3;
    packed.score_mod = "b == 1 ? 1.5 * score : score - 0.02 * float(i)";
    op.tests.push_back({"s33_d64_score_mod_bias_causal", qkv(1, 2, 2, 33, 33, 64), bias, 2});
    op.tests.push_back({"gqa_h4_kv2_s33_d64_score_mod_tanh_mask", qkv(1, 4, 2, 33, 33, 64), curve, 2});
    // (Without dropout. The random cu_seqlens make sequences of one key now and then, where the exact
    // dS = P (dP - D) is 0: the kernels give an exact 0 when D = dO.o and dP = dO.v are summed in the same
    // order (shaders/attention_bwd.comp), but with dropout o = z v, and dO.(z v) rounds apart from
    // z (dO.v): noise where the reference has zeros, past f32's relative 1e-6 on 3-6 % of seeds when the
    // other sequences are short too.)
    op.tests.push_back({"varlen_score_mod_softcap", with(with(qkv(1, 2, 2, 40, 50, 64), 8, {4}), 9, {4}), packed, 1});
  }
  op.bench = {{"b4_h32_s1024_d128_causal", qkv(4, 32, 32, 1024, 1024, 128), causal},
              {"b4_h32_s4096_d128", qkv(4, 32, 32, 4096, 4096, 128), {}},
              {"b4_h32_s4096_d128_causal", qkv(4, 32, 32, 4096, 4096, 128), causal},
              {"b4_h32_s4096_d128_causal_dropout", qkv(4, 32, 32, 4096, 4096, 128), causal_drop}};
  {  // ALiBi built in, and the same bias as a custom score function (the cost of the general form)
    Attrs alibi = causal, fn = causal;
    alibi.alibi = true;
    fn.score_mod = "score - pow(2.0, -0.25 * float(h + 1)) * float(abs(i - j))";
    op.bench.push_back({"b4_h32_s4096_d128_causal_alibi", qkv(4, 32, 32, 4096, 4096, 128), alibi});
    op.bench.push_back({"b4_h32_s4096_d128_causal_score_mod_alibi", qkv(4, 32, 32, 4096, 4096, 128), fn});
  }
  ops.push_back(op);
}

}  // namespace kf
