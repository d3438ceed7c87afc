#version 450
// The in-register ceiling of the tensor-core path (kf-bench's matrix roofline): each subgroup keeps
// 8 independent 16x16 f32 accumulators and multiplies fragments that never leave registers, ITERS
// times, so nothing but the cooperative-matrix multiply-add is timed. The sums are stored at the end
// so that the compiler cannot drop the work.
#extension GL_NV_cooperative_matrix : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Out { float o[]; } out_;
layout(push_constant) uniform PC { uint iters; } pc;

void main() {
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a0 = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(float16_t(0.5));
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a1 = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(float16_t(0.25));
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b0 = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(float16_t(0.125));
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b1 = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(float16_t(-0.125));
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[8];
  [[unroll]] for (uint i = 0; i < 8u; ++i) acc[i] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  for (uint it = 0; it < pc.iters; ++it) {
    acc[0] = coopMatMulAddNV(a0, b0, acc[0]);
    acc[1] = coopMatMulAddNV(a0, b1, acc[1]);
    acc[2] = coopMatMulAddNV(a1, b0, acc[2]);
    acc[3] = coopMatMulAddNV(a1, b1, acc[3]);
    acc[4] = coopMatMulAddNV(a0, b0, acc[4]);
    acc[5] = coopMatMulAddNV(a0, b1, acc[5]);
    acc[6] = coopMatMulAddNV(a1, b0, acc[6]);
    acc[7] = coopMatMulAddNV(a1, b1, acc[7]);
  }
  // (Summing the accumulators with `+` first would be less to store, but crashes Debian 12's glslc -O.)
  const uint base = (gl_WorkGroupID.x * 8u + gl_SubgroupID) * 8u * 256u;
  [[unroll]] for (uint i = 0; i < 8u; ++i) coopMatStoreNV(acc[i], out_.o, base + 256u * i, 16u, false);
}
