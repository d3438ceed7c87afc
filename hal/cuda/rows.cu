// Row kernels (docs/ops.md section 2) in CUDA/HIP: the counterpart of shaders/rows.comp. p.tpr threads
// share a row (a warp for short rows, up to the whole block for long ones); a block of BLOCK threads
// holds BLOCK / tpr rows and strides over the rows. Rows whose length is a multiple of the pack move as
// 16-byte packs ("units" of VW elements), others element by element (units of 1).
//
// Softmax keeps up to CACHE values of its row per thread in registers, so a row that fits is read from
// memory once. Each thread folds its values into a running (max, sum of exponentials) pair; the part of
// a long row beyond the cache is streamed through the same online update and read again for the output.
// One reduction of pairs per row, in a fixed order (warp shuffles in butterfly order, whose result is the
// same in every lane, then the warps of the row in index order through shared memory), so the same row
// gives the same bits on every run. Float dtypes compute in float, in base 2 as rows.comp
// (exp(s x - max) = exp2(fma(x, s log2 e, -M))); f64 computes in double with exp and log.
#include <math.h>

#include <algorithm>

#include "hal/cuda/common.cuh"

namespace kf::hal::cuda {
namespace {

// ---- A unit of a row: a 16-byte pack (W = VW) or one element (W = 1).
// Units are indexed from the row's start in 32 bits (the host keeps a row under 2^31 units).
template <class T, int W>
KF_DEV void load_unit(const void* q, int u, typename T::C (&x)[W]) {
  if constexpr (W == T::VW) T::unpack(load_pack(q, u), x);
  else x[0] = T::load(q, u);
}
template <class T, int W>
KF_DEV void store_unit(void* q, int u, const typename T::C (&x)[W]) {
  if constexpr (W == T::VW) store_pack(q, u, T::pack(x));
  else T::store(q, u, x[0]);
}

// ---- Reductions across the tpr threads of a row (tpr a power of two, at least KF_WARP).
template <class A>
KF_DEV A warp_sum(A v) {
#pragma unroll
  for (int m = KF_WARP / 2; m > 0; m >>= 1) v += KF_SHFL_XOR(v, m);
  return v;
}

template <class A>
KF_DEV A row_sum(A v, int tpr, int slot, A* red) {
  v = warp_sum(v);
  if (tpr <= KF_WARP) return v;
  const int wpr = tpr / KF_WARP, warp = threadIdx.x / KF_WARP;
  if (threadIdx.x % KF_WARP == 0) red[warp] = v;
  __syncthreads();
  A r = red[slot * wpr];
  for (int k = 1; k < wpr; ++k) r += red[slot * wpr + k];
  __syncthreads();
  return r;
}

// Softmax statistics in the units of the compute type: float works in base 2 (m is a max of x s log2 e),
// double in base e (m is a max of s x).
template <class C> struct Stats;
template <> struct Stats<float> {
  float s, k;  // scale, and scale * log2(e)
  KF_DEV explicit Stats(const RowsParams& p) : s(p.scale), k(p.scale * 1.4426950408889634f) {}
  KF_DEV float logit(float x) const { return x * k; }
  KF_DEV float exp_rel(float x, float m) const { return exp2f(fmaf(x, k, -m)); }  // exp(s x) / exp(m)
  static KF_DEV float ex(float d) { return exp2f(d); }
  // log_softmax's output s x - lse, as (x k - M - log2 S) ln 2: fmaf leaves x k - M exact to one rounding,
  // where s x - lse rounded both terms at the logits' magnitude (2e-3 absolute at +-30000; docs/ops.md,
  // special values). `ls` is log_shift(S).
  static KF_DEV float log_shift(float S) { return log2f(S); }
  KF_DEV float log_out(float x, float M, float ls) const { return (fmaf(x, k, -M) - ls) * 0.6931471805599453f; }
};
template <> struct Stats<double> {
  double s;
  KF_DEV explicit Stats(const RowsParams& p) : s(p.scale_d) {}
  KF_DEV double logit(double x) const { return s * x; }
  KF_DEV double exp_rel(double x, double m) const { return exp(s * x - m); }
  static KF_DEV double ex(double d) { return exp(d); }
  static KF_DEV double log_shift(double S) { return log(S); }
  KF_DEV double log_out(double x, double M, double ls) const { return (s * x - M) - ls; }
};

// Combines two (max, sum) pairs. Commutative bit for bit, so every lane of a butterfly gets the same.
// A pair whose max is -inf saw only -inf and NaN: its sum (relative to 0) is 0 or NaN, and stays so.
template <class C>
KF_DEV void combine(C& m, C& s, C m2, C s2) {
  const C M = fmax(m, m2);
  if (M == -C(INFINITY)) {
    s = s + s2;
    return;
  }
  s = s * Stats<C>::ex(m - M) + s2 * Stats<C>::ex(m2 - M);
  m = M;
}

template <class C>
KF_DEV void row_combine(C& m, C& s, int tpr, int slot, C* red_m, C* red_s) {
#pragma unroll
  for (int k = KF_WARP / 2; k > 0; k >>= 1) combine(m, s, KF_SHFL_XOR(m, k), KF_SHFL_XOR(s, k));
  if (tpr <= KF_WARP) return;
  const int wpr = tpr / KF_WARP, warp = threadIdx.x / KF_WARP;
  if (threadIdx.x % KF_WARP == 0) red_m[warp] = m, red_s[warp] = s;
  __syncthreads();
  m = red_m[slot * wpr], s = red_s[slot * wpr];
  for (int k = 1; k < wpr; ++k) combine(m, s, red_m[slot * wpr + k], red_s[slot * wpr + k]);
  __syncthreads();
}

constexpr int kUnroll = 4;  // units in flight per thread in the streaming loops

// sum_squared, mean_abs: one value per row.
template <RowOp OP, class T, int W>
KF_DEV void reduce_row(const RowsParams& p, int64_t row, bool valid, int lane, int slot, typename T::C* red) {
  using C = typename T::C;
  const int npk = static_cast<int>(p.feat / W), tpr = p.tpr;
  const void* in = static_cast<const char*>(p.in) + row * p.feat * T::ES;
  C acc = C(0);
  if (valid) {
    for (int j0 = lane; j0 < npk; j0 += kUnroll * tpr) {
      C x[kUnroll][W];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = j0 + u * tpr;
        if (j < npk) load_unit<T, W>(in, j, x[u]);
        else
#pragma unroll
          for (int k = 0; k < W; ++k) x[u][k] = C(0);  // zeros add nothing to either sum
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int k = 0; k < W; ++k) acc += OP == RowOp::sum_squared ? x[u][k] * x[u][k] : m_abs(x[u][k]);
    }
  }
  acc = row_sum(acc, p.tpr, slot, red);
  if (OP == RowOp::mean_abs) acc = acc / C(p.feat);
  if (valid && lane == 0) T::store(p.out, row, acc);
}

// softmax, log_softmax. CU units of W values are cached per thread; the rest streams UNROLL units at a time.
// RAW (16-bit packs): the cache holds the raw packs, half the registers of their float values, and the
// output recomputes exp(s x - M) from them (one more exp per value) where float dtypes keep the
// exponentials. (The float cache of 16-bit rows held half the bytes in flight of f32's for the same
// registers: 0.62 of copy on an H100 where f32 reached 1.0.)
template <RowOp OP, class T, int W, int CU, int UNROLL>
KF_DEV void softmax_row(const RowsParams& p, int64_t row, bool valid, int lane, int slot, typename T::C* red_m,
                        typename T::C* red_s) {
  using C = typename T::C;
  constexpr bool RAW = W == T::VW && T::ES < int(sizeof(C));
  const Stats<C> st(p);
  const C NEG_INF = -C(INFINITY);
  const int npk = static_cast<int>(p.feat / W), tpr = p.tpr;
  const void* in = static_cast<const char*>(p.in) + row * p.feat * T::ES;
  void* out = static_cast<char*>(p.out) + row * p.feat * T::ES;
  C xc[RAW ? 1 : CU][W];
  uint4 xr[RAW ? CU : 1];
  C m = NEG_INF, s = C(0);
  if (valid) {
    if constexpr (RAW) {
#pragma unroll
      for (int t = 0; t < CU; ++t) {
        const int j = lane + t * tpr;
        if (j < npk) xr[t] = load_pack(in, j);
      }
#pragma unroll
      for (int t = 0; t < CU; ++t) {
        if (lane + t * tpr < npk) {
          C x[W];
          T::unpack(xr[t], x);
#pragma unroll
          for (int k = 0; k < W; ++k) m = fmax(m, st.logit(x[k]));
        }
      }
    } else {
#pragma unroll
      for (int t = 0; t < CU; ++t) {
        const int j = lane + t * tpr;
        if (j < npk) {
          load_unit<T, W>(in, j, xc[t]);
#pragma unroll
          for (int k = 0; k < W; ++k) m = fmax(m, st.logit(xc[t][k]));
        }
      }
    }
    // The part beyond the cache: online (max, sum).
    for (int j0 = lane + CU * tpr; j0 < npk; j0 += UNROLL * tpr) {
      C x[UNROLL][W];
      C pm = NEG_INF;
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int j = j0 + u * tpr;
        if (j < npk) load_unit<T, W>(in, j, x[u]);
        else
#pragma unroll
          for (int k = 0; k < W; ++k) x[u][k] = NEG_INF;  // adds exp(-inf) = 0
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int k = 0; k < W; ++k) pm = fmax(pm, st.logit(x[u][k]));
      if (pm > m) {
        s = s * Stats<C>::ex(m - pm);  // a sum of NaN stays NaN, of zeros zero
        m = pm;
      }
      const C mr = m == NEG_INF ? C(0) : m;  // values all -inf or NaN so far: NaN must still reach the sum
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int k = 0; k < W; ++k) s += st.exp_rel(x[u][k], mr);
    }
    const C mr = m == NEG_INF ? C(0) : m;
#pragma unroll
    for (int t = 0; t < CU; ++t) {
      if (lane + t * tpr < npk) {
        if constexpr (RAW) {
          C x[W];
          T::unpack(xr[t], x);
#pragma unroll
          for (int k = 0; k < W; ++k) s += st.exp_rel(x[k], mr);
        } else {
#pragma unroll
          for (int k = 0; k < W; ++k) {
            const C e = st.exp_rel(xc[t][k], mr);
            s += e;
            if (OP == RowOp::softmax) xc[t][k] = e;  // kept: the output only scales it
          }
        }
      }
    }
  }
  const C m_own = m;
  row_combine(m, s, p.tpr, slot, red_m, red_s);
  if (!valid) return;
  const C M = m, S = s;

  if (OP == RowOp::softmax) {
    // A row whose values are all -inf (NaN aside, as the reference's max ignores NaN) gives zeros.
    const bool zeros = M == NEG_INF;
    const C inv = C(1) / S;
    // The cached exponentials are relative to this thread's max (0 when it saw no finite value, which
    // keeps -inf at 0 and NaN NaN): rescale them to the row's.
    const C f = Stats<C>::ex(m_own - M) * inv;
#pragma unroll
    for (int t = 0; t < CU; ++t) {
      const int j = lane + t * tpr;
      if (j < npk) {
        C y[W];
        if constexpr (RAW) {
          T::unpack(xr[t], y);
#pragma unroll
          for (int k = 0; k < W; ++k) y[k] = zeros ? C(0) : st.exp_rel(y[k], M) * inv;
        } else {
#pragma unroll
          for (int k = 0; k < W; ++k) y[k] = zeros ? C(0) : xc[t][k] * f;
        }
        store_unit<T, W>(out, j, y);
      }
    }
    for (int j0 = lane + CU * tpr; j0 < npk; j0 += UNROLL * tpr) {
      C x[UNROLL][W];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        if (j0 + u * tpr < npk) load_unit<T, W>(in, j0 + u * tpr, x[u]);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        if (j0 + u * tpr < npk) {
#pragma unroll
          for (int k = 0; k < W; ++k) x[u][k] = zeros ? C(0) : st.exp_rel(x[u][k], M) * inv;
          store_unit<T, W>(out, j0 + u * tpr, x[u]);
        }
      }
    }
  } else {
    const C ls = st.log_shift(S);
#pragma unroll
    for (int t = 0; t < CU; ++t) {
      const int j = lane + t * tpr;
      if (j < npk) {
        C y[W];
        if constexpr (RAW) {
          T::unpack(xr[t], y);
#pragma unroll
          for (int k = 0; k < W; ++k) y[k] = st.log_out(y[k], M, ls);
        } else {
#pragma unroll
          for (int k = 0; k < W; ++k) y[k] = st.log_out(xc[t][k], M, ls);
        }
        store_unit<T, W>(out, j, y);
      }
    }
    for (int j0 = lane + CU * tpr; j0 < npk; j0 += UNROLL * tpr) {
      C x[UNROLL][W];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
        if (j0 + u * tpr < npk) load_unit<T, W>(in, j0 + u * tpr, x[u]);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        if (j0 + u * tpr < npk) {
#pragma unroll
          for (int k = 0; k < W; ++k) x[u][k] = st.log_out(x[u][k], M, ls);
          store_unit<T, W>(out, j0 + u * tpr, x[u]);
        }
      }
    }
  }
}

