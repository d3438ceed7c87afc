// attention_backward (docs/ops.md section 5, training) in CUDA/HIP: the counterpart of
// shaders/attention_bwd.comp, with exactly the semantics of src/ops/attention_backward.cpp's reference, as
// FlashAttention 2 computes it: the probabilities are recomputed tile by tile from q, k and the forward's
// lse, never stored.
//   P = exp(s - lse), s as in the forward (scale, soft-capping, ALiBi, masks: attention_common.cuh),
//   Z = keep / (1 - p) from the forward's Philox index, dP = Z do . v, D = do . o,
//   dS = P (dP - D) (1 - tanh^2(t / c)) scale; dv += Z P do, dk += dS q, dq += dS k on rotated q and k;
//   dq and dk are rotated back (RoPE). The sinks enter only through lse.
// Three passes, in order on the stream:
//   PRE: one thread per query row, D_i = do_i . o_i into the workspace (compute type).
//   DKV: one block per (key tile of bk keys, kv head, sequence); 8 threads per key own the 16-byte packs
//        lane, lane + 8, ... of its dk and dv rows; the block loops over the query rows of the G heads
//        that share the kv head (row r: query r / G, head hk G + r % G) in tiles of bq, so dk and dv sum
//        over the group in a fixed order, without atomics.
//   DQ:  one block per (query tile of bq rows, kv head, sequence), as the forward's portable kernel; 8
//        threads per row; loops over the key tiles and accumulates dq.
// Every sum runs in one thread in a fixed order (the dot products over d, then the tile entries in
// order): the same bits every run. Compute type float (double for f64).
#include <algorithm>

#include "hal/cuda/attention_common.cuh"

