// docs/ops.md section 5's attention with one query row a sequence against a long K/V cache, in CUDA/HIP:
// the decode kernel and its combine pass (AttnKernel::Decode, launched by attention.cu's launch_attention;
// when a call takes it: src/plan/attention.hpp and kernels.cpp). Same semantics as attention.cu's kernels.
#include <algorithm>

#include "hal/cuda/attention_common.cuh"

namespace kf::hal::cuda {
namespace {


// ---- The decode kernel (AttnKernel::Decode; the counterpart of shaders/attention_decode.comp): one query
// row per sequence (Sq = 1, not packed; no dropout or block mask) against a long K/V cache,
// streamed once. One block of kDecThreads threads per (key split, kv head x chunk of ng <= 8 of its G
// query heads, sequence): every query head of the chunk is served by the same K/V loads (GQA / MQA read
// each K/V row once per chunk). The block is made of key groups of LK lanes (LK a power of two, about
// D / VW: one key row is one 16-byte load per lane, PPL packs per lane where D / VW > 32). Key group kg
// takes keys j0 + kg U + u (u < U) of each step of NKG U keys: it issues its 2 U PPL 16-byte loads (U
// key rows, U value rows) straight from global memory into registers (no shared memory, no barrier in
// the loop), then the U dot products with the chunk's query rows (registers, pre-scaled), summed over
// the key group's lanes by an xor butterfly (each step adds the same two operands in either order, so
// every lane holds the same bits), the scores (soft-capping, ALiBi, masks: score_of), the online
// softmax per head in the compute type and p v into the lane's packs of the accumulator. At the end the
// key groups are merged in shared memory in key-group order, and the block writes its partial (the
// accumulator, then (m, l)) in attn_combine's format; attn_decode_combine merges the splits, adds the
// sinks, normalizes and writes o and lse. The same bits every run (fixed orders throughout).
// RS (where the GC U scores of a step are at most the LK lanes of a key group and GC <= 4: 16-bit D = 128
// with up to 4 heads a block): the partial dot products are all-reduced over the lane offsets >= GC U and
// reduce-scattered over the rest, so that lane lk of a key group ends with the one full score
// t = lk mod GC U (head t / U, key t % U) and computes that score's softmax step alone; the U lanes of a head
// combine their max and sum by xor shuffles, and the probabilities and the heads' rescale factors are
// gathered back to every lane for p v. The all-reduce butterfly and the softmax of every score in every
// lane took most of the issue slots of a step (Nsight Compute, H100: the kernel issue-bound at 0.78 of
// copy, about 975 instructions a warp per step of 8 keys where its 256 FMAs and 64 conversions are the
// irreducible part): this cuts log2(LK) x GC U shuffles and adds to about 2 GC U, and GC U exps and
// selects to one each.
// RoPE (RM: 1 half, pairs (d, d + D/2); 2 interleaved, pairs (2d, 2d + 1); docs/ops.md: key j at position
// j, the query at Sk - 1): each lane rotates the key elements it holds, in registers, so that a rotation
// costs 2 FMAs an element whatever the heads a block (rotating the queries' weights instead costs 2 an
// element for each head) and no lane reads another's. For that, each lane holds whole pairs: interleaved,
// a 16-byte pack holds VW / 2 pairs as it stands; half, the lane's slot pk is two 8-byte loads, elements
// pk VW / 2 + [0, VW / 2) and D / 2 + the same (each load still coalesced over the key group). Either way
// slot pk holds the pairs pk VW / 2 + t, t < VW / 2, whose (cos, sin) at key j's position are VW / 4
// contiguous 16-byte loads of the table (p.rope; the same one the tiled kernels read: rope_rows), read
// through L1 (the kv heads' blocks read the same rows). The query is loaded in the same element order and
// rotated once. The values are not rotated: V keeps its packs.
constexpr int kDecThreads = 128;
constexpr int kDecU = 4;  // keys in flight per key group and step
constexpr int kDecMaxSplits = 256;

// RoPE's half mode: a streamed 8-byte load (half of a slot; k counts 8-byte units), as load_stream.
KF_DEV uint2 load_stream8(const void* p, int64_t k) {
#if defined(__CUDA_ARCH__) && !defined(KF_HIP) && __CUDA_ARCH__ >= 800
  uint2 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(static_cast<const uint2*>(p) + k));
  return r;
#else
  return static_cast<const uint2*>(p)[k];
#endif
}

// Slot pk of row `row` (D elements) in RoPE's element order (RM 1: two 8-byte halves; else the pack).
template <int RM>
KF_DEV uint4 load_slot(const void* x, int64_t row, int pk, int NPK) {
  if constexpr (RM == 1) {
    const uint2 a = static_cast<const uint2*>(x)[row * 2 * NPK + pk], b = static_cast<const uint2*>(x)[row * 2 * NPK + NPK + pk];
    return make_uint4(a.x, a.y, b.x, b.y);
  } else {
    return load_pack(x, row * NPK + pk);
  }
}

// The (cos, sin) of pairs pair0 .. pair0 + 2 NV - 1 at position pos: NV 16-byte loads of the table
// (pair0 even, D / 2 even: aligned), kept in L1.
template <int NV>
KF_DEV void load_cs(const AttnParams& p, int64_t pos, int pair0, uint4 (&cs)[NV]) {
  const int64_t at = ((pos + p.rope_pos0) * (p.D / 2) + pair0) / 2;
#pragma unroll
  for (int t = 0; t < NV; ++t) {
#if defined(__CUDA_ARCH__) && !defined(KF_HIP)
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(cs[t].x), "=r"(cs[t].y), "=r"(cs[t].z), "=r"(cs[t].w)
        : "l"(static_cast<const uint4*>(p.rope) + at + t));
#else
    cs[t] = load_pack(p.rope, at + t);
#endif
  }
}

