// The attention forward on Hopper's warpgroup matrix instructions (AttnKernel::Wgmma, flash-wgmma; sm_90a:
// H100 / H200), with exactly the semantics of attention.cu's kernels and src/ops/attention.cpp.
//
// Why a kernel of its own: mma.sync, which attn_mma (FlashAttention-2's form) is built on, is issued by
// each warp for each 16 x 8 tile and reaches about half of an H100's tensor-core rate; wgmma.mma_async
// multiplies a 64-row warpgroup tile by a whole shared-memory operand in one asynchronous instruction.
// A prototype of this loop measured 340-434 TFLOP/s on an H100 where attn_mma and PyTorch's
// FlashAttention-2 backend ran 270-340.
//
// Shape: blocks of 256 threads, two warpgroups of 64 query rows each (BQ = 128 rows a block: the GQA row
// grouping of the other kernels, row r of the tile = query qb + (rb + r) / G of head hk G + (rb + r) % G);
// key tiles of BN = 128 keys (64 at D = 256), double-buffered in shared memory by cp.async (zero-filled
// past the visible keys; every thread loads, one block barrier a tile). Per tile and warpgroup:
//   S = Q K^T: D / 16 wgmma.m64nBNk16, Q and K both read from shared memory (K-major descriptors);
//   the scores in the accumulator registers (BN / 2 a thread: rows 16 w + g and + 8 of the warpgroup's
//   warp w, keys 8 j + 2 t + (0, 1)); masks only on tiles a mask reaches; the online softmax in base 2
//   with conditional rescaling as attn_mma (m moves only when a tile's max exceeds it by 2^8);
//   O += P V: BN / 16 wgmma.m64nDk16 with P's A fragments straight from the score registers (the
//   accumulator layout of two n8 column groups is the A layout of one k16 step) and V read from shared
//   memory as an MN-major (transposed) operand: V stays [keys][D] as loaded.
// Head dimensions: built for 64, 128 and 256; any multiple of 8 up to 256 runs on the next of them,
// zero-padded.
// Shared memory: Q, K and V in 128-byte swizzled atoms ([D / 64][rows][64 elements], the 16-byte unit u of
// row r stored at u ^ (r % 8)), so that wgmma reads them without bank conflicts; D = 128: Q 32 KiB, two
// stages of K and V 128 KiB (one block a multiprocessor, 8 warps); D = 256: 193 KiB. Registers (ptxas,
// sm_90a, nvcc 13.0; no spills): 182-184 at D = 64, 216 at D = 128, 232 at D = 256; the DROP instances
// 245-247 at D = 64, 255 with 96 bytes of spill at D = 128.
// Dropout (DROP, an instance of its own so that the other cases keep their registers): the tile's keep bits
// are drawn while S's wgmma runs (they depend on the indices only), one Philox block per 4 keys: the two
// lanes holding a block's keys (lane, lane ^ 1: keys 8 j + 2 t .. + 1 with t = lane % 4) each draw one of
// two neighbouring blocks and trade them; a row whose keys do not start a block (SkT % 4 != 0, a split or
// packed sequence's start) draws per key. Kept probabilities are scaled by 1 / (1 - p), dropped ones zero
// (l counts them all), as attn_mma.
// Dropout up to D = 128 (at 256 ptxas fails to allocate the draw beside O's 128 accumulators a thread).
// Not taken here (attn_mma or the wmma kernels serve them): soft-capping, ALiBi, block masks, RoPE, and
// dropout at D > 128.
// The same bits every run (fixed orders throughout).
#include <type_traits>

#include "hal/cuda/attention_common.cuh"

#if !defined(KF_HIP) && defined(KF_CUDA_WGMMA)
#include "hal/cuda/mma_ptx.cuh"
#include "hal/cuda/wgmma_ptx.cuh"
#endif

