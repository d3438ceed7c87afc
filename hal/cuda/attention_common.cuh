// Device code shared by the attention kernels (attention.cu, attention_decode.cu, attention_mma.cu:
// the forward; attention_bwd.cu: the backward): the ALiBi slopes, the dropout keep rule at the (b, h, i, j) index of [B, Hq, Sq, Sk], the
// sequence geometry of a block, the masks, the score and RoPE, exactly as src/ops/attention.cpp's
// reference writes them down. Everything here sits in an anonymous namespace: each kernel file has its
// own copy, as with a header-only library.
#pragma once
#include "hal/cuda/common.cuh"

namespace kf::hal::cuda {
namespace {

constexpr int kTpr = 8;      // threads per query row (attn_simt)
constexpr int kMaxAcc = 32;  // accumulator values per thread: D <= 256 over 8 threads

template <class C> KF_DEV C neg_inf() { return -C(INFINITY); }
template <class C> KF_DEV C nan_value() {
  if constexpr (sizeof(C) == 8) return __longlong_as_double(0x7ff8000000000000ll);
  else return __int_as_float(0x7fc00000);
}
KF_DEV float m_log(float x) { return logf(x); }
KF_DEV double m_log(double x) { return ::log(x); }
KF_DEV float m_exp2(float x) { return exp2f(x); }
KF_DEV double m_exp2(double x) { return ::exp2(x); }
template <class C> KF_DEV C m_max(C a, C b) { return a > b ? a : b; }

// Folds an attention sink's logit sk into a row's running max m and sum of exponentials l (the sink
// joins the softmax's denominator, never the output); returns the factor that rescales the row's
// accumulated output. M is the kernel's math policy (its exp).
template <class M, class C> KF_DEV C fold_sink(C& m, C& l, C sk) {
  const C mf = m_max(m, sk);
  const C a = m == neg_inf<C>() ? C(0) : M::exp(m - mf);
  l = l * a + M::exp(sk - mf);
  m = mf;
  return a;
}
template <class C> KF_DEV C m_min(C a, C b) { return a < b ? a : b; }  // one type: no overload questions (CUDA / HIP)

// The ALiBi slope of head h: given (op dtype), or the default of src/ops/attention.cpp.
template <class T>
KF_DEV typename T::C alibi_slope(int h, const AttnParams& p) {
  using C = typename T::C;
  if (p.alibi == 2) return T::load(p.slopes, h);
  int c = 1;
  while (c * 2 <= p.Hq) c *= 2;
  if (h < c) return m_exp2(C(-8) * C(h + 1) / C(c));
  return m_exp2(C(-8) * C(2 * (h - c) + 1) / C(2 * c));
}

// Philox block blk of attention's dropout (docs/ops.md's generator: counter (blk, offset), key the seed), each
// round's key from p.rk (philox4x32_10's arithmetic: the same words).
KF_DEV uint4 attn_block(uint64_t blk, const AttnParams& p) {
  uint4 c = make_uint4(static_cast<unsigned>(blk), static_cast<unsigned>(blk >> 32), p.off_lo, p.off_hi);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    // 32 x 32 -> 64-bit products: one wide multiply each (written out: the first round's c.x, cut from the
    // 64-bit blk, otherwise became a 64 x 64-bit product).
    const unsigned lo0 = 0xD2511F53u * c.x, hi0 = __umulhi(0xD2511F53u, c.x);
    const unsigned lo1 = 0xCD9E8D57u * c.z, hi1 = __umulhi(0xCD9E8D57u, c.z);
    c = make_uint4(hi1 ^ c.y ^ p.rk[2 * r], lo1, hi0 ^ c.w ^ p.rk[2 * r + 1], lo0);
  }
  return c;
}

// The 4 keep bits of Philox block blk (bit k: index 4 blk + k), docs/ops.md's rule (the top 24 bits of
// each word against the threshold).
KF_DEV unsigned keep_bits4(uint64_t blk, const AttnParams& p) {
  const uint4 w = attn_block(blk, p);
  return unsigned((w.x >> 8) >= p.thr) | unsigned((w.y >> 8) >= p.thr) << 1 | unsigned((w.z >> 8) >= p.thr) << 2 |
         unsigned((w.w >> 8) >= p.thr) << 3;
}

// keep(i) of docs/ops.md's generator for i = rowidx * SkT + col.
KF_DEV bool attn_keep(int64_t rowidx, int64_t col, const AttnParams& p) {
  const uint64_t i = static_cast<uint64_t>(rowidx) * static_cast<uint64_t>(p.SkT) + static_cast<uint64_t>(col);
  const uint4 w = attn_block(i >> 2, p);
  const unsigned j = static_cast<unsigned>(i) & 3u;
  const unsigned word = j == 0 ? w.x : j == 1 ? w.y : j == 2 ? w.z : w.w;
  return (word >> 8) >= p.thr;
}

// Block blk's 4 dropped flags shifted into acc from its last word down: acc = (acc << 4) | flags, flag k (index
// 4 blk + k dropped: (w >> 8) < thr, the sign bit of (w >> 8) - thr since both are below 2^24 + 1) at bit k.
KF_DEV unsigned shift_in_dropped(unsigned acc, uint64_t blk, const AttnParams& p) {
  const uint4 w = attn_block(blk, p);
  const unsigned ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 3; k >= 0; --k) acc = (acc << 1) | (((ws[k] >> 8) - p.thr) >> 31);
  return acc;
}

