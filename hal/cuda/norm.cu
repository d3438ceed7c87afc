// Normalizations (docs/ops.md section 3) in CUDA/HIP: layer_norm, rms_norm and their fusions,
// add_layer_norm / add_rms_norm, group_norm, batch_norm_relu, and the backward kernels softmax_backward,
// layer_norm_backward and rms_norm_backward. The counterpart of shaders/norm.comp, norm_bwd.comp and
// batchnorm.comp, with one regime: one block per row, the row read from memory once per pass (the
// statistics' passes, then the output's), block sums in a fixed order (common.cuh), so that the same
// input gives the same bits every run. Accumulation in float (double for f64).
// The mean is carried as hi + lo (the corrected two-pass algorithm of Chan, Golub and LeVeque, as
// norm.comp): hi = sum / L, lo = sum(x - hi) / L, and x - mean computed as (x - hi) - lo, so that rows
// whose spread is small next to their mean keep their precision.
#include <algorithm>

#include "hal/cuda/common.cuh"

namespace kf::hal::cuda {
namespace {

template <NormOp OP> constexpr bool kAdd = OP == NormOp::add_layer || OP == NormOp::add_rms;
// The cluster kernel's packs a block when automatic (kernels.hpp ClusterPlan): 4096 for the layer norms
// (mean and deviation), 2048 for the rms norms and the add forms, the faster of each on an H100.
template <NormOp OP>
constexpr bool kClusterLayerTarget = OP == NormOp::layer || OP == NormOp::layer_relu || OP == NormOp::layer_gelu ||
                                     OP == NormOp::layer_silu;
template <NormOp OP>
constexpr bool kRms = OP == NormOp::rms || OP == NormOp::rms_gelu || OP == NormOp::rms_silu || OP == NormOp::add_rms;

template <NormOp OP, class M, class C> KF_DEV C norm_act(C v) {
  if constexpr (OP == NormOp::layer_relu) return relu_f<M>(v);
  else if constexpr (OP == NormOp::layer_gelu || OP == NormOp::rms_gelu) return gelu_f<M>(v);
  else if constexpr (OP == NormOp::layer_silu || OP == NormOp::rms_silu) return silu_f<M>(v);
  else return v;
}

template <class T> KF_DEV typename T::C centered(typename T::C v, typename T::C hi, typename T::C lo) {
  return (v - hi) - lo;
}

// Two block sums with the barriers of one (common.cuh block_sum: 2 barriers each): a and b each summed
// exactly as block_sum sums them (a warp butterfly, then the warps in order: the same bits). sm holds
// 2 x 32 values; the leading barrier frees it as in block_sum.
template <class C> KF_DEV void block_sum2(C& a, C& b, C* sm) {
  a = warp_sum(a);
  b = warp_sum(b);
  const int nw = blockDim.x / KF_WARP, w = threadIdx.x / KF_WARP;
  __syncthreads();  // sm is free (a previous sum has been read)
  if (threadIdx.x % KF_WARP == 0) sm[w] = a, sm[32 + w] = b;
  __syncthreads();
  C ta = sm[0], tb = sm[32];
  for (int k = 1; k < nw; ++k) ta += sm[k], tb += sm[32 + k];
  a = ta, b = tb;
}

// The second pass of the corrected two-pass algorithm, over the block: c and d2 are this thread's sums
// of (x - hi) and (x - hi)^2; lo = sum(x - hi) / L and m2 = sum((x - hi)^2) - c lo (never below 0).
// Both sums in one block reduction (block_sum2: 2 barriers, not 4). sm holds 64 values.
template <class C> KF_DEV void corrected_moments(C c, C d2, int64_t L, C* sm, C& lo, C& m2) {
  block_sum2(c, d2, sm);
  m2 = d2;
  lo = c / C(L);
  m2 = m2 - c * lo;
  if (m2 < C(0)) m2 = C(0);
}

// The row's value j: x, or x + r for the add forms (recomputed in each pass: the same value every time).
template <NormOp OP, class T> KF_DEV typename T::C row_value(const NormParams& p, int64_t i) {
  typename T::C v = T::load(p.x, i);
  if constexpr (kAdd<OP>) v += T::load(p.r, i);
  return v;
}

template <NormOp OP, class T>
__global__ void __launch_bounds__(1024) norm_kernel(const NormParams p) {
  using C = typename T::C;
  using M = Math<C, T::FAST>;  // (as norm_store)
  __shared__ C sm[64];
  const int64_t L = p.feat;
  const C eps = static_cast<C>(p.eps);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * L;
    C hi = C(0), lo = C(0), m2 = C(0);
    if constexpr (kRms<OP>) {
      C ss = C(0);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        const C v = row_value<OP, T>(p, base + j);
        if constexpr (kAdd<OP>) T::store(p.s, base + j, v);
        ss += v * v;
      }
      m2 = block_sum(ss, sm);
    } else {
      C s = C(0);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        const C v = row_value<OP, T>(p, base + j);
        if constexpr (kAdd<OP>) T::store(p.s, base + j, v);
        s += v;
      }
      hi = block_sum(s, sm) / C(L);
      C c = C(0), d2 = C(0);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        const C d = row_value<OP, T>(p, base + j) - hi;
        c += d, d2 += d * d;
      }
      corrected_moments(c, d2, L, sm, lo, m2);
    }
    const C rstd = C(1) / m_sqrt(m2 / C(L) + eps);
    const int64_t g0 = p.groups == 1 ? 0 : (row % p.groups) * p.cpg;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const int64_t ch = g0 + (p.inner == 1 ? j : j / p.inner);
      C o = centered<T>(row_value<OP, T>(p, base + j), hi, lo) * rstd;
      if (p.w) o *= T::load(p.w, ch);
      if (p.b) o += T::load(p.b, ch);
      T::store(p.y, base + j, norm_act<OP, M>(o));
    }
  }
}

// The cached form of norm_kernel for rows of whole 16-byte packs (every pointer 16-byte aligned; the
// affine either as packs, layer and rms norm, or one channel per pack, group_norm with H W a multiple of
// the pack). Thread t owns packs t + u B of the row (B = blockDim.x): for u < CACHE in registers; with
// LONG (rows longer than 1024 x 4 packs) the next p.smem_packs in shared memory (the thread's own slots,
// filled by cp.async, which holds no registers: no barrier guards them), and the rest streamed from
// memory and read again for the output (the host keeps few enough rows in flight that the second read
// hits the L2 cache). All loads of the cached packs are issued before any arithmetic, so a row moves in
// one burst; the statistics and the output come from the cache. (norm_kernel reads the row in every
// pass, element by element: 0.2-0.5 of copy on an H100.)
// The registers hold the raw packs: 16-bit values cost half of their float conversions (the earlier
// float cache of 4 packs spilled 60-260 bytes to local memory for the 16-bit dtypes, and their add forms
// ran at 0.62 of copy). The add forms keep x and r (s = x + r in float is what they normalize, and a
// 16-bit dtype cannot hold it); streamed packs of f32 / f64 re-read s (exact there).
// Statistics: norm_kernel's (hi + lo, fixed-order block sums) with hi the mean of the cached packs: for
// a row the cache holds entirely, the row's mean, so exactly norm_kernel's formulas. For a longer row,
// |mean - hi|^2 <= var * streamed / cached (the between-part variance), so lo = sum(x - hi) / L and
// m2 = sum((x - hi)^2) - lo sum(x - hi) lose at most log2(1 + streamed / cached) bits, and the row is
// still read once for the statistics.
template <NormOp OP, class T> constexpr bool kExactS = kAdd<OP> && T::ES == int(sizeof(typename T::C));

// The VW values of a pack: x, or x + r for the add forms.
template <NormOp OP, class T> KF_DEV void pack_values(const uint4& a, const uint4& b, typename T::C (&v)[T::VW]) {
  T::unpack(a, v);
  if constexpr (kAdd<OP>) {
    typename T::C r[T::VW];
    T::unpack(b, r);
#pragma unroll
    for (int k = 0; k < T::VW; ++k) v[k] += r[k];
  }
  (void)b;
}

// Output pack pk of the tensor from its values v and its affine w, b (used where p.w, p.b are given).
template <NormOp OP, class T>
KF_DEV void norm_store_wb(const NormParams& p, int64_t pk, const typename T::C (&v)[T::VW],
                          const typename T::C (&w)[T::VW], const typename T::C (&b)[T::VW], typename T::C hi,
                          typename T::C lo, typename T::C rstd) {
  using C = typename T::C;
  using M = Math<C, T::FAST>;  // (16-bit: the approximate exp, division and gelu of the elementwise ops)
  constexpr int VW = T::VW;
  C o[VW];
#pragma unroll
  for (int k = 0; k < VW; ++k) {
    C y = centered<T>(v[k], hi, lo) * rstd;
    if (p.w) y *= w[k];
    if (p.b) y += b[k];
    o[k] = norm_act<OP, M>(y);
  }
  store_pack(p.y, pk, T::pack(o));
}