// Rotates a slot's VW elements (RoPE's element order: load_slot) by its pairs' (cos, sin), as
// src/ops/attention.cpp's rope_rotate: x0' = x0 c - x1 s, x1' = x1 c + x0 s.
template <int RM, int VW, class C>
KF_DEV void rope_slot(C (&x)[VW], const uint4 (&cs)[VW / 4]) {
#pragma unroll
  for (int t = 0; t < VW / 2; ++t) {
    const uint4 w = cs[t / 2];
    const C c = C(__uint_as_float(t % 2 ? w.z : w.x)), sn = C(__uint_as_float(t % 2 ? w.w : w.y));
    const int i0 = RM == 1 ? t : 2 * t, i1 = RM == 1 ? t + VW / 2 : 2 * t + 1;
    const C a = x[i0], b = x[i1];
    x[i0] = a * c - b * sn;
    x[i1] = b * c + a * sn;
  }
}

// A streamed 16-byte load: read-only path, not kept in L1 (each byte is read once), 256-byte L2 prefetch.
KF_DEV uint4 load_stream(const void* p, int64_t k) {
#if defined(__CUDA_ARCH__) && !defined(KF_HIP) && __CUDA_ARCH__ >= 800
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(static_cast<const uint4*>(p) + k));
  return r;
#else
  return load_pack(p, k);
#endif
}

