#version 450
// A build-time check: does the glslang that cmake/Shaders.cmake found compile GL_KHR_cooperative_matrix?
#pragma shader_stage(compute)
#extension GL_KHR_cooperative_matrix : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
#extension GL_KHR_memory_scope_semantics : enable
layout(local_size_x = 32) in;
void main() { coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> m; }