#if KF_HAVE_CLUSTER_LAUNCH
// softmax, log_softmax of long rows of whole packs on thread-block clusters (kernels.hpp ClusterPlan):
// block `rank` of a cluster of P holds packs [rank part, (rank + 1) part) of the row, thread t packs
// t + u B of those, R in registers and p.smem_packs in shared memory (cp.async), raw (16-bit packs cost
// half their floats), all loaded before any arithmetic. The block's (max, sum) pair (row_combine over
// the block), published to the cluster; every block combines the P pairs in rank order (the same bits
// in every block and every run), then writes its part, exp(s x - M) recomputed from the raw values.
// One dynamic shared array (the host emulation runs a cluster's blocks at once, each with its own).
template <RowOp OP, class T>
__global__ void __launch_bounds__(kClusterBlock, 4) rows_cluster_kernel(const RowsParams p) {
#if KF_CLUSTERS
  using C = typename T::C;
  constexpr int VW = T::VW, R = 4;
  extern __shared__ __align__(16) unsigned char rows_cluster_smem[];
  C* const red_m = reinterpret_cast<C*>(rows_cluster_smem);  // row_combine: a pair per warp
  C* const red_s = red_m + kClusterBlock / KF_WARP;
  C* const pair = red_s + kClusterBlock / KF_WARP;  // this part's (max, sum), read by the cluster
  const int B = blockDim.x, t = threadIdx.x, S = p.smem_packs;
  uint4* const sx = reinterpret_cast<uint4*>(rows_cluster_smem + kClusterHeader);  // slot u B + t
  const int P = p.cluster_p, part = p.cluster_part, rank = static_cast<int>(kf_cluster_rank());
  const int npk = static_cast<int>(p.feat / VW);
  const int j0 = rank * part, n = max(0, min(part, npk - j0));
  const Stats<C> st(p);
  const C NEG_INF = -C(INFINITY);
  for (int64_t row = blockIdx.x / P; row < p.rows; row += gridDim.x / P) {
    const int64_t base = row * npk + j0;  // the part's first pack
    // (The register loads before the copies: after them, ptxas placed them after the copies' wait.)
    uint4 cx[R];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      const int j = t + u * B;
      if (j < n) cx[u] = load_pack(p.in, base + j);
    }
    for (int u = 0; u < S; ++u) {
      const int j = t + (R + u) * B;
      if (j < n) kf_copy16(sx + u * B + t, static_cast<const uint4*>(p.in) + base + j);
    }
    kf_copy_wait();
    const auto each = [&](auto&& f) {
#pragma unroll
      for (int u = 0; u < R; ++u) {
        const int j = t + u * B;
        if (j < n) {
          C x[VW];
          T::unpack(cx[u], x);
          f(j, x);
        }
      }
      for (int u = 0; u < S; ++u) {
        const int j = t + (R + u) * B;
        if (j < n) {
          C x[VW];
          T::unpack(sx[u * B + t], x);
          f(j, x);
        }
      }
    };
    C m = NEG_INF, s = C(0);
    each([&](int, const C(&x)[VW]) {
#pragma unroll
      for (int k = 0; k < VW; ++k) m = fmax(m, st.logit(x[k]));
    });
    const C mr = m == NEG_INF ? C(0) : m;  // (as softmax_row: NaN must still reach the sum)
    each([&](int, const C(&x)[VW]) {
#pragma unroll
      for (int k = 0; k < VW; ++k) s += st.exp_rel(x[k], mr);
    });
    row_combine(m, s, B, 0, red_m, red_s);
    if (t == 0) pair[0] = m, pair[1] = s;
    kf_cluster_sync();
    const C* q = kf_cluster_map(pair, 0);
    C M = q[0], Sum = q[1];
    for (int k = 1; k < P; ++k) {
      q = kf_cluster_map(pair, k);
      combine(M, Sum, q[0], q[1]);
    }
    kf_cluster_arrive();  // (this block is done with the cluster's pairs)
    if (OP == RowOp::softmax) {
      const bool zeros = M == NEG_INF;  // all -inf (NaN aside): zeros
      const C inv = C(1) / Sum;
      each([&](int j, C(&x)[VW]) {
#pragma unroll
        for (int k = 0; k < VW; ++k) x[k] = zeros ? C(0) : st.exp_rel(x[k], M) * inv;
        store_pack(p.out, base + j, T::pack(x));
      });
    } else {
      const C ls = st.log_shift(Sum);
      each([&](int j, C(&x)[VW]) {
#pragma unroll
        for (int k = 0; k < VW; ++k) x[k] = st.log_out(x[k], M, ls);
        store_pack(p.out, base + j, T::pack(x));
      });
    }
    kf_cluster_wait();  // (every block done with this one's pair: it may change, or go)
  }
