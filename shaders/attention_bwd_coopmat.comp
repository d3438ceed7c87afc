#version 450
// attention_backward's dK/dV and dQ passes on the tensor cores (16x16x16 f16 -> f32 cooperative matrices:
// GL_NV_cooperative_matrix, or GL_KHR_cooperative_matrix with KF_COOPMAT_KHR; coopmat.glsl): f16 and bf16 (BF16IN: f16 copies times powers of two), causal and window masks, key
// lengths, GQA; in the QUAD form also head dimensions HD 32, 64, 80, 96 and 128, dropout, soft-capping
// and ALiBi (the generic form: HD 64 and 128); in both a custom score function (SCORE_MOD,
// SCORE_MOD_GRAD: compiled at run time). RoPE, block masks and packed sequences stay on
// attention_bwd.comp (hal/vulkan/attention.cpp picks). After
// attention_bwd.comp's PRE pass (D_i and lse as floats in the workspace), with its push constants; same
// semantics (FlashAttention 2's backward, the probabilities recomputed from q, k and lse), deterministic
// (no atomics).
// Two forms, as attention_coopmat.comp's:
//   QUAD (where hal/vulkan/attention.cpp finds the accumulators' quad layout on the device, on KHR
//   with the A operands' the same: CM_ACC_TO_A): 4
//   subgroups, each with its stationary A operands in registers; per 16 x 16 score block, P and dS
//   computed on the score accumulators and converted to f16 fragments directly (no shared-memory round
//   trip); the results written through a 16 x 16 staging area.
//     DKV: 64 keys a workgroup (16 a subgroup: its K and V fragments in registers); the query rows of the
//          G heads sharing the kv head in tiles of 32: S^T = K Q^T, dP^T = V dO^T,
//          P^T = exp(S^T scale - lse), dS^T = P^T (dP^T - D) scale; dV += P^T dO, dK += dS^T Q, the
//          16 x HD accumulators in registers.
//     DQ:  64 rows a workgroup (16 a subgroup: their Q and dO fragments in registers); keys in tiles of
//          16, the next tile loaded into registers during the products: S = Q K^T, dP = dO V^T, dS as
//          above, dQ += dS K.
//   generic (any accumulator layout): 2 subgroups, 32 x 32 tiles, scores and probabilities through shared
//   memory:
//     DKV: 32 keys a workgroup (16 a subgroup); per tile of 32 rows and subgroup S^T and dP^T (16 x 32,
//          f32) to shared memory, P^T and dS^T element by element back as f16 (times their powers of
//          two with BF16IN), then the two products.
//     DQ:  32 rows a workgroup; keys in tiles of 32.
// Bindings: 0 q, 1 k, 2 v, 3 dk (DKV) or dq (DQ), 4 dv (DKV), 5 the workspace, 6 do.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
#extension GL_EXT_control_flow_attributes : enable
#include "coopmat.glsl"

// BF16N: bf16 as bf16 (KHR with KF_COOPMAT_BF16, the QUAD form only): q, k, v and do multiplied as
// stored, P and dS converted to bf16 (f32's range: no scaling), dq, dk and dv written as bf16.
#if defined(BF16IN) && defined(BF16N)
#error "BF16IN (staged as f16) and BF16N (bf16 as bf16) are two forms of bf16: define one"
#endif
#if defined(BF16N) && !(QUAD && defined(KF_COOPMAT_BF16))
#error "BF16N is the QUAD form on bf16 cooperative matrices (KF_COOPMAT_BF16)"
#endif
#if defined(BF16IN) || defined(BF16N)
#define DT_BF16
#include "common.glsl"  // pack_bf16x2, bf16_lo, bf16_hi
#endif
#include "philox.glsl"
#include "attention_dropout.glsl"  // keep_bits_keys_in_cols / _rows
#ifndef HD
#define HD 128
#endif
#ifndef QUAD
#define QUAD 0
#endif
#if QUAD
layout(local_size_x = 128) in;  // four subgroups of 32 (devices with the NV shape have subgroups of 32)
#else
layout(local_size_x = 64) in;   // two subgroups of 32
#endif
layout(constant_id = 4) const bool CAUSAL = false;
layout(constant_id = 5) const bool WINDOW = false;
layout(constant_id = 9) const bool LENS = false;
layout(constant_id = 6) const uint ALIBI = 0;        // QUAD: 1 default slopes, 2 given (aux_slopes)
layout(constant_id = 7) const bool SOFTCAP = false;  // QUAD
layout(constant_id = 12) const bool DROPOUT = false; // QUAD

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
  uint aux_amax;  // BF16IN: word aux_amax + 1 .. + 4, the largest magnitudes of q, k, v and do
  uint group_base;  // added to gl_WorkGroupID.x (a grid split into several dispatches)
} pc;

layout(std430, binding = 0) readonly buffer Q_ { uvec4 q4[]; };
layout(std430, binding = 1) readonly buffer K_ { uvec4 k4[]; };
layout(std430, binding = 2) readonly buffer V_ { uvec4 v4[]; };
layout(std430, binding = 3) writeonly buffer O1_ { uint out1[]; };  // f16 pairs (no 16-bit storage buffers)
layout(std430, binding = 4) writeonly buffer O2_ { uint out2[]; };
layout(std430, binding = 5) readonly buffer WS { uint ws[]; };
layout(std430, binding = 6) readonly buffer DO_ { uvec4 do4[]; };

const uint NPK = HD / 8u;       // 16-byte packs a row
const uint LD8 = NPK + 1u;      // packs a staged row (+ 1 against bank conflicts)
const uint NF = HD / 16u;       // 16-wide fragments along the head dimension
const float LOG2E = 1.44269504088896341;
#define INF uintBitsToFloat(0x7f800000u)

