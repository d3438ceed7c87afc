#version 450
// A build-time check: does the slang-carried glslang that cmake/Shaders.cmake found compile GL_EXT_bfloat16
// cooperative matrices (bf16 x bf16 -> f32), and does the new spirv-val accept the result?
#extension GL_KHR_cooperative_matrix : enable
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_EXT_bfloat16 : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer B { uvec4 v[]; } b;
layout(std430, binding = 1) buffer C { float v[]; } c;
void main() {
  coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> x;
  coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> y;
  coopMatLoad(x, b.v, 0, 2, gl_CooperativeMatrixLayoutRowMajor);
  coopMatLoad(y, b.v, 0, 2, gl_CooperativeMatrixLayoutColumnMajor);
  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> z =
      coopMatMulAdd(x, y, coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0));
  coopMatStore(z, c.v, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
}
