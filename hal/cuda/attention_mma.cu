// docs/ops.md section 5's attention on the tensor cores in CUDA (no HIP form): flash-wmma(-regs) and
// flash-mma, launched by attention.cu's launch_attention, which also runs the key splits' combine pass.
// Same semantics as attention.cu's portable kernel (the masks, the dropout index, the online softmax).
//
// attention, tensor-core kernel (attn_wmma, f16 / bf16, D % 16 == 0, CUDA only): 64 query rows per block
// of 4 warps, 16 rows per warp. S = Q K^T with nvcuda::wmma 16x16x16 (float accumulate) into shared
// memory; the warp's softmax on its 16 rows in float (the same masks, dropout and online update as
// above, the tile's row sum added by a warp butterfly); O in shared memory as float, rescaled by the row
// factor, loaded as an accumulator fragment, += P V (P rounded to the dtype), stored back. Simple rather
// than fast: the accumulator makes a round trip through shared memory per tile. The REGS variant
// (flash-wmma-regs) keeps O in accumulator fragments instead, rescaled through each element's row index.
#include <algorithm>
#include <type_traits>

#include "hal/cuda/attention_common.cuh"

#if !defined(KF_HIP)
#include <mma.h>

#include "hal/cuda/mma_ptx.cuh"
#endif

