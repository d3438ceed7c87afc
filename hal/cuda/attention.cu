// docs/ops.md section 5 (attention_scores, attention) and section 4's embedding in CUDA/HIP: the
// counterparts of shaders/attention.comp, attention_coopmat.comp and embedding.comp, with exactly the
// semantics of src/ops/attention.cpp's reference (which writes down every choice: score order, window,
// ALiBi slopes, RoPE positions, the dropout index, sinks, empty rows).
//
// attention, portable kernel (attn_simt): one block per (query tile, kv head, sequence x key split). A
// tile holds bq rows of the G = Hq / Hkv query heads that share the kv head (row r: query i = r / G, head
// hk G + r % G), so that grouped-query attention reads each K/V tile once for the group. 8 threads serve
// a row: for the scores each takes bk / 8 keys of the tile (a whole dot product over D from shared
// memory); for P V each owns the 16-byte packs lane, lane + 8, ... of the output row. K and V tiles pass
// through one shared buffer (K, then V); the softmax is online (running max m, sum l, rescaled
// accumulator) in the compute type (float; double for f64), so Sq x Sk never exists in memory. The 8
// threads of a row read its scores from shared memory in the same order, so they agree bit for bit on
// its max without a reduction. Tiles that a mask hides entirely are skipped (causal, window, key lengths,
// block mask). Scores: s = scale q.k (the scale folded into the staged q, after RoPE), soft-capping,
// ALiBi, masks; dropout keeps p with the Philox generator at the (b, h, i, j) index of the
// [B, Hq, Sq, Sk] probability matrix, keep(i) = (word >> 8) >= thr as every backend.
// Key splits: the key range is cut into nsplit parts (blockIdx.z % nsplit); each writes its partial
// (unnormalized accumulator, m, l) and attn_combine merges them in split order (decoding: one query row
// still fills the GPU).
// The other forward kernels, which launch_attention below picks among: the decode kernel in
// attention_decode.cu, the tensor-core kernels (flash-wmma, flash-mma) in attention_mma.cu, flash-wgmma in
// attention_wgmma.cu; their shared device code in attention_common.cuh.
#include <algorithm>
#include <type_traits>

#include "hal/cuda/attention_common.cuh"

