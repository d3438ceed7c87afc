#version 450
// Attention (docs/ops.md section 5), the portable path: any Vulkan 1.2 device, lavapipe too.
// Variants: DT_<dtype> (the main kernel), COMBINE (the decode combine pass), SCORES (attention_scores);
// SCORE_MOD=<GLSL expression> adds a custom score function (compiled at run time, never at build time).
//
// Main kernel: one workgroup per (query tile, kv head, sequence x key split). A tile holds BQ rows of
// the G = Hq / Hkv query heads that share the kv head (row r: query i = r / G, head hk G + r % G), so
// that grouped-query and multi-query attention read each K/V tile once for the whole group. TPR = 8
// invocations serve a row: for the scores each takes BK / 8 keys of the tile (a whole dot product over
// D from shared memory); for P V each owns the 16-byte packs lane, lane + 8, ... of the output row.
// K and V tiles of BK keys pass through shared memory (one buffer, K then V); the softmax is online
// (running max m, sum l, rescaled accumulator) in f32, so the Sq x Sk matrix never exists in memory.
// Each row's max and sum are read by all 8 invocations from shared memory in the same order, so they
// agree bit for bit without a reduction. Tiles that a mask hides entirely are skipped (causal, window,
// key lengths, block mask). Scores: s = scale q.k (scale folded into the staged q), soft-capping,
// ALiBi, masks; dropout keeps p with the Philox generator at the (b, h, i, j) index of the
// [B, Hq, Sq, Sk] probability matrix (see src/ops/attention.cpp for every choice).
// SPLIT: the key range is cut into nsplit parts (gl_WorkGroupID.z % nsplit); each writes its partial
// (m, l, unnormalized accumulator) to the workspace and the COMBINE pass merges them (decode: one
// query row still fills the GPU).
//
// Bindings: 0 q, 1 k, 2 v, 3 o, 4 lse (or the workspace of partials when SPLIT), 5 the workspace with
// the auxiliary inputs (rope cos/sin table, slopes, sinks, key lengths, cu_seqlens, block mask) at the
// word offsets of the push constants. COMBINE: 0 the workspace, 3 o, 4 lse.
#include "common.glsl"
#include "philox.glsl"

#include "attention_common.glsl"

const uint TPR = 8;
const uint DP = D + 1;        // padded row stride of the shared tiles (no bank conflicts)
const uint MAXACC = 32;       // accumulator values per invocation: D <= 256 over 8 lanes
const uint NU = BK / TPR;     // keys per invocation in the scores (BK a multiple of 8, at most 32)
const uint MAXU = 4;

#if defined(COMBINE)
// One workgroup per row (a grid stride over the rows beyond the grid): invocation t takes pack t % NPK of
// the row and the splits s = t / NPK, t / NPK + NSL, ... (NSL = 256 / NPK split lanes), so that a row's
// partials are read by the whole workgroup at once (one invocation per (row, pack) walking every split
// in turn waited for each load: 27 us for the 32 rows of a 4k-key decode in 32 splits on an H100,
// longer than the decode kernel itself). The split lanes' sums are then added in shared memory in split-
// lane order: a fixed order, the same bits every run.
DECLARE_BUFFER(3, O, )
DECLARE_BUFFER(4, LSEB, )

const uint NSL = gl_WorkGroupSize.x / NPK;  // split lanes (NPK <= 256 packs: D <= 256)
shared float Lp[gl_WorkGroupSize.x / NPK];
shared float Ap[(gl_WorkGroupSize.x / NPK) * D];

