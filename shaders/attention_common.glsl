// Shared by attention.comp (the portable path) and attention_coopmat.comp (the tensor-core path):
// specialization constants, push constants (hal/vulkan/attention.cpp AttnPush), the auxiliary
// inputs in the workspace, ALiBi slopes and the dropout generator.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint D = 64;
layout(constant_id = 2) const uint BQ = 16;
layout(constant_id = 3) const uint BK = 32;
layout(constant_id = 4) const bool CAUSAL = false;
layout(constant_id = 5) const bool WINDOW = false;
layout(constant_id = 6) const uint ALIBI = 0;   // 0 off, 1 default slopes, 2 slopes given (aux)
layout(constant_id = 7) const bool SOFTCAP = false;
layout(constant_id = 8) const uint ROPE = 0;    // 0 none, 1 half, 2 interleaved
layout(constant_id = 9) const bool LENS = false;
layout(constant_id = 10) const bool VARLEN = false;
layout(constant_id = 11) const bool SINKS = false;
layout(constant_id = 12) const bool BMASK = false;
layout(constant_id = 13) const bool DROPOUT = false;
layout(constant_id = 14) const bool LSE = false;
layout(constant_id = 15) const bool SPLIT = false;

const uint NPK = D / VW;      // 16-byte packs per row

layout(push_constant) uniform PC {
  uint B, Hq, Hkv, SqT, SkT, G;
  uint nsplit, split_len;
  float scale, softcap;
  uint window;
  uint seed_lo, seed_hi, off_lo, off_hi, thr;
  float keep_scale;
  uint block_size, nkb;
  uint aux_rope, aux_slopes, aux_sinks, aux_lens, aux_cuq, aux_cuk, aux_bmask;
  int rope_pos0;
  uint part_off;
  uint scale_lo, scale_hi;  // the scale as a double (f64 attention_scores)
  uint aux_amax;            // attention_coopmat.comp BF16IN: words + 1 .. + 3, the largest magnitudes of Q, K, V
  // Added to gl_WorkGroupID.x: a grid wider than the device allows runs as several dispatches, each
  // starting at its first tile (hal/vulkan/kernels_common.hpp, record_split_x).
  uint group_base;
} pc;

#define NEG_INF uintBitsToFloat(0xff800000u)

#if defined(COMBINE)
layout(std430, binding = 0) readonly buffer WS { uint ws[]; };
#else
layout(std430, binding = 5) readonly buffer AUX { uint ws[]; };
#endif

// Element i of an op-dtype array stored at word offset `off` of the workspace.
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

// keep(i) of docs/ops.md's generator for i = rowidx * SkT + col (64-bit).
bool dropout_keep(uint rowidx, uint col) {
  return philox_keep2d(rowidx, pc.SkT, col, uvec2(pc.off_lo, pc.off_hi), uvec2(pc.seed_lo, pc.seed_hi), pc.thr);
}

