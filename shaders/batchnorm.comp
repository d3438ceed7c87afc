#version 450
// batch_norm_relu (docs/ops.md section 3), inference form over NCHW (channels at dimension 1, `inner`
// elements per channel and sample): y = relu((x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c]).
// One invocation owns one 16-byte pack of the output and writes it whole (tensors are padded to 16
// bytes, so the last pack may be partial). PER_PACK: `inner` is a multiple of the pack, so a pack lies
// in one channel and its scale and shift are computed once. Variants: DT_<dtype>.
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool PER_PACK = true;

// Bindings: 0 x, 1 w, 2 b, 3 mean, 4 y, 5 var.
DECLARE_BUFFER(0, x, readonly)
DECLARE_BUFFER(1, w, readonly)
DECLARE_BUFFER(2, b, readonly)
DECLARE_BUFFER(3, mean, readonly)
DECLARE_BUFFER(4, y, writeonly)
DECLARE_BUFFER(5, var, readonly)

layout(push_constant) uniform PC {
  uint n;
  uint inner;
  uint channels;
  float eps;
  uint eps_lo, eps_hi;
} pc;

#if defined(DT_F64)
#define EPS packDouble2x32(uvec2(pc.eps_lo, pc.eps_hi))
#else
#define EPS pc.eps
#endif
// 1 / sqrt, not inversesqrt: Vulkan lets inversesqrt be 2 ulp off and llvmpipe's is worse (a lavapipe
// test seed found f32 1.5e-4 off); once per channel, so the cost is nothing.
FT rsqrt_(FT v) { return FT(1) / sqrt(v); }

// (x - mean) scale + b, not x scale + (b - mean scale): folding the mean into a shift cancels when
// |x scale| is much larger than the result (a small variance), and a test seed found f32 1.3e-4 off.
void scale_shift(uint c, out FT scale, out FT mu, out FT shift) {
  scale = LOAD_ELEM(w, c) * rsqrt_(LOAD_ELEM(var, c) + FT(EPS));
  mu = LOAD_ELEM(mean, c);
  shift = LOAD_ELEM(b, c);
}

void main() {
  const uint npacks = (pc.n + VW - 1u) / VW;
  for (uint p = gl_GlobalInvocationID.x; p < npacks; p += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
    PACK_T(v);
    unpack(x_v.v[p], v);
    FT scale, mu, shift;
    if (PER_PACK) scale_shift(((p * VW) / pc.inner) % pc.channels, scale, mu, shift);
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      if (!PER_PACK) scale_shift((min(p * VW + k, pc.n - 1u) / pc.inner) % pc.channels, scale, mu, shift);
      const FT o = (v[k] - mu) * scale + shift;
      v[k] = o < FT(0) ? FT(0) : o;  // NaN stays NaN
    }
    y_v.v[p] = pack(v);
  }
}