void main() {
  const uint rows = pc.B * pc.Hq * pc.SqT;
  const uint nparts = pc.nsplit * rows;
  const uint lid = gl_LocalInvocationID.x, pk = lid % NPK, sl = lid / NPK;
  for (uint rowidx = gl_WorkGroupID.x; rowidx < rows; rowidx += gl_NumWorkGroups.x) {
    const uint h = (rowidx / pc.SqT) % pc.Hq;
    float m = NEG_INF;  // the row's largest partial maximum (every invocation reads them all: cached)
    for (uint s = 0; s < pc.nsplit; ++s) m = max(m, uintBitsToFloat(ws[pc.part_off + nparts * D + 2u * (s * rows + rowidx)]));
    if (SINKS) m = max(m, aux_elem(pc.aux_sinks, h));
    float l = 0.0;
    float acc[VW];
    [[unroll]] for (uint e = 0; e < VW; ++e) acc[e] = 0.0;
    if (m != NEG_INF && sl < NSL) {
      for (uint s = sl; s < pc.nsplit; s += NSL) {
        const uint part = s * rows + rowidx;
        const float ms = uintBitsToFloat(ws[pc.part_off + nparts * D + 2u * part]);
        if (ms == NEG_INF) continue;
        const float a = exp(ms - m);
        l += a * uintBitsToFloat(ws[pc.part_off + nparts * D + 2u * part + 1u]);
        [[unroll]] for (uint e = 0; e < VW; ++e) acc[e] += a * uintBitsToFloat(ws[pc.part_off + part * D + pk * VW + e]);
      }
    }
    if (sl < NSL) {
      if (pk == 0u) Lp[sl] = l;
      [[unroll]] for (uint e = 0; e < VW; ++e) Ap[sl * D + pk * VW + e] = acc[e];
    }
    barrier();
    if (sl == 0u) {
      l = 0.0;
      [[unroll]] for (uint e = 0; e < VW; ++e) acc[e] = 0.0;
      for (uint k = 0; k < NSL; ++k) {
        l += Lp[k];
        [[unroll]] for (uint e = 0; e < VW; ++e) acc[e] += Ap[k * D + pk * VW + e];
      }
      if (SINKS && m != NEG_INF) l += exp(aux_elem(pc.aux_sinks, h) - m);
      const float inv = l > 0.0 ? 1.0 / l : 0.0;
      FT o[VW];
      [[unroll]] for (uint e = 0; e < VW; ++e) o[e] = FT(acc[e] * inv);
      O_v.v[rowidx * NPK + pk] = pack(o);
      if (LSE && pk == 0u) {
        const float v = l > 0.0 ? m + log(l) : NEG_INF;
        STORE_ELEM(LSEB, rowidx, v)
      }
    }
    barrier();
  }
}

#elif defined(SCORES)
// attention_scores: s[b, h, i, j] = scale q[b, h, i] . k[b, h / G, j]; a workgroup of 256 computes a
// 16 x 16 tile of (i, j), staging 16-wide slices of q and k in shared memory.
DECLARE_BUFFER(0, Q, readonly)
DECLARE_BUFFER(1, K, readonly)
DECLARE_BUFFER(3, S, )
shared FT Qt[16][17];
shared FT Kt[16][17];

void main() {
  const uint lid = gl_LocalInvocationID.x, tx = lid % 16u, ty = lid / 16u;
  const uint i0 = gl_WorkGroupID.y * 16u, j0 = (gl_WorkGroupID.x + pc.group_base) * 16u, bh = gl_WorkGroupID.z;
  const uint b = bh / pc.Hq, h = bh % pc.Hq, hk = h / pc.G;
  const uint qbase = bh * pc.SqT * D, kbase = (b * pc.Hkv + hk) * pc.SkT * D;
#if defined(DT_F64)
  const double scale = packDouble2x32(uvec2(pc.scale_lo, pc.scale_hi));
#else
  const float scale = pc.scale;
#endif
  FT acc = FT(0);
  for (uint d0 = 0; d0 < D; d0 += 16u) {
    const uint qi = i0 + ty, kj = j0 + ty, d = d0 + tx;
    Qt[ty][tx] = qi < pc.SqT && d < D ? FT(LOAD_ELEM(Q, qbase + qi * D + d)) : FT(0);
    Kt[ty][tx] = kj < pc.SkT && d < D ? FT(LOAD_ELEM(K, kbase + kj * D + d)) : FT(0);
    barrier();
    [[unroll]] for (uint e = 0; e < 16u; ++e) acc += Qt[ty][e] * Kt[tx][e];
    barrier();
  }
  const uint i = i0 + ty, j = j0 + tx;
  if (i < pc.SqT && j < pc.SkT) STORE_ELEM(S, (bh * pc.SqT + i) * pc.SkT + j, FT(acc * scale))
}

#else
DECLARE_BUFFER(0, Q, readonly)
DECLARE_BUFFER(1, K, readonly)
DECLARE_BUFFER(2, V, readonly)
DECLARE_BUFFER(3, O, )
DECLARE_BUFFER(4, LSEB, )