// RS: 0 the all-reduce form, 1 the reduce-scatter form with LK = GC U, 2 with LK > GC U (a separate
// instance: the all-reduce loop over a run-time count cost the LK = GC U case 30 registers). RM: RoPE's
// mode (0 none: that instance's code is the kernel without RoPE).
template <class T, int PPL, int GC, int RS, int RM>
__global__ void __launch_bounds__(kDecThreads) attn_decode(const AttnParams p) {
  using C = typename T::C;
  using M = Math<C, T::FAST>;
  constexpr int VW = T::VW, U = kDecU;
  extern __shared__ __align__(16) unsigned char attn_dec_smem[];
  const int D = p.D, NPK = D / VW, LK = p.dec_lk, NKG = kDecThreads / LK;
  C* Ms = reinterpret_cast<C*>(attn_dec_smem);
  C* Ls = Ms + NKG * GC;
  C* Accs = Ls + NKG * GC;  // [GC][D]
  const int tid = threadIdx.x, lk = tid % LK, kg = tid / LK;
  const int split = blockIdx.x;
  const int chunk = blockIdx.y % p.dec_nchunk, hk = blockIdx.y / p.dec_nchunk;
  const int seq = blockIdx.z;
  const int h0 = hk * p.G + chunk * p.dec_ng;
  const int ng = m_min(p.dec_ng, p.G - chunk * p.dec_ng);
  Geo g;
  seq_geometry(p, seq, g);  // one query row: its position is off = klen - 1
  int jbeg = 0, jend = g.kl;
  if (p.window > 0) jbeg = static_cast<int>(m_max(int64_t(0), int64_t(g.off) - p.window + 1));
  jbeg = static_cast<int>(m_max(int64_t(jbeg), int64_t(split) * p.split_len));
  jend = static_cast<int>(m_min(int64_t(jend), int64_t(split + 1) * p.split_len));

  // The chunk's query rows, scaled: this lane's packs lk, lk + LK, ... (RoPE: its slots, rotated to
  // the query's position g.off).
  constexpr int NCS = RM != 0 ? VW / 4 : 1;  // 16-byte table loads a slot
  C q[GC * PPL * VW];
  C slope[GC];
#pragma unroll
  for (int hh = 0; hh < GC; ++hh) {
#pragma unroll
    for (int pp = 0; pp < PPL; ++pp) {
      const int pk = lk + LK * pp;
      C x[VW];
      if (hh < ng && pk < NPK) {
        T::unpack(load_slot<RM>(p.q, int64_t(g.b) * p.Hq + h0 + hh, pk, NPK), x);  // SqT = 1
        if constexpr (RM != 0) {
          uint4 cs[NCS];
          load_cs(p, g.off, pk * (VW / 2), cs);
          rope_slot<RM>(x, cs);
        }
      } else {
#pragma unroll
        for (int e = 0; e < VW; ++e) x[e] = C(0);
      }
#pragma unroll
      for (int e = 0; e < VW; ++e) q[(hh * PPL + pp) * VW + e] = x[e] * C(p.scale);
    }
    slope[hh] = p.alibi && hh < ng ? alibi_slope<T>(h0 + hh, p) : C(0);
  }
  // RS: this lane's score in each step is head own_h's, key jk + own_u; m_own and l_own its head's state.
  const int own_h = (lk % (GC * U)) / U, own_u = lk % U;
  const C own_slope = RS != 0 && p.alibi && own_h < ng ? alibi_slope<T>(h0 + own_h, p) : C(0);
  const int kg_lane0 = (tid % KF_WARP) & ~(LK - 1);  // the key group's first lane in the warp
  C m_own = neg_inf<C>(), l_own = C(0);

  C m[GC], l[GC];
  C acc[GC * PPL * VW];
#pragma unroll
  for (int hh = 0; hh < GC; ++hh) m[hh] = neg_inf<C>(), l[hh] = C(0);
#pragma unroll
  for (int k = 0; k < GC * PPL * VW; ++k) acc[k] = C(0);
  const int64_t kvrow0 = (int64_t(g.b) * p.Hkv + hk) * p.SkT;
  const bool plain = p.softcap <= 0 && !p.alibi;
  int pair0[PPL];  // RoPE: the first pair of each slot (0 past the row: the table's reads stay inside it)
#pragma unroll
  for (int pp = 0; pp < PPL; ++pp) pair0[pp] = lk + LK * pp < NPK ? (lk + LK * pp) * (VW / 2) : 0;

  for (int j0 = jbeg; j0 < jend; j0 += NKG * U) {
    const int jk = j0 + kg * U;
    // All loads of the step first: U key rows and U value rows.
    uint4 kr[U * PPL], vr[U * PPL];
    uint4 cs[U * PPL][NCS];  // RoPE: the (cos, sin) of each key's slots (keys past jend: jend - 1's)
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int pp = 0; pp < PPL; ++pp) {
        const int pk = lk + LK * pp;
        if constexpr (RM != 0) load_cs(p, m_min(jk + u, jend - 1), pair0[pp], cs[u * PPL + pp]);
        if (jk + u < jend && pk < NPK) {
          const int64_t at = (kvrow0 + jk + u) * NPK + pk;
          if constexpr (RM == 1) {
            const uint2 a = load_stream8(p.k, 2 * (kvrow0 + jk + u) * NPK + pk), b = load_stream8(p.k, (2 * (kvrow0 + jk + u) + 1) * NPK + pk);
            kr[u * PPL + pp] = make_uint4(a.x, a.y, b.x, b.y);
          } else {
            kr[u * PPL + pp] = load_stream(p.k, at);
          }
          vr[u * PPL + pp] = load_stream(p.v, at);
        } else {
          kr[u * PPL + pp] = make_uint4(0, 0, 0, 0);
          vr[u * PPL + pp] = make_uint4(0, 0, 0, 0);
        }
      }
    // This lane's partial dot products, then the butterfly over the key group's lanes.
    C s[GC * U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      C kx[PPL * VW];
#pragma unroll
      for (int pp = 0; pp < PPL; ++pp) {
        C x[VW];
        T::unpack(kr[u * PPL + pp], x);
        if constexpr (RM != 0) rope_slot<RM>(x, cs[u * PPL + pp]);
#pragma unroll
        for (int e = 0; e < VW; ++e) kx[pp * VW + e] = x[e];
      }
#pragma unroll
      for (int hh = 0; hh < GC; ++hh) {
        C d = C(0);
#pragma unroll
        for (int k = 0; k < PPL * VW; ++k) d += q[hh * PPL * VW + k] * kx[k];
        s[hh * U + u] = d;
      }
    }
    C pr[GC * U];
    if constexpr (RS != 0) {
      // All-reduce over the offsets >= GC U (lanes lk and lk + GC U then hold the same sums), then
      // reduce-scatter: at offset o the lane keeps the half of its values that bit o of lk selects and
      // adds its partner's copy of them, ending at one value: score t = lk mod GC U.
      if constexpr (RS == 2)
        for (int o = LK / 2; o >= GC * U; o >>= 1)
#pragma unroll
          for (int t = 0; t < GC * U; ++t) s[t] += KF_SHFL_XOR(s[t], o);
#pragma unroll
      for (int o = GC * U / 2; o >= 1; o >>= 1) {
        const bool upper = (lk & o) != 0;
#pragma unroll
        for (int i = 0; i < o; ++i) {
          const C send = upper ? s[i] : s[i + o], keep = upper ? s[i + o] : s[i];
          s[i] = keep + KF_SHFL_XOR(send, o);
        }
      }
      const int j = jk + own_u;
      const C sv = plain ? (j < jend ? s[0] : neg_inf<C>()) : score_of<T>(s[0], j < jend, 0, j, 0, own_slope, p, g);
      C mt = sv;
#pragma unroll
      for (int o = 1; o < U; o <<= 1) mt = m_max(mt, KF_SHFL_XOR(mt, o));  // the head's U lanes
      const C mnew = m_max(m_own, mt);
      const C alpha = mnew == neg_inf<C>() ? C(1) : M::exp(m_own - mnew);
      const C pv = sv == neg_inf<C>() ? C(0) : M::exp(sv - mnew);
      C lt = pv;
#pragma unroll
      for (int o = 1; o < U; o <<= 1) lt += KF_SHFL_XOR(lt, o);  // xor order: the same bits in the U lanes
      l_own = l_own * alpha + lt;
      m_own = mnew;
#pragma unroll
      for (int t = 0; t < GC * U; ++t) pr[t] = KF_SHFL_IDX(pv, kg_lane0 + t);
#pragma unroll
      for (int hh = 0; hh < GC; ++hh) {
        const C a = KF_SHFL_IDX(alpha, kg_lane0 + hh * U);
#pragma unroll
        for (int k = 0; k < PPL * VW; ++k) acc[hh * PPL * VW + k] *= a;
      }
    } else {
    for (int o = 1; o < LK; o <<= 1)
#pragma unroll
      for (int t = 0; t < GC * U; ++t) s[t] += KF_SHFL_XOR(s[t], o);
    // Scores and the online softmax per query head.
#pragma unroll
    for (int hh = 0; hh < GC; ++hh) {
      C mt = neg_inf<C>();
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = jk + u;
        // Without soft-capping or ALiBi the score is the dot product, or -inf past the keys (the window
        // and the key lengths are in [jbeg, jend); causal hides nothing from the last position).
        const C sv = plain ? (j < jend ? s[hh * U + u] : neg_inf<C>()) : score_of<T>(s[hh * U + u], j < jend, 0, j, 0, slope[hh], p, g);
        s[hh * U + u] = sv;
        mt = m_max(mt, sv);
      }
      const C mnew = m_max(m[hh], mt);
      const C alpha = mnew == neg_inf<C>() ? C(1) : M::exp(m[hh] - mnew);
      C lt = C(0);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const C sv = s[hh * U + u];
        const C pv = sv == neg_inf<C>() ? C(0) : M::exp(sv - mnew);
        pr[hh * U + u] = pv;
        lt += pv;
      }
      l[hh] = l[hh] * alpha + lt;
      m[hh] = mnew;
#pragma unroll
      for (int k = 0; k < PPL * VW; ++k) acc[hh * PPL * VW + k] *= alpha;
    }
    }
    // p v into this lane's packs.
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int pp = 0; pp < PPL; ++pp) {
        C x[VW];
        T::unpack(vr[u * PPL + pp], x);
#pragma unroll
        for (int hh = 0; hh < GC; ++hh)
#pragma unroll
          for (int e = 0; e < VW; ++e) acc[(hh * PPL + pp) * VW + e] += pr[hh * U + u] * x[e];
      }
  }

  // The key groups merged in shared memory, in key-group order.
  if constexpr (RS != 0) {
    if (own_u == 0 && lk < GC * U) Ms[kg * GC + own_h] = m_own, Ls[kg * GC + own_h] = l_own;
  } else if (lk == 0) {
#pragma unroll
    for (int hh = 0; hh < GC; ++hh) Ms[kg * GC + hh] = m[hh], Ls[kg * GC + hh] = l[hh];
  }
  __syncthreads();
  C f[GC];
