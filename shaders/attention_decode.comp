#version 450
// Decode attention (docs/ops.md section 5): one query row per sequence (Sq = 1, not packed) against a
// long key/value cache, streamed once at the memory-bandwidth limit. Variants attn_decode_<dt>
// (DT_F32, DT_F16, DT_BF16); hal/vulkan/attention.cpp picks this kernel when the call has no dropout,
// block mask or cu_seqlens (those stay on attention.comp) and the device has subgroup shuffles.
//
// Work: one workgroup per (sequence b, kv head hk, chunk of at most 8 of its G = Hq / Hkv query heads,
// key split). Every query head of the chunk is served from the same K/V bytes, so grouped-query and
// multi-query attention read each K/V row once (with G <= 8: once in all; above, once per chunk).
// The workgroup is made of key groups of LK lanes (LK a power of two, at most the subgroup size, about
// D / VW so that one key row of D elements is one coalesced 16-byte load per lane: 16 lanes x 16 bytes
// = 256 bytes for D = 128 in f16). Key group kg takes keys j0 + kg U + u (u < U) of each step of
// NKG U keys: it first issues the loads of U key rows and U value rows (2 U 16-byte loads per lane,
// straight from global memory into registers: no shared-memory staging, no barrier in the loop), then
// the dot products of the U keys with the GC query rows (held in registers, pre-scaled) as per-lane
// partial sums reduced over the LK lanes with subgroupShuffleXor (a butterfly: every lane ends with
// the same bits), then soft-capping, ALiBi and the masks, the online softmax per query head in f32
// (running max m, sum l, the accumulator rescaled) and p v into the lane's own slice of D.
//
// Why this should reach the bandwidth limit: the loop has no barrier and no shared-memory round trip
// (the portable kernel writes every K and V element to shared memory, converts it, waits on a barrier
// and reads it back 8 times); its only cross-lane traffic is log2(LK) shuffles per (head, key). Each
// lane has 2 U = 8 independent 16-byte loads outstanding per step before it needs the first, so a
// workgroup of 128 lanes has 16 KB in flight and an SM holding 3 or 4 of them 48-64 KB, against the
// roughly 20 KB per SM that Little's law asks of an H100 (3.35 TB/s x ~0.8 us latency / 132 SMs). The
// arithmetic per 16-byte pack of K and V is 2 x 8 multiply-adds per query head (f16) plus the
// shuffles, under the SM's share of the copy bandwidth for G <= 8. The partials of the key splits make
// about 1.5% of the traffic at the bench shapes (64 splits of 512 keys, D + 2 words per row and split).
//
// End of the workgroup: the NKG key groups' partials are merged in shared memory in key-group order
// (fixed order: the same bits every run), and written in the exact format of attention.comp's SPLIT
// path (the accumulator at part_off + part D, then the (m, l) pairs after all nparts accumulators,
// part = split rows + rowidx); attention.comp's COMBINE pass merges the splits, adds the sinks,
// normalizes and writes o and lse.
//
// The reduce-scatter form (RS: where LK = GC U exactly and spec constant 18 allows it, as the CUDA
// kernel's attn_decode<..., RS = true>; e.g. LK 16 with 4 heads, LK 8 with 2, LK 4 with 1): the partial
// dot products are reduce-scattered over the key group's lanes instead of all-reduced, so that lane sl
// of a key group (sl = its subgroup lane mod LK) ends with the one full score t = sl (head sl / U, key
// sl % U) and computes that score's softmax step alone: soft-capping, its head's ALiBi slope, the
// masks; the U lanes of a head combine their max and sum by xor shuffles (the same bits in the U
// lanes) and keep that head's m and l only; the probabilities and the heads' rescale factors are
// gathered back to every lane (subgroupShuffle) for p v. It replaces log2(LK) GC U shuffles and GC U
// exps and selects per lane and step by about 2 GC U shuffles and one exp. The key groups' merge then
// reads each head's m from shared memory (written by the head's lane with key 0). On the CUDA kernel
// (H100, GQA decode) it made the kernel 18-22% faster; unmeasured on Vulkan GPUs
// (KF_TUNE attn_decode_rs=1 keeps the all-reduce form).
//
// RoPE (ROPE 1 half, 2 interleaved; the cos / sin table of the tiled kernels, bound directly): the cache holds unrotated keys, so every key is rotated at its position on every call.
// Rotating it in registers would need its partner elements, which other lanes hold (half form); instead
// the rotation moves onto the query: with qr the rotated query (position Sk - 1) and sg_i = +1 for the
// first element of a pair and -1 for the second, rot(k) . qr = sum_i k_i (qr_i c + sg_i qr_partner(i) s),
// (c, s) the table's entry of element i's pair at the key's position. Each lane loads its query elements'
// partners once at the start (any lane may read any of q) and per key the (c, s) of its elements' pairs
// (the same table row for every kv head and split: cache hits); the values are not rotated.
//
// Semantics as src/ops/attention.cpp: query row 0 sits at position Sk - 1 (bottom-right alignment),
// so causal masks nothing; the window keeps keys j > Sk - 1 - w; ALiBi adds -slope (Sk - 1 - j); key
// lengths mask j >= length[b]; soft-capping before the bias; masked keys never enter the sums.
//
// Bindings: 0 q, 1 k, 2 v, 3 the RoPE table, 4 the workspace (partials, written), 5 the workspace
// (auxiliary inputs: slopes, key lengths, at the word offsets of the push constants).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
#include "philox.glsl"