// Output pack j of the row, layer and rms norm (p.inner == 1): the affine as packs j of w and b.
template <NormOp OP, class T>
KF_DEV void norm_store(const NormParams& p, int j, int64_t pk, const typename T::C (&v)[T::VW], typename T::C hi,
                       typename T::C lo, typename T::C rstd) {
  using C = typename T::C;
  using M = Math<C, T::FAST>;
  constexpr int VW = T::VW;
  C w[VW], b[VW], o[VW];
  if (p.w) T::unpack(load_pack(p.w, j), w);
  if (p.b) T::unpack(load_pack(p.b, j), b);
#pragma unroll
  for (int k = 0; k < VW; ++k) {
    C y = centered<T>(v[k], hi, lo) * rstd;
    if (p.w) y *= w[k];
    if (p.b) y += b[k];
    o[k] = norm_act<OP, M>(y);
  }
  store_pack(p.y, pk, T::pack(o));
}

// group_norm (p.inner > 1: each pack lies in one channel): output pack pk with its channel's wc, bc.
template <NormOp OP, class T>
KF_DEV void norm_store_ch(const NormParams& p, int64_t pk, const typename T::C (&v)[T::VW], typename T::C wc,
                          typename T::C bc, typename T::C hi, typename T::C lo, typename T::C rstd) {
  using C = typename T::C;
  constexpr int VW = T::VW;
  C w[VW], b[VW];
#pragma unroll
  for (int k = 0; k < VW; ++k) w[k] = wc, b[k] = bc;
  norm_store_wb<OP, T>(p, pk, v, w, b, hi, lo, rstd);
}

// group_norm's channels staged in shared memory per row: up to 1 KiB of w and b (128 channels of a
// 32-bit compute type, 64 of f64); groups of more channels read w and b from memory.
template <class C> constexpr int kGnStage = 512 / int(sizeof(C));

