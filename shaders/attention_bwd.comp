#version 450
// attention_backward (docs/ops.md section 5, training), the portable path, as FlashAttention 2: the
// probabilities are recomputed tile by tile from q, k and the forward's lse, never stored.
// Variants: PRE, DKV, DQ (one dtype each). The host (hal/vulkan/attention.cpp) records PRE, DKV, DQ;
// DKV and DQ with SCORE_MOD / SCORE_MOD_GRAD (a custom score function) are compiled at run time.
//   PRE: per query row, D = do . o, lse as a float and do as floats into the workspace (so that the
//        other passes, which have six bindings, read do from there).
//   DKV: one workgroup per (key tile of BK keys, kv head, sequence); 8 invocations per key own packs of
//        its dk and dv rows; loops over the query rows of the G heads that share the kv head in tiles
//        of BQ (so dk and dv sum over the group without atomics, in a fixed order).
//   DQ:  one workgroup per (query tile of BQ rows, kv head, sequence), as the forward; loops over the
//        key tiles and accumulates dq.
// P = exp(s - lse) with s as in the forward (scale, soft-capping, ALiBi, the custom score function f,
// masks), Z the forward's dropout (keep / (1 - p) from the same Philox index), dP = Z do . v,
// dS = P (dP - D) f' (1 - tanh^2) scale;
// dv += Z P do, dk += dS q, dq += dS k, on rotated q and k; dq and dk are rotated back (RoPE).
// Bindings: PRE 0 o, 1 do, 2 lse, 5 the workspace; DKV 0 q, 1 k, 2 v, 3 dk, 4 dv, 5 the workspace;
// DQ 0 q, 1 k, 2 v, 3 dq, 5 the workspace (auxiliary inputs as in attention.comp, then D, lse, do).
#include "common.glsl"
#include "philox.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint D = 64;
layout(constant_id = 2) const uint BQ = 8;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const bool CAUSAL = false;
layout(constant_id = 5) const bool WINDOW = false;
layout(constant_id = 6) const uint ALIBI = 0;
layout(constant_id = 7) const bool SOFTCAP = false;
layout(constant_id = 8) const uint ROPE = 0;
layout(constant_id = 9) const bool LENS = false;
layout(constant_id = 10) const bool VARLEN = false;
layout(constant_id = 11) const bool BMASK = false;
layout(constant_id = 12) const bool DROPOUT = false;
layout(constant_id = 13) const bool DO_TO_WS = true;  // PRE: do as floats for DKV / DQ (not for attention_bwd_coopmat.comp)

const uint TPR = 8;
const uint DP = D + 1;
const uint NPK = D / VW;
const uint MAXACC = 32;
#define NEG_INF uintBitsToFloat(0xff800000u)

layout(push_constant) uniform PC {
  uint B, Hq, Hkv, SqT, SkT, G;
  float scale, softcap;
  uint window;
  uint seed_lo, seed_hi, off_lo, off_hi, thr;
  float keep_scale;
  uint block_size, nkb;
  uint aux_rope, aux_slopes, aux_lens, aux_cuq, aux_cuk, aux_bmask;
  int rope_pos0;
  uint ws_D, ws_lse, ws_do;
  uint unused_amax;  // attention_bwd_coopmat.comp's aux_amax
  uint group_base;   // added to gl_WorkGroupID.x (a grid split into several dispatches)
} pc;

#if defined(PRE)
layout(std430, binding = 5) buffer WS { uint ws[]; };
DECLARE_BUFFER(0, O, readonly)
DECLARE_BUFFER(1, DO, readonly)
DECLARE_BUFFER(2, LSEB, readonly)

