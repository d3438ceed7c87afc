// attention_backward on the tensor cores (mma.sync m16n8k16, ldmatrix, cp.async; sm_80+): FlashAttention-2's
// backward for f16 / bf16 at head dimensions 32, 64, 80, 96 and 128 with causal and sliding-window masks,
// key lengths, GQA / MQA, packed sequences, dropout, soft-capping and ALiBi; sinks enter only through lse.
// Block masks and RoPE stay on attention_bwd.cu's portable kernels. The same semantics and the same three
// passes as attention_bwd.cu (its PRE pass computes D_i = do_i . o_i first):
//   DKV: one block per (64 keys, kv head, sequence), 4 warps of 16 keys. K and V stay in shared memory; the
//        block walks the query rows of the G heads sharing the kv head in tiles of 64 (cp.async, two
//        stages) and per tile computes S^T = K Q^T and dP^T = V dO^T, P^T = exp(s - lse) (s the score as
//        the forward forms it), dS^T = P^T (Z dP^T - D) (1 - tanh^2) scale, then dV += (Z P^T) dO and
//        dK += dS^T Q with Z P^T and dS^T as A fragments straight from the accumulators.
//   DQ:  one block per (64 query rows, kv head, sequence), 4 warps of 16 rows; Q and dO in shared memory,
//        K and V streamed in tiles of 64 keys (two stages): S = Q K^T, dP = dO V^T, dS as above, dQ += dS K.
// No atomics: each output element is summed by one thread in a fixed order (the same bits every run).
// P and dS are rounded to the input type for the second products, as FlashAttention-2 does; the sums are
// float. Fragment layouts: hal/cuda/mma_ptx.cuh.
// On sm_90a (KF_CUDA_WGMMA builds) the same passes also come in a warpgroup form at D 64 and 128
// (attn_bwd_wg_dkv / attn_bwd_wg_dq: wgmma.mma_async, hal/cuda/wgmma_ptx.cuh), which kernels.cpp prefers on
// sm_90 GPUs; the per-element code (dkv_probs, dq_probs) and the rows' bookkeeping (GroupRows) serve both.
#include <type_traits>

#include "hal/cuda/attention_common.cuh"
#include "hal/cuda/mma_ptx.cuh"
#include "hal/cuda/wgmma_ptx.cuh"

namespace kf::hal::cuda {
#if !defined(KF_HIP)
namespace {

constexpr int kBt = 64;  // rows of every tile (keys or query rows), 16 a warp
constexpr float kBwdLog2e = 1.44269504088896341f;

// The dK/dV pass's keep word of `row` (have: a row of the tile), keys j0 + 32 w .. + 31: drawn, and kept for the
// dQ pass where p.keep_words is given.
KF_DEV unsigned dkv_keep_word(const AttnParams& p, const Geo& g, bool have, int64_t row, int j0, int w) {
  if (!have) return 0u;
  const unsigned bits = keep_bits32(static_cast<uint64_t>(row) * p.SkT + g.kbeg + j0 + 32 * w, p);
  if (p.keep_words) p.keep_words[keep_word_at(p, row, (j0 >> 5) + w)] = bits;
  return bits;
}

// The dQ pass's keep bits of row `row` (-1: past the rows, none), keys j0 + 32 half .. + 31 of each tile j0 in
// turn: drawn, or read from the dK/dV pass's words a tile ahead (next: those of the tile after j0).
struct DqKeepBits {
  const AttnParams& p;
  const Geo& g;
  int64_t row;
  int half;
  unsigned next = 0u;
  KF_DEV DqKeepBits(const AttnParams& p_, const Geo& g_, int64_t row_, int half_) : p(p_), g(g_), row(row_), half(half_) {
    if (p.keep_words && row >= 0 && g.jbeg < g.jend) next = keep_load(p, row, g.jbeg + 32 * half);
  }
  KF_DEV unsigned operator()(int j0) {
    if (row < 0) return 0u;
    if (!p.keep_words) return keep_bits32(static_cast<uint64_t>(row) * p.SkT + g.kbeg + j0 + 32 * half, p);
    const unsigned bits = next;
    if (j0 + kBt < g.jend) next = keep_load(p, row, j0 + kBt + 32 * half);
    return bits;
  }
};

// Shared memory: six tiles of 64 x (D + 8) 16-bit values (the stationary pair, two stages of the streamed
// pair), then per stage and row (DKV) the row's lse in base 2, D_i and query index, then per stage and
// tile row the dropout keep bits of the tile's 64 keys (two words), then per stage and row (DKV) the row's
// ALiBi slope.
template <int D> __host__ __device__ constexpr int64_t bwd_mma_bytes() {
  return 2 * int64_t(6 * kBt) * (D + 8) + 2 * kBt * 12 + 2 * kBt * 8 + 2 * kBt * 4;
}

// The score of a visible (query qi, key j) pair in natural units from the scaled dot product sc, with
// soft-capping and ALiBi (XS), and the soft-capping's factor of the gradient (1 - tanh^2): as score_of
// and attention_bwd.cu's grad_entry.
template <bool XS>
KF_DEV float ext_score(float sc, int qi, int j, float slope, const AttnParams& p, const Geo& g, float& dcap) {
  dcap = 1.0f;
  if constexpr (XS) {
    if (p.softcap > 0) {
      const float cap = static_cast<float>(p.softcap), th = tanhf(sc / cap);
      sc = cap * th;
      dcap = 1.0f - th * th;
    }
    if (p.alibi) sc -= slope * fabsf(static_cast<float>(qi + g.off - j));
  }
  return sc;
}

// A dK / dV tile's P^T and dS^T on a warp's 16 keys x 64 rows of scores (S^T at s(n, e), dP^T at dp(n, e): the
// mma / wgmma accumulator layout, element e of n8 group n at key jw + 8 (e / 2), row n 8 + 2 tq + e % 2), in
// place: s becomes Z P^T, dp dS^T = P^T (Z dP^T - D) dcap scale. The rows' base-2 lse l2, D_i dsum, query index
// qi and ALiBi slope sl come from shared memory as pairs (one 8-byte load each); dropout's Z = keep / (1 - p) or
// 0 from the keep bits kb (row-major [64 rows][2 words], keys j0 + 32 w + bit), whose word and bit for the
// lane's keys follow from the warp (kword, kbit). PH 0 does it all; without XS it may run as two phases, PH 1
// (s becomes the masked P^T alone: it needs S^T only) then PH 2 (from it, Z P^T and dS^T: it needs dP^T).
template <bool DROP, bool XS, int NT, int PH = 0, class S, class DP>
KF_DEV void dkv_probs(S s, DP dp, const AttnParams& p, const Geo& g, const float* l2, const float* dsum, const int* qi,
                      const float* sl, const unsigned* kb, bool full, int jw, int warp, int gq, int tq, float scale, float c2,
                      float keep) {
  const int kword = warp >> 1, kbit = (warp & 1) * 16 + gq;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    static_assert(PH == 0 || !XS, "the extended scores' dcap lives between the phases");
    const float2 l2p = PH == 2 ? make_float2(0.0f, 0.0f) : reinterpret_cast<const float2*>(l2)[n * 4 + tq],
                 dsp = PH == 1 ? make_float2(0.0f, 0.0f) : reinterpret_cast<const float2*>(dsum)[n * 4 + tq];
    const int2 qp = PH == 2 || (full && !XS) ? make_int2(0, 0) : reinterpret_cast<const int2*>(qi)[n * 4 + tq];
    const float2 slp = XS ? reinterpret_cast<const float2*>(sl)[n * 4 + tq] : make_float2(0.0f, 0.0f);
    unsigned kw[2] = {~0u, ~0u};
    if constexpr (DROP && PH != 1) kw[0] = kb[2 * (n * 8 + 2 * tq) + kword], kw[1] = kb[2 * (n * 8 + 2 * tq + 1) + kword];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = e & 1, x = e >> 1, j = jw + 8 * x, q = c ? qp.y : qp.x;
      float pr, dcap = 1.0f;
      if constexpr (PH == 2)
        pr = s(n, e);
      else if constexpr (XS)
        pr = ex2_ftz(fmaf(ext_score<true>(s(n, e) * scale, q, j, c ? slp.y : slp.x, p, g, dcap), kBwdLog2e, -(c ? l2p.y : l2p.x)));
      else
        pr = ex2_ftz(fmaf(s(n, e), c2, -(c ? l2p.y : l2p.x)));
      if (PH != 2 && !full) {
        const bool vis = j < g.kl && (!p.causal || j <= q + g.off) && (p.window <= 0 || q + g.off - j < p.window);
        if (!vis) pr = 0.0f;
      }
      if constexpr (PH == 1) {
        s(n, e) = pr;
        continue;
      }
      const float z = DROP ? ((kw[c] >> (kbit + 8 * x)) & 1u ? keep : 0.0f) : 1.0f;
      s(n, e) = z * pr;
      dp(n, e) = pr * (z * dp(n, e) - (c ? dsp.y : dsp.x)) * dcap * scale;
    }
  }
}

