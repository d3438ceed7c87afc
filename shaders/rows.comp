#version 450
// Row kernels (docs/ops.md section 2): reductions and softmax along the last dimension.
// TPR invocations share one row (a subgroup for short rows, the whole workgroup for long ones); a
// workgroup holds WG / TPR rows. Each invocation keeps up to CACHE packs of its row in registers, so a
// row that fits is read from memory once; longer rows re-read the rest. Partial results combine in a
// fixed order (subgroup operations, then shared memory in subgroup order), so a row gives the same
// bits on every run. Variants: OP_<name>, DT_<dtype>, SUBGROUP.
#include "common.glsl"
#include "exp_reduced.glsl"
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
// softmax / log_softmax over rows longer than a workgroup's registers in one pass (KF_TUNE rows_coop):
// P workgroups per row exchanging their parts' max and sum (coop_row below). RAW: bf16 parts cached as
// the packs loaded (64 values in the registers of 32 floats).
layout(constant_id = 5) const bool COOP = false;
layout(constant_id = 6) const bool RAW = false;
#define CACHE (CACHE_VALUES / VW)
// The exponentials of softmax / log_softmax: f32 through exp2_reduced (common.glsl), whose error does not
// grow with the argument on any conformant driver; the 16-bit dtypes keep the driver's exp2, whose
// bound (3 + 2|t| ulp of f32: under 2e-5 relative above f32's smallest normal) is far inside their
// tolerance, and whose extra arithmetic would cost most where there are the most elements per byte.
#if defined(DT_F32)
#define EXP2(t) exp2_reduced(t)
#else
#define EXP2(t) exp2(t)
#endif
#define UNROLL 4u         // loads in flight per invocation in the streaming loops

DECLARE_BUFFER(0, in0, readonly)
DECLARE_BUFFER(1, out0, )
// COOP's workspace: words [0, 1 + rows) zeroed by the host before the dispatch (0: the ticket counter,
// 1 + row: the mask of the row's parts published), then two statistics per part.
layout(std430, binding = 2) coherent buffer CoopFlags { uint flags[]; };