#else
  (void)p;
#endif
}
#endif

// One kernel per op, dtype, block size, row layout (WIDE: 16-byte packs) and, for 256-thread blocks,
// the registers of its row each thread caches (CACHE_VALUES 32-bit values' worth, 16 or 32: KF_TUNE
// rows_values; as packs, CACHE_VALUES / 4 of them in every dtype, the 16-bit ones raw; element by
// element, CACHE_VALUES values, doubles half as many). The launch bounds hold the registers to what the
// cache needs: 64 a thread for 16 (four blocks a multiprocessor), 128 for 32 (two). 1024-thread blocks,
// for rows longer than a 256-thread block caches, keep kRowCache1024 (8 packs: all of a 65536-value
// 16-bit row, half of an f32 one; element by element 8 values) and stream the rest of the row.
template <RowOp OP, class T, int BLOCK, bool WIDE, int CACHE_VALUES>
__global__ void __launch_bounds__(BLOCK, BLOCK == 1024 ? 1 : (CACHE_VALUES > 16 ? 2 : 4))
    rows_kernel(const RowsParams p) {
  using C = typename T::C;
  constexpr int W = WIDE ? T::VW : 1;
  constexpr int CACHE = CACHE_VALUES / (sizeof(C) == 8 ? 2 : 1);
  // (16-bit rows on 1024-thread blocks: 4 raw packs. 8, the whole 65536-value row, spilled 92 bytes a
  // thread and read at 0.57 of copy on an H100, against 0.65 with the earlier 4-pack float cache.)
  constexpr int CU = WIDE ? (BLOCK == 1024 && T::ES == 2 ? 4 : CACHE_VALUES / 4)
                          : BLOCK == 1024 ? 8 / (sizeof(C) == 8 ? 2 : 1) : CACHE;
  constexpr int UNROLL = BLOCK == 1024 || CACHE_VALUES <= 16 ? 2 : 4;
  __shared__ C red_m[BLOCK / KF_WARP], red_s[BLOCK / KF_WARP];
  const int tpr = p.tpr, rpb = BLOCK / tpr;
  const int lane = threadIdx.x & (tpr - 1), slot = threadIdx.x / tpr;
  const int64_t nblk = (p.rows + rpb - 1) / rpb;
  // The loop bound is the same for the whole block, so every thread reaches every __syncthreads().
  for (int64_t blk = blockIdx.x; blk < nblk; blk += gridDim.x) {
    const int64_t row = blk * rpb + slot;
    const bool valid = row < p.rows;
    if constexpr (OP == RowOp::sum_squared || OP == RowOp::mean_abs) reduce_row<OP, T, W>(p, row, valid, lane, slot, red_s);
    else softmax_row<OP, T, W, CU, UNROLL>(p, row, valid, lane, slot, red_m, red_s);
  }
}