// One pass over the packs of the row beyond the registers (LONG): shared memory, then streamed (two
// packs in flight per thread; s stored on the first pass of the add forms). f(j, v) gets every pack.
template <NormOp OP, class T, class F>
KF_DEV void norm_rest(const NormParams& p, int64_t base, int nreg, int ncache, int npk, const uint4* sx,
                      const uint4* sr, bool first, F&& f) {
  using C = typename T::C;
  constexpr int VW = T::VW, U = 2;
  const int B = blockDim.x;
  for (int j = nreg + threadIdx.x; j < ncache; j += B) {
    C v[VW];
    pack_values<OP, T>(sx[j - nreg], sr[j - nreg], v);
    f(j, v);
  }
  for (int j0 = ncache + threadIdx.x; j0 < npk; j0 += U * B) {
    uint4 a[U], b[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u * B;
      if (j < npk) {
        if (kExactS<OP, T> && !first) {
          a[u] = load_pack(p.s, base + j), b[u] = make_uint4(0, 0, 0, 0);  // s + 0: the same value
        } else {
          a[u] = load_pack(p.x, base + j);
          b[u] = kAdd<OP> ? load_pack(p.r, base + j) : make_uint4(0, 0, 0, 0);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u * B;
      if (j >= npk) continue;
      C v[VW];
      pack_values<OP, T>(a[u], b[u], v);
      if (kAdd<OP> && first) store_pack(p.s, base + j, T::pack(v));
      f(j, v);
    }
  }
}

template <NormOp OP, class T, int CACHE, bool LONG>
__global__ void __launch_bounds__(1024) norm_cached_kernel(const NormParams p) {
  using C = typename T::C;
  constexpr int VW = T::VW;
  constexpr bool ADD = kAdd<OP>;
  extern __shared__ __align__(16) unsigned char norm_smem[];
  __shared__ C sm[64];
  __shared__ C gw[kGnStage<C>], gb[kGnStage<C>];  // group_norm: the row's channels' w and b
  const int B = blockDim.x, t = threadIdx.x;
  const int64_t L = p.feat;
  const int npk = static_cast<int>(L / VW);
  const int nreg = B * CACHE;                                          // packs in registers
  const int ncache = LONG ? min(npk, B * (CACHE + p.smem_packs)) : npk;  // packs cached
  uint4* const sx = reinterpret_cast<uint4*>(norm_smem);                // slot j - nreg: x
  uint4* const sr = sx + int64_t(B) * p.smem_packs;                     // the add forms: r
  const C eps = static_cast<C>(p.eps);
  // group_norm: the channel of pack j within the row is j VW / inner (32-bit division where it fits).
  // (group_norm runs as NormOp::layer: the other forms compile without this code.)
  const bool group = OP == NormOp::layer && p.inner != 1, stage = group && p.cpg <= kGnStage<C>;
  const bool narrow = (p.feat >> 32) == 0;
  const auto chan = [&](int j) -> int64_t {
    return narrow ? int64_t(unsigned(j) * unsigned(VW) / unsigned(p.inner)) : int64_t(j) * VW / p.inner;
  };
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * npk;  // the row's first pack
    const int64_t g0 = p.groups == 1 ? 0 : (row % p.groups) * p.cpg;
    if constexpr (LONG) {
      for (int j = nreg + t; j < ncache; j += B) {
        kf_copy16(sx + (j - nreg), static_cast<const uint4*>(p.x) + base + j);
        if constexpr (ADD) kf_copy16(sr + (j - nreg), static_cast<const uint4*>(p.r) + base + j);
      }
    }
    uint4 cx[CACHE], cr[ADD ? CACHE : 1];
#pragma unroll
    for (int u = 0; u < CACHE; ++u) {
      const int j = t + u * B;
      cx[u] = cr[ADD ? u : 0] = make_uint4(0, 0, 0, 0);  // zeros: sum nothing
      if (j < npk) {
        cx[u] = load_pack(p.x, base + j);
        if constexpr (ADD) cr[u] = load_pack(p.r, base + j);
      }
    }
    // group_norm: the row's channels' w and b to shared memory while the row's loads are in flight, so
    // that the output reads them from there, all before its first store. (Read from memory per pack
    // after the previous pack's store, which the compiler must assume may alias them, each load waited
    // a round trip: 0.72 of copy for f32 on an H100.) The block sums' barriers order these writes
    // before the reads.
    if (stage)
      for (int c = t; c < p.cpg; c += B) {
        gw[c] = p.w ? T::load(p.w, g0 + c) : C(1);
        gb[c] = p.b ? T::load(p.b, g0 + c) : C(0);
      }
    if constexpr (LONG) kf_copy_wait();
    // s = x + r to memory (the statistics use the unrounded sum, as norm_kernel).
    if constexpr (ADD) {
#pragma unroll
      for (int u = 0; u < CACHE; ++u) {
        const int j = t + u * B;
        if (j < npk) {
          C v[VW];
          pack_values<OP, T>(cx[u], cr[u], v);
          store_pack(p.s, base + j, T::pack(v));
        }
      }
      if constexpr (LONG)
        for (int j = nreg + t; j < ncache; j += B) {
          C v[VW];
          pack_values<OP, T>(sx[j - nreg], sr[j - nreg], v);
          store_pack(p.s, base + j, T::pack(v));
        }
    }
    C hi = C(0), lo = C(0), m2 = C(0);
    if constexpr (kRms<OP>) {
      C ss = C(0);
      const auto add_sq = [&](int, const C(&v)[VW]) {
#pragma unroll
        for (int k = 0; k < VW; ++k) ss += v[k] * v[k];
      };
#pragma unroll
      for (int u = 0; u < CACHE; ++u) {
        C v[VW];
        pack_values<OP, T>(cx[u], cr[ADD ? u : 0], v);
        add_sq(0, v);
      }
      if constexpr (LONG) norm_rest<OP, T>(p, base, nreg, ncache, npk, sx, sr, true, add_sq);
      m2 = block_sum(ss, sm);
    } else {
      C sum = C(0);
#pragma unroll
      for (int u = 0; u < CACHE; ++u) {
        C v[VW];
        pack_values<OP, T>(cx[u], cr[ADD ? u : 0], v);
#pragma unroll
        for (int k = 0; k < VW; ++k) sum += v[k];
      }
      if constexpr (LONG)
        for (int j = nreg + t; j < ncache; j += B) {
          C v[VW];
          pack_values<OP, T>(sx[j - nreg], sr[j - nreg], v);
#pragma unroll
          for (int k = 0; k < VW; ++k) sum += v[k];
        }
      hi = block_sum(sum, sm) / C(int64_t(ncache) * VW);
      C c = C(0), d2 = C(0);
      const auto add_dev = [&](int, const C(&v)[VW]) {
#pragma unroll
        for (int k = 0; k < VW; ++k) {
          const C d = v[k] - hi;
          c += d, d2 += d * d;
        }
      };
#pragma unroll
      for (int u = 0; u < CACHE; ++u) {
        if (t + u * B < npk) {
          C v[VW];
          pack_values<OP, T>(cx[u], cr[ADD ? u : 0], v);
          add_dev(0, v);
        }
      }
      if constexpr (LONG) norm_rest<OP, T>(p, base, nreg, ncache, npk, sx, sr, true, add_dev);
      corrected_moments(c, d2, L, sm, lo, m2);
    }
    const C rstd = C(1) / m_sqrt(m2 / C(L) + eps);
    // group_norm's affine of pack j: staged, or from memory.
    const auto affine = [&](int j, C& wc, C& bc) {
      const int64_t c = chan(j);
      if (stage) {
        wc = gw[c], bc = gb[c];
      } else {
        wc = p.w ? T::load(p.w, g0 + c) : C(1);
        bc = p.b ? T::load(p.b, g0 + c) : C(0);
      }
    };
    const auto out = [&](int j, const C(&v)[VW]) {
      if (group) {
        C wc, bc;
        affine(j, wc, bc);
        norm_store_ch<OP, T>(p, base + j, v, wc, bc, hi, lo, rstd);
      } else {
        norm_store<OP, T>(p, j, base + j, v, hi, lo, rstd);
      }
    };
#pragma unroll
    for (int u = 0; u < CACHE; ++u) {
      const int j = t + u * B;
      if (j < npk) {
        C v[VW];
        pack_values<OP, T>(cx[u], cr[ADD ? u : 0], v);
        out(j, v);
      }
    }
    if constexpr (LONG) {
      norm_rest<OP, T>(p, base, nreg, ncache, npk, sx, sr, false, out);
      __syncthreads();  // (shared memory: every thread done with its slots before the next row's copies)
    } else {
      if (stage && row + gridDim.x < p.rows) __syncthreads();  // (gw, gb: read before the next row's)
    }
  }
}

#if KF_HAVE_CLUSTER_LAUNCH
// norm_cached_kernel's long rows on thread-block clusters (kernels.hpp ClusterPlan; layer and rms norm,
// not group_norm): block `rank` of a cluster of P holds packs [rank part, (rank + 1) part) of the row,
// thread t packs t + u B of those (u < R in registers, then p.smem_packs in shared memory by cp.async),
// all loads issued before any arithmetic. Each block reduces its part: rms sum(x^2); layer (h, c, m2),
// h the part's mean (a block sum), c = sum(x - h), m2 = sum((x - h)^2) - c^2 / n (norm_kernel's
// corrected two-pass, over the part). The parts combine in rank order (Chan, Golub and LeVeque): the
// row's mean as hi + lo with hi = h_0 and lo = sum(c_k + n_k (h_k - hi)) / L, and M2 = sum(m2_k + n_k
// e_k^2) with e_k = (h_k - hi) + c_k / n_k - lo, each part's mean less the row's (no cancellation: rows
// far from zero keep their precision, as norm_kernel). Every block computes the same statistics, the
// same bits every run. One exchange a row: the cluster's barrier after the statistics are published,
// and its arrive after they are read, waited for only before they are overwritten (next row) or the
// block exits. One dynamic shared array (block sums, statistics, packs): the host emulation runs a
// cluster's blocks at once, each with its own.
template <NormOp OP, class T>
__global__ void __launch_bounds__(kClusterBlock, 4) norm_cluster_kernel(const NormParams p) {
#if KF_CLUSTERS
  using C = typename T::C;
  constexpr int VW = T::VW;
  constexpr bool ADD = kAdd<OP>;
  constexpr int R = ADD ? 2 : 4;  // packs a thread in registers (the add forms hold x and r)
  extern __shared__ __align__(16) unsigned char norm_cluster_smem[];
  C* const sm = reinterpret_cast<C*>(norm_cluster_smem);  // block sums: 64 values
  C* const st = sm + 64;                                    // this part's statistics, read by the cluster
  const int B = blockDim.x, t = threadIdx.x, S = p.smem_packs;
  uint4* const sx = reinterpret_cast<uint4*>(norm_cluster_smem + kClusterHeader);  // slot u B + t: x
  uint4* const sr = sx + B * S;                                                    // the add forms: r
  const int P = p.cluster_p, part = p.cluster_part, rank = static_cast<int>(kf_cluster_rank());
  const int npk = static_cast<int>(p.feat / VW);
  const auto packs_of = [&](int k) { return max(0, min(part, npk - k * part)); };
  const int j0 = rank * part, n = packs_of(rank);
  const C L = C(p.feat), eps = static_cast<C>(p.eps);
  for (int64_t row = blockIdx.x / P; row < p.rows; row += gridDim.x / P) {
    const int64_t base = row * npk + j0;  // the part's first pack
    // The register loads first: issued after the copies, ptxas placed them after the copies' wait (two
    // round trips where one does).
    uint4 cx[R], cr[ADD ? R : 1];
#pragma unroll
    for (int u = 0; u < R; ++u) {
      const int j = t + u * B;
      cx[u] = cr[ADD ? u : 0] = make_uint4(0, 0, 0, 0);
      if (j < n) {
        cx[u] = load_pack(p.x, base + j);
        if constexpr (ADD) cr[u] = load_pack(p.r, base + j);
      }
    }
#pragma unroll 1
    for (int u = 0; u < S; ++u) {  // (not unrolled: registers for the addresses spilled 16-bit layer norms)
      const int j = t + (R + u) * B;
      if (j < n) {
        kf_copy16(sx + u * B + t, static_cast<const uint4*>(p.x) + base + j);
        if constexpr (ADD) kf_copy16(sr + u * B + t, static_cast<const uint4*>(p.r) + base + j);
      }
    }
    kf_copy_wait();
    // f(j, v) on each pack of this thread (j within the part): registers, then shared memory.
    const auto each = [&](auto&& f) {
#pragma unroll
      for (int u = 0; u < R; ++u) {
        const int j = t + u * B;
        if (j < n) {
          C v[VW];
          pack_values<OP, T>(cx[u], cr[ADD ? u : 0], v);
          f(j, v);
        }
      }
      for (int u = 0; u < S; ++u) {
        const int j = t + (R + u) * B;
        if (j < n) {
          C v[VW];
          pack_values<OP, T>(sx[u * B + t], ADD ? sr[u * B + t] : sx[u * B + t], v);
          f(j, v);
        }
      }
    };
    C hi = C(0), lo = C(0), m2 = C(0);
    if constexpr (kRms<OP>) {
      C ss = C(0);
      each([&](int, const C(&v)[VW]) {
#pragma unroll
        for (int k = 0; k < VW; ++k) ss += v[k] * v[k];
      });
      ss = block_sum(ss, sm);
      if (t == 0) st[0] = ss;
      kf_cluster_sync();
      for (int k = 0; k < P; ++k) m2 += kf_cluster_map(st, k)[0];
    } else {
      C sum = C(0);
      each([&](int, const C(&v)[VW]) {
#pragma unroll
        for (int k = 0; k < VW; ++k) sum += v[k];
      });
      sum = block_sum(sum, sm);
      // (The approximate division where a quotient only shifts or corrects: the accurate one's slow path
      // spilled f32's registers.)
      const C cnt = C(int64_t(n) * VW);
      const C h = n > 0 ? kf_fast_div(sum, cnt) : C(0);  // any shift near the mean: c, m2 are about it
      C c = C(0), d2 = C(0);
      each([&](int, const C(&v)[VW]) {
#pragma unroll
        for (int k = 0; k < VW; ++k) {
          const C d = v[k] - h;
          c += d, d2 += d * d;
        }
      });
      block_sum2(c, d2, sm);
      C pm2 = n > 0 ? d2 - c * kf_fast_div(c, cnt) : C(0);
      if (pm2 < C(0)) pm2 = C(0);
      if (t == 0) st[0] = h, st[1] = c, st[2] = pm2;
      kf_cluster_sync();
      hi = kf_cluster_map(st, 0)[0];
      C cs = C(0);
      for (int k = 0; k < P; ++k) {
        const C* q = kf_cluster_map(st, k);
        cs += q[1] + C(int64_t(packs_of(k)) * VW) * (q[0] - hi);
      }
      lo = kf_fast_div(cs, L);
      for (int k = 0; k < P; ++k) {
        const C nk = C(int64_t(packs_of(k)) * VW);
        if (nk > C(0)) {
          const C* q = kf_cluster_map(st, k);
          const C e = (q[0] - hi) + kf_fast_div(q[1], nk) - lo;
          m2 += q[2] + nk * e * e;
        }
      }
    }
    kf_cluster_arrive();  // (this block is done with the cluster's statistics)
    const C rstd = C(1) / m_sqrt(m2 / L + eps);
    // (The add forms store s = x + r here, not before the statistics: the cluster barrier's release,
    // MEMBAR.ALL.GPU on sm_90, would wait for them.)
    each([&](int j, const C(&v)[VW]) {
      norm_store<OP, T>(p, j0 + j, base + j, v, hi, lo, rstd);
      if constexpr (ADD) store_pack(p.s, base + j, T::pack(v));
    });
    kf_cluster_wait();  // (every block done with this one's statistics: st may change, or go)
  }
#else
  (void)p;
#endif
}
#endif

// g = dy w rounded before it is used: contracted into sum(g) or into g - mean(g) (nvcc fuses a * b + c
// by default), the product would keep digits the other side lacks; on an H100 that left 2.8e-5 where a
// one-element row's gradient is exactly 0 (as norm_bwd.comp's `precise`).
KF_DEV float mul_rounded(float a, float b) { return __fmul_rn(a, b); }
KF_DEV double mul_rounded(double a, double b) { return __dmul_rn(a, b); }

// layer_norm_backward / rms_norm_backward, the row pass: dx = rstd (g - sum(g) / L - xhat sum(g xhat) / L)
// with g = dy w (rms: without the sum(g) term); the row's (hi, lo, rstd) to ws for the column pass.
template <class T>
__global__ void __launch_bounds__(1024) norm_bwd_rows(const NormBwdParams p) {
  using C = typename T::C;
  __shared__ C sm[64];
  const int64_t L = p.feat;
  C* ws = static_cast<C*>(p.ws);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * L;
    C hi = C(0), lo = C(0), m2 = C(0);
    if (p.layer) {
      C s = C(0);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) s += T::load(p.x, base + j);
      hi = block_sum(s, sm) / C(L);
      C c = C(0), d2 = C(0);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        const C d = T::load(p.x, base + j) - hi;
        c += d, d2 += d * d;
      }
      corrected_moments(c, d2, L, sm, lo, m2);
    } else {
      C ss = C(0);
      for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        const C v = T::load(p.x, base + j);
        ss += v * v;
      }
      m2 = block_sum(ss, sm);
    }
    const C rs = C(1) / m_sqrt(m2 / C(L) + static_cast<C>(p.eps));
    C sg = C(0), sgx = C(0);
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const C g = mul_rounded(T::load(p.dy, base + j), p.w ? T::load(p.w, j) : C(1));
      sg += g, sgx += g * (centered<T>(T::load(p.x, base + j), hi, lo) * rs);
    }
    sg = p.layer ? block_sum(sg, sm) : C(0);
    sgx = block_sum(sgx, sm);
    const C mg = sg / C(L), mgx = sgx / C(L);
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const C g = mul_rounded(T::load(p.dy, base + j), p.w ? T::load(p.w, j) : C(1));
      const C xhat = centered<T>(T::load(p.x, base + j), hi, lo) * rs;
      T::store(p.dx, base + j, rs * (g - mg - xhat * mgx));
    }
    if (threadIdx.x == 0) ws[3 * row] = hi, ws[3 * row + 1] = lo, ws[3 * row + 2] = rs;
  }
}