#include "attention_common.glsl"

layout(constant_id = 16) const uint LK = 8;  // lanes per key row: a power of two, at most the subgroup size
layout(constant_id = 17) const uint GC = 4;  // query heads per workgroup (at most 8)
layout(constant_id = 18) const uint RS_OK = 1;  // 1: the reduce-scatter form where LK = GC U; 0 never
const uint U = 4;                            // keys in flight per key group and step
const uint PPL = (NPK + LK - 1u) / LK;       // 16-byte packs of a row per lane
const uint NKG = gl_WorkGroupSize.x / LK;    // key groups per workgroup
const bool RS = RS_OK != 0u && LK == GC * U;  // the reduce-scatter form (header)

DECLARE_BUFFER(0, Q, readonly)
DECLARE_BUFFER(1, K, readonly)
DECLARE_BUFFER(2, V, readonly)
layout(std430, binding = 4) buffer PART { uint part_w[]; };
// The RoPE table, bound as it is cached (no copy per call): (cos, sin) of pair d at position p + rope_pos0
// in floats 2 ((p + rope_pos0) D / 2 + d) and + 1; read by vec4, two pairs at a time.
layout(std430, binding = 3) readonly buffer ROPE_T { vec4 rope4[]; };

shared float Ms[NKG * GC];
shared float Ls[NKG * GC];
shared float Accs[GC * D];

#if defined(SCORE_MOD)
// The custom score function (Attrs::score_mod; see attention.comp), compiled in at run time: the one query
// row is query 0 of its sequence.
float score_mod(float score, int b, int h, int i, int j) { return SCORE_MOD; }
#endif

