#version 450
// Row kernels (KERNELS.md section 2): reductions and softmax along the last dimension.
// TPR invocations share one row (a subgroup for short rows, the whole workgroup for long ones); a
// workgroup holds WG / TPR rows. Each invocation keeps up to CACHE packs of its row in registers, so a
// row that fits is read from memory once; longer rows re-read the rest. Partial results combine in a
// fixed order (subgroup operations, then shared memory in subgroup order), so a row gives the same
// bits on every run. Variants: OP_<name>, DT_<dtype>, SUBGROUP.
#include "common.glsl"
#if defined(SUBGROUP)
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 256;   // invocations per row, a power of two
layout(constant_id = 2) const bool WIDE = true; // the row length is a multiple of the pack: 16-byte loads
layout(constant_id = 3) const uint CACHE_VALUES = 32;  // values of its row an invocation keeps in registers
// Rows may be longer than TPR * CACHE_VALUES (softmax, log_softmax): false compiles the streamed loops
// out, whose registers would otherwise cost short rows occupancy (f16 softmax over rows of 4096 read at
// 0.61 of copy with them, 0.85 without, on an H100).
layout(constant_id = 4) const bool STREAM = true;
#define CACHE (CACHE_VALUES / VW)
#define UNROLL 4u         // loads in flight per invocation in the streaming loops

DECLARE_BUFFER(0, in0, readonly)
DECLARE_BUFFER(1, out0, )

layout(push_constant) uniform PC {
  uint rows;
  uint feat;
  float scale;
} pc;

#if defined(DT_F64)
#define ACC double
#else
#define ACC float
#endif

shared ACC red[gl_WorkGroupSize.x];

#define DEFINE_ROW_REDUCE(NAME, SG_OP, COMBINE)                               \
  ACC NAME(ACC v, uint lane, uint slot) {                                      \
    ROW_REDUCE_BODY(SG_OP, COMBINE)                                            \
  }

#if defined(SUBGROUP)
#define ROW_REDUCE_BODY(SG_OP, COMBINE)                                        \
  v = SG_OP(v);                                                                \
  if (TPR == gl_SubgroupSize) return v;                                        \
  if (gl_SubgroupInvocationID == 0u) red[gl_SubgroupID] = v;                   \
  barrier();                                                                   \
  const uint nsg = TPR / gl_SubgroupSize, first = slot * nsg;                  \
  ACC r = red[first];                                                          \
  for (uint k = 1u; k < nsg; ++k) r = COMBINE(r, red[first + k]);              \
  barrier();                                                                   \
  return r;
#else
#define ROW_REDUCE_BODY(SG_OP, COMBINE)                                        \
  red[gl_LocalInvocationID.x] = v;                                             \
  barrier();                                                                   \
  for (uint s = TPR / 2u; s > 0u; s >>= 1) {                                   \
    if (lane < s) red[gl_LocalInvocationID.x] = COMBINE(red[gl_LocalInvocationID.x], red[gl_LocalInvocationID.x + s]); \
    barrier();                                                                 \
  }                                                                            \
  ACC r = red[slot * TPR];                                                     \
  barrier();                                                                   \
  return r;
#endif

ACC add_(ACC a, ACC b) { return a + b; }
ACC max_(ACC a, ACC b) { return max(a, b); }
DEFINE_ROW_REDUCE(row_sum, subgroupAdd, add_)
DEFINE_ROW_REDUCE(row_max, subgroupMax, max_)

#if defined(OP_sum_squared)
#define TERM(v) (ACC(v) * ACC(v))
#elif defined(OP_mean_abs)
#define TERM(v) abs(ACC(v))
#endif