#define ACC CM_ACC
#define MAT_A CM_A  // the products' left operands
#define MAT_B CM_B  // and right ones

#if QUAD
// The quad layout of mma.sync's accumulators (as attention_coopmat.comp): element i of a 16 x 16
// accumulator is at row lane / 4 + 8 H(i), column 2 (lane % 4) + X(i) + 8 Y(i).
layout(constant_id = 16) const uint QLAYOUT = 0xf59d10u;
uint LH(uint i) { return (QLAYOUT >> (3u * i)) & 1u; }
uint LX(uint i) { return (QLAYOUT >> (3u * i + 1u)) & 1u; }
uint LY(uint i) { return (QLAYOUT >> (3u * i + 2u)) & 1u; }
uint LCOL(uint lane, uint i) { return 2u * (lane & 3u) + LX(i) + 8u * LY(i); }
const uint NT = 128u;                   // invocations a workgroup
#if defined(DKV)
const uint BK = 64u;                    // keys a workgroup (16 a subgroup)
const uint BQ = 32u;                    // query rows a tile
shared uvec4 Qs[BQ * LD8], Os[BQ * LD8];  // the tile's q and do (first: the workgroup's k and v, in rounds)
#else
const uint BK = 16u;                    // keys a tile (32 took 19 more registers, 4 % slower under a causal mask)
const uint BQ = 64u;                    // query rows a workgroup (16 a subgroup)
shared uvec4 Ks[BK * LD8], Vs[BK * LD8];  // the tile's k and v (first: the workgroup's q and do, in rounds)
#endif
const uint RB = BQ / 16u;               // 16-row blocks of a tile (DKV)
shared float Sf[4u * 256u];             // per subgroup: a 16 x 16 accumulator on its way out
#else
const uint BT = 32u;            // rows of a tile (keys or query rows)
const uint PL = BT + 8u;        // halves a row of the staged P and dS
// The stationary pair (K, V for DKV; Q, dO for DQ) and the streamed pair, as 16-byte packs.
shared uvec4 St0[BT * LD8], St1[BT * LD8], Sm0[BT * LD8], Sm1[BT * LD8];
shared float Sc[2u * 16u * BT], Dp[2u * 16u * BT];   // per subgroup: S (S^T) and dP (dP^T), 16 x 32
shared float16_t Ph[2u * 16u * PL], Dh[2u * 16u * PL];  // per subgroup: P and dS as f16
shared float l2s[BT], dss[BT];                        // DKV: the tile rows' lse (base 2) and D
shared int qis[BT];                                   // DKV: the tile rows' query
#endif

struct Seq {
  uint b, qlen, klen;
  int off, kl;
};
Seq sequence(uint seq) {
  Seq s;
  s.b = seq;
  s.qlen = pc.SqT;
  s.klen = pc.SkT;
  s.off = int(s.klen) - int(s.qlen);
  s.kl = int(s.klen);
  if (LENS) s.kl = clamp(int(ws[pc.aux_lens + seq]), 0, int(s.klen));
  return s;
}
bool visible(int qi, int j, Seq s) {
  if (j >= s.kl) return false;
  if (CAUSAL && j > qi + s.off) return false;
  if (WINDOW && qi + s.off - j >= int(pc.window)) return false;
  return true;
}
// Row r of the kv head's group rows: query r / G of head hk G + r % G.
uint row_index(Seq s, uint hk, uint r) { return (s.b * pc.Hq + hk * pc.G + r % pc.G) * pc.SqT + r / pc.G; }

// bf16 (BF16IN, both forms) runs on f16 copies of q, k, v and do, each times the power of two that puts its
// largest magnitude in [2^14, 2^15) (attention_absmax.comp, as the forward's bf16): exact scaling, no
// overflow, values down to 2^-28 of the largest keep their 8 bits. dS goes to the products times the power
// of two that puts its bound (2 HD max|dO| max|V| scale / (1 - p): |P| <= 1, |Z dP|, |D| <= HD max|dO|
// max|V| / (1 - p)) at most 2^15, and P times PSCALE (small probabilities stay normal f16 numbers, as in
// the forward; the QUAD form in f16 too, the generic one in bf16 only, its f16 kernels as they were).
// Everything is undone in f32, one power of two at a time (no product of two scales, which could leave
// f32's range); dq, dk and dv are written as bf16.
// With dropout (QUAD) P Z goes to the products: PSCALE / (1 - p) stays within f16 (a smaller power of two
// where 1 / (1 - p) is large, as in the forward).
const float PSCALE = 4096.0;
struct Scales {
  float c2;            // the scores' factor to base-2 logits
  float sdot;          // the scores' factor (soft-capping, ALiBi: in the softmax's units)
  float rso, rsv;      // dP's: 1 / (do's scale), 1 / (v's)
  float ds;            // dS's
  float rsq, rsk;      // 1 / (q's scale), 1 / (k's)
  float pscale;        // P's
  float rso_p;         // 1 / (do's scale) / pscale: dV's
};
#if defined(BF16IN)
#include "bf16_scale.glsl"  // bf16_exp, pow2_scale
#endif
#if defined(BF16IN) || defined(BF16N)
uint pack2(vec2 v) { return pack_bf16x2(v.x, v.y); }
#else
uint pack2(vec2 v) { return packHalf2x16(v); }
#endif
Scales scales() {
  Scales x;
  float sq = 1.0, sk = 1.0, sv = 1.0, so = 1.0;
  x.ds = 1.0;
#if defined(BF16IN)
  const uint mq = ws[pc.aux_amax + 1u], mk = ws[pc.aux_amax + 2u], mv = ws[pc.aux_amax + 3u], mo = ws[pc.aux_amax + 4u];
  sq = pow2_scale(mq), sk = pow2_scale(mk), sv = pow2_scale(mv), so = pow2_scale(mo);
  if (mo != 0u && mv != 0u && mo < 0x7f80u && mv < 0x7f80u) {
    const float z = DROPOUT ? pc.keep_scale : 1.0;  // (|P Z dP|, |D| <= HD max|dO| max|V| / (1 - p))
    const int e = bf16_exp(mo) + bf16_exp(mv) + 2 + int(ceil(log2(2.0 * float(HD) * pc.scale * z)));  // bound < 2^e
    x.ds = exp2(float(clamp(15 - e, -100, 100)));
  }
#endif
  x.sdot = pc.scale / sq / sk;
  x.c2 = x.sdot * LOG2E;
  x.rso = 1.0 / so, x.rsv = 1.0 / sv, x.rsq = 1.0 / sq, x.rsk = 1.0 / sk;
#if QUAD || defined(BF16IN)
  x.pscale = DROPOUT ? min(PSCALE, exp2(floor(log2(32768.0 / pc.keep_scale)))) : PSCALE;
#else
  x.pscale = 1.0;
#endif
  x.rso_p = x.rso / x.pscale;
  return x;
}