namespace kf::hal::cuda {
namespace {

// The end of a row: its partial to the workspace (splits), or the sink, the normalization, o and lse.
// acc holds this thread's packs lane, lane + 8, ... (NQ of them) of the row.
template <class T, int NQ>
KF_DEV void finish_row(const AttnParams& p, int64_t rowidx, int h, int lane, int split, typename T::C m,
                       typename T::C l, typename T::C (&acc)[NQ * T::VW]) {
  using C = typename T::C;
  using M = Math<C, T::FAST>;
  constexpr int VW = T::VW;
  const int NPK = p.D / VW;
  if (p.nsplit > 1) {
    const int64_t rows = int64_t(p.B) * p.Hq * p.SqT;
    const int64_t part = int64_t(split) * rows + rowidx;
    C* accs = static_cast<C*>(p.part);
    C* ml = accs + int64_t(p.nsplit) * rows * p.D;
#pragma unroll
    for (int q = 0; q < NQ; ++q) {
      const int pk = lane + kTpr * q;
      if (pk < NPK)
#pragma unroll
        for (int e = 0; e < VW; ++e) accs[part * p.D + pk * VW + e] = acc[q * VW + e];
    }
    if (lane == 0) ml[2 * part] = m, ml[2 * part + 1] = l;
    return;
  }
  if (p.sinks) {
    const C a = fold_sink<M>(m, l, C(T::load(p.sinks, h)));
#pragma unroll
    for (int k = 0; k < NQ * VW; ++k) acc[k] *= a;
  }
  const C inv = l > C(0) ? C(1) / l : C(0);
#pragma unroll
  for (int q = 0; q < NQ; ++q) {
    const int pk = lane + kTpr * q;
    if (pk < NPK) {
      C o[VW];
#pragma unroll
      for (int e = 0; e < VW; ++e) o[e] = acc[q * VW + e] * inv;
      store_pack(p.o, rowidx * NPK + pk, T::pack(o));
    }
  }
  if (p.lse && lane == 0) T::store(p.lse, rowidx, l > C(0) ? m + m_log(l) : neg_inf<C>());
}

// ---- The portable flash kernel. Shared memory (compute type): Qs [bq][D + 1], KVs [BK][D + 1],
// Ss and Ps [bq][BK]; bq = blockDim.x / 8.
template <class T, int BK>
__global__ void __launch_bounds__(256) attn_simt(const AttnParams p) {
  using C = typename T::C;
  using M = Math<C, T::FAST>;
  constexpr int VW = T::VW;
  constexpr int NU = BK / kTpr;      // keys per thread in the scores
  constexpr int NQ = kMaxAcc / VW;   // packs per thread at most
  extern __shared__ __align__(32) unsigned char attn_smem[];
  const int D = p.D, DP = D + 1, NPK = D / VW;
  const int BQ = blockDim.x / kTpr;
  C* Qs = reinterpret_cast<C*>(attn_smem);
  C* KVs = Qs + BQ * DP;
  C* Ss = KVs + BK * DP;
  C* Ps = Ss + BQ * BK;
  const int tid = threadIdx.x, lr = tid / kTpr, lane = tid % kTpr;
  const int seq = blockIdx.z / p.nsplit, split = blockIdx.z % p.nsplit;
  const int hk = blockIdx.y;
  const int64_t r0 = int64_t(blockIdx.x) * BQ;
  Geo g;
  if (!block_geometry(p, seq, split, r0, BQ, g)) return;  // uniform over the block

  // This thread's row.
  const int64_t my_r = r0 + lr;
  const bool row_ok = my_r < g.nrows;
  const int qi = static_cast<int>(my_r / p.G);
  const int h = hk * p.G + static_cast<int>(my_r % p.G);
  const int row_global = g.qbeg + qi;
  const int64_t rowidx = (int64_t(g.b) * p.Hq + h) * p.SqT + row_global;
  const C slope = p.alibi ? alibi_slope<T>(h, p) : C(0);

  // The query tile (scaled; with RoPE, rotated first, then scaled).
  const C qscale = p.rope_mode ? C(1) : C(p.scale);
  for (int e = tid; e < BQ * NPK; e += blockDim.x) {
    const int t = e / NPK, pk = e % NPK;
    const int64_t rq = r0 + t;
    C x[VW];
    if (rq < g.nrows) {
      const int qh = hk * p.G + static_cast<int>(rq % p.G);
      T::unpack(load_pack(p.q, ((int64_t(g.b) * p.Hq + qh) * p.SqT + g.qbeg + rq / p.G) * NPK + pk), x);
    } else {
#pragma unroll
      for (int k = 0; k < VW; ++k) x[k] = C(0);
    }
#pragma unroll
    for (int k = 0; k < VW; ++k) Qs[t * DP + pk * VW + k] = x[k] * qscale;
  }
  __syncthreads();
  if (p.rope_mode) {
    rope_rows(Qs, DP, static_cast<int>(m_min(int64_t(BQ), g.nrows - r0)), true, r0, g.off, p);
    __syncthreads();
    for (int e = tid; e < BQ * D; e += blockDim.x) Qs[(e / D) * DP + e % D] *= C(p.scale);
    __syncthreads();
  }

  C m = neg_inf<C>(), l = C(0);
  C acc[NQ * VW];
#pragma unroll
  for (int k = 0; k < NQ * VW; ++k) acc[k] = C(0);
  const int64_t kvbase = (int64_t(g.b) * p.Hkv + hk) * p.SkT + g.kbeg;

  // Rows j0 .. j0 + BK - 1 of K or V into the tile (zeros past the visible keys).
  const auto stage_tile = [&](const void* src, int j0) {
    for (int e = tid; e < BK * NPK; e += blockDim.x) {
      const int t = e / NPK, pk = e % NPK, j = j0 + t;
      C x[VW];
      if (j < g.jend) {
        T::unpack(load_pack(src, (kvbase + j) * NPK + pk), x);
      } else {
#pragma unroll
        for (int k = 0; k < VW; ++k) x[k] = C(0);
      }
#pragma unroll
      for (int k = 0; k < VW; ++k) KVs[t * DP + pk * VW + k] = x[k];
    }
  };
  for (int j0 = g.jbeg; j0 < g.jend; j0 += BK) {
    if (!tile_in_mask(p, g, j0, m_min(j0 + BK, g.jend) - 1)) continue;  // the same decision in every thread
    stage_tile(p.k, j0);  // K tile
    __syncthreads();
    if (p.rope_mode) {
      rope_rows(KVs, DP, m_min(BK, g.jend - j0), false, j0, 0, p);
      __syncthreads();
    }
    // Scores of this thread's keys (lane, lane + 8, ...): the dot products together, so that each q
    // value read from shared memory serves all of them.
    C dots[NU];
#pragma unroll
    for (int u = 0; u < NU; ++u) dots[u] = C(0);
    for (int d = 0; d < D; ++d) {
      const C qd = Qs[lr * DP + d];
#pragma unroll
      for (int u = 0; u < NU; ++u) dots[u] += qd * KVs[(lane + kTpr * u) * DP + d];
    }
#pragma unroll
    for (int u = 0; u < NU; ++u) {
      const int t = lane + kTpr * u, j = j0 + t;
      Ss[lr * BK + t] = score_of<T>(dots[u], row_ok && j < g.jend, qi, j, row_global, slope, p, g);
    }
    __syncthreads();
    // V tile (K is no longer read), and the probabilities of this thread's keys.
    stage_tile(p.v, j0);
    C mt = neg_inf<C>();
    for (int t = 0; t < BK; ++t) mt = m_max(mt, Ss[lr * BK + t]);
    const C mnew = m_max(m, mt);
    const C alpha = mnew == neg_inf<C>() ? C(1) : M::exp(m - mnew);
    for (int t = lane; t < BK; t += kTpr) {
      const C s = Ss[lr * BK + t];
      C pr = s == neg_inf<C>() ? C(0) : M::exp(s - mnew);
      // Dropped probabilities are stored negated: they count in the sum l, not in the output.
      if (p.dropout && pr > C(0) && !attn_keep(rowidx, int64_t(g.kbeg) + j0 + t, p)) pr = -pr;
      Ps[lr * BK + t] = pr;
    }
    __syncthreads();
    // The tile's sums first, then added to the running ones (blocked summation).
    C lt = C(0);
    C tacc[NQ * VW];
#pragma unroll
    for (int k = 0; k < NQ * VW; ++k) tacc[k] = C(0);
    for (int t = 0; t < BK; ++t) {
      const C pr = Ps[lr * BK + t];
      lt += m_abs(pr);
      const C w = p.dropout ? (pr > C(0) ? pr : C(0)) * C(p.keep_scale) : pr;
      if (w == C(0)) continue;
#pragma unroll
      for (int q = 0; q < NQ; ++q) {
        const int pk = lane + kTpr * q;
        if (pk < NPK)
#pragma unroll
          for (int e = 0; e < VW; ++e) tacc[q * VW + e] += w * KVs[t * DP + pk * VW + e];
      }
    }
    l = l * alpha + lt;
#pragma unroll
    for (int k = 0; k < NQ * VW; ++k) acc[k] = acc[k] * alpha + tacc[k];
    m = mnew;
    __syncthreads();
  }

  if (!row_ok) return;  // no barrier follows
  finish_row<T, NQ>(p, rowidx, h, lane, split, m, l, acc);
}

// ---- The combine pass of the key splits: one thread per output element, the partials of its row in
// split order (the same bits every run).
template <class T>
__global__ void __launch_bounds__(256) attn_combine(const AttnParams p) {
  using C = typename T::C;
  using M = Math<C, T::FAST>;
  const int64_t rows = int64_t(p.B) * p.Hq * p.SqT, n = rows * p.D;
  const C* accs = static_cast<const C*>(p.part);
  const C* ml = accs + int64_t(p.nsplit) * rows * p.D;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / p.D;
    const int d = static_cast<int>(e % p.D);
    const int h = static_cast<int>((row / p.SqT) % p.Hq);
    C m = neg_inf<C>();
    for (int s = 0; s < p.nsplit; ++s) m = m_max(m, ml[2 * (int64_t(s) * rows + row)]);
    if (p.sinks) m = m_max(m, T::load(p.sinks, h));
    C l = C(0), a_acc = C(0);
    if (m != neg_inf<C>()) {
      for (int s = 0; s < p.nsplit; ++s) {
        const int64_t part = int64_t(s) * rows + row;
        const C ms = ml[2 * part];
        if (ms == neg_inf<C>()) continue;
        const C a = M::exp(ms - m);
        l += a * ml[2 * part + 1];
        a_acc += a * accs[part * p.D + d];
      }
      if (p.sinks) l += M::exp(T::load(p.sinks, h) - m);
    }
    const C inv = l > C(0) ? C(1) / l : C(0);
    T::store(p.o, e, a_acc * inv);
    if (p.lse && d == 0) T::store(p.lse, row, l > C(0) ? m + m_log(l) : neg_inf<C>());
  }
}

// ---- attention_scores: s[b, h, i, j] = scale q[b, h, i] . k[b, h / G, j]; a block of 256 threads
// computes a 16 x 16 tile of (i, j), staging 16-wide slices of q and k in shared memory.
template <class T>
__global__ void __launch_bounds__(256) attn_scores(const AttnParams p) {
  using C = typename T::C;
  __shared__ C Qt[16][17];
  __shared__ C Kt[16][17];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t i0 = int64_t(blockIdx.y) * 16, j0 = int64_t(blockIdx.x) * 16;
  const int bh = blockIdx.z, b = bh / p.Hq, h = bh % p.Hq, hk = h / p.G;
  const int64_t qbase = int64_t(bh) * p.SqT * p.D, kbase = (int64_t(b) * p.Hkv + hk) * p.SkT * p.D;
  C acc = C(0);
  for (int d0 = 0; d0 < p.D; d0 += 16) {
    const int64_t qi = i0 + ty, kj = j0 + ty;
    const int d = d0 + tx;
    Qt[ty][tx] = qi < p.SqT && d < p.D ? T::load(p.q, qbase + qi * p.D + d) : C(0);
    Kt[ty][tx] = kj < p.SkT && d < p.D ? T::load(p.k, kbase + kj * p.D + d) : C(0);
    __syncthreads();
#pragma unroll
    for (int e = 0; e < 16; ++e) acc += Qt[ty][e] * Kt[tx][e];
    __syncthreads();
  }
  const int64_t i = i0 + ty, j = j0 + tx;
  if (i < p.SqT && j < p.SkT) T::store(p.o, (int64_t(bh) * p.SqT + i) * p.SkT + j, acc * C(p.scale));
}

// ---- embedding: one thread per output pack (wide) or element, grid-stride.
template <class T>
__global__ void __launch_bounds__(256) embedding_kernel(const EmbeddingParams p) {
  using C = typename T::C;
  constexpr int VW = T::VW;
  const int64_t n = p.rows * p.d;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  if (p.wide) {
    for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < n / VW; u += stride) {
      const int64_t e0 = u * VW, r = e0 / p.d, c0 = e0 % p.d;
      const int32_t id = p.tokens[r];
      C v[VW];
      if (id >= 0 && id < p.V) {
        T::unpack(load_pack(p.table, (int64_t(id) * p.d + c0) / VW), v);
      } else {
#pragma unroll
        for (int k = 0; k < VW; ++k) v[k] = nan_value<C>();
      }
      if (p.pos) {
        C ps[VW];
        T::unpack(load_pack(p.pos, ((r % p.L) * p.d + c0) / VW), ps);
#pragma unroll
        for (int k = 0; k < VW; ++k) v[k] += ps[k];
      }
      store_pack(p.y, u, T::pack(v));
    }
  } else {
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
      const int64_t r = e / p.d, c = e % p.d;
      const int32_t id = p.tokens[r];
      C v = id >= 0 && id < p.V ? T::load(p.table, int64_t(id) * p.d + c) : nan_value<C>();
      if (p.pos) v += T::load(p.pos, (r % p.L) * p.d + c);
      T::store(p.y, e, v);
    }
  }
}