namespace kf::hal::cuda {
namespace {
// Compiled only where the build has sm_90a code (KF_CUDA_WGMMA, cmake/Cuda.cmake); elsewhere (HIP, other
// architecture lists, the CUDA emulator) this file is the two functions at its end, saying "none".
#if !defined(KF_HIP) && defined(KF_CUDA_WGMMA)
constexpr int kWgBq = 128;
// Keys a tile: 128, or 64 at D = 256 (O's 128 accumulators a thread leave room for 32 scores, not 64;
// and two stages of 128-key tiles would not fit shared memory).
__host__ __device__ constexpr int wg_bn(int D) { return D > 128 ? 64 : 128; }

template <int D>
__host__ __device__ constexpr int wg_smem_bytes() {
  return (kWgBq + 4 * wg_bn(D)) * D * 2 + 1024;  // + the alignment of the atoms to 1024 bytes
}

// D: the head dimension the kernel is built for, 64, 128 or 256; p.D may be any multiple of 8 up to D
// (48, 80, 96, ...): the staged rows are zero-filled past p.D (zero terms in Q K^T, zero columns of O,
// never stored) and the k steps of Q K^T past p.D skipped.
template <class T, int D, bool DROP>
__global__ void __launch_bounds__(256, 1) attn_wgmma(const AttnParams p) {
#if defined(KF_HAS_WGMMA)
  static_assert(D == 64 || D == 128 || D == 256, "head dimensions 64, 128 and 256");
  static_assert(!DROP || D <= 128, "dropout up to D 128 (at 256 ptxas fails to allocate the draw beside O's accumulators)");
  constexpr bool BF = std::is_same_v<T, BF16>;
  using Cv = std::conditional_t<BF, Bf16Conv, HalfConv>;
  // NS, ND: the n8 column groups of S and of O; NPK: 16-byte units of a staged row.
  constexpr int BQ = kWgBq, BN = wg_bn(D), NS = BN / 8, NPK = D / 8, ND = D / 8;
  constexpr unsigned QB = BQ * D * 2, TB = BN * D * 2;             // bytes of Q, of one K or V tile
  extern __shared__ unsigned char wg_smem[];
  const unsigned base = (smem_u32(wg_smem) + 1023u) & ~1023u;
  const unsigned qs = base, ks = qs + QB, vs = ks + 2 * TB;
  const int tid = threadIdx.x, wg = tid / 128, w = (tid / 32) % 4, lane = tid % 32, gq = lane / 4, tq = lane % 4;
  const int seq = blockIdx.z / p.nsplit, split = blockIdx.z % p.nsplit;
  const int hk = blockIdx.y;
  const int64_t r0 = int64_t(blockIdx.x) * BQ;
  Geo g;
  if (!block_geometry(p, seq, split, r0, BQ, g)) return;  // uniform over the block
  const int64_t kvbase = (int64_t(g.b) * p.Hkv + hk) * p.SkT + g.kbeg;
  const int qb = static_cast<int>(r0 / p.G), rb = static_cast<int>(r0 - int64_t(qb) * p.G);
  const auto row_of = [&](int tr, int& h, int& q) {
    const int rr = rb + tr;
    q = qb + rr / p.G;
    h = hk * p.G + rr % p.G;
    return (int64_t(g.b) * p.Hq + h) * p.SqT + g.qbeg + q;
  };
  // The 16-byte unit u of row r of a swizzled operand of `rows` rows.
  const auto sw = [](int r, int u, int rows) {
    return unsigned((u / 8) * rows * 128 + r * 128 + (((u % 8) ^ (r % 8)) << 4));
  };
  const int npk = p.D / 8;  // the rows' 16-byte units in memory (<= NPK)
  for (int e = tid; e < BQ * NPK; e += 256) {
    const int t = e / NPK, u = e % NPK;
    const bool ok = r0 + t < g.nrows && u < npk;
    int h, q;
    const int64_t qrow = ok ? row_of(t, h, q) : 0;
    cp_async16(qs + sw(t, u, BQ), static_cast<const uint4*>(p.q) + (ok ? qrow * npk + u : 0), ok ? 16 : 0);
  }
  // This thread's units of a K / V tile: rows t0 + i KR, unit u0 (the same swizzle row r % 8 for every i).
  constexpr int KR = 256 / NPK;
  const int t0 = tid / NPK, u0 = tid % NPK;
  const unsigned so = sw(t0, u0, BN);
  const auto load_kv = [&](int j0, int buf) {
    const int64_t at0 = (kvbase + j0) * npk + (u0 < npk ? u0 : 0);  // row j0 (a key: j0 < jend)
    const uint4 *kp = static_cast<const uint4*>(p.k) + at0, *vp = static_cast<const uint4*>(p.v) + at0;
    const int left = u0 < npk ? g.jend - j0 - t0 : 0;  // rows i KR < left are keys; the rest zero-filled
#pragma unroll
    for (int i = 0; i < BN / KR; ++i) {
      const bool ok = i * KR < left;
      const int at = ok ? (t0 + i * KR) * npk : 0;
      cp_async16(ks + buf * TB + so + i * KR * 128, kp + at, ok ? 16 : 0);
      cp_async16(vs + buf * TB + so + i * KR * 128, vp + at, ok ? 16 : 0);
    }
  };
  if (g.jbeg < g.jend) load_kv(g.jbeg, 0);
  cp_async_commit();

  // This thread's rows (the warpgroup's rows 16 w + gq + 8 x) and the warpgroup's first and last queries.
  const int wr = 64 * wg + 16 * w;
  int qi[2];
#pragma unroll
  for (int x = 0; x < 2; ++x) qi[x] = qb + (rb + wr + gq + 8 * x) / p.G;
  // DROP: the generator's index of key 0 of each of this thread's rows (row index SkT + kbeg), and the row
  // index (-1 past the block's rows) for the words drawn ahead (p.keep_ready).
  uint64_t erow[2] = {0, 0};
  int64_t krow[2] = {-1, -1};
  if constexpr (DROP) {
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      int hx, qx;
      const int64_t row = row_of(wr + gq + 8 * x, hx, qx);
      erow[x] = static_cast<uint64_t>(row) * static_cast<uint64_t>(p.SkT) + static_cast<uint64_t>(g.kbeg);
      if (r0 + wr + gq + 8 * x < g.nrows) krow[x] = row;
    }
  }
  const int g_n = static_cast<int>(m_min(int64_t(64), g.nrows - r0 - 64 * wg));  // rows of the warpgroup
  const bool g_any = g_n > 0;
  const int g_qlo = qb + (rb + 64 * wg) / p.G, g_qhi = qb + (rb + 64 * wg + m_max(g_n, 1) - 1) / p.G;