#pragma unroll
  for (int hh = 0; hh < GC; ++hh) {
    C mm = neg_inf<C>();
    for (int k = 0; k < NKG; ++k) mm = m_max(mm, Ms[k * GC + hh]);
    const C mh = RS != 0 ? Ms[kg * GC + hh] : m[hh];
    f[hh] = mh == neg_inf<C>() ? C(0) : M::exp(mh - mm);
  }
  for (int k = 0; k < NKG; ++k) {
    if (kg == k) {
#pragma unroll
      for (int hh = 0; hh < GC; ++hh)
#pragma unroll
        for (int pp = 0; pp < PPL; ++pp) {
          const int pk = lk + LK * pp;
          if (pk < NPK)
#pragma unroll
            for (int e = 0; e < VW; ++e) {
              const int at = hh * D + pk * VW + e;
              const C v = f[hh] * acc[(hh * PPL + pp) * VW + e];
              Accs[at] = k == 0 ? v : Accs[at] + v;
            }
        }
    }
    __syncthreads();
  }

  // The partial of (split, row) for each head of the chunk, in attn_combine's format.
  const int64_t rows = int64_t(p.B) * p.Hq;  // SqT = 1
  C* accs = static_cast<C*>(p.part);
  C* ml = accs + int64_t(p.nsplit) * rows * D;
  for (int t = tid; t < ng * D; t += kDecThreads) {
    const int hh = t / D, d = t % D;
    const int64_t part = int64_t(split) * rows + int64_t(g.b) * p.Hq + h0 + hh;
    accs[part * D + d] = Accs[hh * D + d];
  }
  if (tid < ng) {
    const int hh = tid;
    C mm = neg_inf<C>();
    for (int k = 0; k < NKG; ++k) mm = m_max(mm, Ms[k * GC + hh]);
    C ll = C(0);
    for (int k = 0; k < NKG; ++k) {
      const C mk = Ms[k * GC + hh];
      if (mk != neg_inf<C>()) ll += Ls[k * GC + hh] * M::exp(mk - mm);
    }
    const int64_t part = int64_t(split) * rows + int64_t(g.b) * p.Hq + h0 + hh;
    ml[2 * part] = mm, ml[2 * part + 1] = ll;
  }
}

