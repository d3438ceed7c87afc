#version 450
// Attention (docs/ops.md section 5), the tensor-core path: f16 on devices with a 16x16x16 f16 x f16 ->
// f32 cooperative-matrix shape, NV or KHR (KF_COOPMAT_KHR; coopmat.glsl); head dimension HD (a define: 16 .. 256, a multiple of 16). Same
// semantics, bindings, push and specialization constants as attention.comp (attention_common.glsl),
// which documents the row tiling (query heads of a kv-head group share a tile), the masks, the
// dropout index, the key splits and the workspace; hal/vulkan/attention.cpp picks the path.
//
// A workgroup of NW subgroups (4, or 8 in the _w8 variants) takes 16 query rows per subgroup; keys come
// in tiles of BKV. Two forms of the loop:
//   QUAD (the default where hal/vulkan/attention.cpp finds the accumulators' quad layout on the
//   device, on KHR with the A operands' the same): K and V tiles in two buffers, the softmax on the
//   score accumulators in registers (a quad of invocations shares rows), P converted to f16 fragments
//   directly (CM_ACC_TO_A); PREFETCH loads the next K and V into registers during the products.
//   generic (any layout), described here: one buffer (query tile, K tile, V tile in turn), scores and
//   probabilities through shared memory.
// In both, each tile's P V starts from zero and is added to O in f32 (accumulating across tiles in
// the multiply-add drifted over a million keys).
//   S = Q K^T   per subgroup: the query fragments stay in registers, K fragments are loaded column-major
//               from the staged tile; the 16 x BKV f32 scores go to shared memory.
//   softmax     two invocations per row (lane / 2), each half of the keys: scale, soft-capping, ALiBi,
//               masks, the online max and sum in f32, dropout; P (f16) back to shared memory.
//   O += P V    O's 16 x HD accumulators stay in registers, rescaled by the row's factor first: which
//               row an accumulator element belongs to is the implementation's choice, so a 16 x 16
//               matrix whose element (r, c) holds r, loaded once, tells each invocation (elementwise
//               operations apply to elements of the same position in matrices of the same type).
// The output goes through the subgroup's score area, one 16 x 16 accumulator at a time.
//
// BF16N: bf16 attention as bf16 (KHR with KF_COOPMAT_BF16, where the device lists the bf16 16x16x16
// shape), the QUAD form only: Q, K and V staged and multiplied as stored, P converted to bf16 (which has
// f32's range: PSCALE is kept, harmless), the output bf16; no scaling.
// BF16IN: bf16 attention (where there is no bf16 cooperative-matrix shape) on f16 values, each tensor
// multiplied by a power of two that puts its largest magnitude in [2^14, 2^15) (found by
// attention_absmax.comp before this dispatch, words aux_amax + 1 .. + 3 of the workspace): exact scaling,
// no overflow of f16's 65504 (RoPE's rotation grows a component by at most sqrt(2)), and every value
// down to 2^-28 of the largest keeps its 8 bits. Q is bf16 and converted as it is staged; K and V come
// already converted (attention_absmax.comp CONVERT). The scales are undone in f32: Q's and K's on the
// scores (with the softmax scale), V's on the output. Output, lse, slopes and sinks are bf16.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
#include "coopmat.glsl"
#if defined(BF16IN) && defined(BF16N)
#error "BF16IN (staged as f16) and BF16N (bf16 as bf16) are two forms of bf16: define one"
#endif
#if defined(BF16N) && !(QUAD && defined(KF_COOPMAT_BF16))
#error "BF16N is the QUAD form on bf16 cooperative matrices (KF_COOPMAT_BF16)"
#endif
#if defined(BF16IN) || defined(BF16N)
#define DT_BF16
#else
#define DT_F16
#endif
#include "common.glsl"
#include "philox.glsl"
#include "attention_dropout.glsl"  // keep_bits_keys_in_cols
#include "attention_common.glsl"

