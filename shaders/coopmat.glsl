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
// A fourth form, KF_COOPMAT_EMU (tests only: tests/test_coopmat.cpp compiles it at run time), emulates the
// matrices of mm_coopmat.comp's staged variants on any device, the subgroups of SGS invocations being
// consecutive local invocations synchronized by the workgroup's barriers, so that the products' tiles and
// epilogue at any shape and subgroup size run where the device has no cooperative matrices (lavapipe). It
// takes precedence over KF_COOPMAT_KHR.
// In every form:
//   CM_FILL(m, v)         every element of an accumulator set to v
//   CM_ACC_TO_A(a, acc)   an A operand (f16, or bf16 with KF_COOPMAT_BF16) from a 16 x 16 f32 accumulator (the attention kernels' QUAD
//                         forms): NV converts directly; KHR has no conversion between uses, so element by
//                         element, which is right only where the device keeps element i of both at the same
//                         row and column (coopmat_layout.comp; hal/vulkan/attention.cpp checks it first)
//   CM_SUBGROUP_ID, CM_LANE, CM_SUBGROUP_BARRIER(), CM_SUBGROUP_MEMORY_BARRIER_SHARED(): the subgroup's
//                         index in the workgroup, the invocation's in the subgroup, the subgroup's barriers
#ifndef CM_M
#define CM_M 16
#endif
#ifndef CM_N
#define CM_N 16
#endif
#ifndef CM_K
#define CM_K 16
#endif

#if defined(KF_COOPMAT_EMU)
#define CM_KHR 1
#ifndef SGS
#define SGS 32  // (mm_coopmat.comp's default, defined here first)
#endif
#if (CM_M * CM_N) % SGS != 0
#error "the emulated accumulators are shared out evenly over the subgroup"
#endif
// A and B are where CM_LOAD found them (f16 in mm_coopmat.comp's shared As and Bs: the element, the
// stride, column-major or not), read again by the products (CM_EMU_MAD_FUNCTION, after As and Bs);
// accumulator element q (row-major) lives in lane q % SGS, at q / SGS.
#define CM_A uvec3
#define CM_B uvec3
#define CM_ACC float[CM_M * CM_N / SGS]
#define CM_ROW false
#define CM_COL true
#define CM_FILL(m, v) for (int q_ = 0; q_ < m.length(); ++q_) m[q_] = (v)
#define CM_LOAD(m, buf, element, stride, layout) m = uvec3((element), (stride), (layout) ? 1u : 0u)
// f32 accumulators into a uvec4 buffer (do-while: one statement).
#define CM_STORE(m, buf, element, stride, layout)                                                  \
  do for (uint t_ = 0u; t_ < uint(m.length()); ++t_) {                                             \
    const uint q_ = CM_LANE + uint(SGS) * t_, r_ = q_ / uint(CM_N), c_ = q_ % uint(CM_N);            \
    const uint w_ = (layout) ? ((element) + c_ * (stride)) * 4u + r_ : ((element) + r_ * (stride)) * 4u + c_; \
    buf[w_ / 4u][w_ % 4u] = floatBitsToUint(m[q_ / uint(SGS)]);                                      \
  } while (false)
float cm_emu_half(uvec4 p, uint h) {
  const vec2 f = unpackHalf2x16(p[(h % 8u) / 2u]);
  return (h % 2u) == 0u ? f.x : f.y;
}
// Element (r, c) of an operand in halves: row-major (element + r stride) 8 + c, column-major the other way.
#define CM_EMU_AT(m, r, c) ((m).z != 0u ? ((m).x + (c) * (m).y) * 8u + (r) : ((m).x + (r) * (m).y) * 8u + (c))
#define CM_EMU_MAD_FUNCTION(AS, BS)                                                                \
  CM_ACC cm_emu_mad(uvec3 a, uvec3 b, CM_ACC c) {                                                   \
    for (uint t = 0u; t < uint(CM_M * CM_N / SGS); ++t) {                                           \
      const uint q = CM_LANE + uint(SGS) * t, r = q / uint(CM_N), n = q % uint(CM_N);               \
      float s = c[t];                                                                               \
      for (uint k = 0u; k < uint(CM_K); ++k) {                                                      \
        const uint ha = CM_EMU_AT(a, r, k), hb = CM_EMU_AT(b, k, n);                                 \
        s += cm_emu_half(AS[ha / 8u], ha) * cm_emu_half(BS[hb / 8u], hb);                           \
      }                                                                                             \
      c[t] = s;                                                                                     \
    }                                                                                               \
    return c;                                                                                       \
  }
#define CM_MAD(a, b, c) cm_emu_mad(a, b, c)
#define CM_SUBGROUP_ID (gl_LocalInvocationIndex / uint(SGS))
#define CM_LANE (gl_LocalInvocationIndex % uint(SGS))
#define CM_SUBGROUP_BARRIER() barrier()
#define CM_SUBGROUP_MEMORY_BARRIER_SHARED() memoryBarrierShared()
#else
#define CM_FILL(m, v) m = CM_ACC(v)
#define CM_SUBGROUP_ID gl_SubgroupID
#define CM_LANE gl_SubgroupInvocationID
#define CM_SUBGROUP_BARRIER() subgroupBarrier()
#define CM_SUBGROUP_MEMORY_BARRIER_SHARED() subgroupMemoryBarrierShared()
#endif
#if defined(KF_COOPMAT_EMU)
#elif defined(KF_COOPMAT_KHR) && defined(KF_COOPMAT_NV_AS_KHR)
#error "KF_COOPMAT_KHR and KF_COOPMAT_NV_AS_KHR are two compilers' forms of one kernel: define one"
#elif defined(KF_COOPMAT_KHR)
#define CM_KHR 1
#extension GL_KHR_cooperative_matrix : enable
#ifdef KF_COOPMAT_BF16
// bf16 operands as bf16 (GL_EXT_bfloat16, VK_KHR_shader_bfloat16): loads reinterpret the buffers' 16-bit
// words as bf16, so A and B are read as they are stored, with no conversion or scaling. glslang 16+ only
// (cmake/Shaders.cmake compiles these variants through slang's glslang).
#extension GL_EXT_bfloat16 : require
#define CM_AT bfloat16_t
#define CM_A coopmat<bfloat16_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA>
#define CM_B coopmat<bfloat16_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB>
#else
#define CM_AT float16_t
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
#define CM_ACC_TO_A(a, acc) for (int e_ = 0; e_ < 8; ++e_) a[e_] = CM_AT(acc[e_])
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
#define CM_ACC_TO_A(a, acc) for (int e_ = 0; e_ < 8; ++e_) a[e_] = float16_t(acc[e_])
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
#define CM_ACC_TO_A(a, acc) a = CM_A(acc)
#endif
