// The KHR form of a run-time variant: Debian 12's glslang (the run-time compiler, runtime_shader.hpp)
// predates GL_KHR_cooperative_matrix, so a KHR kernel compiled at run time is compiled in coopmat.glsl's
// KF_COOPMAT_NV_AS_KHR form (SPV_NV_cooperative_matrix, each matrix's KHR use marked by its scope) and its
// module rewritten here to SPV_KHR_cooperative_matrix. Plain C++ over the words: no SPIRV-Tools that
// knows the KHR extension is needed at run time. The module keeps its SPIR-V version (shaderc's for Vulkan
// 1.2: 1.5, as the build's KHR modules): SPV_KHR_cooperative_matrix requires SPIR-V 1.3 and, in shaders,
// the Vulkan memory model, which the NV extension already required.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kf::hal::vk {

// The scopes that mark a KF_COOPMAT_NV_AS_KHR matrix's use (SPIR-V Scope values; coopmat.glsl).
constexpr uint32_t kUseMarkA = 2;    // Workgroup: MatrixA
constexpr uint32_t kUseMarkB = 1;    // Device: MatrixB
constexpr uint32_t kUseMarkAcc = 5;  // QueueFamily: MatrixAccumulator

// Rewrites `nv` (a module of the KF_COOPMAT_NV_AS_KHR form) into the KHR form:
//   capability CooperativeMatrixNV -> CooperativeMatrixKHR, extension SPV_NV_ -> SPV_KHR_cooperative_matrix;
//   OpTypeCooperativeMatrixNV (component, marker scope, rows, cols) -> OpTypeCooperativeMatrixKHR
//     (component, Subgroup, rows, cols, use from the marker);
//   OpCooperativeMatrixLoadNV / StoreNV (stride, column-major bool, [memory access]) -> the KHR ones
//     (layout RowMajor / ColumnMajor, stride, [memory operands]);
//   OpCooperativeMatrixMulAddNV, OpCooperativeMatrixLengthNV -> the KHR ones (same operands).
// The constants it needs (Subgroup and the uses and layouts, 32-bit unsigned) are those of the module
// declared before its first matrix type, or new ones right after its OpTypeInt 32 0 (the bound grows).
// Throws kf::Error Internal, naming `what` and the instruction, for what it cannot map: a layout that is
// not a boolean constant, a matrix type whose scope is no marker, a module without 32-bit unsigned ints,
// a malformed module.
std::vector<uint32_t> rewrite_coopmat_nv_to_khr(const std::vector<uint32_t>& nv, const std::string& what);

}  // namespace kf::hal::vk