// The decode kernel's combine pass: one block of kDecThreads threads per query row. The splits' weights
// exp(m_s - m) by split (m the max over the splits and the sink), l = the block's fixed-order sum of
// w_s l_s (plus the sink), then each thread the output elements d = tid, tid + kDecThreads, ... as the sum
// over the splits in split order (coalesced reads of the partials). The same bits every run.
template <class T>
__global__ void __launch_bounds__(kDecThreads) attn_decode_combine(const AttnParams p) {
  using C = typename T::C;
  using M = Math<C, T::FAST>;
  __shared__ C red[kDecThreads / 32];
  __shared__ C Ws[kDecMaxSplits];
  const int64_t rows = int64_t(p.B) * p.Hq * p.SqT;
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x, D = p.D, ns = p.nsplit;
  const int h = static_cast<int>((row / p.SqT) % p.Hq);
  const C* accs = static_cast<const C*>(p.part);
  const C* ml = accs + int64_t(ns) * rows * D;
  C mx = neg_inf<C>();
  for (int s = tid; s < ns; s += kDecThreads) mx = m_max(mx, ml[2 * (int64_t(s) * rows + row)]);
  C m = block_max(mx, red);
  if (p.sinks) m = m_max(m, T::load(p.sinks, h));
  C lp = C(0);
  for (int s = tid; s < ns; s += kDecThreads) {
    const C ms = ml[2 * (int64_t(s) * rows + row)];
    const C w = ms == neg_inf<C>() ? C(0) : M::exp(ms - m);
    Ws[s] = w;
    if (ms != neg_inf<C>()) lp += w * ml[2 * (int64_t(s) * rows + row) + 1];
  }
  C l = block_sum(lp, red);  // its barriers also publish Ws
  if (p.sinks && m != neg_inf<C>()) l += M::exp(T::load(p.sinks, h) - m);
  const C inv = l > C(0) ? C(1) / l : C(0);
  for (int d = tid; d < D; d += kDecThreads) {
    C a = C(0);
    for (int s = 0; s < ns; ++s) {
      const C w = Ws[s];
      if (w != C(0)) a += w * accs[(int64_t(s) * rows + row) * D + d];
    }
    T::store(p.o, row * D + d, a * inv);
  }
  if (p.lse && tid == 0) T::store(p.lse, row, l > C(0) ? m + m_log(l) : neg_inf<C>());
}