namespace kf::hal::cuda {


// ---- The tensor-core flash kernels (see the top of this file).
namespace {

#if !defined(KF_HIP)
template <class T> struct WmmaElem;
template <> struct WmmaElem<F16> { using E = __half; };
template <> struct WmmaElem<BF16> { using E = __nv_bfloat16; };

// Rotates rows [0, n) of a staged 16-bit tile X (row stride ld elements) in place, in float, each
// rotated value rounded once to the dtype (the pairs are read and written by the same thread).
template <class T>
KF_DEV void rope_rows16(unsigned short* X, int ld, int n, bool query, int64_t first, int off, const AttnParams& p) {
  const int half = p.D / 2;
  const float* tab = static_cast<const float*>(p.rope);
  for (int e = threadIdx.x; e < n * half; e += blockDim.x) {
    const int t = e / half, d = e % half;
    const int64_t pos = query ? (first + t) / p.G + off : first + t;
    const int64_t ti = 2 * ((pos + p.rope_pos0) * half + d);
    const float c = tab[ti], s = tab[ti + 1];
    const int i0 = p.rope_mode == 1 ? d : 2 * d, i1 = p.rope_mode == 1 ? d + half : 2 * d + 1;
    unsigned short* row = X + int64_t(t) * ld;
    const float a = T::load(row, i0), b = T::load(row, i1);
    T::store(row, i0, a * c - b * s);
    T::store(row, i1, b * c + a * s);
  }
}

constexpr int kWq = 64;  // query rows per block (4 warps of 16)

// Shared memory (bytes), every region 32-byte aligned as wmma's loads and stores need: Qs [64][D + 8],
// Ks and Vs [BKV][D + 8] (dtype), Sf [64][BKV + 4] (float scores), Ph [64][BKV + 8] (dtype
// probabilities), Of [64][D + 4] (float accumulator), then m, l, alpha per row (float).
__host__ __device__ inline int64_t wmma_bytes(int bkv, int D) {
  return 2 * int64_t(kWq + 2 * bkv) * (D + 8) + 4 * int64_t(kWq) * (bkv + 4) + 2 * int64_t(kWq) * (bkv + 8) +
         4 * int64_t(kWq) * (D + 4) + 3 * 4 * kWq;
}

// REGS: the accumulator O stays in registers (D / 16 accumulator fragments per warp), rescaled element by
// element through the row index of each element (found once: a 16 x 16 matrix whose element (r, c) is r,
// loaded into a fragment of the same type; which element of a fragment holds which row is the
// implementation's choice, the same for fragments of one type); otherwise O lives in shared memory.
template <class T, int BKV, bool REGS>
__global__ void __launch_bounds__(128) attn_wmma(const AttnParams p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  namespace w = nvcuda::wmma;
  using E = typename WmmaElem<T>::E;
  using M = Math<float, true>;
  constexpr int LDS = BKV + 4, LDP = BKV + 8;
  extern __shared__ __align__(32) unsigned char attn_wmma_smem[];
  const int D = p.D, LDH = D + 8, LDO = D + 4, NPK = D / 8, HPK = LDH / 8;
  unsigned short* Qs = reinterpret_cast<unsigned short*>(attn_wmma_smem);
  unsigned short* Ks = Qs + kWq * LDH;
  unsigned short* Vs = Ks + BKV * LDH;
  float* Sf = reinterpret_cast<float*>(Vs + BKV * LDH);
  unsigned short* Ph = reinterpret_cast<unsigned short*>(Sf + kWq * LDS);
  float* Of = reinterpret_cast<float*>(Ph + kWq * LDP);
  float* m_s = Of + kWq * LDO;
  float* l_s = m_s + kWq;
  float* a_s = l_s + kWq;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int seq = blockIdx.z / p.nsplit, split = blockIdx.z % p.nsplit;
  const int hk = blockIdx.y;
  const int64_t r0 = int64_t(blockIdx.x) * kWq;
  Geo g;
  if (!block_geometry(p, seq, split, r0, kWq, g)) return;  // uniform over the block

  // The query tile as given (RoPE rotates it in place; the scale applies to the float scores).
  for (int e = tid; e < kWq * NPK; e += blockDim.x) {
    const int t = e / NPK, pk = e % NPK;
    const int64_t rq = r0 + t;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (rq < g.nrows) {
      const int qh = hk * p.G + static_cast<int>(rq % p.G);
      x = load_pack(p.q, ((int64_t(g.b) * p.Hq + qh) * p.SqT + g.qbeg + rq / p.G) * NPK + pk);
    }
    reinterpret_cast<uint4*>(Qs)[t * HPK + pk] = x;
  }
  for (int e = tid; e < kWq * LDO; e += blockDim.x) Of[e] = 0.0f;
  if (tid < kWq) m_s[tid] = -INFINITY, l_s[tid] = 0.0f, a_s[tid] = 1.0f;
  __syncthreads();
  if (p.rope_mode) {
    rope_rows16<T>(Qs, LDH, static_cast<int>(m_min(int64_t(kWq), g.nrows - r0)), true, r0, g.off, p);
    __syncthreads();
  }
  const int64_t kvbase = (int64_t(g.b) * p.Hkv + hk) * p.SkT + g.kbeg;
  const int wr = warp * 16;  // the warp's first row in the tile
  const float scale = static_cast<float>(p.scale), keep = static_cast<float>(p.keep_scale);
  constexpr int NFMAX = REGS ? (BKV == 64 ? 8 : 16) : 1;  // D <= 128 with 64-key tiles, D <= 256 with 32
  w::fragment<w::accumulator, 16, 16, 16, float> oacc[NFMAX];
  w::fragment<w::accumulator, 16, 16, 16, float> rowf;
  if constexpr (REGS) {
#pragma unroll
    for (int n = 0; n < NFMAX; ++n) w::fill_fragment(oacc[n], 0.0f);
    for (int e = lane; e < 256; e += 32) Sf[(wr + e / 16) * LDS + e % 16] = static_cast<float>(e / 16);
    __syncwarp();
    w::load_matrix_sync(rowf, Sf + wr * LDS, LDS, w::mem_row_major);
    __syncwarp();
  }

  for (int j0 = g.jbeg; j0 < g.jend; j0 += BKV) {
    if (!tile_in_mask(p, g, j0, m_min(j0 + BKV, g.jend) - 1)) continue;  // the same decision in every thread
    // K and V tiles (rows past jend are zeros).
    for (int e = tid; e < BKV * NPK; e += blockDim.x) {
      const int t = e / NPK, pk = e % NPK, j = j0 + t;
      uint4 kx = make_uint4(0, 0, 0, 0), vx = make_uint4(0, 0, 0, 0);
      if (j < g.jend) {
        kx = load_pack(p.k, (kvbase + j) * NPK + pk);
        vx = load_pack(p.v, (kvbase + j) * NPK + pk);
      }
      reinterpret_cast<uint4*>(Ks)[t * HPK + pk] = kx;
      reinterpret_cast<uint4*>(Vs)[t * HPK + pk] = vx;
    }
    __syncthreads();
    if (p.rope_mode) {
      rope_rows16<T>(Ks, LDH, m_min(BKV, g.jend - j0), false, j0, 0, p);
      __syncthreads();
    }
    // S = Q K^T for the warp's 16 rows.
    for (int n = 0; n < BKV / 16; ++n) {
      w::fragment<w::accumulator, 16, 16, 16, float> c;
      w::fill_fragment(c, 0.0f);
      for (int kk = 0; kk < D / 16; ++kk) {
        w::fragment<w::matrix_a, 16, 16, 16, E, w::row_major> a;
        w::fragment<w::matrix_b, 16, 16, 16, E, w::col_major> b;
        w::load_matrix_sync(a, reinterpret_cast<const E*>(Qs + wr * LDH + kk * 16), LDH);
        w::load_matrix_sync(b, reinterpret_cast<const E*>(Ks + n * 16 * LDH + kk * 16), LDH);
        w::mma_sync(c, a, b, c);
      }
      w::store_matrix_sync(Sf + wr * LDS + n * 16, c, LDS, w::mem_row_major);
    }
    __syncwarp();
    // The warp's softmax, row by row: lanes take keys lane, lane + 32.
    for (int rr = 0; rr < 16; ++rr) {
      const int tr = wr + rr;
      const int64_t my_r = r0 + tr;
      const bool row_ok = my_r < g.nrows;
      const int qi = static_cast<int>(my_r / p.G);
      const int h = hk * p.G + static_cast<int>(my_r % p.G);
      const int row_global = g.qbeg + qi;
      const int64_t rowidx = (int64_t(g.b) * p.Hq + h) * p.SqT + row_global;
      const float slope = p.alibi ? alibi_slope<T>(h, p) : 0.0f;
      float sv[BKV / 32 > 0 ? BKV / 32 : 1];
      float mt = -INFINITY;
#pragma unroll
      for (int u = 0; u < BKV / 32; ++u) {
        const int t = lane + 32 * u, j = j0 + t;
        sv[u] = score_of<T>(Sf[tr * LDS + t] * scale, row_ok && j < g.jend, qi, j, row_global, slope, p, g);
        mt = m_max(mt, sv[u]);
      }
      mt = warp_max(mt);
      const float m_old = m_s[tr];
      const float mnew = m_max(m_old, mt);
      const float alpha = mnew == -INFINITY ? 1.0f : M::exp(m_old - mnew);
      float lt = 0.0f;
#pragma unroll
      for (int u = 0; u < BKV / 32; ++u) {
        const int t = lane + 32 * u;
        float pr = sv[u] == -INFINITY ? 0.0f : M::exp(sv[u] - mnew);
        lt += pr;
        if (p.dropout) pr = pr > 0.0f && attn_keep(rowidx, int64_t(g.kbeg) + j0 + t, p) ? pr * keep : 0.0f;
        T::store(Ph, tr * LDP + t, pr);
      }
      lt = warp_sum(lt);
      __syncwarp();
      if (lane == 0) {
        m_s[tr] = mnew;
        l_s[tr] = l_s[tr] * alpha + lt;
        a_s[tr] = alpha;
      }
    }
    __syncwarp();
    // The warp's accumulator rows rescaled, then O += P V.
    if constexpr (REGS) {
#pragma unroll
      for (int n = 0; n < NFMAX; ++n) {
        if (n < D / 16) {
          for (int i = 0; i < rowf.num_elements; ++i) oacc[n].x[i] *= a_s[wr + static_cast<int>(rowf.x[i])];
#pragma unroll
          for (int kk = 0; kk < BKV / 16; ++kk) {
            w::fragment<w::matrix_a, 16, 16, 16, E, w::row_major> a;
            w::fragment<w::matrix_b, 16, 16, 16, E, w::row_major> b;
            w::load_matrix_sync(a, reinterpret_cast<const E*>(Ph + wr * LDP + kk * 16), LDP);
            w::load_matrix_sync(b, reinterpret_cast<const E*>(Vs + kk * 16 * LDH + n * 16), LDH);
            w::mma_sync(oacc[n], a, b, oacc[n]);
          }
        }
      }
    }
    if constexpr (!REGS) {
      for (int e = lane; e < 16 * D; e += 32) Of[(wr + e / D) * LDO + e % D] *= a_s[wr + e / D];
      __syncwarp();
      for (int n = 0; n < D / 16; ++n) {
        w::fragment<w::accumulator, 16, 16, 16, float> c;
        w::load_matrix_sync(c, Of + wr * LDO + n * 16, LDO, w::mem_row_major);
#pragma unroll
        for (int kk = 0; kk < BKV / 16; ++kk) {
          w::fragment<w::matrix_a, 16, 16, 16, E, w::row_major> a;
          w::fragment<w::matrix_b, 16, 16, 16, E, w::row_major> b;
          w::load_matrix_sync(a, reinterpret_cast<const E*>(Ph + wr * LDP + kk * 16), LDP);
          w::load_matrix_sync(b, reinterpret_cast<const E*>(Vs + kk * 16 * LDH + n * 16), LDH);
          w::mma_sync(c, a, b, c);
        }
        w::store_matrix_sync(Of + wr * LDO + n * 16, c, LDO, w::mem_row_major);
      }
    }
    __syncthreads();  // K, V and the scores are free for the next tile
  }

  if constexpr (REGS) {  // the accumulators to the warp's rows of Of, for the end below
#pragma unroll
    for (int n = 0; n < NFMAX; ++n)
      if (n < D / 16) w::store_matrix_sync(Of + wr * LDO + n * 16, oacc[n], LDO, w::mem_row_major);
  }
  // The warp's rows: partials (splits), or sink, normalization, o and lse.
  __syncwarp();
  const int64_t rows = int64_t(p.B) * p.Hq * p.SqT;
  for (int rr = 0; rr < 16; ++rr) {
    const int tr = wr + rr;
    const int64_t my_r = r0 + tr;
    if (my_r >= g.nrows) break;
    const int qi = static_cast<int>(my_r / p.G);
    const int h = hk * p.G + static_cast<int>(my_r % p.G);
    const int64_t rowidx = (int64_t(g.b) * p.Hq + h) * p.SqT + g.qbeg + qi;
    float m = m_s[tr], l = l_s[tr];
    if (p.nsplit > 1) {
      const int64_t part = int64_t(split) * rows + rowidx;
      float* accs = static_cast<float*>(p.part);
      float* ml = accs + int64_t(p.nsplit) * rows * D;
      for (int d = lane; d < D; d += 32) accs[part * D + d] = Of[tr * LDO + d];
      if (lane == 0) ml[2 * part] = m, ml[2 * part + 1] = l;
      continue;
    }
    float a = 1.0f;
    if (p.sinks) {
      a = fold_sink<M>(m, l, float(T::load(p.sinks, h)));
    }
    const float inv = l > 0.0f ? a / l : 0.0f;
    for (int d = lane; d < D; d += 32) T::store(p.o, rowidx * D + d, Of[tr * LDO + d] * inv);
    if (p.lse && lane == 0) T::store(p.lse, rowidx, l > 0.0f ? m + logf(l) : -INFINITY);
  }
#endif
}

// ---- The FlashAttention-2 kernel (AttnKernel::Mma, flash-mma; f16 / bf16, D = 64 or 128, no RoPE):
// blocks of 4 warps, RW = 16 or 32 query rows per warp (BQ = 4 RW rows a block; the GQA row grouping of
// the other kernels); key tiles of kMk = 64 keys. Q comes to shared memory once (cp.async); K and V
// tiles are double-buffered in shared memory, tile t + 1 loading (cp.async, zero-filled past the visible
// keys) while tile t is computed, each tile in steps of KN keys. S = Q K^T with mma.sync.m16n8k16 (float
// accumulators, Q's A fragments and K's B fragments by ldmatrix); the scores in the accumulator
// registers (scale, and where the step needs it, soft-capping, ALiBi and the masks through score_of);
// the online softmax on the fragments (row max and sum over the 4 lanes of a quad, shuffles; the running
// sum per lane, summed over the quad at the end); P rounded to the dtype in registers, straight into the
// A fragments of P V (the accumulator layout of two 16 x 8 tiles is the A layout of one 16 x 16 tile),
// V's B fragments from ldmatrix.trans; O (RW x D per warp) in registers, rescaled per step; dropout on P
// with the Philox generator at the (b, h, i, j) index, as the other kernels. Soft-capping, ALiBi (each
// row's slope computed once, before the key loop) and the window in registers; the block mask through a
// per-warp float scratch in shared memory (16 rows x KN keys a pass, a rolled loop: it costs the main
// path few registers). Rows past the sequence are not masked
// (their Q is zero, their scores finite, nothing of theirs is stored). Rows are padded to D + 8 elements
// (odd 16-byte units: ldmatrix's 8 rows fall in distinct banks). The same bits every run.
//  - RW = 16 (`warp_rows=16`, bq = 64; the default): one m16 row tile per warp, Q's A fragments held in
//    registers for the whole kernel (KD x 4: 32 at D = 128), steps of KN = 64 keys (the whole tile);
//    dropout through the scratch.
//  - RW = 32 (`warp_rows=32`, bq = 128; KF_TUNE attn_rows_per_warp=32): FlashAttention-2's d = 128
//    layout (Flash_fwd_kernel_traits<128, 128, kBlockN, 4>): two m16 row tiles per warp share every K
//    and V B fragment. Steps of KN = 32 keys (FlashAttention-2's kBlockN = 32; two per 64-key tile, one
//    barrier per tile), and Q's A fragments re-read from shared memory (ldmatrix) at every k step
//    (FlashAttention-2's Is_Q_in_regs = false). ldmatrix.x4 per 64 keys and warp at D = 128: 32 Q + 32 K
//    + 32 V for 256 mma (0.375 a mma), against 32 K + 32 V for 128 mma at RW = 16 (0.5). Warps none of
//    whose rows sees a key of the step (the causal diagonal, the window, rows past the sequence) skip
//    it: the masks would make their P zero and leave m, l and O as they are. Dropout: before S = Q K^T,
//    each lane writes the keep bits of one of the warp's 32 rows for the step's 32 keys (a word, in
//    shared memory; a rolled loop while only O is live), applied to P in registers after the softmax.
//    O's rescale is skipped in steps where no row of the warp has a new max (__all_sync: the same bits).
//    Register budget per lane at D = 128 (255 at most: 128 threads at <= 255 registers give 2 blocks a
//    multiprocessor, as RW = 16): O 2 x 16 x 128 / 32 = 128 floats, S 2 x 16 rows x 32 keys / 32 = 32
//    floats, m and l 8, Q's A fragments of a k step 8, a K / V B fragment 4: 180, leaving about 75 for
//    ptxas's ldmatrix prefetch (it keeps 2 k steps of Q and K fragments in flight: 36), addresses, loop
//    state and the geometry (about 26 live across the loop). What did not fit: 64-key steps (S 64
//    floats: 255 registers, 386 / 484 bytes of spill stores / loads), the Philox generator run beside S
//    (28 / 64), 64-bit row divisions in the loops (subroutine calls with fixed registers), per-row K / V
//    pointers and zero-fill addresses kept across the loop. __launch_bounds__(128, 2) (the 255 cap
//    that 2 blocks a multiprocessor give anyway) keeps ptxas from aiming at 3 blocks at D = 64 (168
//    registers, with spills).
// ptxas (sm_90a, nvcc 13.0), f16 and bf16 alike: RW 16: 222 registers at D = 128, 168 at D = 64 (at most
// 168 keeps 3 blocks a multiprocessor there); RW 32: 254 at D = 128, 212 at D = 64; no spills (0 bytes
// stack frame).
// Shared memory (bytes): Q BQ (D + 8) 2, K and V 2 stages x 64 (D + 8) 2 each, the scratch 4 warps x
// 16 x (KN + 4) x 4, the keep bits (RW 32) 4 warps x 32 x 4:
//   RW 16, D 128: 17408 + 69632 + 17408 = 104448 (102 KiB; 2 blocks a multiprocessor);
//   RW 32, D 128: 34816 + 69632 + 9216 + 512 = 114176 (111.5 KiB; 2 blocks with the 1 KiB each reserves:
//   225 of 228 KiB);
//   RW 16, D 64: 46080 + 17408 = 63488 (62 KiB); RW 32, D 64: 55296 + 9216 + 512 = 65024 (63.5 KiB).
constexpr int kMk = 64;
// Keys per compute step (the S fragment's columns, and the scratch's): a whole tile with 16 rows a warp,
// half a tile with 32.
__host__ __device__ constexpr int mma_kn(int RW) { return RW == 16 ? kMk : kMk / 2; }
template <int D, int RW>
__host__ __device__ constexpr int64_t mma_bytes() {
  return 2 * int64_t(4 * RW + 4 * kMk) * (D + 8) + 4 * 4 * 16 * int64_t(mma_kn(RW) + 4) + (RW == 32 ? 4 * 4 * RW : 0);
}

template <class T, int D, int RW>
__global__ void __launch_bounds__(128, 2) attn_mma(const AttnParams p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  static_assert(RW == 16 || RW == 32, "16 or 32 rows per warp");
  constexpr bool BF = std::is_same_v<T, BF16>;
  using Cv = std::conditional_t<BF, Bf16Conv, HalfConv>;
  constexpr int MT = RW / 16, BQ = 4 * RW, KN = mma_kn(RW), SWP = KN + 4;
  constexpr int LD = D + 8, NPK = D / 8, NT = KN / 8, KD = D / 16, ND = D / 8;
  constexpr bool QREG = MT == 1;  // Q's A fragments held in registers (else re-read at every k step)
  extern __shared__ __align__(128) unsigned char attn_mma_smem[];
  // Shared memory (32-bit shared addresses, bytes): Q [BQ][LD], K [2][kMk][LD], V [2][kMk][LD], then the
  // scratch [4 warps][16][SWP] floats, then (RW = 32) the keep bits [4 warps][RW] words.
  const unsigned qs_a = smem_u32(attn_mma_smem), ks_a = qs_a + 2 * BQ * LD, vs_a = ks_a + 2 * 2 * kMk * LD;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
  const int seq = blockIdx.z / p.nsplit, split = blockIdx.z % p.nsplit;
  const int hk = blockIdx.y;
  const int64_t r0 = int64_t(blockIdx.x) * BQ;
  Geo g;
  if (!block_geometry(p, seq, split, r0, BQ, g)) return;  // uniform over the block
  const int64_t kvbase = (int64_t(g.b) * p.Hkv + hk) * p.SkT + g.kbeg;
  const int wr = warp * RW;

  // Row r0 + tr of the sequence is query qb + (rb + tr) / G of head hk G + (rb + tr) % G (r0 = qb G + rb):
  // one 64-bit division here, 32-bit ones after (a 64-bit division is a subroutine call, whose fixed
  // registers cost the loop registers).
  const int qb = static_cast<int>(r0 / p.G), rb = static_cast<int>(r0 - int64_t(qb) * p.G);
  // This lane's rows (wr + 16 mt + gq + 8 x): their queries. Rows past the sequence need no mask: their
  // Q is zero (finite scores) and nothing of theirs is stored.
  int qi[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int x = 0; x < 2; ++x) qi[mt][x] = qb + (rb + wr + 16 * mt + gq + 8 * x) / p.G;
  // The warp's rows (RW = 32: the unit of the full-tile test and of the step skip): whether any exists,
  // their first and last queries.
  const int w_n = static_cast<int>(m_min(int64_t(RW), g.nrows - r0 - wr));  // rows of the warp (<= 0: none)
  const bool w_any = w_n > 0;
  const int w_qlo = qb + (rb + wr) / p.G, w_qhi = qb + (rb + wr + m_max(w_n, 1) - 1) / p.G;
  // The row of the block's tile row tr: its index in [B, Hq, SqT], head, query.
  const auto row_of = [&](int tr, int& h, int& q) {
    const int rr = rb + tr;
    q = qb + rr / p.G;
    h = hk * p.G + rr % p.G;
    return (int64_t(g.b) * p.Hq + h) * p.SqT + g.qbeg + q;
  };
  // The warp's scratch for the uncommon features (a 16 x KN float matrix): the scores of one row tile go
  // through it where soft-capping, ALiBi, a window or a block mask apply, and the probabilities where
  // dropout does, element by element in a loop that keeps them out of the registers of the main path.
  float* Sw = reinterpret_cast<float*>(attn_mma_smem + 2 * (BQ + 4 * kMk) * LD) + warp * 16 * SWP;
  // RW = 32: the warp's dropout keep bits of the step (word rr: its row rr, bit t: key j1 + t), written
  // before S = Q K^T, while only O is live (the Philox generator run with S live too made the kernel spill).
  unsigned* Kw = reinterpret_cast<unsigned*>(attn_mma_smem + 2 * (BQ + 4 * kMk) * LD + 4 * 4 * 16 * SWP) + warp * RW;
  const auto to_scratch = [&](const float (&sc)[NT][4]) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) Sw[(gq + 8 * (e / 2)) * SWP + n * 8 + 2 * tq + (e & 1)] = sc[n][e];
    __syncwarp();
  };
  const auto from_scratch = [&](float (&sc)[NT][4]) {
    __syncwarp();
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[n][e] = Sw[(gq + 8 * (e / 2)) * SWP + n * 8 + 2 * tq + (e & 1)];
    __syncwarp();
  };

