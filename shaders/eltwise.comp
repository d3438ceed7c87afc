#version 450
// Elementwise fusions (docs/ops.md section 1). One invocation owns one 16-byte pack of the output and
// writes it whole, so packs of 16-bit elements never share a word between invocations. The op is a
// define (OP_<name>); the operand layouts are specialization constants:
//   MODE1, MODE2: input 1 / 2 has the output's shape (0), the features shape (1), one element (2),
//                 or is absent (3);  PACKED: input 0 is [.., 2F] holding x then gate (gated ops);
//   GATHER: the features size is not a multiple of the pack, so broadcast and packed operands are
//           read element by element instead of as aligned packs.
#include "common.glsl"
#include "activations.glsl"
#include "philox.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE1 = 0;
layout(constant_id = 2) const uint MODE2 = 0;
layout(constant_id = 3) const bool PACKED = false;
layout(constant_id = 4) const bool GATHER = false;
layout(constant_id = 5) const uint ITEMS = 1;  // packs per invocation per tile

DECLARE_BUFFER(0, in0, readonly)
DECLARE_BUFFER(1, in1, readonly)
DECLARE_BUFFER(2, in2, readonly)
DECLARE_BUFFER(3, out0, writeonly)

layout(push_constant) uniform PC {
  uint n;                    // output elements
  uint feat;                  // output features (last dimension)
  uint seed_lo, seed_hi;     // Philox key
  uint off_lo, off_hi;       // Philox counter offset
  uint thr;                  // keep(i) = (word >> 8) >= thr
  float keep_scale;          // 1 / (1 - p)
  uint keep_scale_lo, keep_scale_hi;  // the same as a double's bits (f64 variants)
} pc;

#if defined(GRAD_OP)
#include "activations_grad.glsl"  // backward ops (sections 3 and 6): grad_apply(dy or a, x or b)
#endif

FT relu_t(FT x) { return x < FT(0) ? FT(0) : x; }

#if defined(DT_F64)
#define KEEP_SCALE packDouble2x32(uvec2(pc.keep_scale_lo, pc.keep_scale_hi))
#else
#define KEEP_SCALE pc.keep_scale
#endif

// The fused function of output element value x (input 0), b (input 1 or gate), c (input 2).
FT apply(FT x, FT b, FT c) {
#if defined(OP_add_relu)
  return relu_t(x + b);
#elif defined(OP_mul_relu)
  return relu_t(x * b);
#elif defined(OP_add_sigmoid)
  return sigmoid_f(x + b);
#elif defined(OP_mul_tanh)
  return tanh_f(x * b);
#elif defined(OP_bias_relu)
  return relu_t(x + b);
#elif defined(OP_bias_gelu) || defined(OP_bias_gelu_dropout)
  return gelu_f(x + b);
#elif defined(OP_bias_gelu_tanh)
  return gelu_tanh_f(x + b);
#elif defined(OP_bias_silu)
  return silu_f(x + b);
#elif defined(OP_swiglu)
  return silu_f(b) * x;
#elif defined(OP_geglu)
  return gelu_f(b) * x;
#elif defined(OP_mish_scale)
  return mish_f(x) * b;
#elif defined(OP_prelu_bias)
  FT s = x + c;
  return s >= FT(0) ? s : b * s;
#elif defined(OP_gelu_dropout) || defined(OP_gelu)
  return gelu_f(x);
#elif defined(OP_dropout) || defined(OP_add_dropout_residual) || defined(OP_copy)
  return x;
#elif defined(OP_add)
  return x + b;
#elif defined(OP_mul)
  return x * b;
#elif defined(OP_prelu)
  return x >= FT(0) ? x : b * x;
#elif defined(OP_relu)
  return relu_t(x);
#elif defined(OP_sigmoid)
  return sigmoid_f(x);
#elif defined(OP_tanh)
  return tanh_f(x);
#elif defined(OP_gelu_tanh)
  return gelu_tanh_f(x);
#elif defined(OP_silu)
  return silu_f(x);
#elif defined(OP_mish)
  return mish_f(x);
#elif defined(GRAD_OP)
  return grad_apply(x, b);
#else
#error "eltwise.comp: no OP_<name> defined"
#endif
}

#if defined(OP_dropout) || defined(OP_gelu_dropout) || defined(OP_bias_gelu_dropout) || defined(OP_add_dropout_residual)
#define RANDOM 1
#endif