// A dQ tile's dS = P (Z dP - D) dcap scale, in place of dp, on a warp's 16 rows (wr + gq + 8 x) x 64 keys
// (j0 + n 8 + 2 tq + e % 2) of scores s(n, e) and dP dp(n, e); the lane's rows' l2, dsum, qi and slope in
// registers; dropout's keep bits kb as dkv_probs's (the tile's rows x keys). PH as dkv_probs's: 1 puts the
// masked P in s, 2 takes it from there.
template <bool DROP, bool XS, int NT, int PH = 0, class S, class DP>
KF_DEV void dq_probs(S s, DP dp, const AttnParams& p, const Geo& g, const float (&l2)[2], const float (&dsum)[2], const int (&qi)[2],
                     const float (&slope)[2], const unsigned* kb, bool full, int j0, int wr, int gq, int tq, float scale, float c2,
                     float keep) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      static_assert(PH == 0 || !XS, "the extended scores' dcap lives between the phases");
      const int x = e >> 1, c = n * 8 + 2 * tq + (e & 1), j = j0 + c;
      float pr, dcap = 1.0f;
      if constexpr (PH == 2) pr = s(n, e);
      else if constexpr (XS) pr = ex2_ftz(fmaf(ext_score<true>(s(n, e) * scale, qi[x], j, slope[x], p, g, dcap), kBwdLog2e, -l2[x]));
      else pr = ex2_ftz(fmaf(s(n, e), c2, -l2[x]));
      if (PH != 2 && !full) {
        const bool vis = j < g.jend && (!p.causal || j <= qi[x] + g.off) && (p.window <= 0 || qi[x] + g.off - j < p.window);
        if (!vis) pr = 0.0f;
      }
      if constexpr (PH == 1) {
        s(n, e) = pr;
        continue;
      }
      const float z = DROP ? ((kb[2 * (wr + gq + 8 * x) + (c >> 5)] >> (c & 31)) & 1u ? keep : 0.0f) : 1.0f;
      dp(n, e) = pr * (z * dp(n, e) - dsum[x]) * dcap * scale;
    }
}

// Copies two 64-row tiles (rows of the same index from src0 and src1) into shared memory at dst0 and dst1
// (row stride D + 8): row t from row `row` where row_of(t, row) says it exists, else zeros.
template <int D, class RowOf>
KF_DEV void load_tiles(unsigned dst0, const void* src0, unsigned dst1, const void* src1, RowOf row_of) {
  constexpr int NPK = D / 8, LD = D + 8;
  for (int e = threadIdx.x; e < kBt * NPK; e += 128) {
    const int t = e / NPK, pk = e % NPK;
    int64_t row = 0;
    const bool ok = row_of(t, row);
    const int64_t at = ok ? row * NPK + pk : 0;
    const unsigned so = 2 * (t * LD + pk * 8);
    cp_async16(dst0 + so, static_cast<const uint4*>(src0) + at, ok ? 16 : 0);
    cp_async16(dst1 + so, static_cast<const uint4*>(src1) + at, ok ? 16 : 0);
  }
}

// The A fragment (16 x 16, row) of an m16n8k16 product from two n8 accumulator tiles (as the forward's P).
template <class Cv>
KF_DEV void acc_to_a(unsigned (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = Cv::pack2(lo[0], lo[1]);
  a[1] = Cv::pack2(lo[2], lo[3]);
  a[2] = Cv::pack2(hi[0], hi[1]);
  a[3] = Cv::pack2(hi[2], hi[3]);
}

// The two score products of a tile for a warp's 16 rows: s = A0 B0^T and dp = A1 B1^T (16 x 64, k = D),
// A0 / A1 the stationary tiles (this lane's ldmatrix offset a_off), B0 / B1 the streamed ones ([n][k] rows,
// b_off): S^T and dP^T in the dK / dV pass, S and dP in the dQ pass.
template <bool BF, int D>
KF_DEV void score_pair(float (&s)[kBt / 8][4], float (&dp)[kBt / 8][4], unsigned a0, unsigned a1, unsigned b0, unsigned b1,
                       unsigned a_off, unsigned b_off) {
  constexpr int LD = D + 8, KD = D / 16, NT = kBt / 8;
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < KD; ++kk) {
    unsigned fa[4], fb[4];
    ldsm_x4(fa, a0 + a_off + 2 * kk * 16);
    ldsm_x4(fb, a1 + a_off + 2 * kk * 16);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      unsigned b[4];
      ldsm_x4(b, b0 + b_off + 2 * (n * 8 * LD + kk * 16));
      mma16816<BF>(s[n], fa, b[0], b[1]);
      mma16816<BF>(s[n + 1], fa, b[2], b[3]);
      ldsm_x4(b, b1 + b_off + 2 * (n * 8 * LD + kk * 16));
      mma16816<BF>(dp[n], fb, b[0], b[1]);
      mma16816<BF>(dp[n + 1], fb, b[2], b[3]);
    }
  }
}