template <class T>
int launch_simt(const AttnParams& p, int bq, int bk, uint32_t qtiles, gpuStream_t s) {
  const dim3 grid(qtiles, static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.nseq * p.nsplit));
  const size_t shared = static_cast<size_t>(attn_simt_shared_bytes(sizeof(typename T::C) == 8 ? Dt::f64 : Dt::f32, bq, bk, p.D));
  if (bk == 32) attn_simt<T, 32><<<grid, bq * kTpr, shared, s>>>(p);
  else if (bk == 16) attn_simt<T, 16><<<grid, bq * kTpr, shared, s>>>(p);
  else attn_simt<T, 8><<<grid, bq * kTpr, shared, s>>>(p);
  return static_cast<int>(gpuGetLastError());
}

template <class T>
int launch_combine(const AttnParams& p, gpuStream_t s) {
  const int64_t n = int64_t(p.B) * p.Hq * p.SqT * p.D;
  const uint32_t blocks = static_cast<uint32_t>(std::min<int64_t>((n + 255) / 256, int64_t(1) << 20));
  attn_combine<T><<<blocks, 256, 0, s>>>(p);
  return static_cast<int>(gpuGetLastError());
}
}  // namespace

int64_t attn_simt_shared_bytes(Dt dt, int bq, int bk, int D) {
  const int64_t cs = dt == Dt::f64 ? 8 : 4;
  return cs * ((int64_t(bq) + bk) * (D + 1) + 2 * int64_t(bq) * bk);
}