// Kahan-compensated running sum.
template <class C> struct Kahan {
  C s = C(0), c = C(0);
  KF_DEV void add(C v) {
    const C y = v - c;
    const C t = s + y;
    c = (t - s) - y;
    s = t;
  }
};

// The column pass: thread (column f, chunk k) sums dy xhat and dy over the chunk's rows, in row order.
template <class T>
__global__ void __launch_bounds__(256) norm_bwd_cols(const NormBwdParams p) {
  using C = typename T::C;
  const int64_t L = p.feat;
  const int64_t f = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t k = blockIdx.y;
  if (f >= L) return;
  const C* st = static_cast<const C*>(p.ws);
  C* part = static_cast<C*>(p.ws) + 3 * p.rows;
  Kahan<C> dw, db;
  const int64_t r1 = (k + 1) * p.chunk_rows < p.rows ? (k + 1) * p.chunk_rows : p.rows;
  for (int64_t r = k * p.chunk_rows; r < r1; ++r) {
    const C dy = T::load(p.dy, r * L + f);
    dw.add(dy * (centered<T>(T::load(p.x, r * L + f), st[3 * r], st[3 * r + 1]) * st[3 * r + 2]));
    db.add(dy);
  }
  part[2 * (k * L + f)] = dw.s;
  part[2 * (k * L + f) + 1] = db.s;
}

// The combine pass: the chunks of each column in chunk order.
template <class T>
__global__ void __launch_bounds__(256) norm_bwd_combine(const NormBwdParams p) {
  using C = typename T::C;
  const int64_t L = p.feat;
  const int64_t f = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (f >= L) return;
  const C* part = static_cast<const C*>(p.ws) + 3 * p.rows;
  Kahan<C> dw, db;
  for (int64_t k = 0; k < p.nchunks; ++k) dw.add(part[2 * (k * L + f)]), db.add(part[2 * (k * L + f) + 1]);
  T::store(p.dw, f, dw.s);
  if (p.db) T::store(p.db, f, db.s);
}

// ---- The fused plan (rows of whole 16-byte packs, every tensor 16-byte aligned, at most 4 packs a
// thread on up to 1024 threads). Bytes: the separate plan reads dy and x twice (row pass, column pass)
// and writes dx: 5 tensor-sized transfers where 3 are the minimum (H100, rows of 4096: 0.14-0.33 of
// copy, the row pass element by element). Here one block per row at a time, blocks striding over the
// rows (row blockIdx.x, + gridDim.x, ...): thread t loads its packs t + u B (u < 4) of dy and x into
// registers before any use (raw 16-byte packs, as norm_cached_kernel), the row's sums in one block
// reduction for rms (sum x^2, sum g x) and two for layer (sum x, sum g; then sum (x - hi), sum
// (x - hi)^2, sum g (x - hi)), dx written once as packs, and dy xhat, dy added to this block's column
// sums in shared memory (each thread owns the columns of its packs: no barrier, no atomics). At the end
// each block writes its column sums as partial blockIdx.x, and the combine pass adds the partials in
// block order (Kahan), so the result is the same bits every run for a given grid (the plan's grid
// depends on the device's multiprocessors and occupancy only). A block adds at most kFusedRows rows per
// column in plain float (error about 2^-24 sqrt(64 / 6) of the column's sum: 2e-7 relative in f32).
// Extra traffic: the partials, grid x L x (2 or 1) values written and read once (H100, 16384 x 4096
// f32: 528 blocks, 17 MiB each way beside 768 MiB of dy, x, dx).
// The mean is hi + lo as norm_bwd_rows (hi = sum x / L, lo = sum(x - hi) / L), and sum(g xhat) =
// rstd (sum g (x - hi) - lo sum g): the same quantity with one reduction fewer.
constexpr int kFusedPacks = 4;    // packs of dy and of x a thread holds
constexpr int kFusedRegThreads = 256;  // blocks of at most this many threads keep the column sums in registers
// (at most 128 registers a thread, 2 such blocks per SM at least: f16 layer norm took 148 otherwise, 3
// blocks of 128 threads per SM, and read at 0.68 of copy on an H100 against bf16's 0.94 at 128)
constexpr int kFusedRows = 64;    // rows a block sums per column at most (plain float)

// Several block sums with one barrier: v[i] summed over the block (warp butterflies, then the warps in
// index order: the same bits in every thread and every run). sm holds N x 32 values; the caller
// alternates two such buffers so that no barrier is needed before writing one (every thread has read
// the previous use of a buffer before it reaches the barrier of the sum in between).
template <int N, class C> KF_DEV void block_sums(C (&v)[N], C* sm) {
  const int nw = blockDim.x / KF_WARP, w = threadIdx.x / KF_WARP;
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = warp_sum(v[i]);
  if (threadIdx.x % KF_WARP == 0)
#pragma unroll
    for (int i = 0; i < N; ++i) sm[i * 32 + w] = v[i];
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    C t = sm[i * 32];
    for (int k = 1; k < nw; ++k) t += sm[i * 32 + k];
    v[i] = t;
  }
}