// Bits c = 0..31: the dropout keep rule of docs/ops.md's generator at indices first + c (attn_keep's rule, one
// Philox call per block of 4 indices: 8 calls, 9 where first is not a multiple of 4).
KF_DEV unsigned keep_bits32(uint64_t first, const AttnParams& p) {
  const uint64_t b0 = first >> 2;
  const unsigned s = static_cast<unsigned>(first) & 3u;
  unsigned dropped = 0;
#pragma unroll
  for (int b = 7; b >= 0; --b) dropped = shift_in_dropped(dropped, b0 + b, p);
  if (s != 0) dropped = (dropped >> s) | (shift_in_dropped(0u, b0 + 8, p) << (32 - s));  // indices 4 b0 + 32 ..
  return ~dropped;
}

// Dropout's stored keep words (AttnParams::keep_words): the index of word w of row `row`, then the bits of keys
// j .. j + 31 of `row` (j any key: a window's tiles start anywhere). A word nobody wrote holds only keys the row
// does not see (their P is 0).
KF_DEV int64_t keep_word_at(const AttnParams& p, int64_t row, int w) { return (int64_t(w >> 1) * p.keep_rows + row) * 2 + (w & 1); }
KF_DEV unsigned keep_load(const AttnParams& p, int64_t row, int j) {
  const int w = j >> 5, s = j & 31;
  const unsigned lo = p.keep_words[keep_word_at(p, row, w)];
  if (s == 0) return lo;
  return (lo >> s) | (p.keep_words[keep_word_at(p, row, w + 1)] << (32 - s));
}

// n / d for 0 <= n < 2^31 by a multiply and a shift (d >= 1, fixed for the kernel; the round-up method of
// Granlund and Montgomery, as CUTLASS's FastDivmod): for the per-row divisions by G in loops, where a 64-bit
// division is a subroutine of some 70 instructions and a 32-bit one about 20.
struct FastDiv {
  unsigned d, m, s;
  KF_DEV explicit FastDiv(unsigned dv) : d(dv), m(0), s(0) {
    while ((1u << s) < d) ++s;
    m = static_cast<unsigned>(((1ull << 32) * ((1ull << s) - d)) / d + 1);
  }
  KF_DEV unsigned div(unsigned n) const { return (__umulhi(n, m) + n) >> s; }
};

// The block's sequence geometry (packed sequences: clamped, so that values outside [0, T] never index
// outside the tensors) and the keys [jbeg, jend) its rows [r0, r0 + bq) may see.
struct Geo {
  int b, qbeg, qlen, kbeg, klen, off, kl;
  int64_t nrows;
  int jbeg, jend;
  int i_lo, i_hi;
};