#if defined(SCORE_MOD)
// The custom score function (Attrs::score_mod), spliced in by the host as GLSL built from its parsed
// expression (src/ops/score_mod.hpp) and compiled at run time (hal/vulkan/runtime_shader.cpp): the score
// after soft-capping and ALiBi, the batch (the sequence when packed), the query head, and the query and
// key indices within the sequence.
float score_mod(float score, int b, int h, int i, int j) { return SCORE_MOD; }
#endif

shared float Qs[BQ * DP];
shared float KVs[BK * DP];
shared float Ss[BQ * BK];
shared float Ps[BQ * BK];

// Rotates the rows [0, nrows_tile) of a staged tile in place: key row t is at position first_pos + t;
// query row t (tile row first_pos + t) at the position of its query, i + off.
void rope_tile(bool query, uint nrows_tile, int first_pos, int off) {
  const uint half_d = D / 2u;
  for (uint e = gl_LocalInvocationID.x; e < nrows_tile * half_d; e += gl_WorkGroupSize.x) {
    const uint t = e / half_d, d = e % half_d;
    const int pos = query ? int((uint(first_pos) + t) / pc.G) + off : first_pos + int(t);
    const uint tab = pc.aux_rope + 2u * (uint(pos + pc.rope_pos0) * half_d + d);
    const float c = uintBitsToFloat(ws[tab]), s = uintBitsToFloat(ws[tab + 1u]);
    const uint i0 = ROPE == 1u ? d : 2u * d, i1 = ROPE == 1u ? d + half_d : 2u * d + 1u;
    const uint base = t * DP;
    if (query) {
      const float a = Qs[base + i0], b = Qs[base + i1];
      Qs[base + i0] = a * c - b * s;
      Qs[base + i1] = b * c + a * s;
    } else {
      const float a = KVs[base + i0], b = KVs[base + i1];
      KVs[base + i0] = a * c - b * s;
      KVs[base + i1] = b * c + a * s;
    }
  }
}