// Hides a raw pack's value from the optimizer (an empty asm that "changes" it): after each block sum the
// values are unpacked again from the raw registers instead of the compiler keeping every unpacked float
// alive across the barriers (16-bit layer norm: 189-195 registers without it, 3 x 32 floats).
KF_DEV void opaque(uint4& v) {
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w));
#else
  (void)v;
#endif
}
KF_DEV int opaque(int v) {
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+r"(v));
#endif
  return v;
}

// The block's column sums live in shared memory as [Q][VW][npk] (quantity q: 0 dy xhat, 1 dy; value k
// of pack j at (q VW + k) npk + j), so that a warp's threads (consecutive packs) touch consecutive
// words; the partials in ws have the same layout, one [Q][VW][npk] block per partial.
template <class T, bool LAYER, bool REG>
__global__ void __launch_bounds__(REG ? kFusedRegThreads : 1024, REG ? 2 : 1) norm_bwd_fused(const NormBwdParams p) {
  using C = typename T::C;
  constexpr int VW = T::VW, P = kFusedPacks, Q = LAYER ? 2 : 1;
  extern __shared__ __align__(16) unsigned char norm_smem[];
  __shared__ C red[2][4 * 32];
  C* const acc = reinterpret_cast<C*>(norm_smem);
  const int B = blockDim.x, t = threadIdx.x;
  const int64_t L = p.feat;
  const int npk = static_cast<int>(L / VW);
  uint4* const sw = reinterpret_cast<uint4*>(acc + (REG ? 0 : Q * L));  // w's packs (w given), after the sums
  const C inv_l = C(1) / C(L), eps = static_cast<C>(p.eps);
  const bool has_w = p.w != nullptr;
  // REG: the column sums of this thread's packs in its registers, cs[u][q VW + k] (no shared memory
  // traffic per value and row; the Vulkan port went from 0.45 to 0.88 of copy in 16-bit layer norm on an
  // H100 with this); else in shared memory, for rows wider than kFusedRegThreads x P packs.
  C cs[REG ? P : 1][REG ? Q * VW : 1];
#pragma unroll
  for (int u = 0; u < P; ++u) {
    const int j = t + u * B;
    if constexpr (REG) {
#pragma unroll
      for (int i = 0; i < Q * VW; ++i) cs[u][i] = C(0);
    }
    if (j < npk) {
      if (has_w) sw[j] = load_pack(p.w, j);
      if constexpr (!REG) {
#pragma unroll
        for (int q = 0; q < Q; ++q)
#pragma unroll
          for (int k = 0; k < VW; ++k) acc[(q * VW + k) * npk + j] = C(0);
      }
    }
  }
  int par = 0;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * npk;
    uint4 cx[P], cd[P];
#pragma unroll
    for (int u = 0; u < P; ++u) {
      const int j = t + u * B;
      cx[u] = cd[u] = make_uint4(0, 0, 0, 0);  // zeros: add nothing to the sums
      if (j < npk) cx[u] = load_pack(p.x, base + j), cd[u] = load_pack(p.dy, base + j);
    }
    // g = dy w, rounded (mul_rounded: the same value in every use).
    const auto grad = [&](int u, C (&d)[VW], C (&g)[VW]) {
      T::unpack(cd[u], d);
      if (has_w && t + u * B < npk) {
        C w[VW];
        T::unpack(sw[t + u * B], w);
#pragma unroll
        for (int k = 0; k < VW; ++k) g[k] = mul_rounded(d[k], w[k]);
      } else {
#pragma unroll
        for (int k = 0; k < VW; ++k) g[k] = d[k];
      }
    };
    C hi = C(0), lo = C(0), rs, mg = C(0), mgx;
    if constexpr (LAYER) {
      // One block sum about a shift K, the row's first value: sum e, sum e^2, sum g, sum g e with
      // e = x - K; the mean is K + sum e / L (hi = K, lo the rest). K is a value of the row, so
      // |mean - K| is a few standard deviations at most and sum e^2 - (sum e)^2 / L keeps its precision
      // (tests/test_norm.cpp BackwardRowsFarFromZero); one barrier pair per row instead of two.
      const C K = T::load(p.x, row * L);
      C s4[4] = {C(0), C(0), C(0), C(0)};
#pragma unroll
      for (int u = 0; u < P; ++u) {
        if (t + u * B >= npk) continue;
        C x[VW], d[VW], g[VW];
        T::unpack(cx[u], x);
        grad(u, d, g);
#pragma unroll
        for (int k = 0; k < VW; ++k) {
          const C e = x[k] - K;
          s4[0] += e, s4[1] += e * e, s4[2] += g[k], s4[3] += g[k] * e;
        }
      }
      block_sums(s4, red[par]);
#pragma unroll
      for (int u = 0; u < P; ++u) opaque(cx[u]), opaque(cd[u]);
      par ^= 1;
      hi = K;
      lo = s4[0] * inv_l;
      C m2 = s4[1] - s4[0] * lo;
      if (m2 < C(0)) m2 = C(0);
      rs = C(1) / m_sqrt(m2 * inv_l + eps);
      mg = s4[2] * inv_l;
      mgx = rs * (s4[3] - lo * s4[2]) * inv_l;
    } else {
      C s1[2] = {C(0), C(0)};  // sum x^2, sum g x
#pragma unroll
      for (int u = 0; u < P; ++u) {
        C x[VW], d[VW], g[VW];
        T::unpack(cx[u], x);
        grad(u, d, g);
#pragma unroll
        for (int k = 0; k < VW; ++k) s1[0] += x[k] * x[k], s1[1] += g[k] * x[k];
      }
      block_sums(s1, red[par]);
#pragma unroll
      for (int u = 0; u < P; ++u) opaque(cx[u]), opaque(cd[u]);
      par ^= 1;
      rs = C(1) / m_sqrt(s1[0] * inv_l + eps);
      mgx = rs * s1[1] * inv_l;
    }
    // dx = rstd (g - mean(g) - xhat mean(g xhat)); the block's column sums of dy xhat and dy. (The
    // stride is hidden from the optimizer row by row: otherwise it keeps the 4 x Q x VW addresses of the
    // slots in registers across the rows, 64 of them for 16-bit layer norm.)
    const int st = opaque(npk);
#pragma unroll
    for (int u = 0; u < P; ++u) {
      const int j = t + u * B;
      if (j >= npk) continue;
      C x[VW], d[VW], g[VW], o[VW];
      T::unpack(cx[u], x);
      grad(u, d, g);
#pragma unroll
      for (int k = 0; k < VW; ++k) {
        const C xhat = centered<T>(x[k], hi, lo) * rs;
        o[k] = rs * (g[k] - mg - xhat * mgx);
        if constexpr (REG) {
          cs[u][k] += d[k] * xhat;
          if constexpr (LAYER) cs[u][VW + k] += d[k];
        } else {
          acc[k * st + j] += d[k] * xhat;
          if constexpr (LAYER) acc[(VW + k) * st + j] += d[k];
        }
      }
      store_pack(p.dx, base + j, T::pack(o));
    }
  }
  // This block's partial (thread-owned slots: no barrier).
  C* const part = static_cast<C*>(p.ws) + int64_t(blockIdx.x) * Q * L;
#pragma unroll
  for (int u = 0; u < P; ++u) {
    const int j = t + u * B;
    if (j < npk)
#pragma unroll
      for (int i = 0; i < Q * VW; ++i) part[i * npk + j] = REG ? cs[REG ? u : 0][REG ? i : 0] : acc[i * npk + j];
  }
}

// The fused plan's combine: slot i of [Q][VW][npk] (column (i % npk) VW + i / npk), quantity blockIdx.y;
// each warp adds partials w, w + 8, ... (Kahan), then warp 0 adds the warps' sums in order.
template <class T>
__global__ void __launch_bounds__(256) norm_bwd_combine_fused(const NormBwdParams p) {
  using C = typename T::C;
  constexpr int VW = T::VW;
  __shared__ C ss[8][32], cs[8][32];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
  const int64_t L = p.feat, npk = L / VW, Q = p.layer ? 2 : 1;
  const int64_t i = int64_t(blockIdx.x) * 32 + lane, q = blockIdx.y;
  const C* part = static_cast<const C*>(p.ws) + q * L + i;
  Kahan<C> k;
  if (i < L)
    for (int64_t b = w; b < p.fused_grid; b += nw) k.add(part[b * Q * L]);
  ss[w][lane] = k.s, cs[w][lane] = k.c;
  __syncthreads();
  if (w != 0 || i >= L) return;
  Kahan<C> s;
  for (int v = 0; v < nw; ++v) s.add(ss[v][lane]), s.add(-cs[v][lane]);
  const int64_t f = (i % npk) * VW + i / npk;
  T::store(q == 0 ? p.dw : p.db, f, s.s);
}