// Stores a warp's 16 x D accumulator (element e of n8 group n at acc(n, e), the mma / wgmma layout; rows
// row_of(x) for the lane's rows gq + 8 x, < 0: none) as 16-bit pairs.
template <class Cv, int D, class Acc, class RowOf>
KF_DEV void store_acc(void* dst, Acc acc, int tq, RowOf row_of) {
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const int64_t row = row_of(x);
    if (row < 0) continue;
    unsigned* out = static_cast<unsigned*>(dst) + row * (D / 2);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) out[n * 4 + tq] = Cv::pack2(acc(n, 2 * x), acc(n, 2 * x + 1));
  }
}

// The query rows of a kv head's group in a sequence: row r (< 2^31: the host checks G SqT) is query r / G of
// head hk G + r % G; index(r) is its row of [B, Hq, SqT], stats() what both passes need of it.
struct GroupRows {
  FastDiv byG;
  int64_t head0;
  int G, SqT;
  KF_DEV GroupRows(const AttnParams& p, const Geo& g, int hk)
      : byG(static_cast<unsigned>(p.G)), head0((int64_t(g.b) * p.Hq + int64_t(hk) * p.G) * p.SqT + g.qbeg), G(p.G), SqT(p.SqT) {}
  KF_DEV int64_t index(int64_t r) const {
    const unsigned q = byG.div(static_cast<unsigned>(r));
    return head0 + int64_t(static_cast<unsigned>(r) - q * unsigned(G)) * SqT + q;
  }
  // Row r's lse in base 2 (inf where the row saw no key or r >= end: P = 2^(s - inf) = 0), D_i, query index
  // and (XS) ALiBi slope.
  template <class T, bool XS>
  KF_DEV void stats(const AttnBwdParams& P, int hk, int64_t r, int64_t end, float& l2, float& dsum, int& qi, float& slope) const {
    l2 = INFINITY, dsum = 0.0f, qi = 0, slope = 0.0f;
    if (r >= end) return;
    const int64_t row = index(r);
    const float lse = static_cast<float>(T::load(P.lse, row));
    l2 = lse > -INFINITY ? lse * kBwdLog2e : INFINITY;
    dsum = static_cast<const float*>(P.dsum)[row];
    const unsigned q = byG.div(static_cast<unsigned>(r));
    qi = static_cast<int>(q);
    if (XS && P.a.alibi) slope = static_cast<float>(alibi_slope<T>(hk * G + static_cast<int>(unsigned(r) - q * unsigned(G)), P.a));
  }
};