  float o[D / 2], s[BN / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) s[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  // Base 2 on unscaled scores, as attn_mma: a score s weighs 2^(s c2 - m); a negative scale negates s.
  constexpr float kLog2e = 1.44269504088896341f;
  const float scale = static_cast<float>(p.scale);
  const bool neg = scale < 0.0f;
  const float c2 = fmaxf(fabsf(scale) * kLog2e, 1.17549435e-38f);

  for (int j0 = g.jbeg, buf = 0; j0 < g.jend; j0 += BN, buf ^= 1) {
    cp_async_wait<0>();
    fence_proxy_async();  // the tile's cp.async writes before wgmma's reads (the async proxy)
    __syncthreads();      // ... of every thread; and both warpgroups are done with the other buffer
    if (j0 + BN < g.jend) load_kv(j0 + BN, buf ^ 1);
    cp_async_commit();
    // The warpgroup skips a tile none of its rows sees (uniform over the warpgroup).
    if (!g_any || (p.causal && int64_t(j0) > int64_t(g_qhi) + g.off) ||
        (p.window > 0 && int64_t(j0) + BN - 1 <= int64_t(g_qlo) + g.off - p.window))
      continue;
    // S = Q K^T over D / 16 k steps of 16 (the k step's 32 bytes inside the 128-byte atom row); where p.D
    // < D, the k steps past p.D are skipped in a separate copy of the loop: a branch between the wgmma of
    // one product makes ptxas wait for each before the next (warpgroup.arrive), which the full loop avoids.
    // Each k step's descriptors as the operand's plus the step's offset (wgmma_desc_at: one 64-bit add).
    const uint64_t da0 = wgmma_desc(qs + 64 * wg * 128, 16, 1024), db0 = wgmma_desc(ks + buf * TB, 16, 1024);
    const auto qk = [&](auto padded) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        if constexpr (decltype(padded)::value)
          if (kk > 0 && kk * 16 >= p.D) break;
        const uint64_t da = wgmma_desc_at(da0, (kk / 4) * BQ * 128 + (kk % 4) * 32);
        const uint64_t db = wgmma_desc_at(db0, (kk / 4) * BN * 128 + (kk % 4) * 32);
        if constexpr (BN == 128) {
          if constexpr (BF) wgmma_ss_n128_bf16(s, da, db, kk > 0);
          else wgmma_ss_n128_f16(s, da, db, kk > 0);
        } else {
          if constexpr (BF) wgmma_ss_n64_bf16(s, da, db, kk > 0);
          else wgmma_ss_n64_f16(s, da, db, kk > 0);
        }
      }
    };
    if (p.D == D) qk(std::false_type());
    else qk(std::true_type());
    wgmma_commit();
    // DROP: the keep bits of this thread's scores (bit 2 j + c of kb[x]: row x, key j0 + 8 j + 2 t + c), drawn
    // while S's wgmma runs (they depend on the indices only).
    unsigned kb[2] = {0u, 0u};
    if constexpr (DROP) {
      if (p.keep_ready) {  // drawn ahead: of each 32-key word q, bits 8 j' + 2 t + c as bits 8 q + 2 j' + c
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          unsigned bits = 0;
          if (krow[x] >= 0) {
#pragma unroll
            for (int q = 0; q < BN / 32; ++q) {
              const unsigned m = (keep_load(p, krow[x], j0 + 32 * q) >> (2 * tq)) & 0x03030303u;
              bits |= ((m | (m >> 6) | (m >> 12) | (m >> 18)) & 0xFFu) << (8 * q);
            }
          }
          kb[x] = bits;
        }
      } else {
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          const uint64_t e0 = erow[x] + static_cast<uint64_t>(j0);
          unsigned bits = 0;
#pragma unroll 1
          for (int j = 0; j < NS; j += 2) {
            const unsigned mine = keep_bits4((e0 + 8 * (j + (tq & 1)) + 4 * (tq >> 1)) >> 2, p);
            const unsigned other = KF_SHFL_XOR(mine, 1);
            const unsigned b0 = (tq & 1) ? other : mine, b1 = (tq & 1) ? mine : other;  // blocks of j, j + 1
            bits |= ((b0 >> (2 * (tq & 1))) & 3u) << (2 * j);
            bits |= ((b1 >> (2 * (tq & 1))) & 3u) << (2 * j + 2);
          }
          if ((e0 & 3u) != 0u) {  // the row's keys do not start a block: each key its own
            bits = 0;
#pragma unroll 1
            for (int j = 0; j < NS; ++j)
              for (int c = 0; c < 2; ++c) {
                const uint64_t i = e0 + 8 * j + 2 * tq + c;
                bits |= ((keep_bits4(i >> 2, p) >> (i & 3u)) & 1u) << (2 * j + c);
              }
          }
          kb[x] = bits;
        }
      }
    }
    wgmma_wait<0>();
    if (neg) {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) s[i] = -s[i];
    }
    // Masks where the tile reaches the end of the keys, the causal diagonal or the window's start.
    const bool full = j0 + BN <= g.jend && (!p.causal || int64_t(j0) + BN - 1 <= int64_t(g_qlo) + g.off) &&
                      (p.window <= 0 || int64_t(j0) > int64_t(g_qhi) + g.off - p.window);
    if (!full) {
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = j0 + 8 * j + 2 * tq + (i & 1), q = qi[i / 2];
          const bool vis = key < g.jend && (!p.causal || key <= q + g.off) &&
                           (p.window <= 0 || int64_t(q) + g.off - key < p.window);
          if (!vis) s[4 * j + i] = -INFINITY;
        }
    }
    // The online softmax per row (a row's 128 scores on the 4 lanes of a quad).
    constexpr float kRescale = 8.0f;
    float alpha[2];
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < NS; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * x], s[4 * j + 2 * x + 1]));
      mx = fmaxf(mx, KF_SHFL_XOR(mx, 1));
      mx = fmaxf(mx, KF_SHFL_XOR(mx, 2));
      const bool up = mx * c2 > m[x] + kRescale;  // never while both are -inf
      const float mnew = up ? mx * c2 : m[x];
      alpha[x] = up ? ex2_ftz(m[x] - mnew) : 1.0f;
      const float msub = mnew == -INFINITY ? 0.0f : mnew;
      float lt = 0.0f;
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& sv = s[4 * j + 2 * x + c];
          sv = ex2_ftz(fmaf(sv, c2, -msub));
          lt += sv;
        }
      l[x] = l[x] * alpha[x] + lt;
      m[x] = mnew;
      if constexpr (DROP) {  // kept probabilities scaled, dropped ones zero (l counts them all)
        const float keep = static_cast<float>(p.keep_scale);
#pragma unroll
        for (int j = 0; j < NS; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float& sv = s[4 * j + 2 * x + c];
            sv = (kb[x] >> (2 * j + c)) & 1u ? sv * keep : 0.0f;
          }
      }
    }
    if (!__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f)) {
#pragma unroll
      for (int j = 0; j < ND; ++j) o[4 * j] *= alpha[0], o[4 * j + 1] *= alpha[0], o[4 * j + 2] *= alpha[1], o[4 * j + 3] *= alpha[1];
    }
    // O += P V: every A fragment converted before the first wgmma (no register an in-flight wgmma reads
    // is written; ptxas would otherwise serialize them), V as an MN-major operand: the D / 64 atoms of a
    // key row lie BN 128 bytes apart (leading byte offset), 8 key rows 1024 (stride byte offset).
    unsigned a[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      a[kk][0] = Cv::pack2(s[8 * kk], s[8 * kk + 1]);
      a[kk][1] = Cv::pack2(s[8 * kk + 2], s[8 * kk + 3]);
      a[kk][2] = Cv::pack2(s[8 * kk + 4], s[8 * kk + 5]);
      a[kk][3] = Cv::pack2(s[8 * kk + 6], s[8 * kk + 7]);
    }
    const uint64_t dv0 = wgmma_desc(vs + buf * TB, BN * 128, 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint64_t db = wgmma_desc_at(dv0, kk * 16 * 128);
      if constexpr (D == 256) {
        if constexpr (BF) wgmma_rs_n256_bf16(o, a[kk], db, 1);
        else wgmma_rs_n256_f16(o, a[kk], db, 1);
      } else if constexpr (D == 128) {
        if constexpr (BF) wgmma_rs_n128_bf16(o, a[kk], db, 1);
        else wgmma_rs_n128_f16(o, a[kk], db, 1);
      } else {
        if constexpr (BF) wgmma_rs_n64_bf16(o, a[kk], db, 1);
        else wgmma_rs_n64_f16(o, a[kk], db, 1);
      }
    }
    wgmma_commit();
    wgmma_wait<0>();  // before the next tile's barrier hands this buffer to the loads
  }

  // The rows' sums over their quads, then partials (splits), or sink, normalization, o and lse.
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    l[x] += KF_SHFL_XOR(l[x], 1);
    l[x] += KF_SHFL_XOR(l[x], 2);
    if (r0 + wr + gq + 8 * x >= g.nrows) continue;
    int hx, qx;
    const int64_t rowidx = row_of(wr + gq + 8 * x, hx, qx);
    finish_quad_row<T, Cv, ND>(p, rowidx, hx, split, tq, m[x], l[x], [&](int n, int c) { return o[4 * n + 2 * x + c]; });
  }