#if KF_HAVE_CLUSTER_LAUNCH
// The cluster kernel for softmax / log_softmax rows of whole packs (32-bit compute types) on devices
// with clusters (compute capability 9.0, code for sm_90): automatically where the rows would take the
// 1024-thread blocks, on any such row with rows_cluster=N. False (nothing launched) where it does not
// apply or the launch was refused: rows_kernel then.
template <RowOp OP, class T>
bool rows_cluster_launch(const RowsParams& p0, int block, gpuStream_t s, ClusterPlan* used) {
  if constexpr (OP == RowOp::sum_squared || OP == RowOp::mean_abs || sizeof(typename T::C) != 4) {
    return false;
  } else {
    if (p0.cc < 90 || p0.cluster == 1 || (p0.cluster == 0 && block != 1024)) return false;
    const int64_t npk = p0.feat / T::VW;
    if (npk > INT32_MAX / 2) return false;
    const ClusterPlan c = cluster_plan(npk, 4, 16, 4096, p0.smem_limit, p0.cluster);
    if (!launch_on_clusters(&rows_cluster_kernel<OP, T>, c, p0, s)) return false;
    if (used) *used = c;
    return true;
  }
}
#endif

template <RowOp OP, class T, bool WIDE>
void launch_layout(const RowsParams& p, int block, int cache, uint32_t blocks, gpuStream_t s) {
  constexpr bool sums = OP == RowOp::sum_squared || OP == RowOp::mean_abs;  // no cache: one kernel
  if (block == 1024) rows_kernel<OP, T, 1024, WIDE, kRowCache1024><<<blocks, 1024, 0, s>>>(p);
  else if (sums || cache <= 16) rows_kernel<OP, T, 256, WIDE, 16><<<blocks, 256, 0, s>>>(p);
  else rows_kernel<OP, T, 256, WIDE, 32><<<blocks, 256, 0, s>>>(p);
}

