#version 450
// Matrix products on tensor cores (f16 inputs, f32 accumulation), with the same epilogue as mm.comp,
// through GL_NV_cooperative_matrix or, with KF_COOPMAT_KHR, GL_KHR_cooperative_matrix (coopmat.glsl).
// Chosen at run time when the device reports an f16 x f16 -> f32 subgroup shape this variant was built
// for (CM_M x CM_N x CM_K, 16 x 16 x 16 by default) on subgroups of SGS invocations (32 by default; 8 or 16
// for Intel's 8 x 16 x 16, whose pipelines require that size with full subgroups); requires K % 8 == 0 (and
// N % 8 == 0 when B is [K, N]) so that every 16-byte load is whole.
//
// A workgroup of SG_M x SG_N subgroups computes a BM x BN tile, each subgroup FM x FN accumulators of
// CM_M x CM_N, from BK-deep slices of A and B staged in shared memory. The next slice is loaded from
// global memory into registers while the current one is multiplied. With STAGES = 2 the slices
// alternate between two shared-memory buffers, so one barrier per slice suffices (STAGES = 1 needs
// two: one before overwriting the buffer, one before reading it); STAGES = 3 also loads two slices
// ahead into registers.
// The tile shape is a compile-time choice (defines; variants in variants.cmake, picked by the
// backend and by KF_TUNE mm_cfg): the defaults are the measured best on an H100
// (docs/performance.md).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable
#include "coopmat.glsl"
#if defined(OUT_BF16)
#define DT_BF16
#else
#define DT_F16
#endif
#include "common.glsl"
#include "out_dtype.glsl"  // the residual and C: Attrs::out_dtype (OUT_BF16 above is the inputs' bf16)
#include "activations.glsl"
#include "philox.glsl"

#ifndef SG_M
#define SG_M 2
#endif
#ifndef SG_N
#define SG_N 4
#endif
#ifndef FM
#define FM 4
#endif
#ifndef FN
#define FN 2
#endif
#ifndef BK
#define BK 32
#endif
#ifndef STAGES
#define STAGES 1
#endif

#ifndef SGS
#define SGS 32
#endif
const uint NSG = SG_M * SG_N;                 // subgroups (of SGS) per workgroup
const uint NT = SGS * NSG;                    // invocations
const uint BM = SG_M * FM * CM_M, BN = SG_N * FN * CM_N;
#if CM_M * CM_N > 256 || CM_K % 8 != 0 || CM_N % 8 != 0 || CM_M % 8 != 0 || BK % CM_K != 0
#error "fragments of at most 256 elements, CM_M, CM_K and CM_N multiples of 8, BK a multiple of CM_K"
#endif
// Every invocation moves whole packs of each slice (LA, LB below): the tiles of variants.cmake keep NT.
#if (SG_M * FM * CM_M * BK / 8) % (SGS * SG_M * SG_N) != 0 || (SG_N * FN * CM_N * BK / 8) % (SGS * SG_M * SG_N) != 0
#error "BM * BK / 8 and BN * BK / 8 must be multiples of the workgroup's invocations"
#endif
// The epilogue's runs of 8 columns per fragment, and per lane (a loop when a fragment has more runs than
// the subgroup has lanes, idle lanes when fewer).
#define CM_RUNS (CM_M * CM_N / 8)
#define CM_RPL ((CM_RUNS + SGS - 1) / SGS)
layout(local_size_x = NT) in;
layout(constant_id = 1) const bool B_NK = true;
layout(constant_id = 2) const bool HAS_BIAS = false;
layout(constant_id = 3) const bool HAS_RES = false;
layout(constant_id = 4) const uint ACT = 0;
// linear_dropout (ffn's hidden layer): act(..) dropped with the Philox mask of docs/ops.md, element
// index = the output's linear index, as mm.comp's and mm_gemv.comp's epilogues.
layout(constant_id = 5) const bool DROPOUT = false;
// For linear_cross_entropy's d W = G^T h (hal/vulkan/lce.cpp, record_matmul_at_b), as mm.comp: A stored
// [K, M] (M contiguous, M % 8 == 0) and C += the product (C's own values added in the epilogue).
layout(constant_id = 6) const bool A_KM = false;
layout(constant_id = 7) const bool ACC_OUT = false;
// For the convolutions' im2col path (hal/vulkan/conv.cpp): C = W col^T per image, so the
// output channel is the row: the bias is per row, and ROW_SS applies conv2d_bn_relu's folded scale
// and shift (f32, scale at word gm of binding 3, shift at word M + gm) before the activation.
layout(constant_id = 8) const bool BIAS_ROW = false;
layout(constant_id = 9) const bool ROW_SS = false;
// bf16 (OUT_BF16: bias, residual and C in bf16): A and B come as f16 scaled by powers of two per m and
// per n (bf16_rows_to_f16.comp: A's rows, or its columns when A_KM; W's rows, or B's columns when [K,
// N]); SCALES multiplies each product by their inverse factors first (before bias, residual and
// ACC_OUT's C, which are unscaled): inv_a at word bz * M + m of binding 5 (A's rows converted over all
// batches), inv_b at word scale_b + bz * scale_stride_b + n (stride 0 when B is shared by the batches).
layout(constant_id = 10) const bool SCALES = false;
layout(std430, binding = 5) readonly buffer SC_ { float inv_scale[]; };

