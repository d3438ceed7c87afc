#version 450
// bf16 linear on the tensor-core path (mm_coopmat.comp OUT_BF16; there is no bf16 NV cooperative-matrix
// shape): each row of a [rows, K] bf16 matrix (K % 8 == 0) as f16 times the power of two that puts the
// row's largest magnitude in [2^14, 2^15), so that nothing overflows f16 and every value down to 2^-28
// of its row's largest keeps its 8 bits. Per row, not per tensor: a row of A (a token) or of W (an
// output channel) far smaller than the rest keeps its precision. The inverse of the factor goes to word
// scale_off + row of binding 5, for the product's epilogue (C[m, n] = acc * inv_a[m] * inv_w[n]).
// 64 invocations per row, 4 rows per workgroup (workgroups in x, then y): the row's bf16 bits (sign cleared; for non-negative
// numbers the bits order as the values) reduced in shared memory, then the row read again (from cache)
// and converted.
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X_ { uvec4 x[]; };
layout(std430, binding = 4) writeonly buffer Y_ { uvec4 y[]; };
layout(std430, binding = 5) writeonly buffer S_ { float inv[]; };
layout(push_constant) uniform PC { uint rows, K, scale_off; } pc;

shared uint red[256];

// The power of two 2^k for a largest magnitude m (bf16 bits): m 2^k in [2^14, 2^15); 1 for zero,
// infinity or NaN (which then propagate). k within [-100, 100].
float pow2_scale(uint m) {
  if (m == 0u || m >= 0x7f80u) return 1.0;
  const int e = (m >> 7) != 0u ? int(m >> 7) - 127 : findMSB(m) - 133;
  return exp2(float(clamp(14 - e, -100, 100)));
}

void main() {
  const uint lid = gl_LocalInvocationID.x, lane = lid & 63u, r = lid >> 6u;
  const uint row = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 4u + r;
  const uint kp = pc.K / 8u;
  uint m = 0u;
  if (row < pc.rows)
    for (uint i = lane; i < kp; i += 64u) {
      const uvec4 v = x[row * kp + i];
      const uvec4 a = max(v & 0x7fffu, (v >> 16) & 0x7fffu);
      m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
    }
  red[lid] = m;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (lane < s) red[lid] = max(red[lid], red[lid + s]);
    barrier();
  }
  if (row >= pc.rows) return;
  const float sc = pow2_scale(red[r * 64u]);
  if (lane == 0u) inv[pc.scale_off + row] = 1.0 / sc;
  for (uint i = lane; i < kp; i += 64u) {
    const uvec4 v = x[row * kp + i];
    uvec4 h;
    [[unroll]] for (uint k = 0; k < 4u; ++k)
      h[k] = packHalf2x16(vec2(uintBitsToFloat(v[k] << 16), uintBitsToFloat(v[k] & 0xffff0000u)) * sc);
    y[row * kp + i] = h;
  }
}