void main() {
  const uint lid = gl_LocalInvocationID.x, lk = lid % LK, kg = lid / LK;
  const uint nchunk = (pc.G + GC - 1u) / GC;
  const uint chunk = gl_WorkGroupID.y % nchunk, hk = gl_WorkGroupID.y / nchunk;
  const uint h0 = hk * pc.G + chunk * GC;
  const uint ng = min(GC, pc.G - chunk * GC);  // query heads of this chunk
  const uint b = gl_WorkGroupID.z / pc.nsplit, split = gl_WorkGroupID.z % pc.nsplit;

  // The keys of this workgroup: [jbeg, jend), the same in every invocation (the loop below is uniform
  // over the workgroup, so every lane reaches every shuffle).
  const int off = int(pc.SkT) - 1;  // the query's position
  int jbeg = 0, jend = int(pc.SkT);
  if (LENS) jend = clamp(int(ws[pc.aux_lens + b]), 0, jend);
  if (WINDOW) jbeg = max(jbeg, off - int(pc.window) + 1);
  jbeg = max(jbeg, int(split * pc.split_len));
  jend = min(jend, int(min((split + 1u) * pc.split_len, pc.SkT)));

  // The query rows of the chunk, scaled, this lane's packs (lk, lk + LK, ...). With RoPE, q holds the
  // rotated query and qp its rotated partner elements, signed (RoPE below).
  float q[GC * PPL * VW];
  float qp[ROPE != 0u ? GC * PPL * VW : 1];
  float slope[GC];
  [[unroll]] for (uint g = 0; g < GC; ++g) {
    const bool gok = g < ng;
    [[unroll]] for (uint p = 0; p < PPL; ++p) {
      const uint pk = lk + LK * p;
      const uint row = (b * pc.Hq + h0 + g) * NPK;
      FT x[VW], y[VW];
      if (gok && pk < NPK) {
        unpack(Q_v.v[row + pk], x);
        if (ROPE == 1u) unpack(Q_v.v[row + (pk < NPK / 2u ? pk + NPK / 2u : pk - NPK / 2u)], y);
      } else {
        [[unroll]] for (uint e = 0; e < VW; ++e) x[e] = FT(0), y[e] = FT(0);
      }
      if (ROPE == 0u) {
        [[unroll]] for (uint e = 0; e < VW; ++e) q[(g * PPL + p) * VW + e] = float(x[e]) * pc.scale;
      } else {
        // The query at position off: qr_i = q_i c - sg_i q_partner s; qp_i = sg_i qr_partner.
        const bool first_half = pk < NPK / 2u;
        const uint row = uint(off + pc.rope_pos0) * (D / 4u);
        [[unroll]] for (uint e = 0; e < VW; ++e) {
          const uint i = pk * VW + e;
          const uint d = ROPE == 1u ? i % (D / 2u) : i / 2u;
          const float sg = (ROPE == 1u ? first_half : (e & 1u) == 0u) ? 1.0 : -1.0;
          const float qi = float(x[e]), qq = ROPE == 1u ? float(y[e]) : float(x[e ^ 1u]);
          const vec4 t = rope4[row + d / 2u];
          const float c = (d & 1u) == 0u ? t.x : t.z, sn = (d & 1u) == 0u ? t.y : t.w;
          q[(g * PPL + p) * VW + e] = (qi * c - sg * qq * sn) * pc.scale;
          qp[(g * PPL + p) * VW + e] = (sg * qq * c + qi * sn) * pc.scale;
        }
      }
    }
    slope[g] = (ALIBI != 0u && gok) ? alibi_slope(h0 + g) : 0.0;
  }

  // RS: this lane's score in each step is head own_h's, key jk + own_u; m_own and l_own that head's
  // state. sl is the lane's place in its key group as the subgroup numbers it (the key group is an
  // aligned block of LK lanes of one subgroup, as the butterfly already needs; sl = lk where the
  // subgroup's lanes follow the local invocation index).
  const uint sl = gl_SubgroupInvocationID & (LK - 1u), kg_lane0 = gl_SubgroupInvocationID & ~(LK - 1u);
  const uint own_h = sl / U, own_u = sl % U;
  float own_slope = 0.0;
  if (RS) {
    if (ALIBI != 0u && own_h < ng) own_slope = alibi_slope(h0 + own_h);
  }
  float m_own = NEG_INF, l_own = 0.0;

  float m[GC], l[GC];
  float acc[GC * PPL * VW];
  [[unroll]] for (uint g = 0; g < GC; ++g) m[g] = NEG_INF, l[g] = 0.0;
  [[unroll]] for (uint k = 0; k < GC * PPL * VW; ++k) acc[k] = 0.0;
  const uint kvrow0 = (b * pc.Hkv + hk) * pc.SkT;

  for (int j0 = jbeg; j0 < jend; j0 += int(NKG * U)) {
    const int jk = j0 + int(kg * U);
    // All loads of the step first: U key rows and U value rows.
    uvec4 kr[U * PPL], vr[U * PPL];
    [[unroll]] for (uint u = 0; u < U; ++u) {
      const int j = jk + int(u);
      [[unroll]] for (uint p = 0; p < PPL; ++p) {
        const uint pk = lk + LK * p;
        if (j < jend && pk < NPK) {
          const uint at = (kvrow0 + uint(j)) * NPK + pk;
          kr[u * PPL + p] = K_v.v[at];
          vr[u * PPL + p] = V_v.v[at];
        } else {
          kr[u * PPL + p] = uvec4(0u);
          vr[u * PPL + p] = uvec4(0u);
        }
      }
    }
    // Partial dot products over this lane's packs, then the butterfly over the key group's lanes.
    float s[GC * U];
    [[unroll]] for (uint u = 0; u < U; ++u) {
      float kx[PPL * VW];
      [[unroll]] for (uint p = 0; p < PPL; ++p) {
        FT x[VW];
        unpack(kr[u * PPL + p], x);
        [[unroll]] for (uint e = 0; e < VW; ++e) kx[p * VW + e] = float(x[e]);
      }
      if (ROPE != 0u) {
        // Key j rotated at its position, folded into the query: k_rot . qr = sum_i k_i (qr_i c + qp_i s)
        // with (c, s) of the pair of element i at position j (a key past the end reads row SkT - 1: its
        // score is masked below).
        // The lane's pairs of a pack are consecutive: VW of them (half form) or VW / 2 (interleaved, each
        // serving two elements), starting at an even pair.
        const uint row = uint(min(jk + int(u), int(pc.SkT) - 1) + pc.rope_pos0) * (D / 4u);
        float cs[PPL * VW], sn[PPL * VW];
        [[unroll]] for (uint p = 0; p < PPL; ++p) {
          const uint i0 = min(lk + LK * p, NPK - 1u) * VW;
          const uint d0 = ROPE == 1u ? i0 % (D / 2u) : i0 / 2u;
          [[unroll]] for (uint t = 0; t < (ROPE == 1u ? VW / 2u : VW / 4u); ++t) {
            const vec4 r = rope4[row + d0 / 2u + t];
            if (ROPE == 1u) {
              cs[p * VW + 2u * t] = r.x, sn[p * VW + 2u * t] = r.y;
              cs[p * VW + 2u * t + 1u] = r.z, sn[p * VW + 2u * t + 1u] = r.w;
            } else {  // elements 4t, 4t + 1 share pair 2t; 4t + 2, 4t + 3 pair 2t + 1
              cs[p * VW + 4u * t] = r.x, sn[p * VW + 4u * t] = r.y;
              cs[p * VW + 4u * t + 1u] = r.x, sn[p * VW + 4u * t + 1u] = r.y;
              cs[p * VW + 4u * t + 2u] = r.z, sn[p * VW + 4u * t + 2u] = r.w;
              cs[p * VW + 4u * t + 3u] = r.z, sn[p * VW + 4u * t + 3u] = r.w;
            }
          }
        }
        [[unroll]] for (uint g = 0; g < GC; ++g) {
          float d = 0.0;
          [[unroll]] for (uint k = 0; k < PPL * VW; ++k)
            d += (q[g * PPL * VW + k] * cs[k] + qp[g * PPL * VW + k] * sn[k]) * kx[k];
          s[g * U + u] = d;
        }
      } else {
        [[unroll]] for (uint g = 0; g < GC; ++g) {
          float d = 0.0;
          [[unroll]] for (uint k = 0; k < PPL * VW; ++k) d += q[g * PPL * VW + k] * kx[k];
          s[g * U + u] = d;
        }
      }
    }
    float pr[GC * U];
    if (RS) {
      // Reduce-scatter: at offset o the lane keeps the half of its values that bit o of sl selects and
      // adds its partner's copy of them (LK = GC U, so the halves end at one value: score t = sl).
      [[unroll]] for (uint o = GC * U / 2u; o >= 1u; o >>= 1) {
        const bool upper = (sl & o) != 0u;
        [[unroll]] for (uint i = 0; i < o; ++i) {
          const float send = upper ? s[i] : s[i + o], keep = upper ? s[i + o] : s[i];
          s[i] = keep + subgroupShuffleXor(send, o);
        }
      }
      const int j = jk + int(own_u);
      float sv = s[0];
      if (SOFTCAP) sv = pc.softcap * tanh(sv / pc.softcap);
      if (ALIBI != 0u) sv -= own_slope * float(off - j);
#if defined(SCORE_MOD)
      sv = score_mod(sv, int(b), int(h0 + own_h), 0, j);
#endif
      if (j >= jend) sv = NEG_INF;
      float mt = sv;
      [[unroll]] for (uint o = 1u; o < U; o <<= 1) mt = max(mt, subgroupShuffleXor(mt, o));  // the head's U lanes
      const float mnew = max(m_own, mt);
      const float alpha = mnew == NEG_INF ? 1.0 : exp(m_own - mnew);
      const float p = sv == NEG_INF ? 0.0 : exp(sv - mnew);
      float lt = p;
      [[unroll]] for (uint o = 1u; o < U; o <<= 1) lt += subgroupShuffleXor(lt, o);  // xor order: the same bits
      l_own = l_own * alpha + lt;
      m_own = mnew;
      [[unroll]] for (uint t = 0; t < GC * U; ++t) pr[t] = subgroupShuffle(p, kg_lane0 + t);
      [[unroll]] for (uint g = 0; g < GC; ++g) {
        const float a = subgroupShuffle(alpha, kg_lane0 + g * U);
        [[unroll]] for (uint k = 0; k < PPL * VW; ++k) acc[g * PPL * VW + k] *= a;
      }
    } else {
      [[unroll]] for (uint o = 1u; o < LK; o <<= 1)
        [[unroll]] for (uint t = 0; t < GC * U; ++t) s[t] += subgroupShuffleXor(s[t], o);

      // Scores, online softmax per query head.
      [[unroll]] for (uint g = 0; g < GC; ++g) {
        float mt = NEG_INF;
        [[unroll]] for (uint u = 0; u < U; ++u) {
          const int j = jk + int(u);
          float sv = s[g * U + u];
          if (SOFTCAP) sv = pc.softcap * tanh(sv / pc.softcap);
          if (ALIBI != 0u) sv -= slope[g] * float(off - j);
#if defined(SCORE_MOD)
          sv = score_mod(sv, int(b), int(h0 + g), 0, j);
#endif
          if (j >= jend) sv = NEG_INF;
          s[g * U + u] = sv;
          mt = max(mt, sv);
        }
        const float mnew = max(m[g], mt);
        const float alpha = mnew == NEG_INF ? 1.0 : exp(m[g] - mnew);
        float lt = 0.0;
        [[unroll]] for (uint u = 0; u < U; ++u) {
          const float sv = s[g * U + u];
          const float p = sv == NEG_INF ? 0.0 : exp(sv - mnew);
          pr[g * U + u] = p;
          lt += p;
        }
        l[g] = l[g] * alpha + lt;
        m[g] = mnew;
        [[unroll]] for (uint k = 0; k < PPL * VW; ++k) acc[g * PPL * VW + k] *= alpha;
      }
    }
    // p v into this lane's slice of D.
    [[unroll]] for (uint u = 0; u < U; ++u) {
      [[unroll]] for (uint p = 0; p < PPL; ++p) {
        FT x[VW];
        unpack(vr[u * PPL + p], x);
        [[unroll]] for (uint g = 0; g < GC; ++g)
          [[unroll]] for (uint e = 0; e < VW; ++e) acc[(g * PPL + p) * VW + e] += pr[g * U + u] * float(x[e]);
      }
    }
  }

  // Merge the key groups in shared memory, in key-group order.
  if (RS) {
    if (own_u == 0u) {
      Ms[kg * GC + own_h] = m_own;
      Ls[kg * GC + own_h] = l_own;
    }
  } else if (lk == 0u) {
    [[unroll]] for (uint g = 0; g < GC; ++g) {
      Ms[kg * GC + g] = m[g];
      Ls[kg * GC + g] = l[g];
    }
  }
  barrier();
  float f[GC];
  [[unroll]] for (uint g = 0; g < GC; ++g) {
    float mm = NEG_INF;
    for (uint k = 0; k < NKG; ++k) mm = max(mm, Ms[k * GC + g]);
    const float mh = RS ? Ms[kg * GC + g] : m[g];
    f[g] = mh == NEG_INF ? 0.0 : exp(mh - mm);
  }
  for (uint k = 0; k < NKG; ++k) {
    if (kg == k) {
      [[unroll]] for (uint g = 0; g < GC; ++g)
        [[unroll]] for (uint p = 0; p < PPL; ++p) {
          const uint pk = lk + LK * p;
          if (pk < NPK)
            [[unroll]] for (uint e = 0; e < VW; ++e) {
              const uint at = g * D + pk * VW + e;
              const float v = f[g] * acc[(g * PPL + p) * VW + e];
              Accs[at] = k == 0u ? v : Accs[at] + v;
            }
        }
    }
    barrier();
  }

  // The partials of (split, row) for the chunk's heads, as attention.comp's SPLIT path writes them.
  const uint rows = pc.B * pc.Hq;  // SqT = 1
  const uint nparts = pc.nsplit * rows;
  for (uint t = lid; t < ng * D; t += gl_WorkGroupSize.x) {
    const uint g = t / D, d = t % D;
    const uint part = split * rows + b * pc.Hq + h0 + g;
    part_w[pc.part_off + part * D + d] = floatBitsToUint(Accs[g * D + d]);
  }
  if (lid < ng) {
    const uint g = lid;
    float mm = NEG_INF;
    for (uint k = 0; k < NKG; ++k) mm = max(mm, Ms[k * GC + g]);
    float ll = 0.0;
    for (uint k = 0; k < NKG; ++k) {
      const float mk = Ms[k * GC + g];
      if (mk != NEG_INF) ll += Ls[k * GC + g] * exp(mk - mm);
    }
    const uint part = split * rows + b * pc.Hq + h0 + g;
    part_w[pc.part_off + nparts * D + 2u * part] = floatBitsToUint(mm);
    part_w[pc.part_off + nparts * D + 2u * part + 1u] = floatBitsToUint(ll);
  }
}
