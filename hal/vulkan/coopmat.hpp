// Cooperative matrices (tensor cores) on Vulkan: the shapes a device lists through VK_KHR_cooperative_matrix,
// and which extension the matrix products' kernels (mm_coopmat.comp) take on a device: NV, KHR at a
// fragment shape kf has variants for, or none (the portable kernels), with the reason.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "hal/vulkan/vk_common.hpp"

// Debian 12's Vulkan headers (1.3.239) predate VK_KHR_cooperative_matrix: its structures as the registry
// defines them (the component types and scopes have the values of the NV extension's).
#ifndef VK_KHR_cooperative_matrix
#define VK_KHR_cooperative_matrix 1
#define VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME "VK_KHR_cooperative_matrix"
constexpr VkStructureType VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR = VkStructureType(1000506000);
constexpr VkStructureType VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR = VkStructureType(1000506001);
constexpr VkStructureType VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR = VkStructureType(1000506002);
typedef uint32_t VkComponentTypeKHR;  // VkComponentTypeNV's values, and VK_COMPONENT_TYPE_BFLOAT16_KHR
constexpr VkComponentTypeKHR VK_COMPONENT_TYPE_BFLOAT16_KHR = 1000141000;
typedef uint32_t VkScopeKHR;  // VkScopeNV's values
struct VkCooperativeMatrixPropertiesKHR {
  VkStructureType sType;
  void* pNext;
  uint32_t MSize, NSize, KSize;
  VkComponentTypeKHR AType, BType, CType, ResultType;
  VkBool32 saturatingAccumulation;
  VkScopeKHR scope;
};
struct VkPhysicalDeviceCooperativeMatrixFeaturesKHR {
  VkStructureType sType;
  void* pNext;
  VkBool32 cooperativeMatrix;
  VkBool32 cooperativeMatrixRobustBufferAccess;
};
struct VkPhysicalDeviceCooperativeMatrixPropertiesKHR {
  VkStructureType sType;
  void* pNext;
  VkShaderStageFlags cooperativeMatrixSupportedStages;
};
typedef VkResult(VKAPI_PTR* PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)(VkPhysicalDevice, uint32_t*,
                                                                                    VkCooperativeMatrixPropertiesKHR*);
#endif

// Debian 12's headers also predate VK_KHR_shader_bfloat16 (bf16 in shaders and bf16 cooperative matrices):
// its feature structure as the registry defines it.
#ifndef VK_KHR_shader_bfloat16
#define VK_KHR_shader_bfloat16 1
#define VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME "VK_KHR_shader_bfloat16"
constexpr VkStructureType VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR = VkStructureType(1000141000);
struct VkPhysicalDeviceShaderBfloat16FeaturesKHR {
  VkStructureType sType;
  void* pNext;
  VkBool32 shaderBFloat16Type;
  VkBool32 shaderBFloat16DotProduct;
  VkBool32 shaderBFloat16CooperativeMatrix;
};
#endif