// softmax_backward: dx = s y (dy - sum(dy y)).
template <class T>
__global__ void __launch_bounds__(1024) softmax_bwd_kernel(const SoftmaxBwdParams p) {
  using C = typename T::C;
  __shared__ C sm[32];
  const int64_t L = p.feat;
  const C scale = static_cast<C>(p.scale);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * L;
    C s = C(0);
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) s += T::load(p.dy, base + j) * T::load(p.y, base + j);
    s = block_sum(s, sm);
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const C y = T::load(p.y, base + j);
      T::store(p.dx, base + j, scale * y * (T::load(p.dy, base + j) - s));
    }
  }
}

// The same on rows of whole 16-byte packs (16-byte aligned tensors): each thread loads its first
// kSoftmaxBwdCache packs of y and of dy into registers before anything else, one block sum, dx written
// once from the registers (rows of 4096 values: 128 threads of 16-bit, 256 of f32; the element-wise
// kernel above read every row twice, one element at a time: 0.40 of copy in 16-bit, 0.68 in f32 on an
// H100). Rows longer than the block caches read the packs past kSoftmaxBwdCache * blockDim again for
// the output. Each thread sums its values in a fixed order, then block_sum: the same bits every run.
constexpr int kSoftmaxBwdCache = 4;
template <class T>
__global__ void __launch_bounds__(1024) softmax_bwd_packs(const SoftmaxBwdParams p) {
  using C = typename T::C;
  constexpr int VW = T::VW, CACHE = kSoftmaxBwdCache;
  __shared__ C sm[32];
  const int64_t npk = p.feat / VW;
  const int nt = blockDim.x;
  const C scale = static_cast<C>(p.scale);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t base = row * npk;
    uint4 ry[CACHE], rd[CACHE];
#pragma unroll
    for (int it = 0; it < CACHE; ++it) {
      const int64_t j = threadIdx.x + int64_t(it) * nt;
      ry[it] = rd[it] = make_uint4(0, 0, 0, 0);  // zeros: add nothing to the sum
      if (j < npk) ry[it] = load_pack(p.y, base + j), rd[it] = load_pack(p.dy, base + j);
    }
    C s = C(0);
#pragma unroll
    for (int it = 0; it < CACHE; ++it) {
      C y[VW], d[VW];
      T::unpack(ry[it], y);
      T::unpack(rd[it], d);
#pragma unroll
      for (int k = 0; k < VW; ++k) s += y[k] * d[k];
    }
    for (int64_t j = threadIdx.x + int64_t(CACHE) * nt; j < npk; j += nt) {
      C y[VW], d[VW];
      T::unpack(load_pack(p.y, base + j), y);
      T::unpack(load_pack(p.dy, base + j), d);
#pragma unroll
      for (int k = 0; k < VW; ++k) s += y[k] * d[k];
    }
    s = block_sum(s, sm);
#pragma unroll
    for (int it = 0; it < CACHE; ++it) {
      const int64_t j = threadIdx.x + int64_t(it) * nt;
      if (j >= npk) break;
      C y[VW], d[VW];
      T::unpack(ry[it], y);
      T::unpack(rd[it], d);
#pragma unroll
      for (int k = 0; k < VW; ++k) y[k] = scale * y[k] * (d[k] - s);
      store_pack(p.dx, base + j, T::pack(y));
    }
    for (int64_t j = threadIdx.x + int64_t(CACHE) * nt; j < npk; j += nt) {
      C y[VW], d[VW];
      T::unpack(load_pack(p.y, base + j), y);
      T::unpack(load_pack(p.dy, base + j), d);
#pragma unroll
      for (int k = 0; k < VW; ++k) y[k] = scale * y[k] * (d[k] - s);
      store_pack(p.dx, base + j, T::pack(y));
    }
  }
}

// batch_norm_relu (inference, NCHW): y = relu((x - mean[c]) * (w[c] / m_sqrt(var[c] + eps)) + b[c]).
template <class T>
__global__ void __launch_bounds__(256) batch_norm_relu_kernel(const BatchNormParams p) {
  using C = typename T::C;
  using M = Math<C, false>;
  const C eps = static_cast<C>(p.eps);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (i / p.inner) % p.channels;
    const C scale = T::load(p.w, c) * (C(1) / m_sqrt(T::load(p.var, c) + eps));
    T::store(p.y, i, relu_f<M>((T::load(p.x, i) - T::load(p.mean, c)) * scale + T::load(p.b, c)));
  }
}

// The same in 16-byte packs, for H W a multiple of the pack (a pack lies in one channel, whose scale is
// derived once per pack; x and y 16-byte aligned): kBnItems packs a thread, all loaded before any is
// computed (element by element, 16-bit values ran at 0.30 of copy on an H100, f32 at 0.59).
constexpr int kBnItems = 4;
template <class T>
__global__ void __launch_bounds__(256) batch_norm_relu_packs(const BatchNormParams p) {
  using C = typename T::C;
  using M = Math<C, false>;
  constexpr int VW = T::VW;
  const C eps = static_cast<C>(p.eps);
  const int64_t npk = p.n / VW, plane = p.inner / VW;  // packs, packs per (sample, channel)
  const int64_t tile = int64_t(blockDim.x) * kBnItems;
  for (int64_t t0 = int64_t(blockIdx.x) * tile + threadIdx.x; t0 < npk; t0 += int64_t(gridDim.x) * tile) {
    uint4 raw[kBnItems];
#pragma unroll
    for (int it = 0; it < kBnItems; ++it) {
      const int64_t pk = t0 + int64_t(it) * blockDim.x;
      if (pk < npk) raw[it] = load_pack(p.x, pk);
    }
#pragma unroll
    for (int it = 0; it < kBnItems; ++it) {
      const int64_t pk = t0 + int64_t(it) * blockDim.x;
      if (pk >= npk) continue;
      // pk / plane in 32 bits where both fit (64-bit division is slow on GPUs).
      const int64_t q = ((pk | plane) >> 32) == 0 ? int64_t(uint32_t(pk) / uint32_t(plane)) : pk / plane;
      const int64_t c = q % p.channels;
      const C scale = T::load(p.w, c) * (C(1) / m_sqrt(T::load(p.var, c) + eps));
      const C mean = T::load(p.mean, c), b = T::load(p.b, c);
      C x[VW];
      T::unpack(raw[it], x);
#pragma unroll
      for (int k = 0; k < VW; ++k) x[k] = relu_f<M>((x[k] - mean) * scale + b);
      store_pack(p.y, pk, T::pack(x));
    }
  }
}

uint32_t row_blocks(int64_t rows) { return static_cast<uint32_t>(rows < 1 ? 1 : rows > (int64_t(1) << 30) ? int64_t(1) << 30 : rows); }

// The cached kernel's layout for these parameters (NormLaunch: block, packs in registers, in shared
// memory and streamed per thread, grid), or false when the row does not qualify (not whole packs, a
// pointer not 16-byte aligned, group_norm's channels not whole packs): norm_kernel then.
// Rows of up to 4 packs a thread (1024 threads) take 4 packs in registers on the smallest block that
// holds them (rows of 4096 16-bit values: 128 threads). Longer rows (LONG) take 1024 threads with 4 packs
// (2 for the add forms, which hold x and r) in registers, then as much of the rest as the device's
// shared memory holds (one block per multiprocessor), then the rest streamed: few enough rows in flight
// that their streamed part (read twice) fits 3/4 of the L2 cache.
template <class T> bool npk_fits_short(const NormParams& p) { return p.feat / T::VW <= int64_t(1024) * 4; }
// Rows of more than 512 x 4 packs and at most 512 x 8 (f32 rows of 8193 to 16384 values, 16-bit of 16385
// to 32768: group_norm's C/G x HW = 16 x 1024, layer norms of 16k features) take 512 threads with 4
// packs in registers and the rest (up to 4 packs a thread, 32 KiB) in shared memory (the LONG kernel)
// rather than 1024 threads with 4 packs in registers: two blocks per multiprocessor, so that one block's
// loads overlap the other's reductions and stores. (One 1024-thread block per multiprocessor, which all
// of its 64 registers a thread fill, loads, reduces, then stores with its memory traffic idle in between:
// f32 group_norm ran at 0.72 of copy on an H100, where Vulkan's 512 invocations x 32 values read it at
// 0.98. 8 packs a thread in registers instead spilled 100-1500 bytes at 64 registers.) Not the add
// forms (x and r) nor f64.
constexpr int kWideBlock = 512;
template <NormOp OP, class T> bool use_wide(const NormParams& p) {
  const int64_t npk = p.feat / T::VW;
  return !kAdd<OP> && sizeof(typename T::C) == 4 && npk > int64_t(kWideBlock) * 4 && npk <= int64_t(kWideBlock) * 8;
}