  // Q (rows past the sequence zero-filled), then K and V of the first tile: two groups.
  for (int e = tid; e < BQ * NPK; e += 128) {
    const int t = e / NPK, pk = e % NPK;
    const bool ok = r0 + t < g.nrows;
    int h, q;
    const int64_t qrow = ok ? row_of(t, h, q) : 0;
    cp_async16(qs_a + 2 * (t * LD + pk * 8), static_cast<const uint4*>(p.q) + qrow * NPK + pk, ok ? 16 : 0);
  }
  cp_async_commit();
  // This thread's part of a K / V tile: rows t0 + i KR (i < kMk / KR), 16-byte unit pk0 (e = 128 i + tid,
  // t = e / NPK, pk = e % NPK); the addresses from one base per tile, so that no per-row pointer stays
  // live across the loop. Rows past the keys are zero-filled from the tile's first row (nothing read).
  static_assert(128 % NPK == 0, "whole rows per pass");
  constexpr int KR = 128 / NPK;
  const int t0 = tid / NPK;
  const int64_t kv_off = (kvbase + t0) * NPK + tid % NPK;
  const unsigned kv_so = 2 * (t0 * LD + (tid % NPK) * 8);
  const auto load_kv = [&](int j0, int buf) {
    const uint4* kp = static_cast<const uint4*>(p.k) + kv_off + int64_t(j0) * NPK;
    const uint4* vp = static_cast<const uint4*>(p.v) + kv_off + int64_t(j0) * NPK;
    const unsigned kd = ks_a + buf * (2 * kMk * LD) + kv_so, vd = vs_a + buf * (2 * kMk * LD) + kv_so;
    const int left = g.jend - j0 - t0;  // this thread's rows i KR < left are keys
#pragma unroll
    for (int i = 0; i < kMk / KR; ++i) {
      const bool ok = i * KR < left;
      const int at = ok ? i * KR * NPK : -t0 * NPK;
      cp_async16(kd + 2 * i * KR * LD, kp + at, ok ? 16 : 0);
      cp_async16(vd + 2 * i * KR * LD, vp + at, ok ? 16 : 0);
    }
  };
  // The tiles the block computes: from jbeg in steps of kMk, those the block mask leaves (the same
  // decision in every thread).
  const auto next_tile = [&](int j0) {
    while (j0 < g.jend && !tile_in_mask(p, g, j0, m_min(j0 + kMk, g.jend) - 1)) j0 += kMk;
    return j0;
  };
  int j0 = next_tile(g.jbeg);
  if (j0 < g.jend) load_kv(j0, 0);
  cp_async_commit();
  cp_async_wait<1>();  // Q
  __syncthreads();
  // This lane's ldmatrix row address in Q for the A fragments (row tile mt and k step kk add constants).
  const unsigned q_a = qs_a + 2 * ((wr + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8);
  unsigned qf[QREG ? KD : 1][4];
  if constexpr (QREG) {
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) ldsm_x4(qf[kk], q_a + 2 * kk * 16);
  }