#if QUAD
// A slope of ALiBi (as attention_bwd.comp): given (16-bit, in the workspace) or the default of Hq heads.
float alibi_slope(uint h) {
  if (ALIBI == 2u) {
    const uint wd = ws[pc.aux_slopes + (h >> 1)];
#if defined(BF16IN) || defined(BF16N)
    return (h & 1u) == 0u ? bf16_lo(wd) : bf16_hi(wd);
#else
    const vec2 v = unpackHalf2x16(wd);
    return (h & 1u) == 0u ? v.x : v.y;
#endif
  }
  const uint c = 1u << uint(findMSB(pc.Hq));
  if (h < c) return exp2(-8.0 * float(h + 1u) / float(c));
  return exp2(-8.0 * float(2u * (h - c) + 1u) / float(2u * c));
}

// What a row's probabilities need: lse in base 2 (+inf where the row saw no key, or is past the range:
// P = 0), D, its query, its row of the [B, Hq, Sq] tensors (the dropout index) and its ALiBi slope.
struct RowStats {
  float l2, d, slope;
  int qi;
  uint ri, h;
};
RowStats row_stats(Seq s, uint hk, uint r, uint nrows) {
  RowStats x;
  x.l2 = INF, x.d = 0.0, x.qi = 0, x.ri = 0u, x.slope = 0.0, x.h = 0u;
  if (r < nrows) {
    x.ri = row_index(s, hk, r);
    const float lse = uintBitsToFloat(ws[pc.ws_lse + x.ri]);
    x.l2 = isinf(lse) && lse < 0.0 ? INF : lse * LOG2E;
    x.d = uintBitsToFloat(ws[pc.ws_D + x.ri]);
    x.qi = int(r / pc.G);
    x.h = hk * pc.G + r % pc.G;
    if (ALIBI != 0u) x.slope = alibi_slope(x.h);
  }
  return x;
}

#if defined(SCORE_MOD)
// The custom score function and its derivative (Attrs::score_mod; see attention_bwd.comp), compiled in
// at run time (packed sequences do not reach these passes, so b is the batch).
const bool SCORE_MOD_ON = true;
float score_mod(float score, int b, int h, int i, int j) { return SCORE_MOD; }
float score_mod_grad(float score, int b, int h, int i, int j) { return SCORE_MOD_GRAD; }
#else
const bool SCORE_MOD_ON = false;
#endif

// P and dS (times their powers of two) of one score element from the raw products (dot: q . k, dp:
// do . v, of the scaled copies), for a row (x) and key j visible or not; keep: its dropout bit.
void p_ds(Scales sc, RowStats x, int j, bool vis, bool keep, Seq s, inout float dot, inout float dp) {
  float p, dcap = 1.0;
  if (!SOFTCAP && ALIBI == 0u && !SCORE_MOD_ON) {
    p = exp2(dot * sc.c2 - x.l2);
  } else {
    float v = dot * sc.sdot;
    if (SOFTCAP) {
      const float th = tanh(v / pc.softcap);
      v = pc.softcap * th;
      dcap = 1.0 - th * th;
    }
    if (ALIBI != 0u) v -= x.slope * abs(float(x.qi + s.off - j));
#if defined(SCORE_MOD)
    const float v0 = v;
    v = score_mod(v0, int(s.b), int(x.h), x.qi, j);
    if (isinf(v) && v < 0.0) vis = false;  // masked by the function (and its derivative not taken)
    else dcap *= score_mod_grad(v0, int(s.b), int(x.h), x.qi, j);
#endif
    p = exp2(v * LOG2E - x.l2);
  }
  if (!vis) p = 0.0, dcap = 0.0;
  float z = 1.0;
  if (DROPOUT) z = p > 0.0 && keep ? pc.keep_scale : 0.0;
  dot = p * z * sc.pscale;
  dp = p * (z * dp * sc.rso * sc.rsv - x.d) * dcap * pc.scale * sc.ds;
}