namespace kf::hal::cuda {
namespace {

// The tiles in shared memory (compute type C): Qs and dOs [bq][D + 1], Ks and Vs [bk][D + 1], Ps and dSs
// [bk * bq] (DKV: [key][row]; DQ: [row][key]), lse_s and D_s [bq].
template <class C>
struct BwdTiles {
  C *Qs, *dOs, *Ks, *Vs, *Ps, *dSs, *lse_s, *D_s;
  int DP;
  KF_DEV BwdTiles(unsigned char* smem, int bq, int bk, int D) {
    DP = D + 1;
    Qs = reinterpret_cast<C*>(smem);
    dOs = Qs + bq * DP;
    Ks = dOs + bq * DP;
    Vs = Ks + bk * DP;
    Ps = Vs + bk * DP;
    dSs = Ps + bq * bk;
    lse_s = dSs + bq * bk;
    D_s = lse_s + bq;
  }
};

// D_i = do_i . o_i, one thread per row, as four partial sums by d mod 4 added as grad_entry adds dP's: for a
// row that sees one key o is that key's v, and the exact dS = P (dP - D) = 0 comes out as 0 only when D
// and dP are summed alike (packed sequences of one key otherwise left noise where the reference has zeros).
template <class T>
__global__ void __launch_bounds__(256) attn_bwd_pre(const AttnBwdParams P) {
  using C = typename T::C;
  constexpr int VW = T::VW;
  const int NPK = P.a.D / VW;
  const int64_t rows = int64_t(P.a.B) * P.a.Hq * P.a.SqT;
  C* dsum = static_cast<C*>(P.dsum);
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    C d4[4] = {C(0), C(0), C(0), C(0)};
    for (int pk = 0; pk < NPK; ++pk) {
      C o[VW], g[VW];
      T::unpack(load_pack(P.o, r * NPK + pk), o);
      T::unpack(load_pack(P.dout, r * NPK + pk), g);
#pragma unroll
      for (int e = 0; e < VW; ++e) d4[(pk * VW + e) & 3] += g[e] * o[e];
    }
    dsum[r] = (d4[0] + d4[1]) + (d4[2] + d4[3]);
  }
}

// Stages the block rows [r0, r0 + bq) of kv head hk (rows at or past nrows: zeros, lse -inf), q and do
// as given (RoPE is the caller's), lse and D per row.
template <class T>
KF_DEV void stage_q(const AttnBwdParams& P, const Geo& g, int hk, int64_t r0, int64_t nrows, int bq,
                    const BwdTiles<typename T::C>& s) {
  using C = typename T::C;
  constexpr int VW = T::VW;
  const AttnParams& p = P.a;
  const int NPK = p.D / VW;
  for (int e = threadIdx.x; e < bq * NPK; e += blockDim.x) {
    const int t = e / NPK, pk = e % NPK;
    const int64_t rq = r0 + t;
    C x[VW], y[VW];
    int64_t rowidx = 0;
    if (rq < nrows) {
      rowidx = (int64_t(g.b) * p.Hq + int64_t(hk) * p.G + rq % p.G) * p.SqT + g.qbeg + rq / p.G;
      T::unpack(load_pack(p.q, rowidx * NPK + pk), x);
      T::unpack(load_pack(P.dout, rowidx * NPK + pk), y);
    } else {
#pragma unroll
      for (int k = 0; k < VW; ++k) x[k] = C(0), y[k] = C(0);
    }
#pragma unroll
    for (int k = 0; k < VW; ++k) {
      s.Qs[t * s.DP + pk * VW + k] = x[k];
      s.dOs[t * s.DP + pk * VW + k] = y[k];
    }
    if (pk == 0) {
      s.lse_s[t] = rq < nrows ? T::load(P.lse, rowidx) : neg_inf<C>();
      s.D_s[t] = rq < nrows ? static_cast<const C*>(P.dsum)[rowidx] : C(0);
    }
  }
}

// Stages keys [j0, j0 + bk) of kv head hk into Ks and Vs (keys at or past jend: zeros), unrotated.
template <class T>
KF_DEV void stage_kv(const AttnBwdParams& P, const Geo& g, int hk, int j0, int jend, int bk,
                     const BwdTiles<typename T::C>& s) {
  using C = typename T::C;
  constexpr int VW = T::VW;
  const AttnParams& p = P.a;
  const int NPK = p.D / VW;
  const int64_t kvbase = (int64_t(g.b) * p.Hkv + hk) * p.SkT + g.kbeg;
  for (int e = threadIdx.x; e < bk * NPK; e += blockDim.x) {
    const int t = e / NPK, pk = e % NPK, j = j0 + t;
    C x[VW], y[VW];
    if (j < jend) {
      T::unpack(load_pack(p.k, (kvbase + j) * NPK + pk), x);
      T::unpack(load_pack(p.v, (kvbase + j) * NPK + pk), y);
    } else {
#pragma unroll
      for (int k = 0; k < VW; ++k) x[k] = C(0), y[k] = C(0);
    }
#pragma unroll
    for (int k = 0; k < VW; ++k) {
      s.Ks[t * s.DP + pk * VW + k] = x[k];
      s.Vs[t * s.DP + pk * VW + k] = y[k];
    }
  }
}

// Z P and dS of staged query row t (block row r0 + t, of nrows) against staged key u (key j0 + u): the
// forward's score recomputed from the rotated tiles. Zero where a mask hides the key or the row saw none.
template <class T>
KF_DEV void grad_entry(const AttnBwdParams& P, const Geo& g, int hk, int64_t r0, int64_t nrows, int t, int j0, int u,
                       const BwdTiles<typename T::C>& s, typename T::C& zp, typename T::C& ds) {
  using C = typename T::C;
  using M = Math<C, T::FAST>;
  const AttnParams& p = P.a;
  zp = C(0), ds = C(0);
  const int64_t rq = r0 + t;
  const int j = j0 + u;
  if (rq >= nrows || j >= g.kl) return;
  const int qi = static_cast<int>(rq / p.G);
  const int h = hk * p.G + static_cast<int>(rq % p.G);
  const int row_global = g.qbeg + qi;
  if (!visible(qi, j, row_global, p, g)) return;
  const C lse = s.lse_s[t];
  if (!(lse > neg_inf<C>())) return;
  const C* q = s.Qs + t * s.DP;
  const C* dO = s.dOs + t * s.DP;
  const C* k = s.Ks + u * s.DP;
  const C* v = s.Vs + u * s.DP;
  // Four partial sums a product (D is a multiple of 8): a quarter of one running sum's rounding, which exp()
  // turns into P's relative error (f32 over D 128 missed docs/ops.md's 1e-6 in some runs with one sum).
  C dq4[4] = {C(0), C(0), C(0), C(0)}, dp4[4] = {C(0), C(0), C(0), C(0)};
  for (int d = 0; d < p.D; d += 4) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      dq4[e] += q[d + e] * k[d + e];
      dp4[e] += dO[d + e] * v[d + e];
    }
  }
  const C dot = (dq4[0] + dq4[1]) + (dq4[2] + dq4[3]), dpv = (dp4[0] + dp4[1]) + (dp4[2] + dp4[3]);
  const C scale = C(p.scale);
  C sc = dot * scale, dcap = C(1);
  if (p.softcap > 0) {
    const C th = M::tanh(sc / C(p.softcap));
    sc = C(p.softcap) * th;
    dcap = C(1) - th * th;
  }
  if (p.alibi) sc -= alibi_slope<T>(h, p) * m_abs(C(qi + g.off - j));
  const C pr = M::exp(sc - lse);
  C z = C(1);
  if (p.dropout) {
    const int64_t rowidx = (int64_t(g.b) * p.Hq + h) * p.SqT + row_global;
    z = attn_keep(rowidx, int64_t(g.kbeg) + j, p) ? C(p.keep_scale) : C(0);
  }
  zp = z * pr;
  ds = pr * (z * dpv - s.D_s[t]) * dcap * scale;
}