void process(uint row, bool valid, uint lane, uint slot) {
  const uint npk = WIDE ? pc.feat / VW : pc.feat;  // packs (wide) or elements (narrow) per row
  const uint base = row * npk;
#if defined(OP_sum_squared) || defined(OP_mean_abs)
  ACC acc = ACC(0);
  if (valid) {
    if (WIDE) {
      for (uint j0 = lane; j0 < npk; j0 += UNROLL * TPR) {
        uvec4 r[UNROLL];
        [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
          const uint j = j0 + u * TPR;
          r[u] = j < npk ? in0_v.v[base + j] : uvec4(0);  // zero bits add nothing to either sum
        }
        [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
          PACK_T(x);
          unpack(r[u], x);
          [[unroll]] for (uint k = 0; k < VW; ++k) acc += TERM(x[k]);
        }
      }
    } else {
      for (uint j = lane; j < npk; j += TPR) acc += TERM(LOAD_ELEM(in0, base + j));
    }
  }
  acc = row_sum(acc, lane, slot);
#if defined(OP_mean_abs)
  acc = acc / ACC(pc.feat);
#endif
  if (valid && lane == 0u) STORE_ELEM(out0, row, FT(acc));
#else  // softmax, log_softmax
  const float NEG_INF = uintBitsToFloat(0xff800000u);
  // In base 2: m tracks max(k x) with k = scale * log2(e), so exp(s x - max) = exp2(fma(x, k, -M)).
  const float s = pc.scale, kk = pc.scale * 1.4426950408889634;
  FT xc[CACHE][VW];
  // One read of the row for both statistics: m is this invocation's running max of k x and acc the
  // sum of exp2(k x - m) over the packs it streams (rescaled when m grows); the cached packs are added
  // once the row's max M is known. (Rows longer than the cache used to be read twice for them.)
  float m = NEG_INF, acc = 0.0;
  if (valid) {
    if (WIDE) {
      [[unroll]] for (uint t = 0; t < CACHE; ++t) {
        const uint j = lane + t * TPR;
        if (j < npk) {
          unpack(in0_v.v[base + j], xc[t]);
          [[unroll]] for (uint k = 0; k < VW; ++k) m = max(m, kk * xc[t][k]);
        }
      }
      // UNROLL packs loaded before any arithmetic (loads in flight), one rescale per batch.
      if (STREAM) for (uint j0 = lane + CACHE * TPR; j0 < npk; j0 += UNROLL * TPR) {
        uvec4 r[UNROLL];
        [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
          const uint j = j0 + u * TPR;
          if (j < npk) r[u] = in0_v.v[base + j];
        }
        FT x[UNROLL][VW];
        float pm = NEG_INF;
        [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
          if (j0 + u * TPR < npk) {
            unpack(r[u], x[u]);
            [[unroll]] for (uint k = 0; k < VW; ++k) pm = max(pm, kk * x[u][k]);
          }
        }
        if (pm > m) acc *= exp2(m - pm), m = pm;  // from m = -inf: acc is 0 (or NaN) and stays so
        // While m is -inf every value so far is -inf (a term of 0) or NaN (which must reach the sum).
        const float ms = m == NEG_INF ? 0.0 : m;
        [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
          if (j0 + u * TPR < npk) {
            [[unroll]] for (uint k = 0; k < VW; ++k) acc += exp2(fma(x[u][k], kk, -ms));
          }
        }
      }
    } else {
      for (uint j = lane; j < npk; j += TPR) {
        const float x = LOAD_ELEM(in0, base + j), v = kk * x;
        if (v > m) acc *= exp2(m - v), m = v;
        acc += exp2(fma(x, kk, -(m == NEG_INF ? 0.0 : m)));
      }
    }
  }
  const float M = row_max(m, lane, slot);
  if (valid && M != NEG_INF) {
    if (m != NEG_INF) acc *= exp2(m - M);  // else acc is 0 or NaN, relative to 0
    if (WIDE) {
      [[unroll]] for (uint t = 0; t < CACHE; ++t) {
        if (lane + t * TPR < npk) {
          [[unroll]] for (uint k = 0; k < VW; ++k) {
#if defined(OP_softmax)
            xc[t][k] = exp2(fma(xc[t][k], kk, -M));  // kept: the output pass only scales it
            acc += xc[t][k];
#else
            acc += exp2(fma(xc[t][k], kk, -M));
#endif
          }
        }
      }
    }
  } else {
    acc = 0.0;
  }
  const float S = row_sum(acc, lane, slot);
  if (!valid) return;
#if defined(OP_softmax)
  // A row that is all -inf gives zeros (KERNELS.md).
  const float inv = M == NEG_INF ? 0.0 : 1.0 / S;
  const float Mw = M == NEG_INF ? 0.0 : M;
#define OUT(v) (exp2(fma((v), kk, -Mw)) * inv)
#define OUT_CACHED(e) (M == NEG_INF ? 0.0 : (e) * inv)
#else
  const float lse = (M + log2(S)) * 0.6931471805599453;  // natural log-sum-exp of s x
#define OUT(v) (s * (v) - lse)
#define OUT_CACHED(v) OUT(v)
#endif
  if (WIDE) {
    [[unroll]] for (uint t = 0; t < CACHE; ++t) {
      const uint j = lane + t * TPR;
      if (j < npk) {
        PACK_T(y);
        [[unroll]] for (uint k = 0; k < VW; ++k) y[k] = OUT_CACHED(xc[t][k]);
        out0_v.v[base + j] = pack(y);
      }
    }
    // Loads first: the stores could alias the input as far as the compiler knows, so a load after a
    // store would wait for it.
    if (STREAM) for (uint j0 = lane + CACHE * TPR; j0 < npk; j0 += UNROLL * TPR) {
      uvec4 r[UNROLL];
      [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
        const uint j = j0 + u * TPR;
        if (j < npk) r[u] = in0_v.v[base + j];
      }
      [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
        const uint j = j0 + u * TPR;
        if (j < npk) {
          PACK_T(x);
          unpack(r[u], x);
          [[unroll]] for (uint k = 0; k < VW; ++k) x[k] = OUT(x[k]);
          out0_v.v[base + j] = pack(x);
        }
      }
    }
  } else {
    for (uint j = lane; j < npk; j += TPR) STORE_ELEM(out0, base + j, OUT(LOAD_ELEM(in0, base + j)));
  }
#endif
}

void main() {
  const uint rpw = gl_WorkGroupSize.x / TPR;
  const uint lane = gl_LocalInvocationID.x % TPR, slot = gl_LocalInvocationID.x / TPR;
  const uint nblocks = (pc.rows + rpw - 1u) / rpw;
  // The loop bound is uniform across the workgroup, so every barrier is reached by all invocations.
  for (uint blk = gl_WorkGroupID.x; blk < nblocks; blk += gl_NumWorkGroups.x) {
    const uint row = blk * rpw + slot;
    process(row, row < pc.rows, lane, slot);
  }
}