// RS where a key group's lanes are at least its scores (LK >= GC kDecU) and p.dec_rs allows it; not for
// 8 heads (LK = 32: ptxas put that instance's arrays in local memory).
int decode_rs(const AttnParams& p, int gc) {
  if (!p.dec_rs || gc > 4 || p.dec_lk < gc * kDecU) return 0;
  return p.dec_lk == gc * kDecU ? 1 : 2;
}

template <class T, int PPL, int GC, int RM>
const void* decode_kernel_of(const AttnParams& p) {
  if constexpr (GC <= 4) {
    if (decode_rs(p, GC) == 1) return reinterpret_cast<const void*>(&attn_decode<T, PPL, GC, 1, RM>);
    if (decode_rs(p, GC) == 2) return reinterpret_cast<const void*>(&attn_decode<T, PPL, GC, 2, RM>);
  }
  return reinterpret_cast<const void*>(&attn_decode<T, PPL, GC, 0, RM>);
}

template <class T, int PPL, int GC>
const void* decode_kernel_rm(const AttnParams& p) {
  switch (p.rope_mode) {
    case 1: return decode_kernel_of<T, PPL, GC, 1>(p);
    case 2: return decode_kernel_of<T, PPL, GC, 2>(p);
    default: return decode_kernel_of<T, PPL, GC, 0>(p);
  }
}

// The decode kernel's instance for p's dec_ppl, dec_gc and rope_mode (null where none is built).
template <class T>
const void* decode_kernel(const AttnParams& p) {
  constexpr int PMAX = T::VW == 8 ? 1 : 2;  // 16-bit: D <= 256 is at most 32 packs; f32: 64 packs
  if (p.dec_ppl < 1 || p.dec_ppl > PMAX || p.rope_mode < 0 || p.rope_mode > 2) return nullptr;
  const bool two = p.dec_ppl == 2;
  switch (p.dec_gc) {
    case 1: return two ? decode_kernel_rm<T, PMAX, 1>(p) : decode_kernel_rm<T, 1, 1>(p);
    case 2: return two ? decode_kernel_rm<T, PMAX, 2>(p) : decode_kernel_rm<T, 1, 2>(p);
    case 4: return two ? decode_kernel_rm<T, PMAX, 4>(p) : decode_kernel_rm<T, 1, 4>(p);
    case 8: return two ? decode_kernel_rm<T, PMAX, 8>(p) : decode_kernel_rm<T, 1, 8>(p);
    default: return nullptr;
  }
}

