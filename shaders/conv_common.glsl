// Shared by conv.comp's implicit GEMM and conv_depthwise.comp: their specialization constants 1-4, the
// bindings, the push constants (CONV_PUSH_EXTRA, defined before the include, appends a kernel's own
// fields) and the epilogue: + bias, or the batch norm folded to a per-channel scale and shift (binding 3,
// f32, written by conv.comp FOLD_BN), activation, dropout at the output's NCHW linear index i.
layout(constant_id = 1) const bool HAS_BIAS = false;
layout(constant_id = 2) const bool BN = false;       // scale and shift per channel (binding 3, f32)
layout(constant_id = 3) const uint ACT = 0;          // 0 none, 1 relu, 2 gelu, 3 gelu_tanh, 4 silu
layout(constant_id = 4) const bool DROPOUT = false;

DECLARE_BUFFER(0, X, readonly)
DECLARE_BUFFER(1, WT, readonly)
DECLARE_BUFFER(2, BIAS, readonly)
layout(std430, binding = 3) readonly buffer SS { float ss[]; };
DECLARE_BUFFER(4, Y, )

#ifndef CONV_PUSH_EXTRA
#define CONV_PUSH_EXTRA
#endif
layout(push_constant) uniform PC {
  uint N, C, H, W, O, groups;
  uint khw, strides, pads, dils;  // {height | width << 16}
  uint seed_lo, seed_hi, off_lo, off_hi, thr;  // dropout: keep(i) = (word >> 8) >= thr
  float keep_scale;
  CONV_PUSH_EXTRA
} pc;

float act(float v) {
  if (ACT == 1u) return relu_f(v);
  if (ACT == 2u) return gelu_f(v);
  if (ACT == 3u) return gelu_tanh_f(v);
  if (ACT == 4u) return silu_f(v);
  return v;
}

// Output channel o, output element i.
float epilogue(float v, uint o, uint i) {
  if (HAS_BIAS) v += float(LOAD_ELEM(BIAS, o));
  if (BN) v = v * ss[o] + ss[pc.O + o];
  v = act(v);
  if (DROPOUT) {
    const uvec4 r = philox4x32_10(uvec4(i >> 2, 0u, pc.off_lo, pc.off_hi), uvec2(pc.seed_lo, pc.seed_hi));
    v = (r[i & 3u] >> 8) >= pc.thr ? v * pc.keep_scale : 0.0;
  }
  return v;
}
