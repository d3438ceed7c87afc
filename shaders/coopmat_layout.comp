#version 450
// Which elements of a 16 x 16 f32 NV cooperative matrix each invocation holds: the layout is the
// implementation's. Invocation i writes, at o[33 i], its element count, then the row and the column of
// each element (a matrix whose element (r, c) is r, and one whose element is c). hal/vulkan/
// kernels_attn.cpp compares it with the m16n8k16 layout that attention_coopmat.comp's QUAD variant uses.
#extension GL_NV_cooperative_matrix : enable
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable

layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer Out { float o[]; } out_;
shared float idx[512];

void main() {
  const uint lane = gl_LocalInvocationID.x;
  for (uint e = lane; e < 256u; e += 32u) {
    idx[e] = float(e / 16u);
    idx[256u + e] = float(e % 16u);
  }
  barrier();
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> r, c;
  coopMatLoadNV(r, idx, 0, 16, false);
  coopMatLoadNV(c, idx, 256, 16, false);
  out_.o[lane * 33u] = float(r.length());
  for (int i = 0; i < r.length() && i < 16; ++i) {
    out_.o[lane * 33u + 1u + uint(i)] = r[i];
    out_.o[lane * 33u + 17u + uint(i)] = c[i];
  }
}