template <class T, int PPL, int GC, int RM>
void launch_decode_rs(const AttnParams& p, dim3 grid, size_t shared, gpuStream_t s) {
  if constexpr (GC <= 4) {
    if (decode_rs(p, GC) == 1) return attn_decode<T, PPL, GC, 1, RM><<<grid, kDecThreads, shared, s>>>(p);
    if (decode_rs(p, GC) == 2) return attn_decode<T, PPL, GC, 2, RM><<<grid, kDecThreads, shared, s>>>(p);
  }
  attn_decode<T, PPL, GC, 0, RM><<<grid, kDecThreads, shared, s>>>(p);
}

template <class T, int PPL, int GC>
void launch_decode_inst(const AttnParams& p, dim3 grid, size_t shared, gpuStream_t s) {
  switch (p.rope_mode) {
    case 1: return launch_decode_rs<T, PPL, GC, 1>(p, grid, shared, s);
    case 2: return launch_decode_rs<T, PPL, GC, 2>(p, grid, shared, s);
    default: return launch_decode_rs<T, PPL, GC, 0>(p, grid, shared, s);
  }
}

template <class T>
int launch_decode(const AttnParams& p, gpuStream_t s) {
  constexpr int PMAX = T::VW == 8 ? 1 : 2;
  if (p.nsplit > kDecMaxSplits || !decode_kernel<T>(p) || (p.rope_mode && !p.rope)) return -1;
  const dim3 grid(static_cast<unsigned>(p.nsplit), static_cast<unsigned>(p.Hkv * p.dec_nchunk), static_cast<unsigned>(p.B));
  const size_t shared = static_cast<size_t>(attn_decode_shared_bytes(p));
  const bool two = p.dec_ppl == 2;
  switch (p.dec_gc) {
    case 1: two ? launch_decode_inst<T, PMAX, 1>(p, grid, shared, s) : launch_decode_inst<T, 1, 1>(p, grid, shared, s); break;
    case 2: two ? launch_decode_inst<T, PMAX, 2>(p, grid, shared, s) : launch_decode_inst<T, 1, 2>(p, grid, shared, s); break;
    case 4: two ? launch_decode_inst<T, PMAX, 4>(p, grid, shared, s) : launch_decode_inst<T, 1, 4>(p, grid, shared, s); break;
    default: two ? launch_decode_inst<T, PMAX, 8>(p, grid, shared, s) : launch_decode_inst<T, 1, 8>(p, grid, shared, s); break;
  }
  int err = static_cast<int>(gpuGetLastError());
  if (err != 0) return err;
  attn_decode_combine<T><<<static_cast<unsigned>(int64_t(p.B) * p.Hq * p.SqT), kDecThreads, 0, s>>>(p);
  return static_cast<int>(gpuGetLastError());
}
}  // namespace

bool attn_decode_rs_form(const AttnParams& p) { return decode_rs(p, p.dec_gc) != 0; }

int64_t attn_decode_shared_bytes(const AttnParams& p) {
  const int nkg = kDecThreads / std::max(p.dec_lk, 1);
  return 4 * (2 * int64_t(nkg) * p.dec_gc + int64_t(p.dec_gc) * p.D);
}

int attn_decode_blocks_per_sm(Dt dt, const AttnParams& p) {
  const void* k = dt == Dt::f32 ? decode_kernel<F32>(p) : dt == Dt::f16 ? decode_kernel<F16>(p)
                : dt == Dt::bf16 ? decode_kernel<BF16>(p) : nullptr;
  if (!k) return 0;
  int n = 0;
  if (gpuOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kDecThreads, static_cast<size_t>(attn_decode_shared_bytes(p))) != gpuSuccess)
    return 0;
  return n;
}

int launch_attention_decode(Dt dt, const AttnParams& p, void* stream) {
  const gpuStream_t s = static_cast<gpuStream_t>(stream);
  switch (dt) {
    case Dt::f32: return launch_decode<F32>(p, s);
    case Dt::f16: return launch_decode<F16>(p, s);
    case Dt::bf16: return launch_decode<BF16>(p, s);
    default: return -1;
  }
}

}  // namespace kf::hal::cuda