// The sequence's bounds alone: b, qbeg, qlen, kbeg, klen, off, kl and nrows (G rows per query).
KF_DEV void seq_geometry(const AttnParams& p, int seq, Geo& g) {
  g.b = p.cuq ? 0 : seq;
  g.qbeg = 0, g.qlen = p.SqT, g.kbeg = 0, g.klen = p.SkT;
  if (p.cuq) {
    g.qbeg = m_min(m_max(p.cuq[seq], 0), p.SqT);
    g.qlen = m_min(m_max(p.cuq[seq + 1], g.qbeg), p.SqT) - g.qbeg;
    g.kbeg = m_min(m_max(p.cuk[seq], 0), p.SkT);
    g.klen = m_min(m_max(p.cuk[seq + 1], g.kbeg), p.SkT) - g.kbeg;
  }
  g.nrows = int64_t(p.G) * g.qlen;
  g.off = g.klen - g.qlen;
  g.kl = g.klen;
  if (p.lens) g.kl = m_min(m_max(p.lens[seq], 0), g.klen);
}

KF_DEV bool block_geometry(const AttnParams& p, int seq, int split, int64_t r0, int bq, Geo& g) {
  seq_geometry(p, seq, g);
  if (r0 >= g.nrows) return false;
  const int64_t r_last = m_min(r0 + bq, g.nrows) - 1;
  g.i_lo = static_cast<int>(r0 / p.G), g.i_hi = static_cast<int>(r_last / p.G);
  int64_t jbeg = 0, jend = g.kl;
  if (p.causal) jend = m_min(jend, int64_t(g.i_hi) + g.off + 1);
  if (p.window > 0) jbeg = m_max(jbeg, int64_t(g.i_lo) + g.off - p.window + 1);
  if (p.nsplit > 1) {
    jbeg = m_max(jbeg, int64_t(split) * p.split_len);
    jend = m_min(jend, int64_t(split + 1) * p.split_len);
  }
  g.jbeg = static_cast<int>(jbeg);
  g.jend = static_cast<int>(m_max(jend, jbeg));
  return true;
}

// The rows [r_begin, r_end) of the kv head's group (G rows a query) that can see a key of the tile
// [j0, jlast]: the dK / dV passes of the backward (attention_bwd.cu, attention_bwd_mma.cu).
KF_DEV void dkv_rows(const AttnParams& p, const Geo& g, int j0, int jlast, int64_t& r_begin, int64_t& r_end) {
  int64_t i_lo = 0, i_hi = g.qlen;
  if (p.causal) i_lo = m_max(i_lo, int64_t(j0) - g.off);
  if (p.window > 0) i_hi = m_min(i_hi, int64_t(jlast) - g.off + p.window);
  if (j0 >= g.kl) i_hi = i_lo;
  i_lo = m_max(i_lo, int64_t(0));
  i_hi = m_max(i_hi, i_lo);
  r_begin = i_lo * p.G, r_end = i_hi * p.G;
}

// Whether the block mask leaves any block of the tile (query rows i_lo..i_hi, keys j0..j1) computed.
KF_DEV bool tile_in_mask(const AttnParams& p, const Geo& g, int j0, int j1) {
  if (!p.bmask) return true;
  const int bi0 = (g.qbeg + g.i_lo) / p.block_size, bi1 = (g.qbeg + g.i_hi) / p.block_size;
  const int bj0 = (g.kbeg + j0) / p.block_size, bj1 = (g.kbeg + j1) / p.block_size;
  for (int bi = bi0; bi <= bi1; ++bi)
    for (int bj = bj0; bj <= bj1; ++bj)
      if (p.bmask[int64_t(bi) * p.nkb + bj] != 0) return true;
  return false;
}

// Whether the causal, window and block masks leave key j visible to query qi (row row_global of the
// packed rows); the key lengths and the tile bounds are the caller's.
KF_DEV bool visible(int qi, int j, int row_global, const AttnParams& p, const Geo& g) {
  if (p.causal && j > qi + g.off) return false;
  if (p.window > 0 && int64_t(qi) + g.off - j >= p.window) return false;
  if (p.bmask && p.bmask[int64_t(row_global / p.block_size) * p.nkb + (g.kbeg + j) / p.block_size] == 0) return false;
  return true;
}