  float o[MT][ND][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int n = 0; n < ND; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  const float scale = static_cast<float>(p.scale), keep = static_cast<float>(p.keep_scale);
  const bool plain = p.softcap <= 0 && !p.alibi && p.window <= 0 && !p.bmask;
  // The softmax works in base 2 on unscaled scores where it can: a score s weighs 2^(s c - m), with
  // c = |scale| log2(e) on the plain path (s negated first when the scale is negative; c kept above
  // zero so that a masked -inf stays -inf) and c = log2(e) where score_of has scaled s already; m is the
  // row's running max of s c. One FFMA and one ex2.approx.ftz a score: Nsight Compute counted about 30
  // instructions a score before (the scale's FMUL, __expf's range tests, a -inf select), half of them
  // FP32 and predicate work around the tensor cores' 13 % (H100).
  constexpr float kLog2e = 1.44269504088896341f;
  const bool neg = scale < 0.0f;
  const float c2 = plain ? fmaxf(fabsf(scale) * kLog2e, 1.17549435e-38f) : kLog2e;
  // ALiBi: the slopes of this lane's rows, once (a row's head does not change with the key step; four
  // slopes a step, each alibi_slope's loop and exp2, held the ALiBi case at 3.9x the plain causal time).
  float slope[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int x = 0; x < 2; ++x)
      slope[mt][x] = p.alibi ? static_cast<float>(alibi_slope<T>(hk * p.G + (rb + wr + 16 * mt + gq + 8 * x) % p.G, p)) : 0.0f;

  for (int buf = 0; j0 < g.jend; buf ^= 1) {
    const int jn = next_tile(j0 + kMk);
    if (jn < g.jend) load_kv(jn, buf ^ 1);  // buffer buf ^ 1 was released by the barrier ending the last tile
    cp_async_commit();
    cp_async_wait<1>();  // this tile
    __syncthreads();
    // The tile in steps of KN keys (one step at RW = 16, two at RW = 32), keys j1 .. j1 + KN - 1.
#pragma unroll 1
    for (int ks = 0; ks < kMk; ks += KN) {
      const int j1 = j0 + ks;
      // RW = 32: the warp skips a step none of its rows sees (uniform over the warp).
      if constexpr (MT > 1)
        if (!w_any || (p.causal && int64_t(j1) > int64_t(w_qhi) + g.off) ||
            (p.window > 0 && int64_t(j1) + KN - 1 <= int64_t(w_qlo) + g.off - p.window))
          continue;
      if constexpr (MT > 1) {
        if (p.dropout) {  // lane rr: the keep bits of the warp's row rr (a Philox call per 4 keys)
          static_assert(KN == 32 && RW == 32, "a word per row and a row per lane");
          __syncwarp();  // the last step's reads of the words are done
          int h, q;
          const int64_t ri = row_of(wr + lane, h, q);
          Kw[lane] = ri >= 0 ? keep_bits32(static_cast<uint64_t>(ri) * p.SkT + g.kbeg + j1, p) : 0u;
          __syncwarp();
        }
      }
      // This lane's ldmatrix row addresses in the step's K and V (the unrolled loops add constants).
      const unsigned kt_a = ks_a + buf * (2 * kMk * LD) + 2 * ((ks + (lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8);
      const unsigned vt_a = vs_a + buf * (2 * kMk * LD) + 2 * ((ks + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8);

      // S = Q K^T for the warp's RW rows and the step's KN keys; each K B fragment serves the MT row tiles.
      float sc[MT][NT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < NT; ++n) sc[mt][n][0] = sc[mt][n][1] = sc[mt][n][2] = sc[mt][n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) {
        unsigned qa[QREG ? 1 : MT][4];
        if constexpr (!QREG) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) ldsm_x4(qa[mt], q_a + 2 * (16 * mt * LD + kk * 16));
        }
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
          unsigned b[4];
          ldsm_x4(b, kt_a + 2 * (n * 8 * LD + kk * 16));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            if constexpr (QREG) {
              mma16816<BF>(sc[mt][n], qf[kk], b[0], b[1]);
              mma16816<BF>(sc[mt][n + 1], qf[kk], b[2], b[3]);
            } else {
              mma16816<BF>(sc[mt][n], qa[mt], b[0], b[1]);
              mma16816<BF>(sc[mt][n + 1], qa[mt], b[2], b[3]);
            }
          }
        }
      }
      // The scores: scaled; the causal diagonal and the end of the keys masked where the tile reaches
      // them; soft-capping, ALiBi, the window and the block mask through score_of in the scratch.
      if (plain) {
        // Whether every score is visible: for the block's rows (RW = 16), the warp's (RW = 32).
        const bool full = j1 + KN <= g.jend &&
                          (!p.causal || int64_t(j1) + KN - 1 <= int64_t(MT == 1 ? g.i_lo : w_qlo) + g.off);
        if (neg) {  // rare: the max below is taken on -s
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
              for (int e = 0; e < 4; ++e) sc[mt][n][e] = -sc[mt][n][e];
        }
        if (!full) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NT; ++n)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int x = e / 2, j = j1 + n * 8 + 2 * tq + (e & 1);
                const bool vis = j < g.jend && (!p.causal || j <= qi[mt][x] + g.off);
                if (!vis) sc[mt][n][e] = -INFINITY;
              }
        }
      } else if (!p.bmask) {
        // Soft-capping, ALiBi and the window in registers, as score_of computes them, the slopes from
        // before the loop (the scratch below took a row index, a slope and a division a score: ALiBi ran at
        // 0.08 of this kernel's plain speed on an H100). Rows past the sequence need no mask (above).
        using M = Math<float, T::FAST>;
        const float cap = static_cast<float>(p.softcap);
        // Whether every score of the step is visible to this lane's rows (uniform over the warp: one
        // branch), with the distances d = i + off - j within 2^24, where the float d of key n 8 + c is
        // float(d of key 0) - (n 8 + c) exactly: an FADD a score where the masks' integer work, an I2F and a
        // select were. The lane's rows' extremes (qi rises with the row) bound the lane's distances.
        const int dhi = qi[MT - 1][1] + g.off - j1, dlo = qi[0][0] + g.off - j1 - (KN - 1);
        const bool full = __all_sync(0xffffffffu, j1 + KN <= g.jend && (!p.causal || dlo >= 0) &&
                                                      (p.window <= 0 || dhi < p.window) && dhi <= (1 << 24) && dlo >= -(1 << 24));
        if (full) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int x = 0; x < 2; ++x) {
              const float d0 = static_cast<float>(qi[mt][x] + g.off - j1 - 2 * tq);  // d of key n 8 + c: d0 - (n 8 + c)
#pragma unroll
              for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                  float& sv = sc[mt][n][2 * x + c];
                  float v = sv * scale;
                  if (cap > 0.0f) v = cap * M::tanh(v / cap);
                  if (p.alibi) v -= slope[mt][x] * fabsf(d0 - static_cast<float>(n * 8 + c));
                  sv = v;
                }
            }
        } else {
          // The masks as bounds on k = n 8 + c (a constant: two compares a score): the key exists (j < jend),
          // the causal diagonal (d >= 0: k <= dq), the window (d < window: k > dq - window).
          const int kend = g.jend - j1 - 2 * tq;
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int x = 0; x < 2; ++x) {
              const int dq = qi[mt][x] + g.off - j1 - 2 * tq;  // d of key n 8 + c: dq - (n 8 + c)
              const int hi = p.causal ? m_min(dq, kend - 1) : kend - 1;
              const int lo = p.window > 0 ? static_cast<int>(m_max(int64_t(dq) - p.window, int64_t(-1))) : -1;
#pragma unroll
              for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                  const int k = n * 8 + c;
                  float& sv = sc[mt][n][2 * x + c];
                  float v = sv * scale;
                  if (cap > 0.0f) v = cap * M::tanh(v / cap);
                  if (p.alibi) v -= slope[mt][x] * fabsf(static_cast<float>(dq - k));
                  sv = k > lo && k <= hi ? v : -INFINITY;
                }
            }
        }
      } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          to_scratch(sc[mt]);