void main() {
  const uint rows = pc.B * pc.Hq * pc.SqT;
  for (uint r = gl_GlobalInvocationID.x; r < rows; r += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
    // Eight partial sums by d mod 8, added in grad_entry's order: for a row that sees one key, o is that
    // key's v and the exact dS = P (dP - D) = 0 comes out as an exact 0 only when D and dP are summed
    // alike (packed sequences of one key otherwise leave rounding noise where the reference has zeros).
    float dp[8];
    [[unroll]] for (uint e = 0; e < 8u; ++e) dp[e] = 0.0;
    for (uint pk = 0; pk < NPK; pk += 8u / VW) {
      [[unroll]] for (uint q = 0; q < 8u / VW; ++q) {
        FT o[VW], g[VW];
        unpack(O_v.v[r * NPK + pk + q], o);
        unpack(DO_v.v[r * NPK + pk + q], g);
        [[unroll]] for (uint e = 0; e < VW; ++e) {
          dp[q * VW + e] += float(g[e]) * float(o[e]);
          if (DO_TO_WS) ws[pc.ws_do + r * D + (pk + q) * VW + e] = floatBitsToUint(float(g[e]));
        }
      }
    }
    const float d = ((dp[0] + dp[1]) + (dp[2] + dp[3])) + ((dp[4] + dp[5]) + (dp[6] + dp[7]));
    ws[pc.ws_D + r] = floatBitsToUint(d);
    ws[pc.ws_lse + r] = floatBitsToUint(float(LOAD_ELEM(LSEB, r)));
  }
}

#else
layout(std430, binding = 5) readonly buffer WS { uint ws[]; };
DECLARE_BUFFER(0, Q, readonly)
DECLARE_BUFFER(1, K, readonly)
DECLARE_BUFFER(2, V, readonly)
DECLARE_BUFFER(3, OUT1, )
DECLARE_BUFFER(4, OUT2, )

float aux_elem(uint off, uint i) {
#if defined(DT_F16)
  vec2 h = unpackHalf2x16(ws[off + (i >> 1)]);
  return (i & 1u) == 0u ? h.x : h.y;
#elif defined(DT_BF16)
  uint w = ws[off + (i >> 1)];
  return (i & 1u) == 0u ? bf16_lo(w) : bf16_hi(w);
#else
  return uintBitsToFloat(ws[off + i]);
#endif
}

float alibi_slope(uint h) {
  if (ALIBI == 2u) return aux_elem(pc.aux_slopes, h);
  const uint c = 1u << uint(findMSB(pc.Hq));
  if (h < c) return exp2(-8.0 * float(h + 1u) / float(c));
  return exp2(-8.0 * float(2u * (h - c) + 1u) / float(2u * c));
}

bool dropout_keep(uint rowidx, uint col) {
  return philox_keep2d(rowidx, pc.SkT, col, uvec2(pc.off_lo, pc.off_hi), uvec2(pc.seed_lo, pc.seed_hi), pc.thr);
}

shared float Qs[BQ * DP];
shared float dOs[BQ * DP];
shared float Ks[BK * DP];
shared float Vs[BK * DP];
shared float Ps[BQ * BK];
shared float dSs[BQ * BK];
shared float lse_s[BQ];
shared float D_s[BQ];

// Rotates rows [0, n) of a staged tile (query rows: tile row first + t is query (first + t) / G at
// position i + off; key rows: position first + t). sgn = -1 rotates back (the gradients).
void rope_rows(bool query, bool on_q_tile, uint n, int first, int off, float sgn) {
  const uint half_d = D / 2u;
  for (uint e = gl_LocalInvocationID.x; e < n * half_d; e += gl_WorkGroupSize.x) {
    const uint t = e / half_d, d = e % half_d;
    const int pos = query ? int((uint(first) + t) / pc.G) + off : first + int(t);
    const uint tab = pc.aux_rope + 2u * (uint(pos + pc.rope_pos0) * half_d + d);
    const float c = uintBitsToFloat(ws[tab]), s = sgn * uintBitsToFloat(ws[tab + 1u]);
    const uint i0 = ROPE == 1u ? d : 2u * d, i1 = ROPE == 1u ? d + half_d : 2u * d + 1u;
    const uint base = t * DP;
    if (on_q_tile) {
      const float a = Qs[base + i0], b = Qs[base + i1];
      Qs[base + i0] = a * c - b * s;
      Qs[base + i1] = b * c + a * s;
    } else {
      const float a = Ks[base + i0], b = Ks[base + i1];
      Ks[base + i0] = a * c - b * s;
      Ks[base + i1] = b * c + a * s;
    }
  }
}