#else
  // Compiled for another architecture than sm_90a (the PTX of other GPUs): never launched there
  // (kernels.cpp checks the device), and loud if it were.
  __trap();
#endif
}

template <class T, int D, bool DROP>
int launch_wgmma_dd(const AttnParams& p, uint32_t qtiles, gpuStream_t s) {
  const dim3 grid(qtiles, static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.nseq * p.nsplit));
  constexpr int bytes = wg_smem_bytes<D>();
  const gpuError_t e = gpuFuncSetAttribute(reinterpret_cast<const void*>(&attn_wgmma<T, D, DROP>),
                                           gpuFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != gpuSuccess) return static_cast<int>(e);
  attn_wgmma<T, D, DROP><<<grid, 256, static_cast<size_t>(bytes), s>>>(p);
  return static_cast<int>(gpuGetLastError());
}
template <class T, int D>
int launch_wgmma_d(const AttnParams& p, uint32_t qtiles, gpuStream_t s) {
  if constexpr (D <= 128) {
    if (p.dropout) return launch_wgmma_dd<T, D, true>(p, qtiles, s);
  } else if (p.dropout) {
    return -1;  // (kernels.cpp does not choose it)
  }
  return launch_wgmma_dd<T, D, false>(p, qtiles, s);
}
#endif
}  // namespace