// Loads input 1 or 2 (a buffer declared as name) for the pack starting at element i0.
#define LOAD_OPERAND(name, MODE, p, i0, dst)                                              \
  if (MODE == 0u) {                                                                      \
    unpack(name##_v.v[p], dst);                                                          \
  } else if (MODE == 1u && !GATHER) {                                                    \
    unpack(name##_v.v[((i0) % pc.feat) / VW], dst);                                         \
  } else if (MODE == 1u) {                                                               \
    [[unroll]] for (uint k = 0; k < VW; ++k) dst[k] = LOAD_ELEM(name, ((i0) + k) % pc.feat); \
  } else if (MODE == 2u) {                                                               \
    FT s_ = LOAD_ELEM(name, 0u);                                                          \
    [[unroll]] for (uint k = 0; k < VW; ++k) dst[k] = s_;                                \
  } else {                                                                               \
    [[unroll]] for (uint k = 0; k < VW; ++k) dst[k] = FT(0);                              \
  }

// One output pack p, given the raw 16-byte packs of the full-size operands (loaded by main).
void process(uint p, uvec4 a0, uvec4 a1, uvec4 a2) {
  const uint i0 = p * VW;
  PACK_T(x);
  PACK_T(b);
  PACK_T(c);
  if (!PACKED) {
    unpack(a0, x);
    if (MODE1 == 0u) unpack(a1, b);
    else LOAD_OPERAND(in1, MODE1, p, i0, b)
  } else if (!GATHER) {
    const uint r = i0 / pc.feat, f = i0 - r * pc.feat, base = r * 2u * pc.feat + f;
    unpack(in0_v.v[base / VW], x);
    unpack(in0_v.v[(base + pc.feat) / VW], b);
  } else {
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      const uint i = min(i0 + k, pc.n - 1u);
      const uint r = i / pc.feat, f = i - r * pc.feat, base = r * 2u * pc.feat + f;
      x[k] = LOAD_ELEM(in0, base);
      b[k] = LOAD_ELEM(in0, base + pc.feat);
    }
  }
  if (MODE2 == 0u) unpack(a2, c);
  else LOAD_OPERAND(in2, MODE2, p, i0, c)

  PACK_T(y);
#if defined(RANDOM)
  uvec4 words = uvec4(0);
#endif
  [[unroll]] for (uint k = 0; k < VW; ++k) {
    FT v = apply(x[k], b[k], c[k]);
#if defined(RANDOM)
    const uint i = i0 + k;
    if (k == 0u || (i & 3u) == 0u)
      words = philox4x32_10(uvec4(i >> 2, 0u, pc.off_lo, pc.off_hi), uvec2(pc.seed_lo, pc.seed_hi));
    v = (words[i & 3u] >> 8) >= pc.thr ? v * KEEP_SCALE : FT(0);
#if defined(OP_add_dropout_residual)
    v += b[k];
#endif
#endif
    y[k] = v;
  }
  out0_v.v[p] = pack(y);
}

// A workgroup handles tiles of WG * ITEMS packs; each invocation issues the loads of all its ITEMS
// packs before using any, so that enough bytes are in flight to saturate memory.
void main() {
  const uint npacks = (pc.n + VW - 1u) / VW;
  const uint WG = gl_WorkGroupSize.x;
  const uint tile = WG * ITEMS;
  const uint ntiles = (npacks + tile - 1u) / tile;
  for (uint t = gl_WorkGroupID.x; t < ntiles; t += gl_NumWorkGroups.x) {
    const uint p0 = t * tile + gl_LocalInvocationID.x;
    uvec4 r0[ITEMS], r1[ITEMS], r2[ITEMS];
    [[unroll]] for (uint it = 0; it < ITEMS; ++it) {
      const uint p = min(p0 + it * WG, npacks - 1u);  // the tail re-reads the last pack: never out of range
      r0[it] = PACKED ? uvec4(0) : in0_v.v[p];
      r1[it] = MODE1 == 0u ? in1_v.v[p] : uvec4(0);
      r2[it] = MODE2 == 0u ? in2_v.v[p] : uvec4(0);
    }
    [[unroll]] for (uint it = 0; it < ITEMS; ++it) {
      const uint p = p0 + it * WG;
      if (p < npacks) process(p, r0[it], r1[it], r2[it]);
    }
  }
}