#pragma unroll 1
          for (int e = lane; e < 16 * KN; e += 32) {
            const int rr = e / KN, t = e % KN, tr = wr + 16 * mt + rr, j = j1 + t;
            int h, q;
            row_of(tr, h, q);
            const float slope = p.alibi ? static_cast<float>(alibi_slope<T>(h, p)) : 0.0f;
            float& sv = Sw[rr * SWP + t];
            sv = score_of<T>(sv * scale, r0 + tr < g.nrows && j < g.jend, q, j, g.qbeg + q, slope, p, g);
          }
          from_scratch(sc[mt]);
        }
      }
      // Online softmax per row in base 2 (the quad's 4 lanes hold a row's KN scores; m and c2 above).
      // A row with nothing visible yet keeps m = -inf and subtracts 0, so that its -inf scores give 0.
      // The max is fmaxf (one FMNMX; a compare and select was two). m moves only when the step's max
      // exceeds it by more than 2^8 (FlashAttention-4's conditional rescaling): the probabilities then
      // stay below 256 (f16 holds them at full precision, l and O in f32), l and O are relative to the
      // same m, and O's rescale (128 FMULs a lane at 32 rows a warp) and the alpha exps are skipped in
      // most steps instead of about half.
      constexpr float kRescale = 8.0f;
      float alpha[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          float mx = -INFINITY;
#pragma unroll
          for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(sc[mt][n][2 * x], sc[mt][n][2 * x + 1]));
          mx = fmaxf(mx, KF_SHFL_XOR(mx, 1));
          mx = fmaxf(mx, KF_SHFL_XOR(mx, 2));
          const bool up = mx * c2 > m[mt][x] + kRescale;  // never while both are -inf
          const float mnew = up ? mx * c2 : m[mt][x];
          alpha[mt][x] = up ? ex2_ftz(m[mt][x] - mnew) : 1.0f;
          const float msub = mnew == -INFINITY ? 0.0f : mnew;
          float lt = 0.0f;