template <NormOp OP, class T> bool norm_layout(const NormParams& p, NormLaunch& l) {
  const auto misaligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) != 0; };
  const bool vec_affine = p.groups == 1 && p.inner == 1;
  if (p.feat % T::VW != 0 || (!vec_affine && p.inner % T::VW != 0) || misaligned(p.x) || misaligned(p.r) ||
      misaligned(p.y) || misaligned(p.s) || (vec_affine && (misaligned(p.w) || misaligned(p.b))) ||
      p.feat / T::VW > INT32_MAX / 2)
    return false;
  const int64_t npk = p.feat / T::VW;
  l.grid = row_blocks(p.rows);
  l.smem_packs = 0;
  const bool wide = use_wide<OP, T>(p);
  if (!wide && npk_fits_short<T>(p)) {
    l.cache = 4;
    l.block = 32;
    while (int64_t(l.block) * 4 < npk) l.block *= 2;
    return true;
  }
  l.block = wide ? kWideBlock : 1024;
  // (8 and 4 packs spilled 24-192 bytes a thread at the 64 registers of 1024 threads (sm_90; 300 for
  // bf16 layer_norm_gelu), the spills going to the L2 cache with shared memory taking the L1: 16-bit
  // rows of 65536 ran at 0.33-0.67 of copy on an H100. 4 and 2: none in f32 and f16, at most 48 bytes
  // in bf16; the shared memory holds what the registers no longer do: f32 and 16-bit rows of 65536 (2 for
  // the add forms: 16-bit) stay whole on chip.)
  l.cache = kAdd<OP> ? 2 : 4;
  // Packs beyond the registers (none for rows of up to 1024 x cache packs: a negative count here made a
  // negative shared-memory size, and the launch failed, for f64 rows of 9000 on the H100).
  const int64_t rest = std::max<int64_t>(0, npk - int64_t(l.block) * l.cache);
  const int64_t slot = kAdd<OP> ? 32 : 16;                 // shared bytes per pack (x, and r)
  // The opt-in limit less the static arrays and a margin (227 KiB on an H100).
  const int64_t budget = std::max<int64_t>(0, p.smem_limit - 2048);
  l.smem_packs = static_cast<int>(std::min<int64_t>((rest + l.block - 1) / l.block, budget / (slot * l.block)));
  const int64_t streamed = rest - int64_t(l.block) * l.smem_packs;
  if (streamed > 0 && p.l2_bytes > 0) {
    // Bytes of the streamed part a row moves between its two reads (x, r, s; the output comes after).
    const int64_t touched = streamed * 16 * (kAdd<OP> ? 3 : 1);
    const int64_t rows_in_flight = std::max<int64_t>(1, p.l2_bytes / 4 * 3 / touched);
    l.grid = static_cast<uint32_t>(std::min<int64_t>(l.grid, rows_in_flight));
  }
  l.streamed = static_cast<int>(std::max<int64_t>(0, streamed));
  return true;
}

template <NormOp OP, class T, int CACHE, bool LONG>
int norm_cached_launch(const NormParams& p0, const NormLaunch& l, gpuStream_t s) {
  NormParams p = p0;
  p.smem_packs = l.smem_packs;
  const int64_t smem = int64_t(l.smem_packs) * l.block * (kAdd<OP> ? 32 : 16);
  if (smem > 0) {  // the opt-in also where dynamic + static shared memory pass 48 KiB
    const gpuError_t e = gpuFuncSetAttribute(reinterpret_cast<const void*>(&norm_cached_kernel<OP, T, CACHE, LONG>),
                                             gpuFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != gpuSuccess) return static_cast<int>(e);
  }
  norm_cached_kernel<OP, T, CACHE, LONG><<<l.grid, l.block, static_cast<size_t>(smem), s>>>(p);
  return static_cast<int>(gpuGetLastError());
}

#if KF_HAVE_CLUSTER_LAUNCH
// The cluster kernel for rows of whole packs that norm_layout took (layer and rms norm, 32-bit compute
// types), on devices with clusters (compute capability 9.0, code for sm_90): automatically for the rows
// that would take the 1024-thread LONG kernel, on any such row with rows_cluster=N. False (nothing
// launched) where it does not apply or the launch was refused: the other kernels then.
template <NormOp OP, class T> bool norm_cluster_launch(const NormParams& p0, const NormLaunch& l, gpuStream_t s, NormLaunch* used) {
  if constexpr (sizeof(typename T::C) != 4) {
    return false;
  } else {
    const bool long_row = l.block == 1024 && !npk_fits_short<T>(p0);
    if (p0.groups != 1 || p0.inner != 1 || p0.cc < 90 || p0.cluster == 1 || (p0.cluster == 0 && !long_row)) return false;
    const ClusterPlan c = cluster_plan(p0.feat / T::VW, kAdd<OP> ? 2 : 4, kAdd<OP> ? 32 : 16, kClusterLayerTarget<OP> ? 4096 : 2048,
                                         p0.smem_limit, p0.cluster);
    if (!launch_on_clusters(&norm_cluster_kernel<OP, T>, c, p0, s)) return false;
    if (used) {
      *used = NormLaunch{};
      used->block = c.block, used->cache = kAdd<OP> ? 2 : 4, used->smem_packs = c.smem;
      used->grid = static_cast<uint32_t>(std::min<int64_t>(p0.rows, int64_t(1) << 27) * c.P), used->cluster = c.P;
    }
    return true;
  }
}
#endif

template <NormOp OP, class T> int norm_launch(const NormParams& p, int block, gpuStream_t s, NormLaunch* used) {
  NormLaunch l;
  if (norm_layout<OP, T>(p, l)) {
#if KF_HAVE_CLUSTER_LAUNCH
    if (norm_cluster_launch<OP, T>(p, l, s, used)) return 0;
#endif
    if (used) *used = l;
    if ((l.block < 1024 || npk_fits_short<T>(p)) && !use_wide<OP, T>(p))
      return norm_cached_launch<OP, T, 4, false>(p, l, s);
    return norm_cached_launch<OP, T, kAdd<OP> ? 2 : 4, true>(p, l, s);
  }
  norm_kernel<OP, T><<<row_blocks(p.rows), block, 0, s>>>(p);
  if (used) *used = NormLaunch{};
  return static_cast<int>(gpuGetLastError());
}

template <NormOp OP> int norm_op(Dt dt, const NormParams& p, int block, gpuStream_t s, NormLaunch* used) {
  switch (dt) {
    case Dt::f32: return norm_launch<OP, F32>(p, block, s, used);
    case Dt::f16: return norm_launch<OP, F16>(p, block, s, used);
    case Dt::bf16: return norm_launch<OP, BF16>(p, block, s, used);
    case Dt::f64: return norm_launch<OP, F64>(p, block, s, used);
  }
  return -1;
}

// The fused plan's kernel for this dtype and op.
template <class T> const void* norm_bwd_fused_kernel(int layer, bool reg) {
  if (reg)
    return layer ? reinterpret_cast<const void*>(&norm_bwd_fused<T, true, true>)
                 : reinterpret_cast<const void*>(&norm_bwd_fused<T, false, true>);
  return layer ? reinterpret_cast<const void*>(&norm_bwd_fused<T, true, false>)
               : reinterpret_cast<const void*>(&norm_bwd_fused<T, false, false>);
}