// A and B only ever read as 16-byte packs: declared alone and restrict, so that the compiler may
// schedule their loads freely; bias, residual and C use the common views.
layout(std430, binding = 0) restrict readonly buffer A_V { uvec4 v[]; } A_v;
layout(std430, binding = 1) restrict readonly buffer B_V { uvec4 v[]; } B_v;
DECLARE_BUFFER(2, BIAS, readonly)
DECLARE_BUFFER(3, RES, readonly)
DECLARE_BUFFER(4, C, )

layout(push_constant) uniform PC {
  uint M, N, K;
  uint stride_a, stride_b, stride_c;
  uint seed_lo, seed_hi, off_lo, off_hi, thr;  // dropout: keep(i) = (word >> 8) >= thr
  float keep_scale;                            // 1 / (1 - p)
  uint scale_b, scale_stride_b;                // SCALES: inv_b's words
} pc;

const uint K8 = BK / 8u;              // uvec4 per staged row of a slice ([rows, BK])
const uint AROW = K8 + 1u;            // padded (bank conflicts)
const uint BROW = BN / 8u + 1u;       // uvec4 per staged row of B when [K, N], padded
const uint AROW_T = BM / 8u + 1u;     // uvec4 per staged row of A when [K, M], padded
const uint A_STAGE = (BM * AROW > BK * AROW_T) ? BM * AROW : BK * AROW_T;
const uint B_STAGE = (BN * AROW > BK * BROW) ? BN * AROW : BK * BROW;
const uint LA = BM * K8 / NT;         // uvec4 of A each invocation moves per slice
const uint LB = BN * K8 / NT;         // (the same count for B in either layout)
// The epilogue stages one CM_M x CM_N f32 tile per subgroup (STAGE_TILE uvec4) in As once the loop is done.
const uint STAGE_TILE = CM_M * CM_N / 4u;
const uint NBUF = STAGES == 0 ? 0u : (STAGES > 1 ? 2u : 1u);  // shared-memory buffers
const uint AS_SIZE = (NBUF * A_STAGE > NSG * STAGE_TILE) ? NBUF * A_STAGE : NSG * STAGE_TILE;
shared uvec4 As[AS_SIZE];
shared uvec4 Bs[NBUF > 0u ? NBUF * B_STAGE : 1u];
#ifdef KF_COOPMAT_EMU
CM_EMU_MAD_FUNCTION(As, Bs)  // the emulated products read their operands where CM_LOAD left them
#endif

