#version 450
// Which elements of 16 x 16 cooperative matrices each invocation holds: the layout is the
// implementation's. For an f32 accumulator, invocation i writes, at o[33 i], its element count, then the
// row and the column of each element (a matrix whose element (r, c) is r, and one whose element is c);
// for an f16 A operand the same at o[32 * 33 + 33 i]. hal/vulkan/attention.cpp compares the accumulator's
// with the m16n8k16 layout that the attention kernels' QUAD forms use, and, in the KHR form (where an
// accumulator cannot become an A operand by conversion), the A operand's with the accumulator's: where
// they agree element by element, an A operand is built from an accumulator element by element.
// NV or KHR (KF_COOPMAT_KHR) through coopmat.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
#include "coopmat.glsl"

layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer Out { float o[]; } out_;
shared float idx[512];
shared float16_t idx16[512];

void main() {
  const uint lane = gl_LocalInvocationID.x;
  for (uint e = lane; e < 256u; e += 32u) {
    idx[e] = float(e / 16u);
    idx[256u + e] = float(e % 16u);
    idx16[e] = float16_t(e / 16u);
    idx16[256u + e] = float16_t(e % 16u);
  }
  barrier();
  CM_ACC r;
  CM_ACC c;
  CM_LOAD(r, idx, 0, 16, CM_ROW);
  CM_LOAD(c, idx, 256, 16, CM_ROW);
  out_.o[lane * 33u] = float(r.length());
  for (int i = 0; i < r.length() && i < 16; ++i) {
    out_.o[lane * 33u + 1u + uint(i)] = r[i];
    out_.o[lane * 33u + 17u + uint(i)] = c[i];
  }
  CM_A ra;
  CM_A ca;
  CM_LOAD(ra, idx16, 0, 16, CM_ROW);
  CM_LOAD(ca, idx16, 256, 16, CM_ROW);
  const uint a0 = 32u * 33u + lane * 33u;
  out_.o[a0] = float(ra.length());
  for (int i = 0; i < ra.length() && i < 16; ++i) {
    out_.o[a0 + 1u + uint(i)] = float(ra[i]);
    out_.o[a0 + 17u + uint(i)] = float(ca[i]);
  }
}
