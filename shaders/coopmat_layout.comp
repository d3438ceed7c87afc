#version 450
// Which elements of a 16 x 16 f32 NV cooperative matrix each invocation holds: the layout is the
// implementation's. Invocation i writes, at o[33 i], its element count, then the row and the column of
// each element (a matrix whose element (r, c) is r, and one whose element is c). hal/vulkan/
// hal/vulkan/attention.cpp compares it with the m16n8k16 layout that attention_coopmat.comp's QUAD variant uses.
// F16: the same for a 16 x 16 f16 matrix (a diagnostic, KF_COOPMAT_LAYOUT=f16: fragments built element
// by element must put each element where the driver keeps it).
#extension GL_NV_cooperative_matrix : enable
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable

layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer Out { float o[]; } out_;
#if defined(F16)
#define ET float16_t
#define MT fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#else
#define ET float
#define MT fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#endif
shared ET idx[512];

void main() {
  const uint lane = gl_LocalInvocationID.x;
  for (uint e = lane; e < 256u; e += 32u) {
    idx[e] = ET(e / 16u);
    idx[256u + e] = ET(e % 16u);
  }
  barrier();
  MT r, c;
  coopMatLoadNV(r, idx, 0, 16, false);
  coopMatLoadNV(c, idx, 256, 16, false);
  out_.o[lane * 33u] = float(r.length());
  for (int i = 0; i < r.length() && i < 16; ++i) {
    out_.o[lane * 33u + 1u + uint(i)] = float(r[i]);
    out_.o[lane * 33u + 17u + uint(i)] = float(c[i]);
  }
}