// Stores this thread's packs (lane, lane + 8, ...) of acc to row `row` of `dst`.
template <class T, int NQ>
KF_DEV void store_row(void* dst, int64_t row, int lane, int NPK, const typename T::C (&acc)[NQ * T::VW]) {
  constexpr int VW = T::VW;
#pragma unroll
  for (int q = 0; q < NQ; ++q) {
    const int pk = lane + kTpr * q;
    if (pk < NPK) {
      typename T::C x[VW];
#pragma unroll
      for (int e = 0; e < VW; ++e) x[e] = acc[q * VW + e];
      store_pack(dst, row * NPK + pk, T::pack(x));
    }
  }
}

// Rotates this thread's accumulator row back (RoPE, sgn -1) through row `t` of the tile X: every thread
// writes its packs, the block rotates rows [0, n), every thread reads its packs back. Called by every
// thread of the block (barriers), after the last read of X.
template <class T, int NQ>
KF_DEV void rotate_back(typename T::C (&acc)[NQ * T::VW], typename T::C* X, int DP, int t, int lane, int n, bool query,
                        int64_t first, int off, const AttnParams& p) {
  using C = typename T::C;
  constexpr int VW = T::VW;
  const int NPK = p.D / VW;
#pragma unroll
  for (int q = 0; q < NQ; ++q) {
    const int pk = lane + kTpr * q;
    if (pk < NPK)
#pragma unroll
      for (int e = 0; e < VW; ++e) X[t * DP + pk * VW + e] = acc[q * VW + e];
  }
  __syncthreads();
  rope_rows(X, DP, n, query, first, off, p, C(-1));
  __syncthreads();
#pragma unroll
  for (int q = 0; q < NQ; ++q) {
    const int pk = lane + kTpr * q;
    if (pk < NPK)
#pragma unroll
      for (int e = 0; e < VW; ++e) acc[q * VW + e] = X[t * DP + pk * VW + e];
  }
}