float act(float v) {
  if (ACT == 1u) return relu_f(v);
  if (ACT == 2u) return gelu_f(v);
  if (ACT == 3u) return gelu_tanh_f(v);
  if (ACT == 4u) return silu_f(v);
  return v;
}

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint sg = CM_SUBGROUP_ID, lane = CM_LANE;
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN, bz = gl_WorkGroupID.z;
  const uint sm = (sg / SG_N) * (FM * CM_M), sn = (sg % SG_N) * (FN * CM_N);  // this subgroup's block
  const uint a_base = bz * pc.stride_a / 8u, b_base = bz * pc.stride_b / 8u;  // in uvec4 (8 halves)
  const uint GK8 = pc.K / 8u, GN8 = pc.N / 8u, GM8 = pc.M / 8u;

  CM_ACC acc[FM][FN];
  [[unroll]] for (uint i = 0; i < FM; ++i) [[unroll]] for (uint j = 0; j < FN; ++j)
    CM_FILL(acc[i][j], 0.0);

  uvec4 ra[LA], rb[LB];
  const uvec4 Z = uvec4(0);
  // Global -> registers: slice rows of K8 packs; B as [N, K] rows, or [K, N] rows of BN / 8 packs.
#define LOAD_SLICE(k0) LOAD_SLICE_INTO(k0, ra, rb)
#define LOAD_SLICE_INTO(k0, ra, rb)                                                             \
  [[unroll]] for (uint q = 0; q < LA; ++q) {                                                    \
    const uint e = lid + NT * q;                                                                \
    if (A_KM) {                                                                                 \
      const uint kr = e / (BM / 8u), gk = (k0) + kr, gm8 = m0 / 8u + e % (BM / 8u);            \
      ra[q] = (gk < pc.K && gm8 < GM8) ? A_v.v[a_base + gk * GM8 + gm8] : Z;                   \
    } else {                                                                                    \
      const uint r = e / K8, gk8 = (k0) / 8u + e % K8;                                         \
      ra[q] = (m0 + r < pc.M && gk8 < GK8) ? A_v.v[a_base + (m0 + r) * GK8 + gk8] : Z;         \
    }                                                                                           \
  }                                                                                             \
  [[unroll]] for (uint q = 0; q < LB; ++q) {                                                    \
    const uint e = lid + NT * q;                                                                \
    if (B_NK) {                                                                                 \
      const uint r = e / K8, gk8 = (k0) / 8u + e % K8;                                         \
      rb[q] = (n0 + r < pc.N && gk8 < GK8) ? B_v.v[b_base + (n0 + r) * GK8 + gk8] : Z;         \
    } else {                                                                                    \
      const uint kr = e / (BN / 8u), gk = (k0) + kr, gn8 = n0 / 8u + e % (BN / 8u);            \
      rb[q] = (gk < pc.K && gn8 < GN8) ? B_v.v[b_base + gk * GN8 + gn8] : Z;                   \
    }                                                                                           \
  }
  // Registers -> shared-memory buffer `st`.
#define STORE_SLICE(st) STORE_SLICE_FROM(st, ra, rb)
#define STORE_SLICE_FROM(st, ra, rb)                                                            \
  [[unroll]] for (uint q = 0; q < LA; ++q) {                                                    \
    const uint e = lid + NT * q;                                                                \
    if (A_KM) As[(st) * A_STAGE + (e / (BM / 8u)) * AROW_T + e % (BM / 8u)] = ra[q];            \
    else As[(st) * A_STAGE + (e / K8) * AROW + e % K8] = ra[q];                                 \
  }                                                                                             \
  [[unroll]] for (uint q = 0; q < LB; ++q) {                                                    \
    const uint e = lid + NT * q;                                                                \
    if (B_NK) Bs[(st) * B_STAGE + (e / K8) * AROW + e % K8] = rb[q];                            \
    else Bs[(st) * B_STAGE + (e / (BN / 8u)) * BROW + e % (BN / 8u)] = rb[q];                   \
  }
  // The products of one staged slice.