// The sequence of this workgroup and its bounds.
struct Seq {
  uint seq, b, qbeg, qlen, kbeg, klen;
  int off, kl;
};

Seq sequence(uint seq) {
  Seq s;
  s.seq = seq;
  s.b = VARLEN ? 0u : seq;
  s.qbeg = 0u;
  s.qlen = pc.SqT;
  s.kbeg = 0u;
  s.klen = pc.SkT;
  if (VARLEN) {
    s.qbeg = min(ws[pc.aux_cuq + seq], pc.SqT);
    s.qlen = clamp(ws[pc.aux_cuq + seq + 1u], s.qbeg, pc.SqT) - s.qbeg;
    s.kbeg = min(ws[pc.aux_cuk + seq], pc.SkT);
    s.klen = clamp(ws[pc.aux_cuk + seq + 1u], s.kbeg, pc.SkT) - s.kbeg;
  }
  s.off = int(s.klen) - int(s.qlen);
  s.kl = int(s.klen);
  if (LENS) s.kl = clamp(int(ws[pc.aux_lens + seq]), 0, int(s.klen));
  return s;
}

// Stages query rows [r0, r0 + BQ) of kv head hk (rows past nrows are zeros; lse -inf), unrotated.
void stage_q(Seq sq, uint hk, uint r0, uint nrows) {
  const uint WG = gl_WorkGroupSize.x;
  for (uint e = gl_LocalInvocationID.x; e < BQ * NPK; e += WG) {
    const uint t = e / NPK, pk = e % NPK, rq = r0 + t;
    FT x[VW];
    uint rowidx = 0u;
    if (rq < nrows) {
      rowidx = (sq.b * pc.Hq + hk * pc.G + rq % pc.G) * pc.SqT + sq.qbeg + rq / pc.G;
      unpack(Q_v.v[rowidx * NPK + pk], x);
    } else {
      [[unroll]] for (uint k = 0; k < VW; ++k) x[k] = FT(0);
    }
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      Qs[t * DP + pk * VW + k] = float(x[k]);
      dOs[t * DP + pk * VW + k] = rq < nrows ? uintBitsToFloat(ws[pc.ws_do + rowidx * D + pk * VW + k]) : 0.0;
    }
    if (pk == 0u) {
      lse_s[t] = rq < nrows ? uintBitsToFloat(ws[pc.ws_lse + rowidx]) : NEG_INF;
      D_s[t] = rq < nrows ? uintBitsToFloat(ws[pc.ws_D + rowidx]) : 0.0;
    }
  }
}

// Stages keys [j0, j0 + BK) of kv head hk (keys at or past jend are zeros), unrotated.
void stage_kv(Seq sq, uint hk, int j0, int jend) {
  const uint kvbase = (sq.b * pc.Hkv + hk) * pc.SkT + sq.kbeg;
  for (uint e = gl_LocalInvocationID.x; e < BK * NPK; e += gl_WorkGroupSize.x) {
    const uint t = e / NPK, pk = e % NPK;
    const int j = j0 + int(t);
    FT x[VW], y[VW];
    if (j < jend) {
      unpack(K_v.v[(kvbase + uint(j)) * NPK + pk], x);
      unpack(V_v.v[(kvbase + uint(j)) * NPK + pk], y);
    } else {
      [[unroll]] for (uint k = 0; k < VW; ++k) x[k] = FT(0), y[k] = FT(0);
    }
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      Ks[t * DP + pk * VW + k] = float(x[k]);
      Vs[t * DP + pk * VW + k] = float(y[k]);
    }
  }
}

#if defined(SCORE_MOD)
// The custom score function and its derivative in score (SCORE_MOD, SCORE_MOD_GRAD: GLSL the host builds
// from the parsed expression, compiled at run time; attention.comp has the same function).
float score_mod(float score, int b, int h, int i, int j) { return SCORE_MOD; }
float score_mod_grad(float score, int b, int h, int i, int j) { return SCORE_MOD_GRAD; }
#endif