namespace kf::hal::vk {

// The shapes vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR lists (the instance loaded by volk).
std::vector<CoopmatShape> query_coopmat_khr(VkPhysicalDevice pd);
// Whether the device's KHR cooperative matrices work in compute shaders (cooperativeMatrixSupportedStages).
bool coopmat_khr_in_compute(VkPhysicalDevice pd);

enum class CoopmatPath : uint8_t { portable, nv, khr };

// The matrix products' choice on a device (VulkanDevice::coopmat_mm).
struct CoopmatChoice {
  CoopmatPath path = CoopmatPath::portable;
  std::string shape;      // khr: one of kKhrShapes
  uint32_t subgroup = 32;  // khr: the subgroup size its kernels run on (8 or 16 at 8x16x16)
  std::string why;        // portable: why not the tensor cores
  // mm_coopmat.comp's variant for an NV name ("mm_coopmat_<dtype>_<tile>"): itself, or the KHR one
  // ("mm_coopmat_khr_<dtype>_<tile>", "_<shape>" after it but at 16x16x16, then "_sg<subgroup>" but on 32).
  std::string variant(std::string nv_name) const;
  std::string label() const;  // "coopmat-nv", "coopmat-khr-16x16x16", "coopmat-khr-8x16x16-sg16"
  // Caps::coopmat_products: "nv", "khr 16x16x16", "khr 8x16x16 on subgroups of 16", "none: <why>"
  std::string describe() const;
};

// The subgroup sizes a compute pipeline can be made to run on (Vulkan 1.3 subgroup size control: a required
// size, with full subgroups), the products' KHR kernels being written for one size each (SGS).
struct SubgroupSizes {
  bool control = false;        // subgroupSizeControl, computeFullSubgroups, compute in requiredSubgroupSizeStages
  uint32_t min = 0, max = 0;   // minSubgroupSize, maxSubgroupSize
  uint32_t max_subgroups = 0;  // maxComputeWorkgroupSubgroups
  // Whether a pipeline may require s: within [min, max], with the products' largest workgroups
  // (kKhrMaxInvocations) in at most max_subgroups subgroups of s.
  bool can_require(uint32_t s) const;
};
// The products' largest KHR workgroup (invocations: the 16-subgroup tiles on 32, c13 at 8x16x16).
constexpr uint32_t kKhrMaxInvocations = 512;
// The shared memory of the largest KHR product variant on subgroups of 8 (tile c13 at 8x16x16).
constexpr uint32_t kKhrSg8SharedBytes = 53248;

// The subgroup size a variant's pipeline runs on: 0 for a variant that is not a KHR cooperative-matrix
// kernel, N for one named "_sg<N>" (its base name, or a run-time variant of it: "<base>#<key>"), else 32.
uint32_t khr_variant_subgroup(const std::string& variant);

// What the device offers the products, found before the device is created.
struct CoopmatOffer {
  bool nv = false;             // NV 16x16x16 f16 -> f32 with its features, subgroups of 32, variants built
  std::string nv_why;          // why not
  struct KhrShape {
    std::string shape;         // one of kKhrShapes
    uint32_t subgroup = 32;    // the size its kernels run on
  };
  std::vector<KhrShape> khr_shapes;  // KHR f16 shapes kf has variants for, in the order of preference
  std::string khr_why;         // why none
};
// nv_usable: the NV 16x16x16 f16 -> f32 subgroup shape with its features, on subgroups of 32 (the device's
// coopmat_f16); khr_features: KHR's cooperativeMatrix (in compute), shaderFloat16, vulkanMemoryModel; sizes:
// what compute pipelines may require. The shapes of 16 rows run on subgroups of 32, the device's default
// (Caps::subgroup_size) or required; 8x16x16 on 8 or 16 (the first the device can require), always
// required: the kernels lay their workgroups out in subgroups of that size. nv_needs / khr_needs: a
// variant the family needs on each path (KHR: "_<shape>" appended but at 16x16x16, then "_sg<size>" but
// on 32).
CoopmatOffer coopmat_offer(const Caps& caps, bool nv_usable, bool khr_features, const SubgroupSizes& sizes,
                           const std::string& nv_needs, const std::string& khr_needs,
                           const std::function<bool(const std::string&)>& has_variant);
// coopmat: Tuning::coopmat or attn_coopmat (0 auto, 1 nv, 2 khr, 3 portable), knob its name; shape:
// Tuning::coopmat_shape (0 auto, else kKhrShapes[shape - 1]). A forced path the offer lacks comes back
// portable, forced_missing set. Automatic: prefer_khr picks KHR over NV where the device offers both.
CoopmatChoice choose_coopmat(const CoopmatOffer& offer, uint32_t coopmat, const char* knob, uint32_t shape,
                             bool prefer_khr, bool* forced_missing);

// The bf16 products' choice on a device (VulkanDevice::coopmat_bf16, KF_TUNE bf16_coopmat): native runs
// mm_coopmat_khr_bf16n_<tile> (bf16 x bf16 -> f32 at 16x16x16, A and B read as stored); otherwise bf16
// products take the f16 kernels on operands scaled per row (bf16_rows_to_f16.comp), where they have tensor
// cores at all. Automatic: native wherever it can run (on an H200 it was 5-13 % faster than scaled, at
// the f16 kernels' speed, and reads the operands as stored; docs/performance.md).
struct Bf16Choice {
  bool native = false;
  std::string why;  // not native: why
  std::string describe() const;  // Caps::coopmat_bf16: "native" or "scaled: <why>"
  // The native variant of an f16 product variant "mm_coopmat_f16_<tile>": "mm_coopmat_khr_bf16n_<tile>"
  // (16x16x16 whatever shape the f16 products take, so labelled kLabel).
  static std::string variant(const std::string& f16_variant);
  static constexpr const char* kLabel = "coopmat-khr-16x16x16";
};
// products: the products' choice (native needs the KHR path); features: VK_KHR_shader_bfloat16's
// shaderBFloat16Type and shaderBFloat16CooperativeMatrix, both on; knob: Tuning::bf16_coopmat (0 auto,
// 1 native, 2 scaled); has_variant: whether the build has a variant. native forced where it cannot run
// comes back not native, forced_missing set.
Bf16Choice choose_coopmat_bf16(const Caps& caps, const CoopmatChoice& products, bool features, uint32_t knob,
                               const std::function<bool(const std::string&)>& has_variant, bool* forced_missing);
// Whether the device lists the bf16 x bf16 -> f32 16x16x16 subgroup shape the native variants use.
bool lists_bf16_16x16x16(const Caps& caps);

// What coopmat_layout.comp measured (v: 32 invocations x 33 floats for a 16 x 16 f32 accumulator, then
// the same for an f16 A operand: each invocation's element count, rows, columns), as the attention
// kernels' QUAD forms take it: their QLAYOUT code where the accumulator has the m16n8k16 quad layout, and
// for KHR (khr) also the A operand holds element i at the same row and column, else -1.
int64_t quad_layout_code(const std::vector<float>& v, bool khr);

// The KHR f16 x f16 -> f32 fragment shapes mm_coopmat.comp has variants for (variants.cmake), in the order
// of preference: the shapes of 16 rows on subgroups of 32 first.
constexpr size_t kKhrShapeCount = 4;
extern const char* const kKhrShapes[kKhrShapeCount];

}  // namespace kf::hal::vk