#define COMPUTE_SLICE(st)                                                                       \
  [[unroll]] for (uint kk = 0; kk < BK; kk += CM_K) {                                           \
    CM_A fa[FM];                                                                                \
    CM_B fb[FN];                                                                                \
    [[unroll]] for (uint i = 0; i < FM; ++i) {                                                  \
      if (A_KM) CM_LOAD(fa[i], As, (st) * A_STAGE + kk * AROW_T + (sm + CM_M * i) / 8u, AROW_T, CM_COL); \
      else CM_LOAD(fa[i], As, (st) * A_STAGE + (sm + CM_M * i) * AROW + kk / 8u, AROW, CM_ROW);          \
    }                                                                                           \
    [[unroll]] for (uint j = 0; j < FN; ++j) {                                                  \
      if (B_NK) CM_LOAD(fb[j], Bs, (st) * B_STAGE + (sn + CM_N * j) * AROW + kk / 8u, AROW, CM_COL); \
      else CM_LOAD(fb[j], Bs, (st) * B_STAGE + kk * BROW + (sn + CM_N * j) / 8u, BROW, CM_ROW);      \
    }                                                                                           \
    [[unroll]] for (uint i = 0; i < FM; ++i) [[unroll]] for (uint j = 0; j < FN; ++j)           \
      acc[i][j] = CM_MAD(fa[i], fb[j], acc[i][j]);                                              \
  }

#if STAGES == 0
  // Fragments straight from global memory (through L1), no staging: needs whole tiles (M % BM, N % BN
  // and K % 16 == 0; the backend checks). An experiment: is staging the bottleneck?
  for (uint k0 = 0; k0 < pc.K; k0 += CM_K) {
    CM_A fa[FM];
    CM_B fb[FN];
    [[unroll]] for (uint i = 0; i < FM; ++i)
      CM_LOAD(fa[i], A_v.v, a_base + (m0 + sm + CM_M * i) * GK8 + k0 / 8u, GK8, CM_ROW);
    [[unroll]] for (uint j = 0; j < FN; ++j) {
      if (B_NK) CM_LOAD(fb[j], B_v.v, b_base + (n0 + sn + CM_N * j) * GK8 + k0 / 8u, GK8, CM_COL);
      else CM_LOAD(fb[j], B_v.v, b_base + k0 * GN8 + (n0 + sn + CM_N * j) / 8u, GN8, CM_ROW);
    }
    [[unroll]] for (uint i = 0; i < FM; ++i) [[unroll]] for (uint j = 0; j < FN; ++j)
      acc[i][j] = CM_MAD(fa[i], fb[j], acc[i][j]);
  }
  barrier();
#elif STAGES == 3
  // Two shared-memory buffers and two register sets: slice t + 2 is loaded from global memory while
  // slice t is multiplied and slice t + 1 is stored, so a load has two slices of products to arrive
  // in. The loop is unrolled twice because register arrays cannot be indexed by a variable cheaply.
  uvec4 ra2[LA], rb2[LB];
  LOAD_SLICE_INTO(0u, ra, rb)
  STORE_SLICE_FROM(0u, ra, rb)
  if (BK < pc.K) LOAD_SLICE_INTO(BK, ra, rb)
  barrier();
  for (uint k0 = 0; k0 < pc.K; k0 += 2u * BK) {
    if (k0 + 2u * BK < pc.K) LOAD_SLICE_INTO(k0 + 2u * BK, ra2, rb2)
    COMPUTE_SLICE(0u)
    if (k0 + BK < pc.K) STORE_SLICE_FROM(1u, ra, rb)
    barrier();
    if (k0 + BK >= pc.K) break;
    if (k0 + 3u * BK < pc.K) LOAD_SLICE_INTO(k0 + 3u * BK, ra, rb)
    COMPUTE_SLICE(1u)
    if (k0 + 2u * BK < pc.K) STORE_SLICE_FROM(0u, ra2, rb2)
    barrier();
  }
#elif STAGES == 2
  LOAD_SLICE(0u)
  STORE_SLICE(0u)
  barrier();
  uint cur = 0u;
  for (uint k0 = 0; k0 < pc.K; k0 += BK) {
    const bool more = k0 + BK < pc.K;
    if (more) LOAD_SLICE(k0 + BK)
    COMPUTE_SLICE(cur)
    if (more) STORE_SLICE(cur ^ 1u)
    barrier();  // the next slice is stored, and nobody reads the buffer it will overwrite
    cur ^= 1u;
  }