// The accumulators times f1 f2 to 16-bit rows through the subgroup's 16 x 16 staging area (indexing an
// accumulator's elements by the layout instead put the whole accumulator array in local memory on NVIDIA
// 580): the invocation's rows are lane / 8 + 4 k (k < 4), at out_row[k] of the output (none where ~0u),
// columns in pairs. (`second`: binding 4, else binding 3.)
void store_rows(ACC acc[NF], uint w, uint lane, uint out_row[4], float f1, float f2, bool second) {
  const uint base = 256u * w, c = 2u * (lane % 8u);
  [[unroll]] for (uint n = 0u; n < NF; ++n) {
    CM_STORE(acc[n], Sf, base, 16u, CM_ROW);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    [[unroll]] for (uint k = 0u; k < 4u; ++k) {
      const uint rr = lane / 8u + 4u * k;
      if (out_row[k] == ~0u) continue;
      const uint v = pack2(vec2(Sf[base + rr * 16u + c], Sf[base + rr * 16u + c + 1u]) * f1 * f2);
      const uint at = (out_row[k] * HD + 16u * n + c) / 2u;
      if (second) out2[at] = v;
      else out1[at] = v;
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
  }
}

#if defined(DKV)
// A tile's q and do packs (and, in the first BQ invocations, its rows' lse, D and query). Loaded as the
// tile starts: loading the next tile during the products (16-row tiles at D 128, for the registers) was
// 3-7 % slower than these 32-row tiles without it (H100).
const uint PF = (BQ * NPK + NT - 1u) / NT;  // packs an invocation (the last round partly, at D 80 or 96)
uvec4 pq[PF], pd[PF];
shared RowStats rst[BQ];  // the tile rows'
RowStats p_rs;
void fetch_rows(Seq s, uint hk, uint r0, uint nrows) {
  [[unroll]] for (uint f = 0u; f < PF; ++f) {
    const uint e = gl_LocalInvocationID.x + NT * f, t = e / NPK, pk = e % NPK, r = r0 + t;
    pq[f] = uvec4(0u), pd[f] = uvec4(0u);
    if (e < BQ * NPK && r < nrows) {
      const uint ri = row_index(s, hk, r);
      pq[f] = q4[ri * NPK + pk];
      pd[f] = do4[ri * NPK + pk];
    }
  }
  if (gl_LocalInvocationID.x < BQ) p_rs = row_stats(s, hk, r0 + gl_LocalInvocationID.x, nrows);
}

void main() {
  const uint w = gl_SubgroupID, lane = gl_SubgroupInvocationID, lid = gl_LocalInvocationID.x;
  const uint hk = gl_WorkGroupID.y, seqi = gl_WorkGroupID.z;
  const Seq s = sequence(seqi);
  const int j0 = int((gl_WorkGroupID.x + pc.group_base) * BK);
  if (j0 >= int(s.klen)) return;  // uniform
  const int jlast = min(j0 + int(BK), int(s.klen)) - 1;
  int i_lo = 0, i_hi = int(s.qlen);
  if (CAUSAL) i_lo = max(i_lo, j0 - s.off);
  if (WINDOW) i_hi = min(i_hi, jlast - s.off + int(pc.window));
  if (j0 >= s.kl) i_hi = i_lo;
  i_lo = max(i_lo, 0);
  i_hi = max(i_hi, i_lo);
  const uint r_begin = uint(i_lo) * pc.G, r_end = uint(i_hi) * pc.G;
  const uint kvbase = (s.b * pc.Hkv + hk) * pc.SkT;
  // The subgroup's K and V fragments, staged through Qs and Os in rounds of 16 keys (one a subgroup).
  MAT_A kreg[NF];
  MAT_A vreg[NF];
  for (uint w0 = 0u; w0 < 4u; ++w0) {
    if (w0 > 0u) barrier();  // the last round's fragments are loaded
    for (uint e = lid; e < 16u * NPK; e += NT) {
      const uint t = e / NPK, pk = e % NPK;
      const int j = j0 + int(16u * w0 + t);
      const bool inside = j < int(s.klen);
      Qs[t * LD8 + pk] = inside ? k4[(kvbase + uint(j)) * NPK + pk] : uvec4(0u);
      Os[t * LD8 + pk] = inside ? v4[(kvbase + uint(j)) * NPK + pk] : uvec4(0u);
    }
    barrier();
    if (w == w0)
      [[unroll]] for (uint f = 0u; f < NF; ++f) {
        CM_LOAD(kreg[f], Qs, 2u * f, LD8, CM_ROW);
        CM_LOAD(vreg[f], Os, 2u * f, LD8, CM_ROW);
      }
  }
  const Scales sc = scales();
  ACC dk[NF];  // (one matrix a declaration: glslang 13 drops the KHR use of later declarators)
  ACC dv[NF];
  [[unroll]] for (uint n = 0u; n < NF; ++n) {
    dk[n] = ACC(0.0);
    dv[n] = ACC(0.0);
  }
  for (uint r0 = r_begin; r0 < r_end; r0 += BQ) {
    barrier();  // the last tile's reads are done
    fetch_rows(s, hk, r0, r_end);
    [[unroll]] for (uint f = 0u; f < PF; ++f) {
      const uint e = lid + NT * f, t = e / NPK, pk = e % NPK;
      if (e < BQ * NPK) Qs[t * LD8 + pk] = pq[f], Os[t * LD8 + pk] = pd[f];
    }
    if (lid < BQ) rst[lid] = p_rs;
    barrier();
    // Per 16 rows of the tile (one score block live at a time, for the registers): S^T = K Q^T,
    // dP^T = V dO^T (16 keys x 16 rows), P^T and dS^T on the accumulators (element i is key lane / 4 +
    // 8 H(i), tile row 16 rb + LCOL), dV += P^T dO, dK += dS^T Q.
    [[unroll]] for (uint rb = 0u; rb < RB; ++rb) {
      ACC sa = ACC(0.0);
      ACC da = ACC(0.0);
      [[unroll]] for (uint kk = 0u; kk < NF; ++kk) {
        MAT_B b;
        CM_LOAD(b, Qs, 16u * rb * LD8 + 2u * kk, LD8, CM_COL);
        sa = CM_MAD(kreg[kk], b, sa);
        CM_LOAD(b, Os, 16u * rb * LD8 + 2u * kk, LD8, CM_COL);
        da = CM_MAD(vreg[kk], b, da);
      }
      uint km = 0u;  // the dropout bits of this block (keys along its rows)
      if (DROPOUT) {
        const uint q = 16u * rb + 2u * (lane & 3u);
        km = keep_bits_keys_in_rows(rst[q].ri, rst[q + 1u].ri, rst[q + 8u].ri, rst[q + 9u].ri, pc.SkT, uint(j0) + 16u * w,
                                    lane, uvec2(pc.off_lo, pc.off_hi), uvec2(pc.seed_lo, pc.seed_hi), pc.thr);
      }
      [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        const int j = j0 + int(16u * w + lane / 4u + 8u * LH(i));
        const RowStats x = rst[16u * rb + LCOL(lane, i)];
        const bool keep = ((km >> (4u * (LH(i) + 2u * LX(i) + 4u * LY(i)) + ((lane >> 2) & 3u))) & 1u) != 0u;
        p_ds(sc, x, j, visible(x.qi, j, s), keep, s, sa[i], da[i]);
      }
      MAT_A pf;
      MAT_A dsf;
      CM_ACC_TO_A(pf, sa);
      CM_ACC_TO_A(dsf, da);
      [[unroll]] for (uint n = 0u; n < NF; ++n) {
        MAT_B b;
        CM_LOAD(b, Os, 16u * rb * LD8 + 2u * n, LD8, CM_ROW);
        dv[n] = CM_MAD(pf, b, dv[n]);
        CM_LOAD(b, Qs, 16u * rb * LD8 + 2u * n, LD8, CM_ROW);
        dk[n] = CM_MAD(dsf, b, dk[n]);
      }
    }
  }
  uint orow[4];
  [[unroll]] for (uint k = 0u; k < 4u; ++k) {
    const int j = j0 + int(16u * w + lane / 8u + 4u * k);
    orow[k] = j <= jlast ? kvbase + uint(j) : ~0u;
  }
  store_rows(dk, w, lane, orow, 1.0 / sc.ds, sc.rsq, false);
  store_rows(dv, w, lane, orow, sc.rso_p, 1.0, true);
}
#endif

#if defined(DQ)
// The next key tile's k and v packs (zeros at or past jend), loaded during this tile's products.
const uint PF = (BK * NPK + NT - 1u) / NT;  // packs an invocation (the last round partly, at D 32, 80 or 96)
uvec4 pk_k[PF], pk_v[PF];
void fetch_keys(uint kvbase, int j0, int jend) {
  [[unroll]] for (uint f = 0u; f < PF; ++f) {
    const uint e = gl_LocalInvocationID.x + NT * f, t = e / NPK, pk = e % NPK;
    const int j = j0 + int(t);
    const bool inside = e < BK * NPK && j < jend;
    pk_k[f] = inside ? k4[(kvbase + uint(j)) * NPK + pk] : uvec4(0u);
    pk_v[f] = inside ? v4[(kvbase + uint(j)) * NPK + pk] : uvec4(0u);
  }
}

void main() {
  const uint w = gl_SubgroupID, lane = gl_SubgroupInvocationID, lid = gl_LocalInvocationID.x;
  const uint hk = gl_WorkGroupID.y, seqi = gl_WorkGroupID.z;
  const Seq s = sequence(seqi);
  const uint nrows = pc.G * s.qlen, r0 = (gl_WorkGroupID.x + pc.group_base) * BQ;
  if (r0 >= nrows) return;  // uniform
  const int i_lo = int(r0 / pc.G), i_hi = int((min(r0 + BQ, nrows) - 1u) / pc.G);
  int jbeg = 0, jend = s.kl;
  if (CAUSAL) jend = min(jend, i_hi + s.off + 1);
  if (WINDOW) jbeg = max(jbeg, i_lo + s.off - int(pc.window) + 1);
  jend = max(jend, jbeg);
  // This invocation's two accumulator rows: lse (base 2), D, query.
  // (scalars chosen by H(i), not arrays indexed by it: kept in registers)
  const RowStats ra = row_stats(s, hk, r0 + 16u * w + lane / 4u, nrows), rb = row_stats(s, hk, r0 + 16u * w + lane / 4u + 8u, nrows);
  // The subgroup's Q and dO fragments, staged through Ks and Vs in rounds of BK rows.
  MAT_A qf[NF];
  MAT_A of[NF];
  for (uint q0 = 0u; q0 < BQ; q0 += BK) {
    if (q0 > 0u) barrier();  // the last round's fragments are loaded
    for (uint e = lid; e < BK * NPK; e += NT) {
      const uint t = e / NPK, pk = e % NPK, r = r0 + q0 + t;
      uvec4 x = uvec4(0u), y = uvec4(0u);
      if (r < nrows) {
        const uint ri = row_index(s, hk, r);
        x = q4[ri * NPK + pk];
        y = do4[ri * NPK + pk];
      }
      Ks[t * LD8 + pk] = x;
      Vs[t * LD8 + pk] = y;
    }
    barrier();
    if (16u * w >= q0 && 16u * w < q0 + BK)
      [[unroll]] for (uint f = 0u; f < NF; ++f) {
        CM_LOAD(qf[f], Ks, (16u * w - q0) * LD8 + 2u * f, LD8, CM_ROW);
        CM_LOAD(of[f], Vs, (16u * w - q0) * LD8 + 2u * f, LD8, CM_ROW);
      }
  }
  const uint kvbase = (s.b * pc.Hkv + hk) * pc.SkT;
  if (jbeg < jend) fetch_keys(kvbase, jbeg, jend);
  const Scales sc = scales();
  ACC dq[NF];
  [[unroll]] for (uint n = 0u; n < NF; ++n) dq[n] = ACC(0.0);
  for (int j0 = jbeg; j0 < jend; j0 += int(BK)) {
    barrier();  // the last tile's reads (and the fragments' staging) are done
    [[unroll]] for (uint f = 0u; f < PF; ++f) {
      const uint e = lid + NT * f, t = e / NPK, pk = e % NPK;
      if (e < BK * NPK) Ks[t * LD8 + pk] = pk_k[f], Vs[t * LD8 + pk] = pk_v[f];
    }
    barrier();
    if (j0 + int(BK) < jend) fetch_keys(kvbase, j0 + int(BK), jend);
    // Per 16 keys (one score block live at a time, for the registers): S = Q K^T, dP = dO V^T, dS on the
    // accumulators (element i is row lane / 4 + 8 H(i), key j0 + 16 jj + LCOL), dQ += dS K.
    [[unroll]] for (uint jj = 0u; jj < BK / 16u; ++jj) {
      ACC sa = ACC(0.0);
      ACC da = ACC(0.0);
      [[unroll]] for (uint f = 0u; f < NF; ++f) {
        MAT_B b;
        CM_LOAD(b, Ks, 16u * jj * LD8 + 2u * f, LD8, CM_COL);
        sa = CM_MAD(qf[f], b, sa);
        CM_LOAD(b, Vs, 16u * jj * LD8 + 2u * f, LD8, CM_COL);
        da = CM_MAD(of[f], b, da);
      }
      uint km = 0u;  // the dropout bits of this block (keys along its columns)
      if (DROPOUT)
        km = keep_bits_keys_in_cols(ra.ri, rb.ri, pc.SkT, uint(j0) + 16u * jj, lane, uvec2(pc.off_lo, pc.off_hi),
                                    uvec2(pc.seed_lo, pc.seed_hi), pc.thr);
      [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        const RowStats x = LH(i) == 0u ? ra : rb;
        const int j = j0 + int(16u * jj + LCOL(lane, i));
        const bool keep = ((km >> (4u * (LH(i) + 2u * LY(i)) + 2u * (lane & 1u) + LX(i))) & 1u) != 0u;
        p_ds(sc, x, j, j < jend && visible(x.qi, j, s), keep, s, sa[i], da[i]);
      }
      MAT_A dsf;
      CM_ACC_TO_A(dsf, da);
      [[unroll]] for (uint n = 0u; n < NF; ++n) {
        MAT_B b;
        CM_LOAD(b, Ks, 16u * jj * LD8 + 2u * n, LD8, CM_ROW);
        dq[n] = CM_MAD(dsf, b, dq[n]);
      }
    }
  }
  // dq rows: the workgroup's rows r0 + 16 w + .., scattered (query r / G of head hk G + r % G).
  uint orow[4];
  [[unroll]] for (uint k = 0u; k < 4u; ++k) {
    const uint r = r0 + 16u * w + lane / 8u + 4u * k;
    orow[k] = r < nrows ? row_index(s, hk, r) : ~0u;
  }
  store_rows(dq, w, lane, orow, 1.0 / sc.ds, sc.rsk, false);
}
#endif
#endif  // QUAD

#if !QUAD
#if defined(SCORE_MOD)
// The custom score function and its derivative (Attrs::score_mod; see attention_bwd.comp), compiled in
// at run time (packed sequences do not reach these passes, so b is the batch).
float score_mod(float score, int b, int h, int i, int j) { return SCORE_MOD; }
float score_mod_grad(float score, int b, int h, int i, int j) { return SCORE_MOD_GRAD; }
#endif
// P of tile row t (of head h) and key j from the raw score (q . k, of the scaled copies in bf16), 0 where
// the key is masked; g: the factor of its dS from the score function (its derivative; 1 without one).
float prob(Scales sc, Seq s, uint t, uint h, int j, bool vis, float dot, out float g) {
  g = 1.0;
#if defined(SCORE_MOD)
  const float v0 = dot * sc.sdot, v = score_mod(v0, int(s.b), int(h), qis[t], j);
  if (!vis || isinf(l2s[t]) || (isinf(v) && v < 0.0)) return 0.0;  // masked (by the function too: no derivative)
  g = score_mod_grad(v0, int(s.b), int(h), qis[t], j);
  return exp2(v * LOG2E - l2s[t]);
#else
  return vis ? exp2(dot * sc.c2 - l2s[t]) : 0.0;
#endif
}

// Stages rows [r0, r0 + 32) of the group (rows at or past nrows: zeros) of q and do into A and Bm.
void stage_rows(Seq s, uint hk, uint r0, uint nrows, bool lse_too) {
  for (uint e = gl_LocalInvocationID.x; e < BT * NPK; e += 64u) {
    const uint t = e / NPK, pk = e % NPK, r = r0 + t;
    uvec4 x = uvec4(0u), y = uvec4(0u);
    if (r < nrows) {
      const uint ri = row_index(s, hk, r);
      x = q4[ri * NPK + pk];
      y = do4[ri * NPK + pk];
    }
    Sm0[t * LD8 + pk] = x;
    Sm1[t * LD8 + pk] = y;
  }
  if (lse_too && gl_LocalInvocationID.x < BT) {
    const uint t = gl_LocalInvocationID.x, r = r0 + t;
    float l2 = uintBitsToFloat(0x7f800000u), d = 0.0;  // rows past the range: P = 0
    int qi = 0;
    if (r < nrows) {
      const uint ri = row_index(s, hk, r);
      const float lse = uintBitsToFloat(ws[pc.ws_lse + ri]);
      l2 = isinf(lse) && lse < 0.0 ? uintBitsToFloat(0x7f800000u) : lse * LOG2E;  // no key seen: P = 0
      d = uintBitsToFloat(ws[pc.ws_D + ri]);
      qi = int(r / pc.G);
    }
    l2s[t] = l2;
    dss[t] = d;
    qis[t] = qi;
  }
}

// Stages keys [j0, j0 + 32) of kv head hk (keys at or past jend: zeros) of k and v into dst0 and dst1.
void stage_keys(Seq s, uint hk, int j0, int jend, bool stationary) {
  const uint kvbase = (s.b * pc.Hkv + hk) * pc.SkT;
  for (uint e = gl_LocalInvocationID.x; e < BT * NPK; e += 64u) {
    const uint t = e / NPK, pk = e % NPK;
    const int j = j0 + int(t);
    uvec4 x = uvec4(0u), y = uvec4(0u);
    if (j < jend) {
      x = k4[(kvbase + uint(j)) * NPK + pk];
      y = v4[(kvbase + uint(j)) * NPK + pk];
    }
    if (stationary) {
      St0[t * LD8 + pk] = x;
      St1[t * LD8 + pk] = y;
    } else {
      Sm0[t * LD8 + pk] = x;
      Sm1[t * LD8 + pk] = y;
    }
  }
}

// Writes a subgroup's 16 x HD accumulator times f1 f2 (rows out_row0.., the first nvalid) as f16 (bf16
// with BF16IN) through its S scratch.
void store_rows(ACC acc[NF], uint sg, uint lane, uint out_row0, uint nvalid, float f1, float f2, bool second) {
  for (uint n = 0u; n < NF; ++n) {
    CM_STORE(acc[n], Sc, sg * 16u * BT, 16u, CM_ROW);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint i = lane; i < 128u; i += 32u) {  // pairs of columns
      const uint rr = i / 8u, c = 2u * (i % 8u);
      if (rr < nvalid) {
        const uint v = pack2(vec2(Sc[sg * 16u * BT + rr * 16u + c], Sc[sg * 16u * BT + rr * 16u + c + 1u]) * f1 * f2);
        const uint at = ((out_row0 + rr) * HD + n * 16u + c) / 2u;
        if (second) out2[at] = v;
        else out1[at] = v;
      }
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
  }
}

#if defined(DKV)
void main() {
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint hk = gl_WorkGroupID.y, seqi = gl_WorkGroupID.z;
  const Seq s = sequence(seqi);
  const int j0 = int((gl_WorkGroupID.x + pc.group_base) * BT);
  if (j0 >= int(s.klen)) return;  // uniform
  const int jlast = min(j0 + int(BT), int(s.klen)) - 1;
  int i_lo = 0, i_hi = int(s.qlen);
  if (CAUSAL) i_lo = max(i_lo, j0 - s.off);
  if (WINDOW) i_hi = min(i_hi, jlast - s.off + int(pc.window));
  if (j0 >= s.kl) i_hi = i_lo;
  i_lo = max(i_lo, 0);
  i_hi = max(i_hi, i_lo);
  const uint r_begin = uint(i_lo) * pc.G, r_end = uint(i_hi) * pc.G;
  stage_keys(s, hk, j0, int(s.klen), true);
  const Scales sc = scales();
  ACC dk[NF];  // (one matrix a declaration: glslang 13 drops the KHR use of later declarators)
  ACC dv[NF];
  for (uint n = 0u; n < NF; ++n) dk[n] = ACC(0.0), dv[n] = ACC(0.0);
  const uint so = sg * 16u * BT, po = sg * 16u * PL;
  for (uint r0 = r_begin; r0 < r_end; r0 += BT) {
    barrier();  // the last tile's reads are done
    stage_rows(s, hk, r0, r_end, true);
    barrier();
    // S^T = K Q^T, dP^T = V dO^T: 16 keys x 32 rows, two 16 x 16 blocks each.
    // (each A fragment loaded once a k step for both 16-row blocks)
    ACC sa0 = ACC(0.0);
    ACC sa1 = ACC(0.0);
    ACC da0 = ACC(0.0);
    ACC da1 = ACC(0.0);
    for (uint kk = 0u; kk < NF; ++kk) {
      MAT_A a;
      MAT_B b;
      CM_LOAD(a, St0, sg * 16u * LD8 + 2u * kk, LD8, CM_ROW);
      CM_LOAD(b, Sm0, 2u * kk, LD8, CM_COL);
      sa0 = CM_MAD(a, b, sa0);
      CM_LOAD(b, Sm0, 16u * LD8 + 2u * kk, LD8, CM_COL);
      sa1 = CM_MAD(a, b, sa1);
      CM_LOAD(a, St1, sg * 16u * LD8 + 2u * kk, LD8, CM_ROW);
      CM_LOAD(b, Sm1, 2u * kk, LD8, CM_COL);
      da0 = CM_MAD(a, b, da0);
      CM_LOAD(b, Sm1, 16u * LD8 + 2u * kk, LD8, CM_COL);
      da1 = CM_MAD(a, b, da1);
    }
    CM_STORE(sa0, Sc, so, BT, CM_ROW);
    CM_STORE(sa1, Sc, so + 16u, BT, CM_ROW);
    CM_STORE(da0, Dp, so, BT, CM_ROW);
    CM_STORE(da1, Dp, so + 16u, BT, CM_ROW);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint i = lane; i < 16u * BT; i += 32u) {
      const uint kr = i / BT, col = i % BT;
      const int j = j0 + int(sg * 16u + kr);
      float g;
      const float p = prob(sc, s, col, hk * pc.G + (r0 + col) % pc.G, j, visible(qis[col], j, s), Sc[so + i], g);
      Ph[po + kr * PL + col] = float16_t(p * sc.pscale);
      Dh[po + kr * PL + col] = float16_t(p * (Dp[so + i] * sc.rso * sc.rsv - dss[col]) * pc.scale * g * sc.ds);
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    // dV += P^T dO, dK += dS^T Q (k = the tile's 32 rows).
    for (uint kk = 0u; kk < 2u; ++kk) {
      MAT_A pa;
      MAT_A dsa;
      CM_LOAD(pa, Ph, po + kk * 16u, PL, CM_ROW);
      CM_LOAD(dsa, Dh, po + kk * 16u, PL, CM_ROW);
      for (uint n = 0u; n < NF; ++n) {
        MAT_B b;
        CM_LOAD(b, Sm1, kk * 16u * LD8 + 2u * n, LD8, CM_ROW);
        dv[n] = CM_MAD(pa, b, dv[n]);
        CM_LOAD(b, Sm0, kk * 16u * LD8 + 2u * n, LD8, CM_ROW);
        dk[n] = CM_MAD(dsa, b, dk[n]);
      }
    }
  }
  const int kfirst = j0 + int(sg * 16u);
  const uint nvalid = uint(clamp(jlast - kfirst + 1, 0, 16));
  const uint orow = (s.b * pc.Hkv + hk) * pc.SkT + uint(kfirst);
  store_rows(dk, sg, lane, orow, nvalid, 1.0 / sc.ds, sc.rsq, false);
  store_rows(dv, sg, lane, orow, nvalid, sc.rso_p, 1.0, true);
}
#endif

#if defined(DQ)
void main() {
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint hk = gl_WorkGroupID.y, seqi = gl_WorkGroupID.z;
  const Seq s = sequence(seqi);
  const uint nrows = pc.G * s.qlen, r0 = (gl_WorkGroupID.x + pc.group_base) * BT;
  if (r0 >= nrows) return;  // uniform
  const int i_lo = int(r0 / pc.G), i_hi = int((min(r0 + BT, nrows) - 1u) / pc.G);
  int jbeg = 0, jend = s.kl;
  if (CAUSAL) jend = min(jend, i_hi + s.off + 1);
  if (WINDOW) jbeg = max(jbeg, i_lo + s.off - int(pc.window) + 1);
  jend = max(jend, jbeg);
  // Q and dO of the block's rows (stationary: St0, St1), through the streamed buffers' staging.
  // (and the rows' lse in base 2, D and query into l2s, dss, qis, as the dK/dV pass stages them)
  stage_rows(s, hk, r0, nrows, true);
  barrier();
  for (uint e = gl_LocalInvocationID.x; e < BT * LD8; e += 64u) St0[e] = Sm0[e], St1[e] = Sm1[e];
  const Scales sc = scales();
  ACC dq[NF];
  for (uint n = 0u; n < NF; ++n) dq[n] = ACC(0.0);
  const uint so = sg * 16u * BT, po = sg * 16u * PL;
  for (int j0 = jbeg; j0 < jend; j0 += int(BT)) {
    barrier();  // the last tile's reads (and the copy above) are done
    stage_keys(s, hk, j0, jend, false);
    barrier();
    // (each A fragment loaded once a k step for both 16-row blocks)
    ACC sa0 = ACC(0.0);
    ACC sa1 = ACC(0.0);
    ACC da0 = ACC(0.0);
    ACC da1 = ACC(0.0);
    for (uint kk = 0u; kk < NF; ++kk) {
      MAT_A a;
      MAT_B b;
      CM_LOAD(a, St0, sg * 16u * LD8 + 2u * kk, LD8, CM_ROW);
      CM_LOAD(b, Sm0, 2u * kk, LD8, CM_COL);
      sa0 = CM_MAD(a, b, sa0);
      CM_LOAD(b, Sm0, 16u * LD8 + 2u * kk, LD8, CM_COL);
      sa1 = CM_MAD(a, b, sa1);
      CM_LOAD(a, St1, sg * 16u * LD8 + 2u * kk, LD8, CM_ROW);
      CM_LOAD(b, Sm1, 2u * kk, LD8, CM_COL);
      da0 = CM_MAD(a, b, da0);
      CM_LOAD(b, Sm1, 16u * LD8 + 2u * kk, LD8, CM_COL);
      da1 = CM_MAD(a, b, da1);
    }
    CM_STORE(sa0, Sc, so, BT, CM_ROW);
    CM_STORE(sa1, Sc, so + 16u, BT, CM_ROW);
    CM_STORE(da0, Dp, so, BT, CM_ROW);
    CM_STORE(da1, Dp, so + 16u, BT, CM_ROW);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint i = lane; i < 16u * BT; i += 32u) {
      const uint rr = i / BT, col = i % BT, t = sg * 16u + rr;  // rows past nrows have P = 0 by their lse
      const int j = j0 + int(col);
      float g;
      const float p = prob(sc, s, t, hk * pc.G + (r0 + t) % pc.G, j, j < jend && visible(qis[t], j, s), Sc[so + i], g);
      Dh[po + rr * PL + col] = float16_t(p * (Dp[so + i] * sc.rso * sc.rsv - dss[t]) * pc.scale * g * sc.ds);
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint kk = 0u; kk < 2u; ++kk) {
      MAT_A dsa;
      CM_LOAD(dsa, Dh, po + kk * 16u, PL, CM_ROW);
      for (uint n = 0u; n < NF; ++n) {
        MAT_B b;
        CM_LOAD(b, Sm0, kk * 16u * LD8 + 2u * n, LD8, CM_ROW);
        dq[n] = CM_MAD(dsa, b, dq[n]);
      }
    }
  }
  // dq rows: the block's rows r0 + 16 sg + rr, scattered (query r / G of head hk G + r % G).
  const float f1 = 1.0 / sc.ds, f2 = sc.rsk;
  for (uint n = 0u; n < NF; ++n) {
    CM_STORE(dq[n], Sc, so, 16u, CM_ROW);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint i = lane; i < 128u; i += 32u) {  // pairs of columns
      const uint rr = i / 8u, c = 2u * (i % 8u), r = r0 + sg * 16u + rr;
      if (r < nrows)
        out1[(row_index(s, hk, r) * HD + n * 16u + c) / 2u] = pack2(vec2(Sc[so + rr * 16u + c], Sc[so + rr * 16u + c + 1u]) * f1 * f2);
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
  }
}
#endif
#endif  // !QUAD