#pragma unroll
          for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              float& sv = sc[mt][n][2 * x + c];
              sv = ex2_ftz(fmaf(sv, c2, -msub));
              lt += sv;
            }
          l[mt][x] = l[mt][x] * alpha[mt][x] + lt;
          m[mt][x] = mnew;
        }
      if (p.dropout) {  // kept probabilities scaled, dropped ones zero (l counts them all)
        if constexpr (MT > 1) {  // from the keep bits
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int x = 0; x < 2; ++x) {
              const unsigned w = Kw[16 * mt + gq + 8 * x] >> (2 * tq);  // bit n 8 + c: key j1 + n 8 + 2 tq + c
#pragma unroll
              for (int n = 0; n < NT; ++n)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                  float& pr = sc[mt][n][2 * x + c];
                  pr = (w >> (n * 8 + c)) & 1u ? pr * keep : 0.0f;
                }
            }
        } else {  // through the scratch
          to_scratch(sc[0]);
#pragma unroll 1
          for (int e = lane; e < 16 * KN; e += 32) {
            const int rr = e / KN, t = e % KN, tr = wr + rr;
            float& pr = Sw[rr * SWP + t];
            int h, q;
            const int64_t ri = row_of(tr, h, q);
            pr = pr > 0.0f && attn_keep(ri, int64_t(g.kbeg) + j1 + t, p) ? pr * keep : 0.0f;
          }
          from_scratch(sc[0]);
        }
      }
      // O rescaled by the rows' factors, skipped where every factor of the warp is 1 (no row's max grew:
      // most later steps of long rows), the same bits (a product by 1) without its 64 FMULs a lane.
      bool one = true;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) one = one && alpha[mt][0] == 1.0f && alpha[mt][1] == 1.0f;
      if (!__all_sync(0xffffffffu, one)) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int n = 0; n < ND; ++n)
            o[mt][n][0] *= alpha[mt][0], o[mt][n][1] *= alpha[mt][0], o[mt][n][2] *= alpha[mt][1], o[mt][n][3] *= alpha[mt][1];
      }
      // O += P V: P's A fragments from the score registers, V's B fragments by ldmatrix.trans (each
      // serves the MT row tiles).