// The score of (query i, key j) from the scaled dot product, or -inf where a mask hides it.
template <class T>
KF_DEV typename T::C score_of(typename T::C dot, bool vis, int qi, int j, int row_global, typename T::C slope,
                              const AttnParams& p, const Geo& g) {
  using C = typename T::C;
  using M = Math<C, T::FAST>;
  if (!vis || !visible(qi, j, row_global, p, g)) return neg_inf<C>();
  C s = dot;
  if (p.softcap > 0) s = C(p.softcap) * M::tanh(s / C(p.softcap));
  if (p.alibi) s -= slope * m_abs(C(qi + g.off - j));
  return s;
}

// The end of a row of the tensor-core flash kernels (attention_mma.cu attn_mma, attention_wgmma.cu attn_wgmma),
// whose output sits in the quad layout of the mma / wgmma accumulators: lane tq holds columns 8 n + 2 tq and
// + 1 of each n8 group n (at(n, c) reads them; groups at or past p.D are padding, never stored). Writes the
// row's partial (splits: the unnormalized accumulator, then m in natural units and l), or folds the sink,
// normalizes and stores o and lse. m2: the row's max in the kernels' base-2 units; l: its sum over the quad.
template <class T, class Cv, int ND, class At>
KF_DEV void finish_quad_row(const AttnParams& p, int64_t rowidx, int h, int split, int tq, float m2, float l, At at) {
  constexpr float kLn2 = 0.69314718055994530942f;
  if (p.nsplit > 1) {
    const int64_t rows = int64_t(p.B) * p.Hq * p.SqT, part = int64_t(split) * rows + rowidx;
    float* accs = static_cast<float*>(p.part);
    float* ml = accs + int64_t(p.nsplit) * rows * p.D;
#pragma unroll
    for (int n = 0; n < ND; ++n)
      if (n * 8 < p.D) accs[part * p.D + n * 8 + 2 * tq] = at(n, 0), accs[part * p.D + n * 8 + 2 * tq + 1] = at(n, 1);
    if (tq == 0) ml[2 * part] = m2 * kLn2, ml[2 * part + 1] = l;
    return;
  }
  float mm = m2 * kLn2, ll = l, a = 1.0f;
  if (p.sinks) a = fold_sink<Math<float, true>>(mm, ll, float(T::load(p.sinks, h)));
  const float inv = ll > 0.0f ? a / ll : 0.0f;
  unsigned* orow = static_cast<unsigned*>(p.o) + rowidx * (p.D / 2);
#pragma unroll
  for (int n = 0; n < ND; ++n)
    if (n * 8 < p.D) orow[n * 4 + tq] = Cv::pack2(at(n, 0) * inv, at(n, 1) * inv);
  if (p.lse && tq == 0) T::store(p.lse, rowidx, ll > 0.0f ? mm + logf(ll) : -INFINITY);
}

// Rotates rows [0, n) of a staged tile X (row stride ld) in place: key row t is at position first + t;
// query tile row t (row first + t of the block's rows) at its query's position i + off. sgn = -1 rotates
// back (the inverse rotation: the backward's gradients).
template <class C>
KF_DEV void rope_rows(C* X, int ld, int n, bool query, int64_t first, int off, const AttnParams& p, C sgn = C(1)) {
  const int half = p.D / 2;
  const C* tab = static_cast<const C*>(p.rope);
  for (int e = threadIdx.x; e < n * half; e += blockDim.x) {
    const int t = e / half, d = e % half;
    const int64_t pos = query ? (first + t) / p.G + off : first + t;
    const int64_t ti = 2 * ((pos + p.rope_pos0) * half + d);
    const C c = tab[ti], s = sgn * tab[ti + 1];
    const int i0 = p.rope_mode == 1 ? d : 2 * d, i1 = p.rope_mode == 1 ? d + half : 2 * d + 1;
    C* row = X + int64_t(t) * ld;
    const C a = row[i0], b = row[i1];
    row[i0] = a * c - b * s;
    row[i1] = b * c + a * s;
  }
}
}  // namespace
}  // namespace kf::hal::cuda