int launch_attention_scores(Dt dt, const AttnParams& p, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  const dim3 grid(static_cast<unsigned>((p.SkT + 15) / 16), static_cast<unsigned>((p.SqT + 15) / 16),
                  static_cast<unsigned>(p.B * p.Hq));
  switch (dt) {
    case Dt::f32: attn_scores<F32><<<grid, 256, 0, s>>>(p); break;
    case Dt::f16: attn_scores<F16><<<grid, 256, 0, s>>>(p); break;
    case Dt::bf16: attn_scores<BF16><<<grid, 256, 0, s>>>(p); break;
    case Dt::f64: attn_scores<F64><<<grid, 256, 0, s>>>(p); break;
  }
  return static_cast<int>(gpuGetLastError());
}

int launch_embedding(Dt dt, const EmbeddingParams& p, uint32_t blocks, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f32: embedding_kernel<F32><<<blocks, 256, 0, s>>>(p); break;
    case Dt::f16: embedding_kernel<F16><<<blocks, 256, 0, s>>>(p); break;
    case Dt::bf16: embedding_kernel<BF16><<<blocks, 256, 0, s>>>(p); break;
    case Dt::f64: embedding_kernel<F64><<<blocks, 256, 0, s>>>(p); break;
  }
  return static_cast<int>(gpuGetLastError());
}