#else
  LOAD_SLICE(0u)
  for (uint k0 = 0; k0 < pc.K; k0 += BK) {
    STORE_SLICE(0u)
    barrier();
    if (k0 + BK < pc.K) LOAD_SLICE(k0 + BK)
    COMPUTE_SLICE(0u)
    barrier();
  }
#endif

  // Epilogue: each CM_M x CM_N accumulator goes through this subgroup's staging tile; run u (of CM_RUNS)
  // is row u / (CM_N / 8), columns 8 (u % (CM_N / 8)) .. + 7, written as pairs of halves when N is even.
  // Lane l takes runs l, l + SGS, ...; a tile of fewer runs than lanes (16 x 8 on 32) leaves the other
  // lanes idle: their row is out of range.
  const uint cbase = bz * pc.stride_c;
  const bool pairs = OUT_HALF && (pc.N % 2u) == 0u;
  // packs: each lane's eight outputs are stored (and the residual read) as 16-byte packs, when every
  // row starts on a pack (see LOAD_OUT8).
  const bool packs = (pc.N % (OUT_HALF ? 8u : 4u)) == 0u && (cbase % 8u) == 0u;
  const uint stage_tile = sg * STAGE_TILE;
  // Column blocks outer: a column's bias and bf16 scale factor serve the FM accumulators of block j and
  // then die (rows outer kept all FN blocks' values live across the rows' iterations).
  [[unroll]] for (uint j = 0; j < FN; ++j) [[unroll]] for (uint i = 0; i < FM; ++i) {
    CM_STORE(acc[i][j], As, stage_tile, CM_N / 4u, CM_ROW);
    CM_SUBGROUP_MEMORY_BARRIER_SHARED();
    CM_SUBGROUP_BARRIER();
    // RUN: this lane's run (a macro: one run per lane adds no variable to the module).
#if CM_RPL > 1
    [[unroll]] for (uint ru = 0; ru < CM_RPL; ++ru) {
    const uint lane_run = lane + SGS * ru;
#define RUN lane_run
#else
    {
#define RUN lane
#endif
    // (an idle lane, past the fragment's runs, reads row CM_M - 1 of its own tile: never past the array)
    const uint r = min(RUN / (CM_N / 8u), CM_M - 1u), c0 = (RUN % (CM_N / 8u)) * 8u;
#if CM_RPL * SGS == CM_RUNS
    const uint gm = m0 + sm + CM_M * i + r, gn0 = n0 + sn + CM_N * j + c0;
#else
    const uint gm = RUN < CM_RUNS ? m0 + sm + CM_M * i + r : 0xffffffffu, gn0 = n0 + sn + CM_N * j + c0;
#endif
#undef RUN
    // Dropout: the 8 consecutive elements span at most 3 of the generator's 4-word blocks; each block
    // is computed once (a generator call per element took 1.1 ms of linear_dropout's 4.5 at 4096 x
    // 16384 on an H100).
    uvec4 dw[3] = uvec4[3](uvec4(0u), uvec4(0u), uvec4(0u));
    const uint e0 = cbase + gm * pc.N + gn0, q0 = e0 >> 2;
    if (DROPOUT) {
      const uint nq = ((e0 + 7u) >> 2) - q0 + 1u;
      [[unroll]] for (uint q = 0; q < 3u; ++q)
        if (q < nq) dw[q] = philox4x32_10(uvec4(q0 + q, 0u, pc.off_lo, pc.off_hi), uvec2(pc.seed_lo, pc.seed_hi));
    }
    // With packs, gn0 % 8 == 0 and N % 4 == 0, so gn0 < N means gn0 + 3 < N, and gn0 + 4 < N means
    // gn0 + 7 < N.
    const bool in_pack = packs && gm < pc.M && gn0 < pc.N, hi4 = gn0 + 4u < pc.N;
    float r8[8], c8[8], b8[VW];
    if (HAS_RES && in_pack) LOAD_OUT8(RES, e0, hi4, r8)
    if (ACC_OUT && in_pack) LOAD_OUT8(C, e0, hi4, c8)
    // The bias as one 16-byte pack too (16-bit inputs, a bias per column, N % 8 == 0).
    const bool bias_pack = HAS_BIAS && !BIAS_ROW && VW == 8u && (pc.N % 8u) == 0u;
    if (bias_pack && gn0 < pc.N) unpack(BIAS_v.v[gn0 >> 3], b8);
    // The outputs' bits, each pair packed as soon as it is computed (16-bit outputs: w8[0..3]), so that
    // four words rather than eight floats stay live until the store.
    uint w8[8];
    [[unroll]] for (uint h = 0; h < 8u; ++h) {
      const uint c = c0 + h;
      float x = uintBitsToFloat(As[stage_tile + r * (CM_N / 4u) + c / 4u][c % 4u]);
      const uint gn = gn0 + h;
      if (gm < pc.M && gn < pc.N) {
        // (x * inv_a) * inv_b: the factors' product alone could leave f32's range.
        if (SCALES) x = x * inv_scale[bz * pc.M + gm] * inv_scale[pc.scale_b + bz * pc.scale_stride_b + gn];
        if (HAS_BIAS) x += bias_pack ? b8[h % VW] : LOAD_ELEM(BIAS, BIAS_ROW ? gm : gn);
        if (ROW_SS) x = x * uintBitsToFloat(RES_w.w[gm]) + uintBitsToFloat(RES_w.w[pc.M + gm]);
        x = act(x);
        if (DROPOUT) {
          const uint e = e0 + h, q = (e >> 2) - q0;
          const uvec4 w = q == 0u ? dw[0] : q == 1u ? dw[1] : dw[2];
          x = (w[e & 3u] >> 8) >= pc.thr ? x * pc.keep_scale : 0.0;
        }
        if (HAS_RES) x += packs ? r8[h] : LOAD_OUT(RES, cbase + gm * pc.N + gn);
        if (ACC_OUT) x += packs ? c8[h] : LOAD_OUT(C, cbase + gm * pc.N + gn);
      }
      if (!OUT_HALF) w8[h] = floatBitsToUint(x);
      else if (h % 2u == 0u) w8[h] = floatBitsToUint(x);  // the pair's first value, until its second
      else w8[h / 2u] = OUT_PAIR(uintBitsToFloat(w8[h - 1u]), x);
    }
    CM_SUBGROUP_BARRIER();  // the staging tile is reused by the next accumulator
    if (packs) {
      if (in_pack) {
        if (OUT_HALF) C_v.v[e0 >> 3] = uvec4(w8[0], w8[1], w8[2], w8[3]);
        else {
          C_v.v[e0 >> 2] = uvec4(w8[0], w8[1], w8[2], w8[3]);
          if (hi4) C_v.v[(e0 >> 2) + 1u] = uvec4(w8[4], w8[5], w8[6], w8[7]);
        }
      }
    } else if (gm < pc.M) {
      [[unroll]] for (uint h = 0; h < 8u; h += 2u) {
        const uint gn = gn0 + h, idx = cbase + gm * pc.N + gn;
        // 16-bit: the pair's bits, or each half alone (already rounded: STORE_OUT rounds it exactly).
        if (pairs && gn < pc.N) {
          C_w.w[idx >> 1] = w8[h / 2u];
        } else if (OUT_HALF) {
          if (gn < pc.N) STORE_OUT(C, idx, OUT_LO(w8[h / 2u]));
          if (gn + 1u < pc.N) STORE_OUT(C, idx + 1u, OUT_HI(w8[h / 2u]));
        } else {
          if (gn < pc.N) STORE_OUT(C, idx, uintBitsToFloat(w8[h]));
          if (gn + 1u < pc.N) STORE_OUT(C, idx + 1u, uintBitsToFloat(w8[h + 1u]));
        }
      }
    }
    }  // runs
  }
}