// ---- DKV: blockDim.x = 8 bk; bq query rows per tile.
template <class T>
__global__ void __launch_bounds__(128) attn_bwd_dkv(const AttnBwdParams P) {
  using C = typename T::C;
  constexpr int VW = T::VW;
  constexpr int NQ = kMaxAcc / VW;
  extern __shared__ __align__(32) unsigned char attn_bwd_smem[];
  const AttnParams& p = P.a;
  const int bq = P.bq, bk = P.bk;  // blockDim.x = 8 bk
  const BwdTiles<C> s(attn_bwd_smem, bq, bk, p.D);
  const int NPK = p.D / VW;
  const int tid = threadIdx.x, jr = tid / kTpr, lane = tid % kTpr;
  const int hk = blockIdx.y, seq = blockIdx.z;
  Geo g;
  seq_geometry(p, seq, g);
  const int j0 = static_cast<int>(blockIdx.x) * bk;
  if (j0 >= g.klen) return;  // uniform over the block
  const int jlast = m_min(j0 + bk, g.klen) - 1;
  stage_kv<T>(P, g, hk, j0, g.klen, bk, s);
  __syncthreads();
  if (p.rope_mode) {
    rope_rows(s.Ks, s.DP, jlast - j0 + 1, false, j0, 0, p);
    __syncthreads();
  }
  int64_t r_begin, r_end;  // the rows that can see a key of the tile
  dkv_rows(p, g, j0, jlast, r_begin, r_end);

  C dk[NQ * VW], dv[NQ * VW];
#pragma unroll
  for (int k = 0; k < NQ * VW; ++k) dk[k] = C(0), dv[k] = C(0);
  for (int64_t r0 = r_begin; r0 < r_end; r0 += bq) {
    stage_q<T>(P, g, hk, r0, r_end, bq, s);
    __syncthreads();
    if (p.rope_mode) {
      rope_rows(s.Qs, s.DP, static_cast<int>(m_min(int64_t(bq), r_end - r0)), true, r0, g.off, p);
      __syncthreads();
    }
    for (int t = lane; t < bq; t += kTpr) {
      C zp, ds;
      grad_entry<T>(P, g, hk, r0, r_end, t, j0, jr, s, zp, ds);
      s.Ps[jr * bq + t] = zp;
      s.dSs[jr * bq + t] = ds;
    }
    __syncthreads();
    for (int t = 0; t < bq; ++t) {
      const C zp = s.Ps[jr * bq + t], ds = s.dSs[jr * bq + t];
      if (zp == C(0) && ds == C(0)) continue;
#pragma unroll
      for (int q = 0; q < NQ; ++q) {
        const int pk = lane + kTpr * q;
        if (pk < NPK)
#pragma unroll
          for (int e = 0; e < VW; ++e) {
            dv[q * VW + e] += zp * s.dOs[t * s.DP + pk * VW + e];
            dk[q * VW + e] += ds * s.Qs[t * s.DP + pk * VW + e];
          }
      }
    }
    __syncthreads();  // the tiles are free for the next query rows
  }
  if (p.rope_mode) rotate_back<T, NQ>(dk, s.Ks, s.DP, jr, lane, jlast - j0 + 1, false, j0, 0, p);
  if (j0 + jr > jlast) return;  // no barrier follows
  const int64_t krow = (int64_t(g.b) * p.Hkv + hk) * p.SkT + g.kbeg + j0 + jr;
  store_row<T, NQ>(P.dk, krow, lane, NPK, dk);
  store_row<T, NQ>(P.dv, krow, lane, NPK, dv);
}

// ---- DQ: blockDim.x = 8 bq; bk keys per tile.
template <class T>
__global__ void __launch_bounds__(128) attn_bwd_dq(const AttnBwdParams P) {
  using C = typename T::C;
  constexpr int VW = T::VW;
  constexpr int NQ = kMaxAcc / VW;
  extern __shared__ __align__(32) unsigned char attn_bwd_smem[];
  const AttnParams& p = P.a;
  const int bq = P.bq, bk = P.bk;  // blockDim.x = 8 bq
  const BwdTiles<C> s(attn_bwd_smem, bq, bk, p.D);
  const int NPK = p.D / VW;
  const int tid = threadIdx.x, lr = tid / kTpr, lane = tid % kTpr;
  const int hk = blockIdx.y, seq = blockIdx.z;
  const int64_t r0 = int64_t(blockIdx.x) * bq;
  Geo g;
  if (!block_geometry(p, seq, 0, r0, bq, g)) return;  // uniform over the block (p.nsplit is 1)
  const int nr = static_cast<int>(m_min(int64_t(bq), g.nrows - r0));
  stage_q<T>(P, g, hk, r0, g.nrows, bq, s);
  __syncthreads();
  if (p.rope_mode) {
    rope_rows(s.Qs, s.DP, nr, true, r0, g.off, p);
    __syncthreads();
  }
  C dq[NQ * VW];
#pragma unroll
  for (int k = 0; k < NQ * VW; ++k) dq[k] = C(0);
  for (int j0 = g.jbeg; j0 < g.jend; j0 += bk) {
    if (!tile_in_mask(p, g, j0, m_min(j0 + bk, g.jend) - 1)) continue;  // the same decision in every thread
    stage_kv<T>(P, g, hk, j0, g.jend, bk, s);
    __syncthreads();
    if (p.rope_mode) {
      rope_rows(s.Ks, s.DP, m_min(bk, g.jend - j0), false, j0, 0, p);
      __syncthreads();
    }
    for (int t = lane; t < bk; t += kTpr) {
      C zp, ds;
      grad_entry<T>(P, g, hk, r0, g.nrows, lr, j0, t, s, zp, ds);
      if (j0 + t >= g.jend) ds = C(0);
      s.dSs[lr * bk + t] = ds;
    }
    __syncthreads();
    for (int t = 0; t < bk; ++t) {
      const C ds = s.dSs[lr * bk + t];
      if (ds == C(0)) continue;
#pragma unroll
      for (int q = 0; q < NQ; ++q) {
        const int pk = lane + kTpr * q;
        if (pk < NPK)
#pragma unroll
          for (int e = 0; e < VW; ++e) dq[q * VW + e] += ds * s.Ks[t * s.DP + pk * VW + e];
      }
    }
    __syncthreads();  // the tiles are free for the next keys
  }
  if (p.rope_mode) rotate_back<T, NQ>(dq, s.Qs, s.DP, lr, lane, nr, true, r0, g.off, p);
  const int64_t my_r = r0 + lr;
  if (my_r >= g.nrows) return;  // no barrier follows
  const int64_t rowidx = (int64_t(g.b) * p.Hq + int64_t(hk) * p.G + my_r % p.G) * p.SqT + g.qbeg + my_r / p.G;
  store_row<T, NQ>(P.dq, rowidx, lane, NPK, dq);
}