// dS (and Z P) of query tile row t against key tile row u: the forward's score recomputed.
void grad_entry(Seq sq, uint hk, uint r0, uint nrows, uint t, int j0, uint u, out float zp, out float ds) {
  zp = 0.0;
  ds = 0.0;
  const uint rq = r0 + t;
  const int j = j0 + int(u);
  if (rq >= nrows || j >= sq.kl) return;
  const int i = int(rq / pc.G);
  const uint h = hk * pc.G + rq % pc.G;
  const uint row_global = sq.qbeg + uint(i);
  if (CAUSAL && j > i + sq.off) return;
  if (WINDOW && i + sq.off - j >= int(pc.window)) return;
  if (BMASK && ws[pc.aux_bmask + (row_global / pc.block_size) * pc.nkb + (sq.kbeg + uint(j)) / pc.block_size] == 0u) return;
  const float lse = lse_s[t];
  if (lse == NEG_INF) return;
  // q.k and dO.v as eight partial sums (d mod 8; D is a multiple of 8) added pairwise: in f32 the score's
  // rounding is most of the backward's error (P's relative error is the score's absolute one), and one
  // running sum over D = 64..96 left lavapipe's relative L2 error at 0.4e-6 typical with tails past
  // docs/ops.md's 1e-6.
  float dot8[8], dpv8[8];
  [[unroll]] for (uint e = 0; e < 8u; ++e) dot8[e] = 0.0, dpv8[e] = 0.0;
  for (uint d = 0; d < D; d += 8u) {
    [[unroll]] for (uint e = 0; e < 8u; ++e) {
      dot8[e] += Qs[t * DP + d + e] * Ks[u * DP + d + e];
      dpv8[e] += dOs[t * DP + d + e] * Vs[u * DP + d + e];
    }
  }
  const float dot = ((dot8[0] + dot8[1]) + (dot8[2] + dot8[3])) + ((dot8[4] + dot8[5]) + (dot8[6] + dot8[7]));
  const float dpv = ((dpv8[0] + dpv8[1]) + (dpv8[2] + dpv8[3])) + ((dpv8[4] + dpv8[5]) + (dpv8[6] + dpv8[7]));
  float s = dot * pc.scale, dcap = 1.0;
  if (SOFTCAP) {
    const float th = tanh(s / pc.softcap);
    s = pc.softcap * th;
    dcap = 1.0 - th * th;
  }
  if (ALIBI != 0u) s -= alibi_slope(h) * abs(float(i + sq.off - j));
#if defined(SCORE_MOD)
  const float s0 = s;
  s = score_mod(s0, int(sq.seq), int(h), i, j);
  if (s == NEG_INF) return;  // masked by the function: no gradient
  dcap *= score_mod_grad(s0, int(sq.seq), int(h), i, j);
#endif
  const float p = exp(s - lse);
  float z = 1.0;
  if (DROPOUT) {
    const uint rowidx = (sq.b * pc.Hq + h) * pc.SqT + row_global;
    z = dropout_keep(rowidx, sq.kbeg + uint(j)) ? pc.keep_scale : 0.0;
  }
  zp = z * p;
  ds = p * (z * dpv - D_s[t]) * dcap * pc.scale;
}

