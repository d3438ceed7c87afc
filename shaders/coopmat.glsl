// One source for both cooperative-matrix extensions: GL_NV_cooperative_matrix (Debian's glslc) and, with
// KF_COOPMAT_KHR defined, GL_KHR_cooperative_matrix (glslang 13+, cmake/Shaders.cmake). Included right
// after the #version and #extension lines (it adds the extension). The fragment shape is CM_M x CM_N with
// CM_K-deep products (default 16 x 16 x 16): a variant per shape the device may list
// (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR); the NV form is 16 x 16 x 16 only.
//   CM_A, CM_B            f16 operands (bf16 with KF_COOPMAT_BF16, KHR only): A is CM_M x CM_K, B is CM_K x CM_N
//   CM_ACC                f32 accumulator, CM_M x CM_N; CM_ACC16 the same in f16 (attention's products)
//   CM_ROW, CM_COL        memory layouts: row-major, column-major (constants, as both extensions require)
//   CM_LOAD(m, buf, element, stride, layout)   element and stride count buf's elements (uvec4: 8 halves)
//   CM_STORE(m, buf, element, stride, layout)
//   CM_MAD(a, b, c)       a * b + c
// Both extensions give m.length() and m[i] (this invocation's elements; their order is the device's).
// A third form, KF_COOPMAT_NV_AS_KHR, is the KHR form for Debian's glslang 12, which has no
// GL_KHR_cooperative_matrix: the variants compiled at run time (hal/vulkan/runtime_shader.cpp) are written
// through the NV extension with each matrix's KHR use in its scope (A Workgroup, B Device, accumulators
// QueueFamily: glslang takes any scope and shape, and so gives A and B distinct types), and the module is
// then rewritten to SPV_KHR_cooperative_matrix (hal/vulkan/spirv_khr.cpp), where every scope is Subgroup.
// CM_KHR is 1 in both KHR forms: the shaders test it where the KHR form differs (no QUAD form).
#ifndef CM_M
#define CM_M 16
#endif
#ifndef CM_N
#define CM_N 16
#endif
#ifndef CM_K
#define CM_K 16
#endif

#if defined(KF_COOPMAT_KHR) && defined(KF_COOPMAT_NV_AS_KHR)
#error "KF_COOPMAT_KHR and KF_COOPMAT_NV_AS_KHR are two compilers' forms of one kernel: define one"
#endif
#if defined(KF_COOPMAT_KHR)
#define CM_KHR 1
#extension GL_KHR_cooperative_matrix : enable
#ifdef KF_COOPMAT_BF16
// bf16 operands as bf16 (GL_EXT_bfloat16, VK_KHR_shader_bfloat16): loads reinterpret the buffers' 16-bit
// words as bf16, so A and B are read as they are stored, with no conversion or scaling. glslang 16+ only
// (cmake/Shaders.cmake compiles these variants through slang's glslang).
#extension GL_EXT_bfloat16 : require
#define CM_A coopmat<bfloat16_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA>
#define CM_B coopmat<bfloat16_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB>
#else
#define CM_A coopmat<float16_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA>
#define CM_B coopmat<float16_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB>
#endif
#define CM_ACC coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>
#define CM_ACC16 coopmat<float16_t, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>
#define CM_ROW gl_CooperativeMatrixLayoutRowMajor
#define CM_COL gl_CooperativeMatrixLayoutColumnMajor
#define CM_LOAD(m, buf, element, stride, layout) coopMatLoad(m, buf, element, stride, layout)
#define CM_STORE(m, buf, element, stride, layout) coopMatStore(m, buf, element, stride, layout)
#define CM_MAD(a, b, c) coopMatMulAdd(a, b, c)
#elif defined(KF_COOPMAT_NV_AS_KHR)
#define CM_KHR 1
#ifdef KF_COOPMAT_BF16
#error "bf16 operands need KF_COOPMAT_KHR (glslang 16): the run-time compiler has no bf16 types"
#endif
#extension GL_NV_cooperative_matrix : enable
#define CM_A fcoopmatNV<16, gl_ScopeWorkgroup, CM_M, CM_K>
#define CM_B fcoopmatNV<16, gl_ScopeDevice, CM_K, CM_N>
#define CM_ACC fcoopmatNV<32, gl_ScopeQueueFamily, CM_M, CM_N>
#define CM_ACC16 fcoopmatNV<16, gl_ScopeQueueFamily, CM_M, CM_N>
#define CM_ROW false
#define CM_COL true
#define CM_LOAD(m, buf, element, stride, layout) coopMatLoadNV(m, buf, element, stride, layout)
#define CM_STORE(m, buf, element, stride, layout) coopMatStoreNV(m, buf, element, stride, layout)
#define CM_MAD(a, b, c) coopMatMulAddNV(a, b, c)
#else
#define CM_KHR 0
#ifdef KF_COOPMAT_BF16
#error "bf16 operands need KF_COOPMAT_KHR"
#endif
#extension GL_NV_cooperative_matrix : enable
#if CM_M != 16 || CM_N != 16 || CM_K != 16
#error "the NV form is written for 16 x 16 x 16 fragments only"
#endif
#define CM_A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CM_B fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CM_ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define CM_ACC16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CM_ROW false
#define CM_COL true
#define CM_LOAD(m, buf, element, stride, layout) coopMatLoadNV(m, buf, element, stride, layout)
#define CM_STORE(m, buf, element, stride, layout) coopMatStoreNV(m, buf, element, stride, layout)
#define CM_MAD(a, b, c) coopMatMulAddNV(a, b, c)
#endif