#ifndef HD
#define HD 128
#endif
#ifndef QUAD
#define QUAD 0
#endif
#if QUAD
layout(constant_id = 16) const uint QLAYOUT = 0xf59d10u;  // bits 3i, 3i + 1, 3i + 2: H(i), X(i), Y(i) (the default: NVIDIA 580)
uint LH(uint i) { return (QLAYOUT >> (3u * i)) & 1u; }
uint LCOL(uint lane, uint i) { return 2u * (lane & 3u) + ((QLAYOUT >> (3u * i + 1u)) & 1u) + 8u * ((QLAYOUT >> (3u * i + 2u)) & 1u); }
#endif
#ifndef NW
#define NW 4u                                // subgroups (of 32) per workgroup
#endif
#ifndef PREFETCH
#define PREFETCH 0                           // QUAD only: the next K, V tiles loaded into registers early
#endif
const uint TQ = NW * 16u;                    // query rows per workgroup
const uint BKV = HD > 128u ? 32u : 64u;      // keys per tile (shared memory: 32 KiB at HD = 256)
const uint NF = HD / 16u;                    // 16-wide fragments along the head dimension
const uint NJ = BKV / 16u;                   // 16-wide fragments along a key tile
const uint KROW = HD / 8u + 1u;              // 16-byte packs per staged row: + 1 against bank conflicts
const uint SROW = BKV + 4u;                  // floats per row of a subgroup's scores
const uint PROW = BKV + 8u;                  // halves per row of a subgroup's probabilities
const uint HPK = HD / 8u;                    // 16-byte packs per row
// P goes to the products in f16, scaled by pscale (undone in the epilogue): probabilities far below the
// row's maximum stay normal f16 numbers (down to 1.5e-8 instead of 6.1e-5) and keep their 11 bits. Over
// a million keys most of a row's mass is in such probabilities (kf-long-attention: without the scale
// the error of a row of 1e6 keys was 1.5e-3, over f16's tolerance). 4096 leaves room for dropout's
// 1 / (1 - p) up to 8 below f16's largest number; a larger 1 / (1 - p) takes a smaller power of two.
const float PSCALE_MAX = 4096.0;
const uint KVROWS = BKV > 32u ? BKV : 32u;   // rows of the staging buffer

DECLARE_BUFFER(0, Q, readonly)
DECLARE_BUFFER(1, K, readonly)
DECLARE_BUFFER(2, V, readonly)
DECLARE_BUFFER(3, O, )
DECLARE_BUFFER(4, LSEB, )

#if QUAD
shared uvec4 KVs[KVROWS * KROW];          // the query tile (in rounds), then K tiles
shared uvec4 Vs[BKV * KROW];              // V tiles
shared float Ss[NW * 256u];               // the row-index matrix; the output staging
shared float rowml[TQ * 2u];              // per row: the final m and l
#if PREFETCH
const uint PF = BKV * HPK / (32u * NW);   // packs of a K (and of a V) tile per invocation
uvec4 pk_k[PF], pk_v[PF];
void prefetch(int j0, int jend, uint kvbase) {
  [[unroll]] for (uint q = 0; q < PF; ++q) {
    const uint e = gl_LocalInvocationID.x + q * gl_WorkGroupSize.x, t = e / HPK, pk = e % HPK;
    const int j = j0 + int(t);
    pk_k[q] = j < jend ? K_v.v[(kvbase + uint(j)) * HPK + pk] : uvec4(0);
    pk_v[q] = j < jend ? V_v.v[(kvbase + uint(j)) * HPK + pk] : uvec4(0);
  }
}
#endif
#else
shared uvec4 KVs[KVROWS * KROW];          // the query tile (in rounds), then K and V tiles
shared float Ss[NW * 16u * SROW];         // scores; the row-index matrix; the output staging
shared float16_t Ps[NW * 16u * PROW];     // probabilities
shared float rowf[NW * 16u];              // per row: the rescaling factor of this tile
#endif

#define FRAG_A CM_A      // Q and P
#define FRAG_B CM_B      // K^T and V
#define FRAG32 CM_ACC

// A staged row: 16-byte packs of 8 halves, as in memory.
void stage_row_pack(uint t, uint pk, uvec4 x) { KVs[t * KROW + pk] = x; }