void main() {
  const uint lid = gl_LocalInvocationID.x, lr = lid / TPR, lane = lid % TPR;
  const uint WG = BQ * TPR;
  const uint seq = gl_WorkGroupID.z / pc.nsplit, split = gl_WorkGroupID.z % pc.nsplit;
  const uint hk = gl_WorkGroupID.y;
  const uint b = VARLEN ? 0u : seq;
  uint qbeg = 0u, qlen = pc.SqT, kbeg = 0u, klen = pc.SkT;
  if (VARLEN) {  // clamped: values outside [0, T] never index outside the tensors
    qbeg = min(ws[pc.aux_cuq + seq], pc.SqT);
    qlen = clamp(ws[pc.aux_cuq + seq + 1u], qbeg, pc.SqT) - qbeg;
    kbeg = min(ws[pc.aux_cuk + seq], pc.SkT);
    klen = clamp(ws[pc.aux_cuk + seq + 1u], kbeg, pc.SkT) - kbeg;
  }
  const uint nrows = pc.G * qlen;
  const uint r0 = (gl_WorkGroupID.x + pc.group_base) * BQ;
  if (r0 >= nrows) return;  // uniform over the workgroup
  const int off = int(klen) - int(qlen);
  int kl = int(klen);
  if (LENS) kl = clamp(int(ws[pc.aux_lens + seq]), 0, int(klen));
  const uint r_last = min(r0 + BQ, nrows) - 1u;
  const int i_lo = int(r0 / pc.G), i_hi = int(r_last / pc.G);

  // The keys this workgroup visits: [jbeg, jend).
  int jbeg = 0, jend = kl;
  if (CAUSAL) jend = min(jend, i_hi + off + 1);
  if (WINDOW) jbeg = max(jbeg, i_lo + off - int(pc.window) + 1);
  if (SPLIT) {
    jbeg = max(jbeg, int(split * pc.split_len));
    jend = min(jend, int((split + 1u) * pc.split_len));
  }

  // This invocation's row.
  const uint my_r = r0 + lr;
  const bool row_ok = my_r < nrows;
  const int qi = int(my_r / pc.G);
  const uint h = hk * pc.G + my_r % pc.G;
  const uint row_global = qbeg + uint(qi);
  const uint rowidx = (b * pc.Hq + h) * pc.SqT + row_global;
  float slope = 0.0;
  if (ALIBI != 0u) slope = alibi_slope(h);

  // Stage the query tile (scaled).
  for (uint e = lid; e < BQ * NPK; e += WG) {
    const uint t = e / NPK, pk = e % NPK, rq = r0 + t;
    FT x[VW];
    if (rq < nrows) {
      const uint qh = hk * pc.G + rq % pc.G;
      unpack(Q_v.v[((b * pc.Hq + qh) * pc.SqT + qbeg + rq / pc.G) * NPK + pk], x);
    } else {
      [[unroll]] for (uint k = 0; k < VW; ++k) x[k] = FT(0);
    }
    [[unroll]] for (uint k = 0; k < VW; ++k) Qs[t * DP + pk * VW + k] = float(x[k]) * (ROPE != 0u ? 1.0 : pc.scale);
  }
  barrier();
  if (ROPE != 0u) {
    rope_tile(true, min(BQ, nrows - r0), int(r0), off);
    barrier();
    for (uint e = lid; e < BQ * D; e += WG) Qs[(e / D) * DP + e % D] *= pc.scale;
    barrier();
  }

  float m = NEG_INF, l = 0.0;
  float acc[MAXACC];
  [[unroll]] for (uint k = 0; k < MAXACC; ++k) acc[k] = 0.0;
  const uint npp = (NPK + TPR - 1u) / TPR;  // packs per invocation
  const uint kvbase = (b * pc.Hkv + hk) * pc.SkT + kbeg;

  for (int j0 = jbeg; j0 < jend; j0 += int(BK)) {
    if (BMASK) {  // skip a tile whose blocks are all masked (the same decision in every invocation)
      bool any = false;
      const uint bi0 = (qbeg + uint(i_lo)) / pc.block_size, bi1 = (qbeg + uint(i_hi)) / pc.block_size;
      const uint bj0 = (kbeg + uint(j0)) / pc.block_size, bj1 = (kbeg + uint(min(j0 + int(BK), jend)) - 1u) / pc.block_size;
      for (uint bi = bi0; bi <= bi1 && !any; ++bi)
        for (uint bj = bj0; bj <= bj1 && !any; ++bj) any = ws[pc.aux_bmask + bi * pc.nkb + bj] != 0u;
      if (!any) continue;
    }
    // K tile.
    for (uint e = lid; e < BK * NPK; e += WG) {
      const uint t = e / NPK, pk = e % NPK;
      const int j = j0 + int(t);
      FT x[VW];
      if (j < jend) {
        unpack(K_v.v[(kvbase + uint(j)) * NPK + pk], x);
      } else {
        [[unroll]] for (uint k = 0; k < VW; ++k) x[k] = FT(0);
      }
      [[unroll]] for (uint k = 0; k < VW; ++k) KVs[t * DP + pk * VW + k] = float(x[k]);
    }
    barrier();
    if (ROPE != 0u) {
      rope_tile(false, uint(min(int(BK), jend - j0)), j0, 0);
      barrier();
    }
    // Scores of this invocation's keys (lane, lane + 8, ...): the dot products together, so that each
    // q value read from shared memory serves all of them.
    float dots[MAXU];
    [[unroll]] for (uint u = 0; u < MAXU; ++u) dots[u] = 0.0;
    for (uint d = 0; d < D; ++d) {
      const float qd = Qs[lr * DP + d];
      [[unroll]] for (uint u = 0; u < MAXU; ++u)
        if (u < NU) dots[u] += qd * KVs[(lane + TPR * u) * DP + d];
    }
    [[unroll]] for (uint u = 0; u < MAXU; ++u) {
      if (u >= NU) break;
      const uint t = lane + TPR * u;
      const int j = j0 + int(t);
      float s = NEG_INF;
      bool vis = row_ok && j < jend;
      if (CAUSAL && j > qi + off) vis = false;
      if (WINDOW && qi + off - j >= int(pc.window)) vis = false;
      if (BMASK && vis && ws[pc.aux_bmask + (row_global / pc.block_size) * pc.nkb + (kbeg + uint(j)) / pc.block_size] == 0u) vis = false;
      if (vis) {
        s = dots[u];
        if (SOFTCAP) s = pc.softcap * tanh(s / pc.softcap);
        if (ALIBI != 0u) s -= slope * abs(float(qi + off - j));
#if defined(SCORE_MOD)
        s = score_mod(s, int(seq), int(h), qi, j);  // -inf masks the key like any mask
#endif
      }
      Ss[lr * BK + t] = s;
    }
    barrier();
    // V tile (K is no longer read), and the probabilities of this invocation's keys.
    for (uint e = lid; e < BK * NPK; e += WG) {
      const uint t = e / NPK, pk = e % NPK;
      const int j = j0 + int(t);
      FT x[VW];
      if (j < jend) {
        unpack(V_v.v[(kvbase + uint(j)) * NPK + pk], x);
      } else {
        [[unroll]] for (uint k = 0; k < VW; ++k) x[k] = FT(0);
      }
      [[unroll]] for (uint k = 0; k < VW; ++k) KVs[t * DP + pk * VW + k] = float(x[k]);
    }
    float mt = NEG_INF;
    for (uint t = 0; t < BK; ++t) mt = max(mt, Ss[lr * BK + t]);
    const float mnew = max(m, mt);
    const float alpha = mnew == NEG_INF ? 1.0 : exp(m - mnew);
    for (uint t = lane; t < BK; t += TPR) {
      const float s = Ss[lr * BK + t];
      float p = s == NEG_INF ? 0.0 : exp(s - mnew);
      // Dropped probabilities are stored negated: they count in the sum l, not in the output.
      if (DROPOUT && p > 0.0 && !dropout_keep(rowidx, kbeg + uint(j0) + t)) p = -p;
      Ps[lr * BK + t] = p;
    }
    barrier();
    // The tile's sums first, then added to the running ones: blocked summation (a row of Sk keys
    // accumulates about BK + Sk / BK rounding errors instead of Sk).
    float lt = 0.0;
    float tacc[MAXACC];
    [[unroll]] for (uint k = 0; k < MAXACC; ++k) tacc[k] = 0.0;
    for (uint t = 0; t < BK; ++t) {
      const float p = Ps[lr * BK + t];
      lt += abs(p);
      const float w = DROPOUT ? max(p, 0.0) * pc.keep_scale : p;
      if (w == 0.0) continue;
      [[unroll]] for (uint q = 0; q < MAXACC / VW; ++q) {
        const uint pk = lane + TPR * q;
        if (q < npp && pk < NPK)
          [[unroll]] for (uint e = 0; e < VW; ++e) tacc[q * VW + e] += w * KVs[t * DP + pk * VW + e];
      }
    }
    l = l * alpha + lt;
    [[unroll]] for (uint k = 0; k < MAXACC; ++k) acc[k] = acc[k] * alpha + tacc[k];
    m = mnew;
    barrier();
  }

  if (!row_ok) return;  // no barrier follows
  if (SPLIT) {
    const uint rows = pc.B * pc.Hq * pc.SqT;
    const uint part = split * rows + rowidx;
    const uint nparts = pc.nsplit * rows;
    [[unroll]] for (uint q = 0; q < MAXACC / VW; ++q) {
      const uint pk = lane + TPR * q;
      if (q < npp && pk < NPK)
        [[unroll]] for (uint e = 0; e < VW; ++e) LSEB_w.w[pc.part_off + part * D + pk * VW + e] = floatBitsToUint(acc[q * VW + e]);
    }
    if (lane == 0u) {
      LSEB_w.w[pc.part_off + nparts * D + 2u * part] = floatBitsToUint(m);
      LSEB_w.w[pc.part_off + nparts * D + 2u * part + 1u] = floatBitsToUint(l);
    }
    return;
  }
  if (SINKS) {
    const float sk = aux_elem(pc.aux_sinks, h);
    const float mf = max(m, sk);
    const float a = m == NEG_INF ? 0.0 : exp(m - mf);
    l = l * a + exp(sk - mf);
    [[unroll]] for (uint k = 0; k < MAXACC; ++k) acc[k] *= a;
    m = mf;
  }
  const float inv = l > 0.0 ? 1.0 / l : 0.0;
  [[unroll]] for (uint q = 0; q < MAXACC / VW; ++q) {
    const uint pk = lane + TPR * q;
    if (q < npp && pk < NPK) {
      FT o[VW];
      [[unroll]] for (uint e = 0; e < VW; ++e) o[e] = FT(acc[q * VW + e] * inv);
      O_v.v[rowidx * NPK + pk] = pack(o);
    }
  }
  if (LSE && lane == 0u) {
    const float v = l > 0.0 ? m + log(l) : NEG_INF;
    STORE_ELEM(LSEB, rowidx, v)
  }
}
#endif