template <class T>
int launch_pre(const AttnBwdParams& P, gpuStream_t st) {
  const AttnParams& p = P.a;
  const int64_t rows = int64_t(p.B) * p.Hq * p.SqT;
  if (rows <= 0) return 0;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((rows + 255) / 256, int64_t(1) << 20));
  attn_bwd_pre<T><<<blocks, 256, 0, st>>>(P);
  return static_cast<int>(gpuGetLastError());
}

template <class T>
int launch_bwd(AttnBwdParams P, int bq, int bk, gpuStream_t st) {
  P.bq = bq, P.bk = bk;
  const AttnParams& p = P.a;
  const size_t shared = static_cast<size_t>(attn_bwd_shared_bytes(sizeof(typename T::C) == 8 ? Dt::f64 : Dt::f32, bq, bk, p.D));
  if (const int e = launch_pre<T>(P, st); e != 0) return e;
  // Above 48 KiB a block's dynamic shared memory must be opted in to (the host checked the device's limit).
  gpuError_t e = gpuFuncSetAttribute(reinterpret_cast<const void*>(&attn_bwd_dkv<T>),
                                     gpuFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  if (e != gpuSuccess) return static_cast<int>(e);
  e = gpuFuncSetAttribute(reinterpret_cast<const void*>(&attn_bwd_dq<T>), gpuFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(shared));
  if (e != gpuSuccess) return static_cast<int>(e);
  const unsigned ktiles = static_cast<unsigned>((int64_t(p.SkT) + bk - 1) / bk);
  const unsigned qtiles = static_cast<unsigned>((int64_t(p.G) * p.SqT + bq - 1) / bq);
  if (ktiles > 0) {
    const dim3 grid(ktiles, static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.nseq));
    attn_bwd_dkv<T><<<grid, bk * kTpr, shared, st>>>(P);
    const int e2 = static_cast<int>(gpuGetLastError());
    if (e2 != 0) return e2;
  }
  if (qtiles > 0) {
    const dim3 grid(qtiles, static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.nseq));
    attn_bwd_dq<T><<<grid, bq * kTpr, shared, st>>>(P);
  }
  return static_cast<int>(gpuGetLastError());
}

}  // namespace

int64_t attn_bwd_shared_bytes(Dt dt, int bq, int bk, int D) {
  const int64_t cs = dt == Dt::f64 ? 8 : 4;
  return cs * (2 * (int64_t(bq) + bk) * (D + 1) + 2 * int64_t(bq) * bk + 2 * int64_t(bq));
}

int launch_attention_backward_pre(Dt dt, const AttnBwdParams& p, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f32: return launch_pre<F32>(p, s);
    case Dt::f16: return launch_pre<F16>(p, s);
    case Dt::bf16: return launch_pre<BF16>(p, s);
    case Dt::f64: return launch_pre<F64>(p, s);
  }
  return -1;
}

int launch_attention_backward(Dt dt, const AttnBwdParams& p, int bq, int bk, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f32: return launch_bwd<F32>(p, bq, bk, s);
    case Dt::f16: return launch_bwd<F16>(p, bq, bk, s);
    case Dt::bf16: return launch_bwd<BF16>(p, bq, bk, s);
    case Dt::f64: return launch_bwd<F64>(p, bq, bk, s);
  }
  return -1;
}

}  // namespace kf::hal::cuda