layout(push_constant) uniform PC {
  uint rows;
  uint feat;
  float scale;
  uint chunk;    // COOP: elements per part (a multiple of the pack)
  uint nchunks;  // COOP: parts per row
  uint spin;     // COOP: polls of the rows' masks a workgroup may make over its life
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
  // m tracks the row's max of g x, g = sign(scale) (exact), and exp(s x - max) = EXP2((g x - m) k) with
  // k = |scale| log2(e): the difference is exact wherever the term is not negligible (Sterbenz), so the
  // exponent is exact to one rounding however large the logits. The form exp2(fma(x, k, -M)) rounded
  // k x to the logits' magnitude where the driver does not fuse the fma (GLSL need not): on lavapipe
  // the f32 relative error grew to 1e-4 for logits of +-30000 (docs/ops.md, special values).
  const float s = pc.scale, g = s < 0.0 ? -1.0 : 1.0, kk = abs(s) * 1.4426950408889634;
  FT xc[CACHE][VW];
  // One read of the row for both statistics: m is this invocation's running max of g x and acc the
  // sum of exp2((g x - m) k) over the packs it streams (rescaled when m grows); the cached packs are
  // added once the row's max M is known. (Rows longer than the cache used to be read twice for them.)
  float m = NEG_INF, acc = 0.0;
  if (valid) {
    if (WIDE) {
      [[unroll]] for (uint t = 0; t < CACHE; ++t) {
        const uint j = lane + t * TPR;
        if (j < npk) {
          unpack(in0_v.v[base + j], xc[t]);
          [[unroll]] for (uint k = 0; k < VW; ++k) m = max(m, g * xc[t][k]);
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
            [[unroll]] for (uint k = 0; k < VW; ++k) pm = max(pm, g * x[u][k]);
          }
        }
        if (pm > m) acc *= EXP2((m - pm) * kk), m = pm;  // from m = -inf: acc is 0 (or NaN) and stays so
        // While m is -inf every value so far is -inf (a term of 0) or NaN (which must reach the sum).
        const float ms = m == NEG_INF ? 0.0 : m;
        [[unroll]] for (uint u = 0; u < UNROLL; ++u) {
          if (j0 + u * TPR < npk) {
            [[unroll]] for (uint k = 0; k < VW; ++k) acc += EXP2((g * x[u][k] - ms) * kk);
          }
        }
      }
    } else {
      for (uint j = lane; j < npk; j += TPR) {
        const float v = g * LOAD_ELEM(in0, base + j);
        if (v > m) acc *= EXP2((m - v) * kk), m = v;
        acc += EXP2((v - (m == NEG_INF ? 0.0 : m)) * kk);
      }
    }
  }
  const float M = row_max(m, lane, slot);
  if (valid && M != NEG_INF) {
    if (m != NEG_INF) acc *= EXP2((m - M) * kk);  // else acc is 0 or NaN, relative to 0
    if (WIDE) {
      [[unroll]] for (uint t = 0; t < CACHE; ++t) {
        if (lane + t * TPR < npk) {
          [[unroll]] for (uint k = 0; k < VW; ++k) {
#if defined(OP_softmax)
            xc[t][k] = EXP2((g * xc[t][k] - M) * kk);  // kept: the output pass only scales it
            acc += xc[t][k];
#else
            acc += EXP2((g * xc[t][k] - M) * kk);
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
  // A row that is all -inf gives zeros (docs/ops.md).
  const float inv = M == NEG_INF ? 0.0 : 1.0 / S;
  const float Mw = M == NEG_INF ? 0.0 : M;
#define OUT(v) (EXP2((g * (v) - Mw) * kk) * inv)
#define OUT_CACHED(e) (M == NEG_INF ? 0.0 : (e) * inv)
#else
  // s x - lse = |s| (g x - M) - log(S): the large parts cancel exactly before anything is rounded
  // (s x - lse rounded both to the logits' magnitude: an absolute error of 2e-3 at +-30000).
  const float as = abs(s), lnS = log2(S) * 0.6931471805599453;
#define OUT(v) ((g * (v) - M) * as - lnS)
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

#if defined(OP_softmax) || defined(OP_log_softmax)
// ---- COOP: rows shared by P workgroups in one pass (the scheme of norm.comp's PASS 3, whose comment
// gives the reasoning: tickets in start order, so the waits end on a GPU; a bounded poll, after which a
// workgroup computes a missing part's statistics itself from memory with the same function and order,
// precise arithmetic, so the bits do not depend on which parts were waited for). A part's statistics:
// M_k = max of g x over the part (g = sign(scale), k = |scale| log2 e) and S_k = sum of exp2((g x - M_k) k);
// the row's are M = max M_k and S = sum over k in part order of S_k exp2((M_k - M) k) (a part whose max is -inf sums
// about 0 instead: its terms are 0, or NaN that must reach S). softmax keeps exp2((g x - M_k) k) of
// its own part in the registers (float cache) and scales it by exp2((M_k - M) k) / S for the output.
shared uint coop_ticket, coop_mask;
shared float coop_st[2u * 32u];
uint spin_left;
FT cx[CACHE][VW];
uvec4 cr[CACHE];

void stat_put(uint i, float v) { atomicExchange(flags[i], floatBitsToUint(v)); }
float stat_get(uint i) { return uintBitsToFloat(atomicOr(flags[i], 0u)); }

// The part's statistics from the registers (cached; softmax with a float cache then holds the
// exponentials) or from memory (a missing sibling's part). Every invocation calls it (barriers). sh:
// the shift of this invocation's exponentials (the cached ones are exp2((g x - sh) k), sh = -inf standing
// for a shift of 0).
#if defined(SUBGROUP)
// With subgroups, ONE round through shared memory (one barrier): each subgroup's max M_g (subgroupMax)
// and its sum S_g of exp2((g x - M_g) k) (subgroupAdd, after a pass over the registers) meet in shared
// memory as online-softmax pairs, and every invocation combines them in subgroup order: M_k = max M_g,
// S_k = sum S_g exp2(M_g - M_k) (S_g alone where M_g is -inf). No trailing barrier: the next writer of
// coop_red is behind another barrier (coop_row).
shared float coop_red[2u * gl_WorkGroupSize.x];
void part_stats(bool cached, uint p0, uint npk, uint lane, float g, float kk, out float Mk, out float Sk, out float sh) {
  const float NEG_INF = uintBitsToFloat(0xff800000u);
  const uint nsg = gl_WorkGroupSize.x / gl_SubgroupSize, sg = gl_SubgroupID;
  float m = NEG_INF;
  [[unroll]] for (uint t = 0; t < CACHE; ++t) {
    const uint j = lane + t * TPR;
    if (j < npk) {
      PACK_T(v);
      if (!cached) unpack(in0_v.v[p0 + j], v);
      else if (RAW) unpack(cr[t], v);
      else [[unroll]] for (uint k = 0; k < VW; ++k) v[k] = cx[t][k];
      [[unroll]] for (uint k = 0; k < VW; ++k) m = max(m, g * v[k]);
    }
  }
  const float Mg = subgroupMax(m);
  // A subgroup whose max is -inf has terms of 0 (-inf) or NaN (which must reach the sum): shifted by 0.
  const float ms = Mg == NEG_INF ? 0.0 : Mg;
  precise float acc = 0.0;
  [[unroll]] for (uint t = 0; t < CACHE; ++t) {
    const uint j = lane + t * TPR;
    if (j < npk) {
      PACK_T(v);
      if (!cached) unpack(in0_v.v[p0 + j], v);
      else if (RAW) unpack(cr[t], v);
      else [[unroll]] for (uint k = 0; k < VW; ++k) v[k] = cx[t][k];
      [[unroll]] for (uint k = 0; k < VW; ++k) {
        precise const float e = EXP2((g * v[k] - ms) * kk);
#if defined(OP_softmax)
        if (cached && !RAW) cx[t][k] = e;
#endif
        acc += e;
      }
    }
  }
  const float Sg = subgroupAdd(acc);
  if (gl_SubgroupInvocationID == 0u) coop_red[2u * sg] = Mg, coop_red[2u * sg + 1u] = Sg;
  barrier();
  float M = coop_red[0];
  for (uint k = 1u; k < nsg; ++k) M = max(M, coop_red[2u * k]);
  precise float S = 0.0;
  for (uint k = 0u; k < nsg; ++k) {
    const float mg = coop_red[2u * k], sg_ = coop_red[2u * k + 1u];
    precise const float f = EXP2((mg - M) * kk);
    S += mg == NEG_INF ? sg_ : sg_ * f;  // (sg_: 0, or NaN)
  }
  Mk = M, Sk = S, sh = Mg;
}
#else
// Without subgroups: two shared-memory trees (the part's max, then its sum).
void part_stats(bool cached, uint p0, uint npk, uint lane, float g, float kk, out float Mk, out float Sk, out float sh) {
  const float NEG_INF = uintBitsToFloat(0xff800000u);
  float m = NEG_INF;
  [[unroll]] for (uint t = 0; t < CACHE; ++t) {
    const uint j = lane + t * TPR;
    if (j < npk) {
      PACK_T(v);
      if (!cached) unpack(in0_v.v[p0 + j], v);
      else if (RAW) unpack(cr[t], v);
      else [[unroll]] for (uint k = 0; k < VW; ++k) v[k] = cx[t][k];
      [[unroll]] for (uint k = 0; k < VW; ++k) m = max(m, g * v[k]);
    }
  }
  Mk = row_max(m, lane, 0u);
  // A part whose max is -inf has terms of 0 (-inf) or NaN (which must reach the sum): shifted by 0.
  const float ms = Mk == NEG_INF ? 0.0 : Mk;
  precise float acc = 0.0;
  {
    [[unroll]] for (uint t = 0; t < CACHE; ++t) {
      const uint j = lane + t * TPR;
      if (j < npk) {
        PACK_T(v);
        if (!cached) unpack(in0_v.v[p0 + j], v);
        else if (RAW) unpack(cr[t], v);
        else [[unroll]] for (uint k = 0; k < VW; ++k) v[k] = cx[t][k];
        [[unroll]] for (uint k = 0; k < VW; ++k) {
          precise const float e = EXP2((g * v[k] - ms) * kk);
#if defined(OP_softmax)
          if (cached && !RAW) cx[t][k] = e;
#endif
          acc += e;
        }
      }
    }
  }
  Sk = row_sum(acc, lane, 0u);
  sh = Mk;
}
#endif

void coop_row(uint row, uint part, uint lane) {
  const float NEG_INF = uintBitsToFloat(0xff800000u);
  // In the logits' units, as process(): m and M are maxima of g x, g = sign(scale).
  const float s = pc.scale, g = s < 0.0 ? -1.0 : 1.0, kk = abs(s) * 1.4426950408889634;
  const uint P = pc.nchunks, L = pc.feat, C = pc.chunk;
  const uint rpk = L / VW, cpk = C / VW;  // packs per row, per part
  const uint p0 = row * rpk + part * cpk, npk = min(cpk, rpk - part * cpk);
  [[unroll]] for (uint t = 0; t < CACHE; ++t) {  // every load before any use
    const uint j = lane + t * TPR;
    if (j < npk) {
      if (RAW) cr[t] = in0_v.v[p0 + j];
      else unpack(in0_v.v[p0 + j], cx[t]);
    }
  }
  float Mk, Sk, sh;
  part_stats(true, p0, npk, lane, g, kk, Mk, Sk, sh);
  const uint at = ((pc.rows + 2u) & ~1u) + 2u * row * P;
  if (lane == 0u) {
    stat_put(at + 2u * part, Mk);
    stat_put(at + 2u * part + 1u, Sk);
    memoryBarrierBuffer();
    atomicOr(flags[1u + row], 1u << part);
    const uint all = P == 32u ? ~0u : (1u << P) - 1u;
    uint seen = atomicOr(flags[1u + row], 0u);
    for (; seen != all && spin_left > 0u; --spin_left) seen = atomicOr(flags[1u + row], 0u);
    coop_ticket = atomicAdd(flags[0], 1u);  // the next unit (norm.comp's coop_row says why here)
    memoryBarrierBuffer();
    for (uint k = 0u; k < P; ++k) {
      if (k != part && (seen & (1u << k)) != 0u) {
        coop_st[2u * k] = stat_get(at + 2u * k);
        coop_st[2u * k + 1u] = stat_get(at + 2u * k + 1u);
      }
    }
    coop_st[2u * part] = Mk;
    coop_st[2u * part + 1u] = Sk;
    coop_mask = seen | (1u << part);
  }
  barrier();
  const uint seen = coop_mask;  // uniform: the loop below has barriers
  const uint all = P == 32u ? ~0u : (1u << P) - 1u;
  if (seen != all) {
    for (uint k = 0u; k < P; ++k) {
      if ((seen & (1u << k)) == 0u) {
        float a, b, c;
        part_stats(false, row * rpk + k * cpk, min(cpk, rpk - k * cpk), lane, g, kk, a, b, c);
        if (lane == 0u) coop_st[2u * k] = a, coop_st[2u * k + 1u] = b;
        barrier();  // part_stats' shared memory read by all before the next call writes it
      }
    }
  }
  float M = NEG_INF;
  for (uint k = 0u; k < P; ++k) M = max(M, coop_st[2u * k]);
  float S = 0.0;
  for (uint k = 0u; k < P; ++k) {
    const float mk = coop_st[2u * k], sk = coop_st[2u * k + 1u];
    S += mk == NEG_INF ? sk : sk * EXP2((mk - M) * kk);  // (sk: 0, or NaN)
  }
#if defined(OP_softmax)
  // A row that is all -inf gives zeros (docs/ops.md).
  const float inv = M == NEG_INF ? 0.0 : 1.0 / S;
  const float Mw = M == NEG_INF ? 0.0 : M;
  const float f = sh == NEG_INF ? inv : EXP2((sh - M) * kk) * inv;  // the cached exponentials' factor
#else
  const float as = abs(s), lnS = log2(S) * 0.6931471805599453;  // s x - lse = |s| (g x - M) - log(S)
#endif
  [[unroll]] for (uint t = 0; t < CACHE; ++t) {
    const uint j = lane + t * TPR;
    if (j < npk) {
      PACK_T(y);
#if defined(OP_softmax)
      if (RAW) {
        unpack(cr[t], y);
        [[unroll]] for (uint k = 0; k < VW; ++k) y[k] = EXP2((g * y[k] - Mw) * kk) * inv;
      } else {
        [[unroll]] for (uint k = 0; k < VW; ++k) y[k] = cx[t][k] * f;
      }
#else
      if (RAW) unpack(cr[t], y);
      else [[unroll]] for (uint k = 0; k < VW; ++k) y[k] = cx[t][k];
      [[unroll]] for (uint k = 0; k < VW; ++k) y[k] = (g * y[k] - M) * as - lnS;
#endif
      out0_v.v[p0 + j] = pack(y);
    }
  }
}
#endif

void main() {
  const uint rpw = gl_WorkGroupSize.x / TPR;
  const uint lane = gl_LocalInvocationID.x % TPR, slot = gl_LocalInvocationID.x / TPR;
  const uint nblocks = (pc.rows + rpw - 1u) / rpw;
#if defined(OP_softmax) || defined(OP_log_softmax)
  if (COOP) {
    const uint units = pc.rows * pc.nchunks;
    spin_left = pc.spin;
    // The first ticket here, the next ones in coop_row (as norm.comp's PASS 3).
    if (gl_LocalInvocationID.x == 0u) coop_ticket = atomicAdd(flags[0], 1u);
    barrier();
    for (;;) {
      const uint u = coop_ticket;  // uniform
      if (u >= units) break;
      coop_row(u / pc.nchunks, u % pc.nchunks, lane);
    }
    return;
  }
#endif
  // The loop bound is uniform across the workgroup, so every barrier is reached by all invocations.
  for (uint blk = gl_WorkGroupID.x; blk < nblocks; blk += gl_NumWorkGroups.x) {
    const uint row = blk * rpw + slot;
    process(row, row < pc.rows, lane, slot);
  }
}