// ---- DKV: grid (key tiles, Hkv, sequences), 128 threads.
template <class T, int D, bool DROP, bool XS>
__global__ void __launch_bounds__(128, 2) attn_bwd_mma_dkv(const AttnBwdParams P) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr bool BF = std::is_same_v<T, BF16>;
  using Cv = std::conditional_t<BF, Bf16Conv, HalfConv>;
  constexpr int LD = D + 8, ND = D / 8, NT = kBt / 8, TILE = 2 * kBt * LD;
  extern __shared__ __align__(128) unsigned char attn_bwd_mma_smem[];
  const AttnParams& p = P.a;
  // K, V, then Q [2 stages], dO [2 stages] (32-bit shared addresses); the rows' data after the tiles.
  const unsigned ks_a = smem_u32(attn_bwd_mma_smem), vs_a = ks_a + TILE, qs_a = vs_a + TILE, os_a = qs_a + 2 * TILE;
  float* l2_s = reinterpret_cast<float*>(attn_bwd_mma_smem + 6 * TILE);  // [2][64]
  float* ds_s = l2_s + 2 * kBt;                                          // [2][64]
  int* qi_s = reinterpret_cast<int*>(ds_s + 2 * kBt);                    // [2][64]
  unsigned* kb_s = reinterpret_cast<unsigned*>(qi_s + 2 * kBt);          // [2][64 rows][2] keep bits
  float* sl_s = reinterpret_cast<float*>(kb_s + 4 * kBt);                // [2][64] ALiBi slopes
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
  const int hk = blockIdx.y, seq = blockIdx.z;
  Geo g;
  seq_geometry(p, seq, g);
  const int j0 = static_cast<int>(blockIdx.x) * kBt;
  if (j0 >= g.klen) return;  // uniform over the block
  const int jlast = m_min(j0 + kBt, g.klen) - 1;
  const int64_t kvbase = (int64_t(g.b) * p.Hkv + hk) * p.SkT + g.kbeg;
  int64_t r_begin, r_end;  // the rows that can see a key of the tile
  dkv_rows(p, g, j0, jlast, r_begin, r_end);

  const auto kv_row = [&](int t, int64_t& row) {
    row = kvbase + j0 + t;
    return j0 + t < g.klen;
  };
  load_tiles<D>(ks_a, p.k, vs_a, p.v, kv_row);
  cp_async_commit();
  const GroupRows rows(p, g, hk);
  const FastDiv& byG = rows.byG;
  const auto q_row_of = [&](int64_t r0, int t, int64_t& row) {
    if (r0 + t >= r_end) return false;
    row = rows.index(r0 + t);
    return true;
  };
  const auto stage_rows = [&](int64_t r0, int buf) {
    const auto q_row = [&](int t, int64_t& row) { return q_row_of(r0, t, row); };
    load_tiles<D>(qs_a + buf * TILE, p.q, os_a + buf * TILE, P.dout, q_row);
    if (tid < kBt) {
      float l2, dsum, slope;
      int qi;
      rows.stats<T, XS>(P, hk, r0 + tid, r_end, l2, dsum, qi, slope);
      l2_s[buf * kBt + tid] = l2;
      ds_s[buf * kBt + tid] = dsum;
      qi_s[buf * kBt + tid] = qi;
      if (XS) sl_s[buf * kBt + tid] = slope;
    }
  };

  // ldmatrix lane offsets (bytes): A fragments of the warp's 16 keys; B fragments from [n][k] rows (Q, dO
  // for S^T, dP^T); B fragments from [k][n] rows (.trans: dO, Q for dV, dK).
  const unsigned a_off = 2 * ((warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8);
  const unsigned b_off = 2 * (((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8);
  const unsigned t_off = 2 * ((((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8);
  const float scale = static_cast<float>(p.scale), c2 = scale * kBwdLog2e, keep = static_cast<float>(p.keep_scale);
  const int jw = j0 + warp * 16 + gq;  // this lane's keys: jw, jw + 8

  float dk[ND][4], dv[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
  int64_t r0 = r_begin;
  if (r0 < r_end) stage_rows(r0, 0);
  cp_async_commit();
  for (int buf = 0; r0 < r_end; buf ^= 1, r0 += kBt) {
    if (r0 + kBt < r_end) stage_rows(r0 + kBt, buf ^ 1);  // that stage was released by the last tile's barrier
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const unsigned q_b = qs_a + buf * TILE, o_b = os_a + buf * TILE;
    // Dropout: the tile's keep bits, row tid / 2, keys 32 (tid % 2) .. + 31 (the stage's bits were last
    // read two tiles ago; the barrier below publishes them before the products end).
    unsigned* kb = kb_s + buf * 2 * kBt;
    if constexpr (DROP) {
      int64_t row = 0;
      const int t = tid >> 1, w = tid & 1;
      const bool have = r0 + t < r_end && q_row_of(r0, t, row);  // sets row
      kb[tid] = dkv_keep_word(p, g, have, row, j0, w);
    }
    // The masks only where the tile reaches them (rows past the range have P = 0 by their lse).
    const float* l2 = l2_s + buf * kBt;
    const float* dsum = ds_s + buf * kBt;
    const int* qi = qi_s + buf * kBt;
    const int q_lo = static_cast<int>(byG.div(static_cast<unsigned>(r0))),
              q_hi = static_cast<int>(byG.div(static_cast<unsigned>(m_min(r0 + kBt, r_end) - 1)));
    const bool full = j0 + kBt <= g.kl && (!p.causal || j0 + kBt - 1 <= q_lo + g.off) &&
                      (p.window <= 0 || int64_t(q_hi) + g.off - j0 < p.window);
    // S^T = K Q^T and dP^T = V dO^T (16 keys x 64 rows a warp).
    float s[NT][4], dp[NT][4];
    score_pair<BF, D>(s, dp, ks_a, vs_a, q_b, o_b, a_off, b_off);
    if constexpr (DROP) __syncthreads();  // the keep bits
    dkv_probs<DROP, XS, NT>([&](int n, int e) -> float& { return s[n][e]; }, [&](int n, int e) -> float& { return dp[n][e]; }, p, g,
                            l2, dsum, qi, sl_s + buf * kBt, kb, full, jw, warp, gq, tq, scale, c2, keep);
    // dV += P^T dO, dK += dS^T Q (k = the tile's 64 rows).
#pragma unroll
    for (int kk = 0; kk < kBt / 16; ++kk) {
      unsigned pa[4], da[4];
      acc_to_a<Cv>(pa, s[2 * kk], s[2 * kk + 1]);
      acc_to_a<Cv>(da, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
      for (int n = 0; n < ND; n += 2) {
        unsigned b[4];
        ldsm_x4_trans(b, o_b + t_off + 2 * (kk * 16 * LD + n * 8));
        mma16816<BF>(dv[n], pa, b[0], b[1]);
        mma16816<BF>(dv[n + 1], pa, b[2], b[3]);
        ldsm_x4_trans(b, q_b + t_off + 2 * (kk * 16 * LD + n * 8));
        mma16816<BF>(dk[n], da, b[0], b[1]);
        mma16816<BF>(dk[n + 1], da, b[2], b[3]);
      }
    }
    __syncthreads();  // this stage is free for the tile after next
  }
  cp_async_wait<0>();  // K and V when no row sees the tile
  const auto key_row = [&](int x) -> int64_t {
    const int j = jw + 8 * x;
    return j <= jlast ? kvbase + j : -1;
  };
  store_acc<Cv, D>(P.dk, [&](int n, int e) { return dk[n][e]; }, tq, key_row);
  store_acc<Cv, D>(P.dv, [&](int n, int e) { return dv[n][e]; }, tq, key_row);
#endif
}

// ---- DQ: grid (row tiles, Hkv, sequences), 128 threads.
template <class T, int D, bool DROP, bool XS>
__global__ void __launch_bounds__(128, 2) attn_bwd_mma_dq(const AttnBwdParams P) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr bool BF = std::is_same_v<T, BF16>;
  using Cv = std::conditional_t<BF, Bf16Conv, HalfConv>;
  constexpr int LD = D + 8, ND = D / 8, NT = kBt / 8, TILE = 2 * kBt * LD;
  extern __shared__ __align__(128) unsigned char attn_bwd_mma_smem[];
  const AttnParams& p = P.a;
  // Q, dO, then K [2 stages], V [2 stages].
  const unsigned qs_a = smem_u32(attn_bwd_mma_smem), os_a = qs_a + TILE, ks_a = os_a + TILE, vs_a = ks_a + 2 * TILE;
  // The keep bits after the tiles and the (unused here) rows' data: [2 stages][64 rows][2].
  unsigned* kb_s = reinterpret_cast<unsigned*>(attn_bwd_mma_smem + 6 * TILE + 2 * kBt * 12);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
  const int hk = blockIdx.y, seq = blockIdx.z;
  const int64_t r0 = int64_t(blockIdx.x) * kBt;
  Geo g;
  if (!block_geometry(p, seq, 0, r0, kBt, g)) return;  // uniform over the block (p.nsplit is 1)
  const int64_t kvbase = (int64_t(g.b) * p.Hkv + hk) * p.SkT + g.kbeg;
  const GroupRows rows(p, g, hk);
  const auto row_index = [&](int64_t r) { return rows.index(r); };
  const auto q_row = [&](int t, int64_t& row) {
    if (r0 + t >= g.nrows) return false;
    row = row_index(r0 + t);
    return true;
  };
  load_tiles<D>(qs_a, p.q, os_a, P.dout, q_row);
  cp_async_commit();
  const auto load_kv = [&](int jt, int buf) {
    const auto kv_row = [&](int t, int64_t& row) {
      row = kvbase + jt + t;
      return jt + t < g.jend;
    };
    load_tiles<D>(ks_a + buf * TILE, p.k, vs_a + buf * TILE, p.v, kv_row);
  };
  // This lane's rows wr + gq + 8 x: lse in base 2 (P = 0 where the row saw no key or does not exist), D_i,
  // query index.
  const int wr = warp * 16;
  float l2[2], dsum[2], slope[2];
  int qi[2];
#pragma unroll
  for (int x = 0; x < 2; ++x) rows.stats<T, XS>(P, hk, r0 + wr + gq + 8 * x, g.nrows, l2[x], dsum[x], qi[x], slope[x]);
  const unsigned a_off = 2 * ((wr + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8);
  const unsigned b_off = 2 * (((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8);
  const unsigned t_off = 2 * ((((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8);
  const float scale = static_cast<float>(p.scale), c2 = scale * kBwdLog2e, keep = static_cast<float>(p.keep_scale);
  // Dropout: the global row index of this thread's bit row (tid / 2; -1: past the rows).
  const int64_t kb_row = DROP && r0 + (tid >> 1) < g.nrows ? row_index(r0 + (tid >> 1)) : -1;
  DqKeepBits dq_keep_bits(p, g, kb_row, tid & 1);

  float dq[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[n][e] = 0.0f;
  int j0 = g.jbeg;
  if (j0 < g.jend) load_kv(j0, 0);
  cp_async_commit();
  for (int buf = 0; j0 < g.jend; buf ^= 1, j0 += kBt) {
    if (j0 + kBt < g.jend) load_kv(j0 + kBt, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const unsigned k_b = ks_a + buf * TILE, v_b = vs_a + buf * TILE;
    // Dropout: the tile's keep bits, row tid / 2, keys j0 + 32 (tid % 2) .. + 31.
    unsigned* kb = kb_s + buf * 2 * kBt;
    if constexpr (DROP) kb[tid] = dq_keep_bits(j0);
    // S = Q K^T and dP = dO V^T (16 rows x 64 keys a warp).
    float s[NT][4], dp[NT][4];
    score_pair<BF, D>(s, dp, qs_a, os_a, k_b, v_b, a_off, b_off);
    const bool full = j0 + kBt <= g.jend && (!p.causal || j0 + kBt - 1 <= g.i_lo + g.off) &&
                      (p.window <= 0 || int64_t(g.i_hi) + g.off - j0 < p.window);
    if constexpr (DROP) __syncthreads();  // the keep bits
    dq_probs<DROP, XS, NT>([&](int n, int e) -> float& { return s[n][e]; }, [&](int n, int e) -> float& { return dp[n][e]; }, p, g,
                           l2, dsum, qi, slope, kb, full, j0, wr, gq, tq, scale, c2, keep);
    // dQ += dS K (k = the tile's 64 keys).
#pragma unroll
    for (int kk = 0; kk < kBt / 16; ++kk) {
      unsigned da[4];
      acc_to_a<Cv>(da, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
      for (int n = 0; n < ND; n += 2) {
        unsigned b[4];
        ldsm_x4_trans(b, k_b + t_off + 2 * (kk * 16 * LD + n * 8));
        mma16816<BF>(dq[n], da, b[0], b[1]);
        mma16816<BF>(dq[n + 1], da, b[2], b[3]);
      }
    }
    __syncthreads();  // this stage is free for the tile after next
  }
  cp_async_wait<0>();  // Q and dO when the rows see no key
  const auto q_out = [&](int x) -> int64_t {
    const int64_t r = r0 + wr + gq + 8 * x;
    return r < g.nrows ? row_index(r) : -1;
  };
  store_acc<Cv, D>(P.dq, [&](int n, int e) { return dq[n][e]; }, tq, q_out);
#endif
}

#if defined(KF_CUDA_WGMMA)
// ---- The warpgroup form (sm_90a, D 64 and 128): the same two passes, tiles, loads and per-element code, with
// the products on Hopper's wgmma.mma_async (wgmma_ptx.cuh). One warpgroup a block (128 threads, 64 keys or
// rows: warp w holds rows 16 w .. 16 w + 15 of every accumulator, the layout of the mma kernels' warps), two
// blocks an SM; the tiles sit in 128-byte swizzled atoms (attention_wgmma.cu's layout) so that each is read
// both K-major (S^T = K Q^T, dP^T = V dO^T; S = Q K^T, dP = dO V^T) and MN-major (the B operand of dV += P^T
// dO, dK += dS^T Q; dQ += dS K), with P^T / dS^T / dS as A fragments straight from the accumulators.
template <int D> __host__ __device__ constexpr int64_t bwd_wg_bytes() {
  return 2 * int64_t(6 * kBt) * D + 2 * kBt * 12 + 2 * kBt * 8 + 2 * kBt * 4 + 1024;  // + the atoms' alignment
}

// The shared-memory offset of the 16-byte unit u of row r of a 64-row swizzled operand.
KF_DEV unsigned sw64(int r, int u) { return unsigned((u / 8) * kBt * 128 + r * 128 + (((u % 8) ^ (r % 8)) << 4)); }

// load_tiles into swizzled 64-row operands. Thread tid copies unit u = tid % (D / 8) of rows t0 + i KR (t0 =
// tid / (D / 8), KR = 128 / (D / 8), a multiple of 8): one swizzled offset for all its rows (r % 8 is t0 % 8).
template <int D, class RowOf>
KF_DEV void load_tiles_sw(unsigned dst0, const void* src0, unsigned dst1, const void* src1, RowOf row_of) {
  constexpr int NPK = D / 8, KR = 128 / NPK;
  const int t0 = threadIdx.x / NPK, u = threadIdx.x % NPK;
  const unsigned so = sw64(t0, u);
#pragma unroll
  for (int i = 0; i < kBt / KR; ++i) {
    int64_t row = 0;
    const bool ok = row_of(t0 + i * KR, row);
    const int64_t at = ok ? row * NPK + u : 0;
    cp_async16(dst0 + so + i * KR * 128, static_cast<const uint4*>(src0) + at, ok ? 16 : 0);
    cp_async16(dst1 + so + i * KR * 128, static_cast<const uint4*>(src1) + at, ok ? 16 : 0);
  }
}

#if defined(KF_HAS_WGMMA)
// s = A0 B0^T and dp = A1 B1^T (64 x 64, k = D), every operand a K-major swizzled 64-row tile; issued and
// committed (TWO: as two groups, s's then dp's), not waited for.
template <bool BF, int D, bool TWO>
KF_DEV void wg_score_pair(float (&s)[32], float (&dp)[32], unsigned a0, unsigned a1, unsigned b0, unsigned b1) {
  // Each k step's descriptors as the tile's plus the step's offset (wgmma_desc_at): computed once a tile.
  const uint64_t da0 = wgmma_desc(a0, 16, 1024), db0 = wgmma_desc(b0, 16, 1024);
  const uint64_t da1 = wgmma_desc(a1, 16, 1024), db1 = wgmma_desc(b1, 16, 1024);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const unsigned off = (kk / 4) * kBt * 128 + (kk % 4) * 32;
    if constexpr (BF) wgmma_ss_n64_bf16(s, wgmma_desc_at(da0, off), wgmma_desc_at(db0, off), kk > 0);
    else wgmma_ss_n64_f16(s, wgmma_desc_at(da0, off), wgmma_desc_at(db0, off), kk > 0);
  }
  if constexpr (TWO) wgmma_commit();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const unsigned off = (kk / 4) * kBt * 128 + (kk % 4) * 32;
    if constexpr (BF) wgmma_ss_n64_bf16(dp, wgmma_desc_at(da1, off), wgmma_desc_at(db1, off), kk > 0);
    else wgmma_ss_n64_f16(dp, wgmma_desc_at(da1, off), wgmma_desc_at(db1, off), kk > 0);
  }
  wgmma_commit();
}

// The A fragments (k = the tile's 64 columns, 4 steps) of a 64 x 64 accumulator, in the RS form's layout.
template <class Cv>
KF_DEV void wg_acc_to_a(unsigned (&a)[4][4], const float (&s)[32]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) a[kk][i] = Cv::pack2(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
}

// acc += A B (k = 64): A fragments a, B the MN-major [64][D] swizzled tile at b (D / 64 atoms 64 x 128 bytes
// apart along N, 8 rows 1024 bytes apart). Issued only: the caller fences, commits and waits.
template <bool BF, int D>
KF_DEV void wg_acc_rs(float (&acc)[D / 2], const unsigned (&a)[4][4], unsigned b) {
  const uint64_t db0 = wgmma_desc(b, kBt * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t db = wgmma_desc_at(db0, kk * 16 * 128);
    if constexpr (D == 128) {
      if constexpr (BF) wgmma_rs_n128_bf16(acc, a[kk], db, 1);
      else wgmma_rs_n128_f16(acc, a[kk], db, 1);
    } else {
      if constexpr (BF) wgmma_rs_n64_bf16(acc, a[kk], db, 1);
      else wgmma_rs_n64_f16(acc, a[kk], db, 1);
    }
  }
}
#endif

// ---- DKV (warpgroup): grid (key tiles, Hkv, sequences), 128 threads; as attn_bwd_mma_dkv.
template <class T, int D, bool DROP, bool XS>
__global__ void __launch_bounds__(128, 2) attn_bwd_wg_dkv(const AttnBwdParams P) {
#if defined(KF_HAS_WGMMA)
  static_assert(D == 64 || D == 128, "head dimensions 64 and 128");
  constexpr bool BF = std::is_same_v<T, BF16>;
  // TWO: S's and dP's products as two groups, P computed while dP's run (measured: 4 % faster with dropout,
  // 3-4 % slower without; the soft-capping / ALiBi instances keep one phase).
  constexpr bool TWO = DROP && !XS;
  using Cv = std::conditional_t<BF, Bf16Conv, HalfConv>;
  constexpr int NT = kBt / 8, TILE = 2 * kBt * D;
  extern __shared__ __align__(1024) unsigned char attn_bwd_wg_smem[];
  const AttnParams& p = P.a;
  // K, V, then Q [2 stages], dO [2 stages] from a 1024-byte boundary; the rows' data after the tiles.
  const unsigned raw = smem_u32(attn_bwd_wg_smem), ks_a = (raw + 1023u) & ~1023u, vs_a = ks_a + TILE,
                 qs_a = vs_a + TILE, os_a = qs_a + 2 * TILE;
  float* l2_s = reinterpret_cast<float*>(attn_bwd_wg_smem + (ks_a - raw) + 6 * TILE);  // [2][64]
  float* ds_s = l2_s + 2 * kBt;                                                        // [2][64]
  int* qi_s = reinterpret_cast<int*>(ds_s + 2 * kBt);                                  // [2][64]
  unsigned* kb_s = reinterpret_cast<unsigned*>(qi_s + 2 * kBt);                        // [2][64 rows][2] keep bits
  float* sl_s = reinterpret_cast<float*>(kb_s + 4 * kBt);                              // [2][64] ALiBi slopes
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
  const int hk = blockIdx.y, seq = blockIdx.z;
  Geo g;
  seq_geometry(p, seq, g);
  const int j0 = static_cast<int>(blockIdx.x) * kBt;
  if (j0 >= g.klen) return;  // uniform over the block
  const int jlast = m_min(j0 + kBt, g.klen) - 1;
  const int64_t kvbase = (int64_t(g.b) * p.Hkv + hk) * p.SkT + g.kbeg;
  int64_t r_begin, r_end;
  dkv_rows(p, g, j0, jlast, r_begin, r_end);
  const auto kv_row = [&](int t, int64_t& row) {
    row = kvbase + j0 + t;
    return j0 + t < g.klen;
  };
  load_tiles_sw<D>(ks_a, p.k, vs_a, p.v, kv_row);
  cp_async_commit();
  const GroupRows rows(p, g, hk);
  const FastDiv& byG = rows.byG;
  const auto q_row_of = [&](int64_t r0, int t, int64_t& row) {
    if (r0 + t >= r_end) return false;
    row = rows.index(r0 + t);
    return true;
  };
  const auto stage_rows = [&](int64_t r0, int buf) {
    const auto q_row = [&](int t, int64_t& row) { return q_row_of(r0, t, row); };
    load_tiles_sw<D>(qs_a + buf * TILE, p.q, os_a + buf * TILE, P.dout, q_row);
    if (tid < kBt) {
      float l2, dsum, slope;
      int qi;
      rows.stats<T, XS>(P, hk, r0 + tid, r_end, l2, dsum, qi, slope);
      l2_s[buf * kBt + tid] = l2;
      ds_s[buf * kBt + tid] = dsum;
      qi_s[buf * kBt + tid] = qi;
      if (XS) sl_s[buf * kBt + tid] = slope;
    }
  };
  const float scale = static_cast<float>(p.scale), c2 = scale * kBwdLog2e, keep = static_cast<float>(p.keep_scale);
  const int jw = j0 + warp * 16 + gq;

  float dk[D / 2], dv[D / 2], s[32], dp[32];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = dp[i] = 0.0f;
  // Software-pipelined by one product: a tile's dV / dK products run while the next tile's S^T / dP^T are
  // issued; the wait for them (wait_group 1) and a barrier then free their stage for the loads of the tile
  // after (pa / da, their A fragments, stay live until then).
  unsigned pa[4][4], da[4][4];
  int64_t r0 = r_begin;
  if (r0 < r_end) stage_rows(r0, 0);
  cp_async_commit();
  for (int buf = 0; r0 < r_end; buf ^= 1, r0 += kBt) {
    cp_async_wait<0>();   // this tile (and, first, K and V)
    fence_proxy_async();  // the tiles' cp.async writes before wgmma's reads (the async proxy)
    __syncthreads();
    const unsigned q_b = qs_a + buf * TILE, o_b = os_a + buf * TILE;
    wg_score_pair<BF, D, TWO>(s, dp, ks_a, vs_a, q_b, o_b);  // S^T = K Q^T, dP^T = V dO^T
    wgmma_wait<TWO ? 2 : 1>();  // the previous tile's dV / dK
    __syncthreads();  // ... of every warp: its stage is free
    if (r0 + kBt < r_end) stage_rows(r0 + kBt, buf ^ 1);
    cp_async_commit();
    unsigned* kb = kb_s + buf * 2 * kBt;
    if constexpr (DROP) {  // drawn while the products run
      int64_t row = 0;
      const int t = tid >> 1, w = tid & 1;
      const bool have = r0 + t < r_end && q_row_of(r0, t, row);  // sets row
      kb[tid] = dkv_keep_word(p, g, have, row, j0, w);
    }
    const int q_lo = static_cast<int>(byG.div(static_cast<unsigned>(r0))),
              q_hi = static_cast<int>(byG.div(static_cast<unsigned>(m_min(r0 + kBt, r_end) - 1)));
    const bool full = j0 + kBt <= g.kl && (!p.causal || j0 + kBt - 1 <= q_lo + g.off) &&
                      (p.window <= 0 || int64_t(q_hi) + g.off - j0 < p.window);
    const auto s_at = [&](int n, int e) -> float& { return s[4 * n + e]; };
    const auto dp_at = [&](int n, int e) -> float& { return dp[4 * n + e]; };
    const float *l2t = l2_s + buf * kBt, *dst = ds_s + buf * kBt, *slt = sl_s + buf * kBt;
    const int* qit = qi_s + buf * kBt;
    if constexpr (TWO) {  // P^T while dP^T's products run
      wgmma_wait<1>();
      dkv_probs<DROP, XS, NT, 1>(s_at, dp_at, p, g, l2t, dst, qit, slt, kb, full, jw, warp, gq, tq, scale, c2, keep);
    }
    wgmma_wait<0>();
    if constexpr (DROP) __syncthreads();  // the keep bits
    dkv_probs<DROP, XS, NT, TWO ? 2 : 0>(s_at, dp_at, p, g, l2t, dst, qit, slt, kb, full, jw, warp, gq, tq, scale, c2, keep);
    // dV += P^T dO, dK += dS^T Q: every A fragment converted before the first wgmma; not waited for here.
    wg_acc_to_a<Cv>(pa, s);
    wg_acc_to_a<Cv>(da, dp);
    wgmma_fence();
    wg_acc_rs<BF, D>(dv, pa, o_b);
    wg_acc_rs<BF, D>(dk, da, q_b);
    wgmma_commit();
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
  const auto key_row = [&](int x) -> int64_t {
    const int j = jw + 8 * x;
    return j <= jlast ? kvbase + j : -1;
  };
  store_acc<Cv, D>(P.dk, [&](int n, int e) { return dk[4 * n + e]; }, tq, key_row);
  store_acc<Cv, D>(P.dv, [&](int n, int e) { return dv[4 * n + e]; }, tq, key_row);
#else
  __trap();  // compiled for another architecture than sm_90a: never launched there (kernels.cpp checks)
#endif
}

// ---- DQ (warpgroup): grid (row tiles, Hkv, sequences), 128 threads; as attn_bwd_mma_dq.
template <class T, int D, bool DROP, bool XS>
__global__ void __launch_bounds__(128, 2) attn_bwd_wg_dq(const AttnBwdParams P) {
#if defined(KF_HAS_WGMMA)
  static_assert(D == 64 || D == 128, "head dimensions 64 and 128");
  constexpr bool BF = std::is_same_v<T, BF16>;
  // TWO: S's and dP's products as two groups, P computed while dP's run (measured: 4 % faster with dropout,
  // 3-4 % slower without; the soft-capping / ALiBi instances keep one phase).
  constexpr bool TWO = DROP && !XS;
  using Cv = std::conditional_t<BF, Bf16Conv, HalfConv>;
  constexpr int NT = kBt / 8, TILE = 2 * kBt * D;
  extern __shared__ __align__(1024) unsigned char attn_bwd_wg_smem[];
  const AttnParams& p = P.a;
  // Q, dO, then K [2 stages], V [2 stages] from a 1024-byte boundary; the keep bits after the tiles.
  const unsigned raw = smem_u32(attn_bwd_wg_smem), qs_a = (raw + 1023u) & ~1023u, os_a = qs_a + TILE,
                 ks_a = os_a + TILE, vs_a = ks_a + 2 * TILE;
  unsigned* kb_s = reinterpret_cast<unsigned*>(attn_bwd_wg_smem + (qs_a - raw) + 6 * TILE + 2 * kBt * 12);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
  const int hk = blockIdx.y, seq = blockIdx.z;
  const int64_t r0 = int64_t(blockIdx.x) * kBt;
  Geo g;
  if (!block_geometry(p, seq, 0, r0, kBt, g)) return;
  const int64_t kvbase = (int64_t(g.b) * p.Hkv + hk) * p.SkT + g.kbeg;
  const GroupRows rows(p, g, hk);
  const auto row_index = [&](int64_t r) { return rows.index(r); };
  const auto q_row = [&](int t, int64_t& row) {
    if (r0 + t >= g.nrows) return false;
    row = row_index(r0 + t);
    return true;
  };
  load_tiles_sw<D>(qs_a, p.q, os_a, P.dout, q_row);
  cp_async_commit();
  const auto load_kv = [&](int jt, int buf) {
    const auto kv_row = [&](int t, int64_t& row) {
      row = kvbase + jt + t;
      return jt + t < g.jend;
    };
    load_tiles_sw<D>(ks_a + buf * TILE, p.k, vs_a + buf * TILE, p.v, kv_row);
  };
  const int wr = warp * 16;
  float l2[2], dsum[2], slope[2];
  int qi[2];
#pragma unroll
  for (int x = 0; x < 2; ++x) rows.stats<T, XS>(P, hk, r0 + wr + gq + 8 * x, g.nrows, l2[x], dsum[x], qi[x], slope[x]);
  const float scale = static_cast<float>(p.scale), c2 = scale * kBwdLog2e, keep = static_cast<float>(p.keep_scale);
  const int64_t kb_row = DROP && r0 + (tid >> 1) < g.nrows ? row_index(r0 + (tid >> 1)) : -1;
  DqKeepBits dq_keep_bits(p, g, kb_row, tid & 1);

  float dq[D / 2], s[32], dp[32];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dq[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = dp[i] = 0.0f;
  // Software-pipelined by one product as the dK / dV pass: a tile's dQ products run while the next tile's
  // S / dP are issued.
  unsigned da[4][4];
  int j0 = g.jbeg;
  if (j0 < g.jend) load_kv(j0, 0);
  cp_async_commit();
  for (int buf = 0; j0 < g.jend; buf ^= 1, j0 += kBt) {
    cp_async_wait<0>();  // this tile (and, first, Q and dO)
    fence_proxy_async();
    __syncthreads();
    const unsigned k_b = ks_a + buf * TILE, v_b = vs_a + buf * TILE;
    wg_score_pair<BF, D, TWO>(s, dp, qs_a, os_a, k_b, v_b);  // S = Q K^T, dP = dO V^T
    wgmma_wait<TWO ? 2 : 1>();  // the previous tile's dQ
    __syncthreads();  // ... of every warp: its stage is free
    if (j0 + kBt < g.jend) load_kv(j0 + kBt, buf ^ 1);
    cp_async_commit();
    unsigned* kb = kb_s + buf * 2 * kBt;
    if constexpr (DROP) kb[tid] = dq_keep_bits(j0);
    const bool full = j0 + kBt <= g.jend && (!p.causal || j0 + kBt - 1 <= g.i_lo + g.off) &&
                      (p.window <= 0 || int64_t(g.i_hi) + g.off - j0 < p.window);
    const auto s_at = [&](int n, int e) -> float& { return s[4 * n + e]; };
    const auto dp_at = [&](int n, int e) -> float& { return dp[4 * n + e]; };
    if constexpr (TWO) {  // P while dP's products run
      wgmma_wait<1>();
      dq_probs<DROP, XS, NT, 1>(s_at, dp_at, p, g, l2, dsum, qi, slope, kb, full, j0, wr, gq, tq, scale, c2, keep);
    }
    wgmma_wait<0>();
    if constexpr (DROP) __syncthreads();  // the keep bits
    dq_probs<DROP, XS, NT, TWO ? 2 : 0>(s_at, dp_at, p, g, l2, dsum, qi, slope, kb, full, j0, wr, gq, tq, scale, c2, keep);
    wg_acc_to_a<Cv>(da, dp);
    wgmma_fence();
    wg_acc_rs<BF, D>(dq, da, k_b);  // dQ += dS K; not waited for here
    wgmma_commit();
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
  const auto q_out = [&](int x) -> int64_t {
    const int64_t r = r0 + wr + gq + 8 * x;
    return r < g.nrows ? row_index(r) : -1;
  };
  store_acc<Cv, D>(P.dq, [&](int n, int e) { return dq[4 * n + e]; }, tq, q_out);
#else
  __trap();
#endif
}

#endif

// Both passes of a backward form: the dK/dV kernel on (key tiles, Hkv, sequences), then the dQ kernel on (row
// tiles, Hkv, sequences), 128 threads and `bytes` of dynamic shared memory each.
int launch_passes(void (*dkv)(AttnBwdParams), void (*dq)(AttnBwdParams), int bytes, const AttnBwdParams& P, gpuStream_t st) {
  const AttnParams& p = P.a;
  for (const void* f : {reinterpret_cast<const void*>(dkv), reinterpret_cast<const void*>(dq)}) {
    const gpuError_t e = gpuFuncSetAttribute(f, gpuFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != gpuSuccess) return static_cast<int>(e);
  }
  const unsigned ktiles = static_cast<unsigned>((int64_t(p.SkT) + kBt - 1) / kBt);
  const unsigned qtiles = static_cast<unsigned>((int64_t(p.G) * p.SqT + kBt - 1) / kBt);
  if (ktiles > 0) {
    dkv<<<dim3(ktiles, static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.nseq)), 128, bytes, st>>>(P);
    const int e = static_cast<int>(gpuGetLastError());
    if (e != 0) return e;
  }
  if (qtiles > 0) dq<<<dim3(qtiles, static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.nseq)), 128, bytes, st>>>(P);
  return static_cast<int>(gpuGetLastError());
}

// Dropout and the extended scores (soft-capping, ALiBi) in instances of their own: as a run-time branch the
// keep bits' code cost the other cases 10-12 %. launch(drop, xs) gets them as std::bool_constant.
template <class Launch>
int by_instance(const AttnBwdParams& P, Launch launch) {
  const bool xs = P.a.softcap > 0 || P.a.alibi != 0;
  if (P.a.dropout) return xs ? launch(std::true_type(), std::true_type()) : launch(std::true_type(), std::false_type());
  return xs ? launch(std::false_type(), std::true_type()) : launch(std::false_type(), std::false_type());
}

template <class T, int D>
int launch_mma(const AttnBwdParams& P, gpuStream_t st) {
  return by_instance(P, [&](auto drop, auto xs) {
    constexpr bool DROP = decltype(drop)::value, XS = decltype(xs)::value;
    return launch_passes(&attn_bwd_mma_dkv<T, D, DROP, XS>, &attn_bwd_mma_dq<T, D, DROP, XS>, static_cast<int>(bwd_mma_bytes<D>()), P, st);
  });
}

#if defined(KF_CUDA_WGMMA)
template <class T, int D>
int launch_wg(const AttnBwdParams& P, gpuStream_t st) {
  return by_instance(P, [&](auto drop, auto xs) {
    constexpr bool DROP = decltype(drop)::value, XS = decltype(xs)::value;
    return launch_passes(&attn_bwd_wg_dkv<T, D, DROP, XS>, &attn_bwd_wg_dq<T, D, DROP, XS>, static_cast<int>(bwd_wg_bytes<D>()), P, st);
  });
}
#endif

}  // namespace
#endif

// The head dimensions built: D 64 and 128, and the other common ones that are multiples of 16 up to 128.
#define KF_BWD_MMA_DIMS(X) X(32) X(64) X(80) X(96) X(128)

int64_t attn_bwd_mma_shared_bytes(int D) {
#if defined(KF_HIP)
  (void)D;
  return 0;  // not built (HIP): the portable kernels serve
#else
#define KF_BYTES(d) if (D == d) return bwd_mma_bytes<d>();
  KF_BWD_MMA_DIMS(KF_BYTES)
#undef KF_BYTES
  return 0;
#endif
}

int launch_attention_backward_mma(Dt dt, const AttnBwdParams& p, void* stream) {
#if defined(KF_HIP)
  (void)dt, (void)p, (void)stream;
  return -1;
#else
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
#define KF_LAUNCH(d) \
  if (p.a.D == d) return dt == Dt::f16 ? launch_mma<F16, d>(p, s) : dt == Dt::bf16 ? launch_mma<BF16, d>(p, s) : -1;
  KF_BWD_MMA_DIMS(KF_LAUNCH)
#undef KF_LAUNCH
  return -1;
#endif
}

int64_t attn_bwd_wgmma_shared_bytes(int D) {
#if defined(KF_HIP) || !defined(KF_CUDA_WGMMA)
  (void)D;
  return 0;  // no sm_90a code in this build
#else
  return D == 64 ? bwd_wg_bytes<64>() : D == 128 ? bwd_wg_bytes<128>() : 0;
#endif
}

int launch_attention_backward_wgmma(Dt dt, const AttnBwdParams& p, void* stream) {
#if defined(KF_HIP) || !defined(KF_CUDA_WGMMA)
  (void)dt, (void)p, (void)stream;
  return -1;
#else
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  if (p.a.D != 64 && p.a.D != 128) return -1;
  if (dt == Dt::f16) return p.a.D == 64 ? launch_wg<F16, 64>(p, s) : launch_wg<F16, 128>(p, s);
  if (dt == Dt::bf16) return p.a.D == 64 ? launch_wg<BF16, 64>(p, s) : launch_wg<BF16, 128>(p, s);
  return -1;
#endif
}

}  // namespace kf::hal::cuda