int launch_attention(AttnKernel kern, Dt dt, const AttnParams& p, int bq, int bk, uint32_t qtiles, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  int err = 0;
  if (kern == AttnKernel::Decode) return launch_attention_decode(dt, p, stream);  // its own combine pass
  if (kern == AttnKernel::Wgmma) {
    err = launch_attention_wgmma(dt, p, qtiles, stream);
  } else if (kern == AttnKernel::Mma || kern == AttnKernel::Wmma || kern == AttnKernel::WmmaRegs) {
    err = launch_attention_mma(kern, dt, p, bq, bk, qtiles, stream);
  } else {
    switch (dt) {
      case Dt::f32: err = launch_simt<F32>(p, bq, bk, qtiles, s); break;
      case Dt::f16: err = launch_simt<F16>(p, bq, bk, qtiles, s); break;
      case Dt::bf16: err = launch_simt<BF16>(p, bq, bk, qtiles, s); break;
      case Dt::f64: err = launch_simt<F64>(p, bq, bk, qtiles, s); break;
    }
  }
  if (err != 0 || p.nsplit <= 1) return err;
  switch (dt) {
    case Dt::f32: return launch_combine<F32>(p, s);
    case Dt::f16: return launch_combine<F16>(p, s);
    case Dt::bf16: return launch_combine<BF16>(p, s);
    case Dt::f64: return launch_combine<F64>(p, s);
  }
  return -1;
}

}  // namespace kf::hal::cuda