#pragma unroll
      for (int kk = 0; kk < KN / 16; ++kk) {
        unsigned a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          a[mt][0] = Cv::pack2(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
          a[mt][1] = Cv::pack2(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
          a[mt][2] = Cv::pack2(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
          a[mt][3] = Cv::pack2(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int n = 0; n < ND; n += 2) {
          unsigned b[4];
          ldsm_x4_trans(b, vt_a + 2 * (kk * 16 * LD + n * 8));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma16816<BF>(o[mt][n], a[mt], b[0], b[1]);
            mma16816<BF>(o[mt][n + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();  // K and V of this buffer are free for the tile after next
    j0 = jn;
  }

  // The rows' sums over their quads, then partials (splits), or sink, normalization, o and lse.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      l[mt][x] += KF_SHFL_XOR(l[mt][x], 1);
      l[mt][x] += KF_SHFL_XOR(l[mt][x], 2);
      if (r0 + wr + 16 * mt + gq + 8 * x >= g.nrows) continue;
      int hx, qx;
      const int64_t rowidx = row_of(wr + 16 * mt + gq + 8 * x, hx, qx);
      finish_quad_row<T, Cv, ND>(p, rowidx, hx, split, tq, m[mt][x], l[mt][x],
                                 [&](int n, int c) { return o[mt][n][2 * x + c]; });
    }
#endif
}

template <class T, int D, int RW>
int launch_mma_d(const AttnParams& p, uint32_t qtiles, gpuStream_t s) {
  const dim3 grid(qtiles, static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.nseq * p.nsplit));
  constexpr int64_t bytes = mma_bytes<D, RW>();
  const gpuError_t e = gpuFuncSetAttribute(reinterpret_cast<const void*>(&attn_mma<T, D, RW>),
                                           gpuFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != gpuSuccess) return static_cast<int>(e);
  attn_mma<T, D, RW><<<grid, 128, static_cast<size_t>(bytes), s>>>(p);
  return static_cast<int>(gpuGetLastError());
}

// bq: the block's query rows, 64 (16 a warp) or 128 (32 a warp).
template <class T>
int launch_mma(const AttnParams& p, int bq, uint32_t qtiles, gpuStream_t s) {
  if (bq == 128) {
    if (p.D == 64) return launch_mma_d<T, 64, 32>(p, qtiles, s);
    if (p.D == 128) return launch_mma_d<T, 128, 32>(p, qtiles, s);
    return -1;
  }
  if (bq != 64) return -1;
  if (p.D == 64) return launch_mma_d<T, 64, 16>(p, qtiles, s);
  if (p.D == 128) return launch_mma_d<T, 128, 16>(p, qtiles, s);
  return -1;
}

template <class T, int BKV, bool REGS>
int launch_wmma_bk(const AttnParams& p, uint32_t qtiles, gpuStream_t s) {
  const dim3 grid(qtiles, static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.nseq * p.nsplit));
  const int64_t bytes = wmma_bytes(BKV, p.D);
  const gpuError_t e = gpuFuncSetAttribute(reinterpret_cast<const void*>(&attn_wmma<T, BKV, REGS>),
                                           gpuFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != gpuSuccess) return static_cast<int>(e);
  attn_wmma<T, BKV, REGS><<<grid, 128, static_cast<size_t>(bytes), s>>>(p);
  return static_cast<int>(gpuGetLastError());
}

template <class T>
int launch_wmma(const AttnParams& p, int bk, bool regs, uint32_t qtiles, gpuStream_t s) {
  if (regs) return bk == 64 ? launch_wmma_bk<T, 64, true>(p, qtiles, s) : launch_wmma_bk<T, 32, true>(p, qtiles, s);
  return bk == 64 ? launch_wmma_bk<T, 64, false>(p, qtiles, s) : launch_wmma_bk<T, 32, false>(p, qtiles, s);
}
#endif

}  // namespace

bool attn_wmma_built() {
#if defined(KF_HIP)
  return false;
#else
  return true;
#endif
}

int64_t attn_mma_shared_bytes(int D, int rows_per_warp) {
#if defined(KF_HIP)
  (void)D, (void)rows_per_warp;
  return 0;
#else
  if (rows_per_warp == 32) return D == 64 ? mma_bytes<64, 32>() : D == 128 ? mma_bytes<128, 32>() : 0;
  if (rows_per_warp != 16) return 0;
  return D == 64 ? mma_bytes<64, 16>() : D == 128 ? mma_bytes<128, 16>() : 0;
#endif
}

int64_t attn_wmma_shared_bytes(int bk, int D) {
#if defined(KF_HIP)
  (void)bk, (void)D;
  return 0;
#else
  return wmma_bytes(bk, D);
#endif
}

int launch_attention_mma(AttnKernel kern, Dt dt, const AttnParams& p, int bq, int bk, uint32_t qtiles, void* stream) {
#if defined(KF_HIP)
  (void)kern, (void)dt, (void)p, (void)bq, (void)bk, (void)qtiles, (void)stream;
  return -1;
#else
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  if (kern == AttnKernel::Mma) {
    if (dt == Dt::f16) return launch_mma<F16>(p, bq, qtiles, s);
    if (dt == Dt::bf16) return launch_mma<BF16>(p, bq, qtiles, s);
    return -1;
  }
  const bool regs = kern == AttnKernel::WmmaRegs;
  if (dt == Dt::f16) return launch_wmma<F16>(p, bk, regs, qtiles, s);
  if (dt == Dt::bf16) return launch_wmma<BF16>(p, bk, regs, qtiles, s);
  return -1;
#endif
}

}  // namespace kf::hal::cuda