#if defined(DKV)
void main() {
  const uint lid = gl_LocalInvocationID.x, jr = lid / TPR, lane = lid % TPR;
  const uint hk = gl_WorkGroupID.y;
  const Seq sq = sequence(gl_WorkGroupID.z);
  const int j0 = int((gl_WorkGroupID.x + pc.group_base) * BK);
  if (j0 >= int(sq.klen)) return;  // uniform
  const int jlast = min(j0 + int(BK), int(sq.klen)) - 1;
  const uint nrows = pc.G * sq.qlen;
  stage_kv(sq, hk, j0, int(sq.klen));
  barrier();
  if (ROPE != 0u) {
    rope_rows(false, false, uint(jlast - j0 + 1), j0, 0, 1.0);
    barrier();
  }
  // The query rows that can see a key of the tile.
  int i_lo = 0, i_hi = int(sq.qlen);  // [i_lo, i_hi)
  if (CAUSAL) i_lo = max(i_lo, j0 - sq.off);
  if (WINDOW) i_hi = min(i_hi, jlast - sq.off + int(pc.window));
  if (j0 >= sq.kl) i_hi = i_lo;
  const uint r_begin = uint(max(i_lo, 0)) * pc.G, r_end = uint(max(i_hi, i_lo)) * pc.G;

  float dk[MAXACC], dv[MAXACC];
  [[unroll]] for (uint k = 0; k < MAXACC; ++k) dk[k] = 0.0, dv[k] = 0.0;
  const uint npp = (NPK + TPR - 1u) / TPR;
  for (uint r0 = r_begin; r0 < r_end; r0 += BQ) {
    stage_q(sq, hk, r0, min(nrows, r_end));
    barrier();
    if (ROPE != 0u) {
      rope_rows(true, true, min(BQ, r_end - r0), int(r0), sq.off, 1.0);
      barrier();
    }
    for (uint t = lane; t < BQ; t += TPR) {
      float zp, ds;
      grad_entry(sq, hk, r0, r_end, t, j0, jr, zp, ds);
      Ps[jr * BQ + t] = zp;
      dSs[jr * BQ + t] = ds;
    }
    barrier();
    for (uint t = 0; t < BQ; ++t) {
      const float zp = Ps[jr * BQ + t], ds = dSs[jr * BQ + t];
      if (zp == 0.0 && ds == 0.0) continue;
      [[unroll]] for (uint q = 0; q < MAXACC / VW; ++q) {
        const uint pk = lane + TPR * q;
        if (q < npp && pk < NPK)
          [[unroll]] for (uint e = 0; e < VW; ++e) {
            dv[q * VW + e] += zp * dOs[t * DP + pk * VW + e];
            dk[q * VW + e] += ds * Qs[t * DP + pk * VW + e];
          }
      }
    }
    barrier();
  }
  const bool key_ok = j0 + int(jr) <= jlast;
  const uint krow = (sq.b * pc.Hkv + hk) * pc.SkT + sq.kbeg + uint(j0) + jr;
  if (ROPE != 0u) {  // rotate dk back through shared memory
    [[unroll]] for (uint q = 0; q < MAXACC / VW; ++q) {
      const uint pk = lane + TPR * q;
      if (q < npp && pk < NPK) [[unroll]] for (uint e = 0; e < VW; ++e) Ks[jr * DP + pk * VW + e] = dk[q * VW + e];
    }
    barrier();
    rope_rows(false, false, uint(jlast - j0 + 1), j0, 0, -1.0);
    barrier();
    [[unroll]] for (uint q = 0; q < MAXACC / VW; ++q) {
      const uint pk = lane + TPR * q;
      if (q < npp && pk < NPK) [[unroll]] for (uint e = 0; e < VW; ++e) dk[q * VW + e] = Ks[jr * DP + pk * VW + e];
    }
  }
  if (!key_ok) return;
  [[unroll]] for (uint q = 0; q < MAXACC / VW; ++q) {
    const uint pk = lane + TPR * q;
    if (q < npp && pk < NPK) {
      FT a[VW], c[VW];
      [[unroll]] for (uint e = 0; e < VW; ++e) a[e] = FT(dk[q * VW + e]), c[e] = FT(dv[q * VW + e]);
      OUT1_v.v[krow * NPK + pk] = pack(a);
      OUT2_v.v[krow * NPK + pk] = pack(c);
    }
  }
}