// A 16-byte pack of Q as 8 f16 values (BF16IN: 8 bf16 values times Q's power of two).
uvec4 to_f16(uvec4 x, float s) {
#if defined(BF16IN)
  uvec4 h;
  [[unroll]] for (uint k = 0; k < 4u; ++k) h[k] = packHalf2x16(vec2(bf16_lo(x[k]), bf16_hi(x[k])) * s);
  return h;
#else
  return x;
#endif
}

#include "bf16_scale.glsl"  // pow2_scale
float g_scale;  // the softmax scale of the raw dot products of the staged (scaled) Q and K

// Two staged 16-bit values of a word, as floats, and back: f16, or bf16 as stored (BF16N).
#if defined(BF16N)
vec2 unpack2(uint w) { return vec2(bf16_lo(w), bf16_hi(w)); }
uint pack2(vec2 v) { return pack_bf16x2(v.x, v.y); }
#else
vec2 unpack2(uint w) { return unpackHalf2x16(w); }
uint pack2(vec2 v) { return packHalf2x16(v); }
#endif

// RoPE on rows [0, n) of the staged tile, in f32 (as attention.comp's rope_tile); query row t is at
// the position of its query, key row t at first_pos + t. An invocation owns whole words (two halves):
// the pair (d, d + 1) and its partners (interleaved: one word holds a pair).
void rope_staged(bool query, uint n, int first_pos, int off) {
  const uint half_d = HD / 2u, pairs = half_d / 2u;
  for (uint e = gl_LocalInvocationID.x; e < n * pairs; e += gl_WorkGroupSize.x) {
    const uint t = e / pairs, d = 2u * (e % pairs);  // d, d + 1
    const int pos = query ? int((uint(first_pos) + t) / pc.G) + off : first_pos + int(t);
    const uint tab = pc.aux_rope + 2u * (uint(pos + pc.rope_pos0) * half_d + d);
    const vec2 c = vec2(uintBitsToFloat(ws[tab]), uintBitsToFloat(ws[tab + 2u]));
    const vec2 s = vec2(uintBitsToFloat(ws[tab + 1u]), uintBitsToFloat(ws[tab + 3u]));
    if (ROPE == 1u) {  // pairs (d, d + HD / 2) and (d + 1, d + 1 + HD / 2): two words
      const uint w0 = d / 2u, w1 = (d + half_d) / 2u;
      const vec2 a = unpack2(KVs[t * KROW + w0 / 4u][w0 % 4u]);
      const vec2 b = unpack2(KVs[t * KROW + w1 / 4u][w1 % 4u]);
      KVs[t * KROW + w0 / 4u][w0 % 4u] = pack2(a * c - b * s);
      KVs[t * KROW + w1 / 4u][w1 % 4u] = pack2(b * c + a * s);
    } else {  // pairs (2d, 2d + 1) and (2d + 2, 2d + 3): words d and d + 1
      [[unroll]] for (uint k = 0; k < 2u; ++k) {
        const uint wd = d + k;
        const vec2 x = unpack2(KVs[t * KROW + wd / 4u][wd % 4u]);
        KVs[t * KROW + wd / 4u][wd % 4u] = pack2(vec2(x.x * c[k] - x.y * s[k], x.y * c[k] + x.x * s[k]));
      }
    }
  }
}

// A query row of the tile and what its scores depend on.
struct Row {
  bool ok;          // a row of the tile that exists
  int qi;           // its query (within the sequence)
  uint h;           // its head
  uint global_row;  // its query in the tensor (packed sequences: qbeg + qi)
  uint idx;         // its row of the [B, Hq, Sq] outputs
  float slope;      // ALiBi
};

Row row_of(uint r, uint nrows, uint hk, uint b, uint qbeg) {
  Row x;
  x.ok = r < nrows;
  x.qi = int(r / pc.G);
  x.h = hk * pc.G + r % pc.G;
  x.global_row = qbeg + uint(x.qi);
  x.idx = (b * pc.Hq + x.h) * pc.SqT + x.global_row;
  x.slope = ALIBI != 0u ? alibi_slope(x.h) : 0.0;
  return x;
}

#if defined(SCORE_MOD)
// The custom score function (Attrs::score_mod; see attention.comp), compiled in at run time.
float score_mod(float score, int b, int h, int i, int j) { return SCORE_MOD; }
#endif