template <RowOp OP, class T>
int launch_dtype(const RowsParams& p, int block, int cache, uint32_t blocks, gpuStream_t s, ClusterPlan* clusters) {
#if KF_HAVE_CLUSTER_LAUNCH
  if (p.wide && rows_cluster_launch<OP, T>(p, block, s, clusters)) return 0;
#else
  (void)clusters;
#endif
  if (p.wide) launch_layout<OP, T, true>(p, block, cache, blocks, s);
  else launch_layout<OP, T, false>(p, block, cache, blocks, s);
  return static_cast<int>(gpuGetLastError());
}

template <RowOp OP>
int launch_op(Dt dt, const RowsParams& p, int block, int cache, uint32_t blocks, gpuStream_t s, ClusterPlan* c) {
  switch (dt) {
    case Dt::f32: return launch_dtype<OP, F32>(p, block, cache, blocks, s, c);
    case Dt::f16: return launch_dtype<OP, F16>(p, block, cache, blocks, s, c);
    case Dt::bf16: return launch_dtype<OP, BF16>(p, block, cache, blocks, s, c);
    case Dt::f64: return launch_dtype<OP, F64>(p, block, cache, blocks, s, c);
  }
  return -1;
}

}  // namespace

int launch_rows(RowOp op, Dt dt, const RowsParams& p, int block, int cache, uint32_t blocks, void* stream,
                ClusterPlan* clusters) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  if (clusters) *clusters = ClusterPlan{};
  switch (op) {
#define KF_CUDA_CASE(name) \
  case RowOp::name: return launch_op<RowOp::name>(dt, p, block, cache, blocks, s, clusters);
    KF_CUDA_ROW_OPS(KF_CUDA_CASE)
#undef KF_CUDA_CASE
    case RowOp::count: break;
  }
  return -1;
}

}  // namespace kf::hal::cuda