#else  // DQ
void main() {
  const uint lid = gl_LocalInvocationID.x, lr = lid / TPR, lane = lid % TPR;
  const uint hk = gl_WorkGroupID.y;
  const Seq sq = sequence(gl_WorkGroupID.z);
  const uint nrows = pc.G * sq.qlen;
  const uint r0 = (gl_WorkGroupID.x + pc.group_base) * BQ;
  if (r0 >= nrows) return;  // uniform
  const uint r_last = min(r0 + BQ, nrows) - 1u;
  const int i_lo = int(r0 / pc.G), i_hi = int(r_last / pc.G);
  int jbeg = 0, jend = sq.kl;
  if (CAUSAL) jend = min(jend, i_hi + sq.off + 1);
  if (WINDOW) jbeg = max(jbeg, i_lo + sq.off - int(pc.window) + 1);
  stage_q(sq, hk, r0, nrows);
  barrier();
  if (ROPE != 0u) {
    rope_rows(true, true, r_last - r0 + 1u, int(r0), sq.off, 1.0);
    barrier();
  }
  float dq[MAXACC];
  [[unroll]] for (uint k = 0; k < MAXACC; ++k) dq[k] = 0.0;
  const uint npp = (NPK + TPR - 1u) / TPR;
  for (int j0 = jbeg; j0 < jend; j0 += int(BK)) {
    if (BMASK) {
      bool any = false;
      const uint bi0 = (sq.qbeg + uint(i_lo)) / pc.block_size, bi1 = (sq.qbeg + uint(i_hi)) / pc.block_size;
      const uint bj0 = (sq.kbeg + uint(j0)) / pc.block_size, bj1 = (sq.kbeg + uint(min(j0 + int(BK), jend)) - 1u) / pc.block_size;
      for (uint bi = bi0; bi <= bi1 && !any; ++bi)
        for (uint bj = bj0; bj <= bj1 && !any; ++bj) any = ws[pc.aux_bmask + bi * pc.nkb + bj] != 0u;
      if (!any) continue;
    }
    stage_kv(sq, hk, j0, jend);
    barrier();
    if (ROPE != 0u) {
      rope_rows(false, false, uint(min(int(BK), jend - j0)), j0, 0, 1.0);
      barrier();
    }
    for (uint t = lane; t < BK; t += TPR) {
      float zp, ds;
      grad_entry(sq, hk, r0, nrows, lr, j0, t, zp, ds);
      if (j0 + int(t) >= jend) ds = 0.0;
      dSs[lr * BK + t] = ds;
    }
    barrier();
    for (uint t = 0; t < BK; ++t) {
      const float ds = dSs[lr * BK + t];
      if (ds == 0.0) continue;
      [[unroll]] for (uint q = 0; q < MAXACC / VW; ++q) {
        const uint pk = lane + TPR * q;
        if (q < npp && pk < NPK) [[unroll]] for (uint e = 0; e < VW; ++e) dq[q * VW + e] += ds * Ks[t * DP + pk * VW + e];
      }
    }
    barrier();
  }
  if (ROPE != 0u) {  // rotate dq back through shared memory
    [[unroll]] for (uint q = 0; q < MAXACC / VW; ++q) {
      const uint pk = lane + TPR * q;
      if (q < npp && pk < NPK) [[unroll]] for (uint e = 0; e < VW; ++e) Qs[lr * DP + pk * VW + e] = dq[q * VW + e];
    }
    barrier();
    rope_rows(true, true, r_last - r0 + 1u, int(r0), sq.off, -1.0);
    barrier();
    [[unroll]] for (uint q = 0; q < MAXACC / VW; ++q) {
      const uint pk = lane + TPR * q;
      if (q < npp && pk < NPK) [[unroll]] for (uint e = 0; e < VW; ++e) dq[q * VW + e] = Qs[lr * DP + pk * VW + e];
    }
  }
  const uint my_r = r0 + lr;
  if (my_r >= nrows) return;
  const uint rowidx = (sq.b * pc.Hq + hk * pc.G + my_r % pc.G) * pc.SqT + sq.qbeg + my_r / pc.G;
  [[unroll]] for (uint q = 0; q < MAXACC / VW; ++q) {
    const uint pk = lane + TPR * q;
    if (q < npp && pk < NPK) {
      FT a[VW];
      [[unroll]] for (uint e = 0; e < VW; ++e) a[e] = FT(dq[q * VW + e]);
      OUT1_v.v[rowidx * NPK + pk] = pack(a);
    }
  }
}
#endif
#endif