// The score of key j for row x from the raw dot product (NEG_INF where masked).
float score(Row x, int j, int jend, int off, uint kbeg, float dot) {
  bool vis = x.ok && j < jend;
  if (CAUSAL && j > x.qi + off) vis = false;
  if (WINDOW && x.qi + off - j >= int(pc.window)) vis = false;
  if (BMASK && vis && ws[pc.aux_bmask + (x.global_row / pc.block_size) * pc.nkb + (kbeg + uint(j)) / pc.block_size] == 0u) vis = false;
  if (!vis) return NEG_INF;
  float s = dot * g_scale;
  if (SOFTCAP) s = pc.softcap * tanh(s / pc.softcap);
  if (ALIBI != 0u) s -= x.slope * abs(float(x.qi + off - j));
#if defined(SCORE_MOD)
  s = score_mod(s, int(gl_WorkGroupID.z / pc.nsplit), int(x.h), x.qi, j);  // the sequence, as attention.comp
#endif
  return s;
}

void main() {
  const uint lid = gl_LocalInvocationID.x, w = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint seq = gl_WorkGroupID.z / pc.nsplit, split = gl_WorkGroupID.z % pc.nsplit;
  const uint hk = gl_WorkGroupID.y;
  const uint b = VARLEN ? 0u : seq;
  uint qbeg = 0u, qlen = pc.SqT, kbeg = 0u, klen = pc.SkT;
  if (VARLEN) {
    qbeg = min(ws[pc.aux_cuq + seq], pc.SqT);
    qlen = clamp(ws[pc.aux_cuq + seq + 1u], qbeg, pc.SqT) - qbeg;
    kbeg = min(ws[pc.aux_cuk + seq], pc.SkT);
    klen = clamp(ws[pc.aux_cuk + seq + 1u], kbeg, pc.SkT) - kbeg;
  }
  const uint nrows = pc.G * qlen;
  const uint r0 = (gl_WorkGroupID.x + pc.group_base) * TQ;
  if (r0 >= nrows) return;  // uniform over the workgroup
  const int off = int(klen) - int(qlen);
  int kl = int(klen);
  if (LENS) kl = clamp(int(ws[pc.aux_lens + seq]), 0, int(klen));
  const uint r_last = min(r0 + TQ, nrows) - 1u;
  const int i_lo = int(r0 / pc.G), i_hi = int(r_last / pc.G);
  int jbeg = 0, jend = kl;
  if (CAUSAL) jend = min(jend, i_hi + off + 1);
  if (WINDOW) jbeg = max(jbeg, i_lo + off - int(pc.window) + 1);
  if (SPLIT) {
    jbeg = max(jbeg, int(split * pc.split_len));
    jend = min(jend, int((split + 1u) * pc.split_len));
  }

  // This invocation's row in the softmax and the output: tile row tr, keys of parity c.
  const uint tr = w * 16u + lane / 2u, c = lane & 1u;
  const Row me = row_of(r0 + tr, nrows, hk, b, qbeg);
  const float pscale = DROPOUT ? min(PSCALE_MAX, exp2(floor(log2(32768.0 / pc.keep_scale)))) : PSCALE_MAX;
#if defined(BF16IN)
  const float sq = pow2_scale(ws[pc.aux_amax + 1u]), sk = pow2_scale(ws[pc.aux_amax + 2u]), sv = pow2_scale(ws[pc.aux_amax + 3u]);
  g_scale = pc.scale / sq / sk;  // (each division exact, by a power of two, unless the result underflows)
#else
  const float sq = 1.0, sk = 1.0, sv = 1.0;
  g_scale = pc.scale;
#endif
#if QUAD
  // The quad layout of mma.sync's accumulators (hal/vulkan/attention.cpp finds it on the device
  // before choosing this variant): element i of a 16 x 16 accumulator is at row lane / 4 + 8 H(i),
  // column 2 (lane % 4) + X(i) + 8 Y(i) (QLAYOUT's bits); the four invocations of a quad share rows.
  const Row rq[2] = Row[2](row_of(r0 + w * 16u + lane / 4u, nrows, hk, b, qbeg),
                           row_of(r0 + w * 16u + lane / 4u + 8u, nrows, hk, b, qbeg));
  const uint sbase = w * 256u;
#else
  const uint sbase = w * 16u * SROW, pbase = w * 16u * PROW;
#endif

  // The query tile (unscaled: the scale is applied to the f32 scores), RoPE'd in place, staged in
  // rounds of KVROWS rows (HD = 256: two), each subgroup taking its fragments from its round.
  FRAG_A qf[NF];
  for (uint q0 = 0; q0 < TQ; q0 += KVROWS) {
    for (uint e = lid; e < KVROWS * HPK; e += gl_WorkGroupSize.x) {
      const uint t = e / HPK, pk = e % HPK, rq = r0 + q0 + t;
      uvec4 x = uvec4(0);
      if (rq < nrows) x = to_f16(Q_v.v[((b * pc.Hq + hk * pc.G + rq % pc.G) * pc.SqT + qbeg + rq / pc.G) * HPK + pk], sq);
      stage_row_pack(t, pk, x);
    }
    barrier();
    if (ROPE != 0u && r0 + q0 < nrows) {
      rope_staged(true, min(KVROWS, nrows - r0 - q0), int(r0 + q0), off);
      barrier();
    }
    if (w * 16u >= q0 && w * 16u < q0 + KVROWS)
      [[unroll]] for (uint f = 0; f < NF; ++f) CM_LOAD(qf[f], KVs, (w * 16u - q0) * KROW + 2u * f, KROW, CM_ROW);
    barrier();  // the staged rows are in registers before the next round (or K) overwrites them
  }
#if QUAD
  FRAG32 acc[NF];
  [[unroll]] for (uint f = 0; f < NF; ++f) acc[f] = FRAG32(0.0);
  float m[2] = float[2](NEG_INF, NEG_INF), l[2] = float[2](0.0, 0.0);
  const uint kvbase = (b * pc.Hkv + hk) * pc.SkT + kbeg;
#if PREFETCH
  if (jbeg < jend) prefetch(jbeg, jend, kvbase);  // (no block mask with PREFETCH: every tile is visited)
#endif

  for (int j0 = jbeg; j0 < jend; j0 += int(BKV)) {
    if (BMASK && PREFETCH == 0) {  // skip a tile whose blocks are all masked (PREFETCH visits every tile)
      bool any = false;
      const uint bi0 = (qbeg + uint(i_lo)) / pc.block_size, bi1 = (qbeg + uint(i_hi)) / pc.block_size;
      const uint bj0 = (kbeg + uint(j0)) / pc.block_size, bj1 = (kbeg + uint(min(j0 + int(BKV), jend)) - 1u) / pc.block_size;
      for (uint bi = bi0; bi <= bi1 && !any; ++bi)
        for (uint bj = bj0; bj <= bj1 && !any; ++bj) any = ws[pc.aux_bmask + bi * pc.nkb + bj] != 0u;
      if (!any) continue;
    }
    // K and V tiles together (two buffers): one barrier before the products. PREFETCH: this tile's
    // packs came into registers during the previous tile's products; the next tile's are requested now.
#if PREFETCH
    [[unroll]] for (uint q = 0; q < PF; ++q) {
      const uint e = lid + q * gl_WorkGroupSize.x, t = e / HPK, pk = e % HPK;
      KVs[t * KROW + pk] = pk_k[q];
      Vs[t * KROW + pk] = pk_v[q];
    }
    barrier();
    if (j0 + int(BKV) < jend) prefetch(j0 + int(BKV), jend, kvbase);
#else
    for (uint e = lid; e < BKV * HPK; e += gl_WorkGroupSize.x) {
      const uint t = e / HPK, pk = e % HPK;
      const int j = j0 + int(t);
      const bool inside = j < jend;
      stage_row_pack(t, pk, inside ? K_v.v[(kvbase + uint(j)) * HPK + pk] : uvec4(0));
      Vs[t * KROW + pk] = inside ? V_v.v[(kvbase + uint(j)) * HPK + pk] : uvec4(0);
    }
    barrier();
#endif
    if (ROPE != 0u) {
      rope_staged(false, uint(min(int(BKV), jend - j0)), j0, 0);
      barrier();
    }
    // S = Q K^T, kept in registers.
    FRAG32 s[NJ];
    [[unroll]] for (uint jj = 0; jj < NJ; ++jj) {
      s[jj] = FRAG32(0.0);
      [[unroll]] for (uint f = 0; f < NF; ++f) {
        FRAG_B kf;
        CM_LOAD(kf, KVs, 16u * jj * KROW + 2u * f, KROW, CM_COL);
        s[jj] = CM_MAD(qf[f], kf, s[jj]);
      }
    }
    // The softmax on the accumulators: this invocation's two rows, reduced over its quad.
    float mt[2] = float[2](NEG_INF, NEG_INF);
    [[unroll]] for (uint jj = 0; jj < NJ; ++jj)
      [[unroll]] for (uint i = 0; i < 8u; ++i) {
        const uint hh = LH(i);
        const int j = j0 + int(16u * jj + LCOL(lane, i));
        const float v = score(rq[hh], j, jend, off, kbeg, s[jj][i]);
        s[jj][i] = v;
        mt[hh] = max(mt[hh], v);
      }
    float alpha[2], mnew[2], lt[2];
    [[unroll]] for (uint hh = 0; hh < 2u; ++hh) {
      mt[hh] = max(mt[hh], subgroupShuffleXor(mt[hh], 1u));
      mt[hh] = max(mt[hh], subgroupShuffleXor(mt[hh], 2u));
      mnew[hh] = max(m[hh], mt[hh]);
      alpha[hh] = mnew[hh] == NEG_INF ? 1.0 : exp(m[hh] - mnew[hh]);
      lt[hh] = 0.0;
    }
    FRAG_A pf[NJ];
    [[unroll]] for (uint jj = 0; jj < NJ; ++jj) {
      uint km = 0u;  // the dropout bits of this 16-key block (attention_dropout.glsl)
      if (DROPOUT)
        km = keep_bits_keys_in_cols(rq[0].idx, rq[1].idx, pc.SkT, kbeg + uint(j0) + 16u * jj, lane,
                                    uvec2(pc.off_lo, pc.off_hi), uvec2(pc.seed_lo, pc.seed_hi), pc.thr);
      [[unroll]] for (uint i = 0; i < 8u; ++i) {
        const uint hh = LH(i);
        const float v = s[jj][i];
        float p = v == NEG_INF ? 0.0 : exp(v - mnew[hh]);
        lt[hh] += p;
        if (DROPOUT && p > 0.0) {
          const uint bit = 4u * (hh + 2u * ((QLAYOUT >> (3u * i + 2u)) & 1u)) + 2u * (lane & 1u) + ((QLAYOUT >> (3u * i + 1u)) & 1u);
          p = ((km >> bit) & 1u) != 0u ? p * pc.keep_scale : 0.0;
        }
        s[jj][i] = p * pscale;
      }
      CM_ACC_TO_A(pf[jj], s[jj]);
    }
    [[unroll]] for (uint hh = 0; hh < 2u; ++hh) {
      lt[hh] += subgroupShuffleXor(lt[hh], 1u);
      lt[hh] += subgroupShuffleXor(lt[hh], 2u);
      l[hh] = l[hh] * alpha[hh] + lt[hh];
      m[hh] = mnew[hh];
    }
    // O = O alpha + P V: the tile's product from zero, then added in f32. (Accumulating every tile in
    // the multiply-add itself drifted: its additions are not rounded to nearest, and a row of a
    // million keys came out 1.5e-3 off, growing with the keys; kf-long-attention.)
    [[unroll]] for (uint f = 0; f < NF; ++f) {
      FRAG32 t = FRAG32(0.0);
      [[unroll]] for (uint kk = 0; kk < NJ; ++kk) {
        FRAG_B vf;
        CM_LOAD(vf, Vs, 16u * kk * KROW + 2u * f, KROW, CM_ROW);
        t = CM_MAD(pf[kk], vf, t);
      }
      [[unroll]] for (uint i = 0; i < 8u; ++i) acc[f][i] = acc[f][i] * alpha[LH(i)] + t[i];
    }
    barrier();  // K and V are read everywhere before the next tiles overwrite them
  }
  // The rows' m and l for the epilogue's invocation-per-half-row mapping.
  if ((lane & 3u) == 0u)
    [[unroll]] for (uint hh = 0; hh < 2u; ++hh) {
      rowml[2u * (w * 16u + lane / 4u + 8u * hh)] = m[hh];
      rowml[2u * (w * 16u + lane / 4u + 8u * hh) + 1u] = l[hh];
    }
  subgroupMemoryBarrierShared();
  subgroupBarrier();
  float m_row = rowml[2u * tr], l_row = rowml[2u * tr + 1u];
#else
  // The row-index matrix.
  for (uint e = lane; e < 256u; e += 32u) Ss[sbase + e] = float(e / 16u);
  subgroupMemoryBarrierShared();
  subgroupBarrier();
  FRAG32 ridx;
  CM_LOAD(ridx, Ss, sbase, 16u, CM_ROW);

  FRAG32 acc[NF];
  [[unroll]] for (uint f = 0; f < NF; ++f) acc[f] = FRAG32(0.0);
  float m = NEG_INF, l = 0.0;
  const uint kvbase = (b * pc.Hkv + hk) * pc.SkT + kbeg;

  for (int j0 = jbeg; j0 < jend; j0 += int(BKV)) {
    if (BMASK) {  // skip a tile whose blocks are all masked (the same decision in every invocation)
      bool any = false;
      const uint bi0 = (qbeg + uint(i_lo)) / pc.block_size, bi1 = (qbeg + uint(i_hi)) / pc.block_size;
      const uint bj0 = (kbeg + uint(j0)) / pc.block_size, bj1 = (kbeg + uint(min(j0 + int(BKV), jend)) - 1u) / pc.block_size;
      for (uint bi = bi0; bi <= bi1 && !any; ++bi)
        for (uint bj = bj0; bj <= bj1 && !any; ++bj) any = ws[pc.aux_bmask + bi * pc.nkb + bj] != 0u;
      if (!any) continue;
    }
    for (uint e = lid; e < BKV * HPK; e += gl_WorkGroupSize.x) {
      const uint t = e / HPK, pk = e % HPK;
      const int j = j0 + int(t);
      stage_row_pack(t, pk, j < jend ? K_v.v[(kvbase + uint(j)) * HPK + pk] : uvec4(0));
    }
    barrier();
    if (ROPE != 0u) {
      rope_staged(false, uint(min(int(BKV), jend - j0)), j0, 0);
      barrier();
    }
    // S = Q K^T (K^T's fragments: the staged K rows read column-major).
    [[unroll]] for (uint jj = 0; jj < NJ; ++jj) {
      FRAG32 s = FRAG32(0.0);
      [[unroll]] for (uint f = 0; f < NF; ++f) {
        FRAG_B kf;
        CM_LOAD(kf, KVs, 16u * jj * KROW + 2u * f, KROW, CM_COL);
        s = CM_MAD(qf[f], kf, s);
      }
      CM_STORE(s, Ss, sbase + 16u * jj, SROW, CM_ROW);
    }
    barrier();  // K is read everywhere; the scores are visible
    for (uint e = lid; e < BKV * HPK; e += gl_WorkGroupSize.x) {
      const uint t = e / HPK, pk = e % HPK;
      const int j = j0 + int(t);
      stage_row_pack(t, pk, j < jend ? V_v.v[(kvbase + uint(j)) * HPK + pk] : uvec4(0));
    }
    // The softmax of this invocation's half row (keys c, c + 2, ...).
    float sv[BKV / 2u];
    float mt = NEG_INF;
    [[unroll]] for (uint u = 0; u < BKV / 2u; ++u) {
      const uint t = c + 2u * u;
      const int j = j0 + int(t);
      const float s = score(me, j, jend, off, kbeg, Ss[sbase + (lane / 2u) * SROW + t]);
      sv[u] = s;
      mt = max(mt, s);
    }
    mt = max(mt, subgroupShuffleXor(mt, 1u));
    const float mnew = max(m, mt);
    const float alpha = mnew == NEG_INF ? 1.0 : exp(m - mnew);
    float lt = 0.0;
    [[unroll]] for (uint u = 0; u < BKV / 2u; ++u) {
      const uint t = c + 2u * u;
      float p = sv[u] == NEG_INF ? 0.0 : exp(sv[u] - mnew);
      lt += p;
      if (DROPOUT) p = (p > 0.0 && dropout_keep(me.idx, kbeg + uint(j0) + t)) ? p * pc.keep_scale : 0.0;
      Ps[pbase + (lane / 2u) * PROW + t] = float16_t(p * pscale);
    }
    lt += subgroupShuffleXor(lt, 1u);
    l = l * alpha + lt;
    m = mnew;
    if (c == 0u) rowf[tr] = alpha;
    barrier();  // V, P and the factors are visible
    // O = O alpha + P V, the tile's product from zero and added in f32 (as the QUAD variant).
    FRAG_A pf[NJ];
    [[unroll]] for (uint kk = 0; kk < NJ; ++kk) CM_LOAD(pf[kk], Ps, pbase + 16u * kk, PROW, CM_ROW);
    float fac[16];  // (an accumulator holds at most 256 / 32 elements per invocation on any subgroup of 16+)
    for (int i = 0; i < ridx.length(); ++i) fac[i] = rowf[w * 16u + uint(ridx[i])];
    [[unroll]] for (uint f = 0; f < NF; ++f) {
      FRAG32 t = FRAG32(0.0);
      [[unroll]] for (uint kk = 0; kk < NJ; ++kk) {
        FRAG_B vf;
        CM_LOAD(vf, KVs, 16u * kk * KROW + 2u * f, KROW, CM_ROW);
        t = CM_MAD(pf[kk], vf, t);
      }
      for (int i = 0; i < t.length(); ++i) acc[f][i] = acc[f][i] * fac[i] + t[i];
    }
    barrier();  // V is read everywhere before the next K overwrites it
  }

  float m_row = m, l_row = l;
#endif

  // Epilogue: this invocation's row is the staged row lane / 2, columns 8 c .. 8 c + 7 of each
  // 16-wide block; its m and l are the row's.
  float factor = 1.0 / pscale / sv;
  if (SINKS && !SPLIT) {
    const float sk = aux_elem(pc.aux_sinks, me.h);
    const float mf = max(m_row, sk);
    const float a = m_row == NEG_INF ? 0.0 : exp(m_row - mf);
    l_row = l_row * a + exp(sk - mf);
    factor *= a;
    m_row = mf;
  }
  if (!SPLIT) factor *= l_row > 0.0 ? 1.0 / l_row : 0.0;
  const uint rows = pc.B * pc.Hq * pc.SqT;
  const uint part = split * rows + me.idx;
  [[unroll]] for (uint f = 0; f < NF; ++f) {
    CM_STORE(acc[f], Ss, sbase, 16u, CM_ROW);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    float v[8];
    [[unroll]] for (uint e = 0; e < 8u; ++e) v[e] = Ss[sbase + (lane / 2u) * 16u + 8u * c + e] * factor;
    subgroupBarrier();  // the staging area is reused by the next block
    if (me.ok) {
      if (SPLIT) {
        [[unroll]] for (uint e = 0; e < 8u; ++e)
          LSEB_w.w[pc.part_off + part * HD + 16u * f + 8u * c + e] = floatBitsToUint(v[e]);
      } else {
        O_v.v[me.idx * HPK + 2u * f + c] = pack(v);
      }
    }
  }
  if (!me.ok || c != 0u) return;
  if (SPLIT) {
    const uint nparts = pc.nsplit * rows;
    LSEB_w.w[pc.part_off + nparts * HD + 2u * part] = floatBitsToUint(m_row);
    LSEB_w.w[pc.part_off + nparts * HD + 2u * part + 1u] = floatBitsToUint(l_row);
  } else if (LSE) {
    const float lv = l_row > 0.0 ? m_row + log(l_row) : NEG_INF;
    STORE_ELEM(LSEB, me.idx, lv)
  }
}