// The fused plan where it applies (see norm_bwd_fused), else the separate one.
template <class T> void norm_bwd_plan(NormBwdParams& p, int block, NormBwdLaunch& l) {
  using C = typename T::C;
  const auto misaligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) != 0; };
  const int64_t npk = p.feat / T::VW, Q = p.layer ? 2 : 1;
  // Rows of at most kFusedRegThreads x kFusedPacks packs keep the column sums in registers; wider ones
  // in shared memory.
  const bool reg = npk <= int64_t(kFusedRegThreads) * kFusedPacks;
  const int64_t smem = (reg ? 0 : Q * p.feat * int64_t(sizeof(C))) + (p.w ? npk * 16 : 0);  // the sums, w
  l = NormBwdLaunch{};
  p.fused_grid = 0;
  bool fused = p.feat % T::VW == 0 && !misaligned(p.dy) && !misaligned(p.x) && !misaligned(p.w) &&
               !misaligned(p.dx) && npk <= int64_t(1024) * kFusedPacks && smem <= p.smem_limit - 2048;
  const void* k = norm_bwd_fused_kernel<T>(p.layer, reg);
  if (fused && smem > 0)  // dynamic + static may pass 48 KiB at exactly 48 KiB dynamic (f32 layer rows of 4096)
    fused = gpuFuncSetAttribute(k, gpuFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) == gpuSuccess;
  if (fused) {
    int b = KF_WARP;
    while (b < 1024 && int64_t(b) * kFusedPacks < npk) b *= 2;
    int per_sm = 0;
    if (gpuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, b, static_cast<size_t>(smem)) != gpuSuccess ||
        per_sm < 1)
      per_sm = 1;
    // Every resident block busy, and at most kFusedRows rows per block.
    const int64_t g = std::min<int64_t>(
        {p.rows, std::max<int64_t>(int64_t(std::max(p.sms, 1)) * per_sm, (p.rows + kFusedRows - 1) / kFusedRows),
         int64_t(1) << 30});
    l.fused = reg ? 2 : 1, l.block = b, l.grid = static_cast<uint32_t>(g), l.smem = smem;
    l.ws_elems = g * Q * p.feat;
    p.fused_grid = static_cast<int>(g);
    return;
  }
  l.block = block;
  l.grid = row_blocks(p.rows);
  l.ws_elems = 3 * p.rows + 2 * p.nchunks * p.feat;
}

template <class T> int norm_bwd_launch(const NormBwdParams& p, const NormBwdLaunch& l, gpuStream_t s) {
  int e;
  const uint32_t cols = static_cast<uint32_t>((p.feat + 255) / 256);
  if (l.fused) {
    const size_t sm = static_cast<size_t>(l.smem);
    if (l.fused == 2) {
      if (p.layer) norm_bwd_fused<T, true, true><<<l.grid, l.block, sm, s>>>(p);
      else norm_bwd_fused<T, false, true><<<l.grid, l.block, sm, s>>>(p);
    } else {
      if (p.layer) norm_bwd_fused<T, true, false><<<l.grid, l.block, sm, s>>>(p);
      else norm_bwd_fused<T, false, false><<<l.grid, l.block, sm, s>>>(p);
    }
    e = static_cast<int>(gpuGetLastError());
    if (e) return e;
    const dim3 g(static_cast<uint32_t>((p.feat + 31) / 32), p.layer ? 2u : 1u);
    norm_bwd_combine_fused<T><<<g, 256, 0, s>>>(p);
    return static_cast<int>(gpuGetLastError());
  }
  norm_bwd_rows<T><<<l.grid, l.block, 0, s>>>(p);
  e = static_cast<int>(gpuGetLastError());
  if (e) return e;
  norm_bwd_cols<T><<<dim3(cols, static_cast<uint32_t>(p.nchunks)), 256, 0, s>>>(p);
  e = static_cast<int>(gpuGetLastError());
  if (e) return e;
  norm_bwd_combine<T><<<cols, 256, 0, s>>>(p);
  return static_cast<int>(gpuGetLastError());
}

}  // namespace

int launch_norm(NormOp op, Dt dt, const NormParams& p, int block, void* stream, NormLaunch* cached_block) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (op) {
    case NormOp::layer: return norm_op<NormOp::layer>(dt, p, block, s, cached_block);
    case NormOp::rms: return norm_op<NormOp::rms>(dt, p, block, s, cached_block);
    case NormOp::layer_relu: return norm_op<NormOp::layer_relu>(dt, p, block, s, cached_block);
    case NormOp::layer_gelu: return norm_op<NormOp::layer_gelu>(dt, p, block, s, cached_block);
    case NormOp::layer_silu: return norm_op<NormOp::layer_silu>(dt, p, block, s, cached_block);
    case NormOp::rms_gelu: return norm_op<NormOp::rms_gelu>(dt, p, block, s, cached_block);
    case NormOp::rms_silu: return norm_op<NormOp::rms_silu>(dt, p, block, s, cached_block);
    case NormOp::add_layer: return norm_op<NormOp::add_layer>(dt, p, block, s, cached_block);
    case NormOp::add_rms: return norm_op<NormOp::add_rms>(dt, p, block, s, cached_block);
  }
  return -1;
}

void plan_norm_backward(Dt dt, NormBwdParams& p, int block, NormBwdLaunch& l) {
  switch (dt) {
    case Dt::f32: return norm_bwd_plan<F32>(p, block, l);
    case Dt::f16: return norm_bwd_plan<F16>(p, block, l);
    case Dt::bf16: return norm_bwd_plan<BF16>(p, block, l);
    case Dt::f64: return norm_bwd_plan<F64>(p, block, l);
  }
}

int launch_norm_backward(Dt dt, const NormBwdParams& p, const NormBwdLaunch& l, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f32: return norm_bwd_launch<F32>(p, l, s);
    case Dt::f16: return norm_bwd_launch<F16>(p, l, s);
    case Dt::bf16: return norm_bwd_launch<BF16>(p, l, s);
    case Dt::f64: return norm_bwd_launch<F64>(p, l, s);
  }
  return -1;
}

int launch_softmax_backward(Dt dt, const SoftmaxBwdParams& p, int block, void* stream, int* packs_block) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  const uint32_t g = row_blocks(p.rows);
  const int64_t vw = dt == Dt::f64 ? 2 : dt == Dt::f32 ? 4 : 8;
  const auto aligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  if (packs_block) *packs_block = 0;
  if (p.feat % vw == 0 && aligned(p.dy) && aligned(p.y) && aligned(p.dx)) {
    // The smallest block (a multiple of the warp, at most 1024) whose threads cache the whole row.
    const int64_t npk = p.feat / vw;
    int b = KF_WARP;
    while (b < 1024 && int64_t(b) * kSoftmaxBwdCache < npk) b *= 2;
    if (packs_block) *packs_block = b;
    switch (dt) {
      case Dt::f32: softmax_bwd_packs<F32><<<g, b, 0, s>>>(p); break;
      case Dt::f16: softmax_bwd_packs<F16><<<g, b, 0, s>>>(p); break;
      case Dt::bf16: softmax_bwd_packs<BF16><<<g, b, 0, s>>>(p); break;
      case Dt::f64: softmax_bwd_packs<F64><<<g, b, 0, s>>>(p); break;
    }
    return static_cast<int>(gpuGetLastError());
  }
  switch (dt) {
    case Dt::f32: softmax_bwd_kernel<F32><<<g, block, 0, s>>>(p); break;
    case Dt::f16: softmax_bwd_kernel<F16><<<g, block, 0, s>>>(p); break;
    case Dt::bf16: softmax_bwd_kernel<BF16><<<g, block, 0, s>>>(p); break;
    case Dt::f64: softmax_bwd_kernel<F64><<<g, block, 0, s>>>(p); break;
  }
  return static_cast<int>(gpuGetLastError());
}

int launch_batch_norm_relu(Dt dt, const BatchNormParams& p, uint32_t blocks, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  const int vw = dt == Dt::f64 ? 2 : dt == Dt::f32 ? 4 : 8;
  const auto aligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  if (p.inner % vw == 0 && aligned(p.x) && aligned(p.y)) {
    const int64_t tiles = (p.n / vw + 256 * kBnItems - 1) / (256 * kBnItems);
    const uint32_t g = static_cast<uint32_t>(std::max<int64_t>(1, std::min<int64_t>(blocks, tiles)));
    switch (dt) {
      case Dt::f32: batch_norm_relu_packs<F32><<<g, 256, 0, s>>>(p); break;
      case Dt::f16: batch_norm_relu_packs<F16><<<g, 256, 0, s>>>(p); break;
      case Dt::bf16: batch_norm_relu_packs<BF16><<<g, 256, 0, s>>>(p); break;
      case Dt::f64: batch_norm_relu_packs<F64><<<g, 256, 0, s>>>(p); break;
    }
    return static_cast<int>(gpuGetLastError());
  }
  switch (dt) {
    case Dt::f32: batch_norm_relu_kernel<F32><<<blocks, 256, 0, s>>>(p); break;
    case Dt::f16: batch_norm_relu_kernel<F16><<<blocks, 256, 0, s>>>(p); break;
    case Dt::bf16: batch_norm_relu_kernel<BF16><<<blocks, 256, 0, s>>>(p); break;
    case Dt::f64: batch_norm_relu_kernel<F64><<<blocks, 256, 0, s>>>(p); break;
  }
  return static_cast<int>(gpuGetLastError());
}

}  // namespace kf::hal::cuda