int64_t attn_wgmma_shared_bytes(int D) {
#if defined(KF_HIP) || !defined(KF_CUDA_WGMMA)
  (void)D;
  return 0;
#else
  if (D <= 0 || D % 8 != 0 || D > 256) return 0;
  return D <= 64 ? wg_smem_bytes<64>() : D <= 128 ? wg_smem_bytes<128>() : wg_smem_bytes<256>();
#endif
}

int launch_attention_wgmma(Dt dt, const AttnParams& p, uint32_t qtiles, void* stream) {
#if defined(KF_HIP) || !defined(KF_CUDA_WGMMA)
  (void)dt, (void)p, (void)qtiles, (void)stream;
  return -1;
#else
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  if (p.D <= 0 || p.D % 8 != 0 || p.D > 256) return -1;
  if (dt == Dt::f16)
    return p.D <= 64 ? launch_wgmma_d<F16, 64>(p, qtiles, s) : p.D <= 128 ? launch_wgmma_d<F16, 128>(p, qtiles, s)
                                                                       : launch_wgmma_d<F16, 256>(p, qtiles, s);
  if (dt == Dt::bf16)
    return p.D <= 64 ? launch_wgmma_d<BF16, 64>(p, qtiles, s) : p.D <= 128 ? launch_wgmma_d<BF16, 128>(p, qtiles, s)
                                                                        : launch_wgmma_d<BF16, 256>(p, qtiles, s);
  return -1;
#endif
}

}  // namespace kf::hal::cuda
