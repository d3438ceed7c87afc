#version 450
// bf16 attention on the tensor-core path (attention_coopmat.comp BF16IN), which has no bf16 cooperative-
// matrix shape and stages f16 scaled by a power of two per tensor:
//   (default) the largest magnitude of each of Q, K and V. Workgroup row y = 0, 1, 2 reads binding y
//     (n_packs[y] 16-byte packs); every workgroup reduces its packs' bf16 bits with the sign cleared
//     (for non-negative numbers the bits order as the values; NaN above infinity) and adds them with
//     one atomicMax to word out + y of the workspace, which the host zeroed first.
//   CONVERT: K (y = 0) and V (y = 1) as f16 times their powers of two into bindings 3 and 4, so that
//     the attention kernel stages them as they are (converting in its staging cost a third of its speed
//     on an H100: the conversion sits between the loads and the stores of every tile). Q is converted
//     in the kernel, once per workgroup.
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Q_ { uvec4 q[]; };
layout(std430, binding = 1) readonly buffer K_ { uvec4 k[]; };
layout(std430, binding = 2) readonly buffer V_ { uvec4 v[]; };
layout(std430, binding = 3) writeonly buffer KH_ { uvec4 kh[]; };
layout(std430, binding = 4) writeonly buffer VH_ { uvec4 vh[]; };
layout(std430, binding = 5) buffer WS { uint ws[]; };
layout(push_constant) uniform PC { uint n_packs[3]; uint out_word; } pc;

#if defined(CONVERT)
#include "bf16_scale.glsl"  // pow2_scale, as attention_coopmat.comp
uvec4 to_f16(uvec4 x, float s) {
  uvec4 h;
  [[unroll]] for (uint k = 0; k < 4u; ++k)
    h[k] = packHalf2x16(vec2(uintBitsToFloat(x[k] << 16), uintBitsToFloat(x[k] & 0xffff0000u)) * s);
  return h;
}

void main() {
  const uint y = gl_WorkGroupID.y, n = pc.n_packs[y + 1u];
  const uint stride = gl_NumWorkGroups.x * 256u;
  const float s = pow2_scale(ws[pc.out_word + 1u + y]);
  uint i = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x;
  for (; i + 3u * stride < n; i += 4u * stride) {
    uvec4 x[4];
    [[unroll]] for (uint u = 0; u < 4u; ++u) x[u] = y == 0u ? k[i + u * stride] : v[i + u * stride];
    [[unroll]] for (uint u = 0; u < 4u; ++u) {
      if (y == 0u) kh[i + u * stride] = to_f16(x[u], s);
      else vh[i + u * stride] = to_f16(x[u], s);
    }
  }
  for (; i < n; i += stride) {
    if (y == 0u) kh[i] = to_f16(k[i], s);
    else vh[i] = to_f16(v[i], s);
  }
}
#else

shared uint part[256];  // per subgroup (any subgroup size)

uint absmax_pack(uvec4 x) {
  const uvec4 lo = x & 0x7fffu, hi = (x >> 16) & 0x7fffu;
  const uvec4 m = max(lo, hi);
  return max(max(m.x, m.y), max(m.z, m.w));
}

void main() {
  const uint y = gl_WorkGroupID.y, n = pc.n_packs[y];
  const uint stride = gl_NumWorkGroups.x * 256u;
  uint m = 0u;
  // Four packs in flight per invocation (loads issued before the reductions).
  uint i = gl_WorkGroupID.x * 256u + gl_LocalInvocationID.x;
  for (; i + 3u * stride < n; i += 4u * stride) {
    uvec4 x[4];
    [[unroll]] for (uint u = 0; u < 4u; ++u) {
      const uint j = i + u * stride;
      x[u] = y == 0u ? q[j] : y == 1u ? k[j] : v[j];
    }
    [[unroll]] for (uint u = 0; u < 4u; ++u) m = max(m, absmax_pack(x[u]));
  }
  for (; i < n; i += stride) m = max(m, absmax_pack(y == 0u ? q[i] : y == 1u ? k[i] : v[i]));
  m = subgroupMax(m);
  if (gl_SubgroupInvocationID == 0u) part[gl_SubgroupID] = m;
  barrier();
  if (gl_LocalInvocationID.x == 0u) {
    uint r = 0u;
    for (uint s = 0u; s < gl_NumSubgroups; ++s) r = max(r, part[s]);
    atomicMax(ws[pc.out_word + y], r);
  }
}
#endif
