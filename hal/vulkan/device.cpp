// The Vulkan device: creation, buffers and transfers, pipelines, the command stream, and timers.
#include "hal/vulkan/device.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "hal/vulkan/coopmat.hpp"
#include "hal/vulkan/families.hpp"
#include "hal/vulkan/runtime_shader.hpp"
#include "hal/vulkan/spirv_table.hpp"

namespace kf::hal::vk {

namespace {
const std::unordered_map<std::string, const SpirvEntry*>& spirv_index() {
  static const auto index = [] {
    std::unordered_map<std::string, const SpirvEntry*> m;
    for (size_t i = 0; i < kSpirvTableSize; ++i) m[kSpirvTable[i].name] = &kSpirvTable[i];
    return m;
  }();
  return index;
}
}  // namespace

VkBuf::VkBuf(VulkanDevice& dev, size_t bytes) : dev_(dev) {
  size_ = bytes;
  VkBufferCreateInfo ci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  ci.size = bytes;
  ci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  ci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  KF_VK(vkCreateBuffer(dev.device(), &ci, nullptr, &buffer_));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev.device(), buffer_, &req);
  try {
    alloc_ = dev.allocator().allocate(req, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    KF_VK(vkBindBufferMemory(dev.device(), buffer_, alloc_.memory, alloc_.offset));
  } catch (const Error& e) {
    if (alloc_.memory) dev.allocator().free(alloc_);
    vkDestroyBuffer(dev.device(), buffer_, nullptr);
    // A buffer past maxMemoryAllocationSize is asked for anyway (drivers may give it: the limit only
    // promises what succeeds); where it fails, the message names the limit.
    const uint64_t most = dev.info().caps.max_allocation;
    if (e.code() == ErrorCode::OutOfMemory && most && req.size > most)
      throw Error(ErrorCode::OutOfMemory, std::string(e.what()) + " (a buffer of " + std::to_string(req.size) +
                                              " bytes, past the device's largest allocation, " +
                                              std::to_string(most) + " bytes)");
    throw;
  } catch (...) {
    if (alloc_.memory) dev.allocator().free(alloc_);
    vkDestroyBuffer(dev.device(), buffer_, nullptr);
    throw;
  }
}

VkBuf::VkBuf(VulkanDevice& dev, std::shared_ptr<Buffer> parent, size_t offset, size_t bytes)
    : dev_(dev), parent_(std::move(parent)) {
  const auto& p = static_cast<const VkBuf&>(*parent_);
  if (offset + bytes > p.size())
    throw Error(ErrorCode::Internal, "vulkan: a buffer view of " + std::to_string(bytes) + " bytes at " +
                                         std::to_string(offset) + " exceeds its buffer of " + std::to_string(p.size()));
  size_ = bytes;
  VkBufferCreateInfo ci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  ci.size = bytes;
  ci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  ci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  KF_VK(vkCreateBuffer(dev.device(), &ci, nullptr, &buffer_));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev.device(), buffer_, &req);
  const VkDeviceSize at = p.alloc_.offset + offset;
  if (at % req.alignment != 0 || !(req.memoryTypeBits & (1u << p.alloc_.type))) {
    vkDestroyBuffer(dev.device(), buffer_, nullptr);
    throw Error(ErrorCode::Internal, "vulkan: a buffer view at byte " + std::to_string(offset) +
                                         " breaks the device's buffer alignment (" + std::to_string(req.alignment) + ")");
  }
  if (const VkResult r = vkBindBufferMemory(dev.device(), buffer_, p.alloc_.memory, at); r != VK_SUCCESS) {
    vkDestroyBuffer(dev.device(), buffer_, nullptr);
    KF_VK(r);
  }
}

VkBuf::~VkBuf() {
  dev_.forget_buffer(buffer_);
  vkDestroyBuffer(dev_.device(), buffer_, nullptr);
  if (!parent_) dev_.allocator().free(alloc_);
}

VulkanDevice::VulkanDevice(std::shared_ptr<Instance> instance, VkPhysicalDevice pd, int index,
                           const DeviceOptions& o)
    : instance_(std::move(instance)), pd_(pd), info_(describe(pd, index)), options_(o), tuning_(o.tuning) {
  // A binding covers at most the device's range (record()); KF_TUNE max_binding lowers the limit the
  // core splits calls at, not this one.
  max_range_ = info_.caps.max_storage_range;
  if (o.tuning.max_binding && (!info_.caps.max_storage_range || o.tuning.max_binding < info_.caps.max_storage_range))
    info_.caps.max_storage_range = o.tuning.max_binding;
  std::fill(&variant_slots_[0][0][0], &variant_slots_[0][0][0] + sizeof(variant_slots_) / sizeof(int32_t), -1);
  std::fill(&simple_supported_[0][0], &simple_supported_[0][0] + sizeof(simple_supported_), int8_t(-1));
  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf.data());
  family_ = UINT32_MAX;
  for (uint32_t i = 0; i < nq; ++i)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      family_ = i;
      timestamp_mask_ = qf[i].timestampValidBits >= 64 ? ~0ull : ((1ull << qf[i].timestampValidBits) - 1);
      break;
    }
  if (family_ == UINT32_MAX) throw Error(ErrorCode::Unsupported, "vulkan: " + info_.name + " has no compute queue");

  const float prio = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;

  // A validation layer older than VK_KHR_cooperative_matrix (Debian 12's 1.3.239) reports its structures
  // and SPIR-V as errors: under it the KHR kernels are not offered, and nothing of the extension is queried.
  const uint32_t layer = instance_->validation_layer();
  const bool khr_layer_too_old = layer != 0 && layer < VK_MAKE_API_VERSION(0, 1, 3, 255);
  const bool khr_present = info_.caps.coopmat_khr && !khr_layer_too_old;
  // Features the kernels use, enabled only where present: f64 arithmetic; f16 arithmetic and the
  // Vulkan memory model for the cooperative-matrix (tensor core) kernels.
  VkPhysicalDeviceCooperativeMatrixFeaturesNV cm_have{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  VkPhysicalDeviceCooperativeMatrixFeaturesKHR cmk_have{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
  VkPhysicalDeviceVulkan12Features f12_have{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  if (info_.caps.coopmat_nv) f12_have.pNext = &cm_have;
  if (khr_present) {
    cmk_have.pNext = f12_have.pNext;
    f12_have.pNext = &cmk_have;
  }
  // The KHR kernels lay their workgroups out in subgroups of one size (SGS: 32, or 8 or 16 at Intel's
  // 8x16x16): a device whose default is another size (AMD's wave64, Intel's variable widths) runs them at
  // that size required where it allows it (Vulkan 1.3 subgroup size control, with full subgroups, for
  // compute; coopmat.hpp).
  VkPhysicalDeviceSubgroupSizeControlFeatures sc_have{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  VkPhysicalDeviceSubgroupSizeControlProperties sc_props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
  bool sc_api = false;
  if (khr_present) {
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &sc_props};
    vkGetPhysicalDeviceProperties2(pd, &p2);
    sc_api = p2.properties.apiVersion >= VK_API_VERSION_1_3;
    if (sc_api) {
      sc_have.pNext = f12_have.pNext;
      f12_have.pNext = &sc_have;
    }
  }
  // bf16 cooperative matrices (the bf16-native products): queried only with the KHR extension usable.
  VkPhysicalDeviceShaderBfloat16FeaturesKHR bf16_have{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR};
  if (khr_present && info_.caps.bfloat16) {
    bf16_have.pNext = f12_have.pNext;
    f12_have.pNext = &bf16_have;
  }
  VkPhysicalDeviceFeatures2 have{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f12_have};
  vkGetPhysicalDeviceFeatures2(pd, &have);
  VkPhysicalDeviceCooperativeMatrixFeaturesNV cm_on{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  VkPhysicalDeviceVulkan12Features f12_on{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceFeatures2 on{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f12_on};
  on.features.shaderFloat64 = have.features.shaderFloat64;
  f12_on.shaderFloat16 = f12_have.shaderFloat16;
  std::vector<const char*> exts;
  if (info_.caps.coopmat_nv && cm_have.cooperativeMatrix && f12_have.shaderFloat16 && f12_have.vulkanMemoryModel) {
    // Use the tensor-core kernel only for a shape it was written for: 16x16x16, f16 x f16 -> f32.
    uint32_t n = 0;
    vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &n, nullptr);
    std::vector<VkCooperativeMatrixPropertiesNV> shapes(n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
    vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &n, shapes.data());
    for (const auto& p : shapes)
      if (p.MSize == 16 && p.NSize == 16 && p.KSize == 16 && p.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
          p.BType == VK_COMPONENT_TYPE_FLOAT16_NV && p.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
          p.DType == VK_COMPONENT_TYPE_FLOAT32_NV && p.scope == VK_SCOPE_SUBGROUP_NV)
        coopmat_f16_ = info_.caps.subgroup_size == 32;
    if (coopmat_f16_) {
      // The memory model (which SPV_NV_cooperative_matrix requires, and the KHR kernels below) only with it:
      // enabling it changes the rules for every shader's atomics (they then need device scope too).
      f12_on.vulkanMemoryModel = VK_TRUE;
      f12_on.vulkanMemoryModelDeviceScope = f12_have.vulkanMemoryModelDeviceScope;
      cm_on.cooperativeMatrix = VK_TRUE;
      f12_on.pNext = &cm_on;
      exts.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    }
  }
  // The tensor-core kernels of the matrix products and of attention: NV, KHR (at a shape the device lists),
  // or none and why (coopmat.hpp); a forced path the device cannot run fails here, before the device exists.
  bool forced_missing = false;
  const bool khr_features = khr_present && cmk_have.cooperativeMatrix && f12_have.shaderFloat16 &&
                            f12_have.vulkanMemoryModel && coopmat_khr_in_compute(pd);
  SubgroupSizes sizes;
  sizes.control = sc_api && sc_have.subgroupSizeControl && sc_have.computeFullSubgroups &&
                  (sc_props.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT);
  sizes.min = sc_props.minSubgroupSize;
  sizes.max = sc_props.maxSubgroupSize;
  sizes.max_subgroups = sc_props.maxComputeWorkgroupSubgroups;
  const auto has = [this](const std::string& v) { return has_variant(v); };
  const auto refuse = [&](const char* knob, uint32_t v, const CoopmatChoice& c) {
    throw Error(ErrorCode::Unsupported, std::string("vulkan: KF_TUNE ") + knob + "=" + (v == 1 ? "nv" : "khr") + ": " +
                                            info_.name + " cannot run those kernels (" + c.why + ")");
  };
  const auto offer = [&](const char* nv_needs, const char* khr_needs) {
    CoopmatOffer o = coopmat_offer(info_.caps, coopmat_f16_, khr_features, sizes, nv_needs, khr_needs, has);
    if (info_.caps.coopmat_khr && khr_layer_too_old)
      o.khr_why = "the validation layer (spec " + std::to_string(VK_API_VERSION_MAJOR(layer)) + "." +
                  std::to_string(VK_API_VERSION_MINOR(layer)) + "." + std::to_string(VK_API_VERSION_PATCH(layer)) +
                  ") predates VK_KHR_cooperative_matrix and reports it as errors";
    return o;
  };
  coopmat_mm_ = choose_coopmat(offer("mm_coopmat_f16_c1", "mm_coopmat_khr_f16_c1"),
                               tuning_.coopmat, "coopmat", tuning_.coopmat_shape,
                               // KHR where both: on an H100 (driver 580) the KHR 16x16x16 products took
                               // 0.63-0.66x the NV kernels' time (linear, matmul 4096^3, f16 and bf16)
                               true, &forced_missing);
  if (forced_missing) refuse("coopmat", tuning_.coopmat, coopmat_mm_);
  coopmat_attn_ = choose_coopmat(offer("attn_cm_f16_d64", "attn_cm_khr_f16_d64"),
                                 tuning_.attn_coopmat, "attn_coopmat", 0,
                                 // KHR where both: on an H200 (driver 580) its QUAD forms took 0.75-0.79x
                                 // the NV forms' time in attention and 0.68-0.72x in its backward (B 4, H 32,
                                 // S 4096, D 128, f16 and bf16, causal and not)
                                 true, &forced_missing);
  if (forced_missing) refuse("attn_coopmat", tuning_.attn_coopmat, coopmat_attn_);
  info_.caps.coopmat_products = coopmat_mm_.describe();
  info_.caps.coopmat_attention = coopmat_attn_.describe();
  coopmat_bf16_ = choose_coopmat_bf16(info_.caps, coopmat_mm_,
                                      bf16_have.shaderBFloat16Type && bf16_have.shaderBFloat16CooperativeMatrix,
                                      tuning_.bf16_coopmat, has, &forced_missing);
  if (forced_missing)
    throw Error(ErrorCode::Unsupported, "vulkan: KF_TUNE bf16_coopmat=native: " + info_.name +
                                            " cannot run those kernels (" + coopmat_bf16_.why + ")");
  info_.caps.coopmat_bf16 = coopmat_bf16_.describe();
  VkPhysicalDeviceCooperativeMatrixFeaturesKHR cmk_on{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
  if (coopmat_mm_.path == CoopmatPath::khr || coopmat_attn_.path == CoopmatPath::khr) {
    f12_on.vulkanMemoryModel = VK_TRUE;
    f12_on.vulkanMemoryModelDeviceScope = f12_have.vulkanMemoryModelDeviceScope;
    cmk_on.cooperativeMatrix = VK_TRUE;
    cmk_on.pNext = f12_on.pNext;
    f12_on.pNext = &cmk_on;
    exts.push_back(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
  }
  VkPhysicalDeviceShaderBfloat16FeaturesKHR bf16_on{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR};
  if (coopmat_bf16_.native) {  // (the products on KHR: its extension and features were enabled above)
    bf16_on.shaderBFloat16Type = VK_TRUE;
    bf16_on.shaderBFloat16CooperativeMatrix = VK_TRUE;
    bf16_on.pNext = f12_on.pNext;
    f12_on.pNext = &bf16_on;
    exts.push_back(VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME);
  }
  VkPhysicalDeviceSubgroupSizeControlFeatures sc_on{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  // Some KHR kernel runs on subgroups other than the default (the offer checked the device allows it).
  const bool khr_mm = coopmat_mm_.path == CoopmatPath::khr;
  if (cmk_on.cooperativeMatrix &&
      (info_.caps.subgroup_size != 32 || (khr_mm && coopmat_mm_.subgroup != info_.caps.subgroup_size))) {
    khr_require_subgroup_ = true;
    sc_on.subgroupSizeControl = VK_TRUE;
    sc_on.computeFullSubgroups = VK_TRUE;
    sc_on.pNext = f12_on.pNext;
    f12_on.pNext = &sc_on;
  }
  // KF_PIPELINE_STATS=1 (a developer's tool): the driver's statistics of every pipeline created
  // (registers, shared memory, spills, ...) through VK_KHR_pipeline_executable_properties, on stderr.
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pe_on{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
  if (options_.pipeline_stats) {
    uint32_t n = 0;
    vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> all(n);
    vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, all.data());
    for (const auto& x : all)
      if (std::string(x.extensionName) == VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME) pipeline_stats_ = true;
    if (pipeline_stats_) {
      pe_on.pipelineExecutableInfo = VK_TRUE;
      pe_on.pNext = on.pNext;
      on.pNext = &pe_on;
      exts.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    } else {
      std::fprintf(stderr, "kf: KF_PIPELINE_STATS: %s lacks VK_KHR_pipeline_executable_properties\n", info_.name.c_str());
    }
  }
  // Exportable memory (external.cpp) where the device has it: the extension costs nothing unused.
  export_why_ = export_support(pd);
  if (export_why_.empty()) exts.push_back(VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME);
  timeline_why_ = f12_have.timelineSemaphore ? timeline_export_support(pd) : "the device lacks timeline semaphores";
  if (timeline_why_.empty()) {
    f12_on.timelineSemaphore = VK_TRUE;
    exts.push_back(VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
  }
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &on};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = static_cast<uint32_t>(exts.size());
  dci.ppEnabledExtensionNames = exts.data();
  KF_VK(vkCreateDevice(pd, &dci, nullptr, &device_));
  vkGetDeviceQueue(device_, family_, 0, &queue_);
  allocator_ = std::make_unique<Allocator>(pd, device_);
  if (info_.vendor == "NVIDIA" && options_.vk_cuda_context) {  // KF_VK_CUDA_CONTEXT=0: not held
    VkPhysicalDeviceIDProperties idp{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &idp};
    vkGetPhysicalDeviceProperties2(pd, &p2);
    uint8_t uuid[16];
    std::memcpy(uuid, idp.deviceUUID, 16);
    cuda_hold_ = std::make_unique<CudaContextHold>(uuid);
    cuda_context_held = cuda_hold_->held();
  }

  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = family_;
  KF_VK(vkCreateCommandPool(device_, &pci, nullptr, &cmd_pool_));
  VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cai.commandPool = cmd_pool_;
  cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cai.commandBufferCount = 1;
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  for (Batch& b : batches_) {
    KF_VK(vkAllocateCommandBuffers(device_, &cai, &b.cmd));
    KF_VK(vkCreateFence(device_, &fci, nullptr, &b.fence));
  }

  // One layout serves every kernel: kBindings storage buffers and 128 bytes of push constants (the guaranteed minimum).
  VkDescriptorSetLayoutBinding b[kBindings];
  for (uint32_t i = 0; i < kBindings; ++i)
    b[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dl.bindingCount = kBindings;
  dl.pBindings = b;
  KF_VK(vkCreateDescriptorSetLayout(device_, &dl, nullptr, &set_layout_));
  VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
  VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pl.setLayoutCount = 1;
  pl.pSetLayouts = &set_layout_;
  pl.pushConstantRangeCount = 1;
  pl.pPushConstantRanges = &pcr;
  KF_VK(vkCreatePipelineLayout(device_, &pl, nullptr, &pipe_layout_));
  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kBindings * kMaxBatch};
  VkDescriptorPoolCreateInfo dp{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dp.maxSets = kMaxBatch;
  dp.poolSizeCount = 1;
  dp.pPoolSizes = &ps;
  for (Batch& bt : batches_) KF_VK(vkCreateDescriptorPool(device_, &dp, nullptr, &bt.pool));
  VkDescriptorPoolSize cps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kBindings * kCachedSets};
  VkDescriptorPoolCreateInfo cdp{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  cdp.flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT;
  cdp.maxSets = kCachedSets;
  cdp.poolSizeCount = 1;
  cdp.pPoolSizes = &cps;
  KF_VK(vkCreateDescriptorPool(device_, &cdp, nullptr, &set_pool_));

  // The pipeline cache: read from disk when a previous run left one (the driver checks its header).
  std::vector<char> blob;
  if (const std::string path = cache_path(); !path.empty()) {
    std::ifstream f(path, std::ios::binary);
    if (f) blob.assign(std::istreambuf_iterator<char>(f), {});
  }
  VkPipelineCacheCreateInfo cci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  cci.initialDataSize = blob.size();
  cci.pInitialData = blob.empty() ? nullptr : blob.data();
  if (vkCreatePipelineCache(device_, &cci, nullptr, &pipe_cache_) != VK_SUCCESS) {
    cci.initialDataSize = 0;  // a stale or corrupt cache is dropped, not an error
    cci.pInitialData = nullptr;
    KF_VK(vkCreatePipelineCache(device_, &cci, nullptr, &pipe_cache_));
  }

  if (info_.caps.timestamps) {
    VkQueryPoolCreateInfo qp{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qp.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qp.queryCount = kMaxQueries;
    KF_VK(vkCreateQueryPool(device_, &qp, nullptr, &queries_));
  }

  VkBufferCreateInfo sci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  sci.size = kStagingBytes;
  sci.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  KF_VK(vkCreateBuffer(device_, &sci, nullptr, &staging_));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, staging_, &req);
  staging_mem_ = allocator_->allocate(req, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                                          VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  KF_VK(vkBindBufferMemory(device_, staging_, staging_mem_.memory, staging_mem_.offset));
}

VulkanDevice::~VulkanDevice() {
  // The work still running (after a wait that timed out) gets one more bounded wait, at least
  // kCloseWait_s: a context whose short time-out cut a long kernel short still closes cleanly once it ends.
  bool idle = true;
  try {
    flush();
  } catch (const Error&) {
  }
  const double bound = std::max(options_.timeout_s, kCloseWait_s);
  for (Batch& b : batches_) {
    if (!b.pending) continue;
    const VkResult r = vkWaitForFences(device_, 1, &b.fence, VK_TRUE, static_cast<uint64_t>(bound * 1e9));
    idle &= r != VK_TIMEOUT;  // a lost device (an error) runs nothing more: its objects are destroyed below
  }
  if (!idle) {
    // Still running: destroying what it uses would crash the process, waiting might never end. Its device,
    // memory and buffers are left to the process instead (the driver reclaims them at exit), kept reachable
    // so that leak checkers do not report them.
    static auto* abandoned = new std::vector<std::shared_ptr<void>>;
    static std::mutex abandoned_mu;
    std::lock_guard<std::mutex> lock(abandoned_mu);
    for (Batch& b : batches_) {
      for (auto& buf : b.retained) abandoned->push_back(std::move(buf));
      for (auto& g : b.graphs) abandoned->push_back(std::move(g));
    }
    for (auto& w : workspace_) abandoned->push_back(std::move(w));
    abandoned->push_back(std::move(rope_.table));
    abandoned->push_back(std::shared_ptr<Allocator>(std::move(allocator_)));
    abandoned->push_back(std::shared_ptr<CudaContextHold>(std::move(cuda_hold_)));
    abandoned->push_back(std::move(instance_));
    return;
  }
  vkDeviceWaitIdle(device_);
  destroy_retired();
  // Buffers of this device, freed before the allocator and the device go (the retained ones are still
  // held when the last wait timed out: freeing them after the allocator crashed the process).
  for (Batch& b : batches_) {
    b.retained.clear();
    b.graphs.clear();
  }
  for (auto& w : workspace_) w.reset();
  rope_.table.reset();
  // Save the pipeline cache: write a temporary file, then rename it over the old one, so that two
  // processes sharing the folder never see a half-written cache.
  if (const std::string path = cache_path(); !path.empty() && pipe_cache_) {
    size_t n = 0;
    if (vkGetPipelineCacheData(device_, pipe_cache_, &n, nullptr) == VK_SUCCESS && n > 0) {
      std::vector<char> data(n);
      if (vkGetPipelineCacheData(device_, pipe_cache_, &n, data.data()) == VK_SUCCESS) {
        std::error_code ec;
        std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
        // Unique per context too: two contexts of one process may close at once on separate threads.
        static std::atomic<unsigned> seq{0};
        const std::string tmp = path + "." + std::to_string(::getpid()) + "." + std::to_string(seq++) + ".tmp";
        std::ofstream f(tmp, std::ios::binary);
        if (f.write(data.data(), static_cast<std::streamsize>(n)) && (f.close(), true))
          std::filesystem::rename(tmp, path, ec);
        if (ec) std::filesystem::remove(tmp, ec);
      }
    }
  }
  for (auto& [k, p] : pipelines_) vkDestroyPipeline(device_, p, nullptr);
  for (auto& [k, m] : modules_) vkDestroyShaderModule(device_, m, nullptr);
  if (pipe_cache_) vkDestroyPipelineCache(device_, pipe_cache_, nullptr);
  if (queries_) vkDestroyQueryPool(device_, queries_, nullptr);
  vkDestroyBuffer(device_, staging_, nullptr);
  allocator_->free(staging_mem_);
  vkDestroyDescriptorPool(device_, set_pool_, nullptr);
  for (Batch& b : batches_) {
    if (b.pool) vkDestroyDescriptorPool(device_, b.pool, nullptr);
    vkDestroyFence(device_, b.fence, nullptr);
  }
  vkDestroyPipelineLayout(device_, pipe_layout_, nullptr);
  vkDestroyDescriptorSetLayout(device_, set_layout_, nullptr);
  vkDestroyCommandPool(device_, cmd_pool_, nullptr);
  allocator_.reset();
  vkDestroyDevice(device_, nullptr);
}

std::string VulkanDevice::cache_path() const {
  if (options_.pipeline_cache_dir.empty()) return {};
  VkPhysicalDeviceProperties p;
  vkGetPhysicalDeviceProperties(pd_, &p);
  std::ostringstream s;
  s << options_.pipeline_cache_dir << "/vulkan-" << std::hex << p.vendorID << "-" << p.deviceID << "-"
    << p.driverVersion << "-";
  for (uint8_t c : p.pipelineCacheUUID) s << (c >> 4) << (c & 15);
  s << ".bin";
  return s.str();
}

std::shared_ptr<Buffer> VulkanDevice::allocate(size_t bytes) { return std::make_shared<VkBuf>(*this, bytes); }

void VulkanDevice::begin() {
  if (recording_) return;
  Batch& b = batches_[open_];
  if (b.pending) wait_batch(b);  // the oldest batch of the ring
  after_submitted_ = false;
  for (const Batch& o : batches_) after_submitted_ |= o.pending;
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  KF_VK(vkBeginCommandBuffer(b.cmd, &bi));
  cmd_ = b.cmd;
  recording_ = true;
  commands_ = 0;
  forget_bound();
  if (queries_ && !queries_reset_) {
    vkCmdResetQueryPool(cmd_, queries_, 0, kMaxQueries);
    queries_reset_ = true;
  }
}

void VulkanDevice::barrier() {
  // The first command of a batch needs one too while an earlier batch may still run: a barrier orders
  // against everything submitted before it on the queue.
  if (commands_ == 0 && !after_submitted_) return;
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                     VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  vkCmdPipelineBarrier(cmd_, st, st, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

void VulkanDevice::flush() {
  if (!recording_ || capture_) return;
  Batch& b = batches_[open_];
  recording_ = false;
  KF_VK(vkEndCommandBuffer(b.cmd));
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &b.cmd;
  submit(si, b.fence);
  b.pending = true;
  b.commands = commands_;
  commands_ = 0;
  open_ = (open_ + 1) % batches_.size();
}

void VulkanDevice::submit_and_wait() {
  not_capturing("a wait for the device");
  flush();
  finish_pending();
}

// Waits (bounded by KF_TIMEOUT_S) for every submitted batch, oldest first, recycling each. After a wait
// that timed out a batch may still run: nothing of it is reused or freed until its fence signals (on
// lavapipe, recording into a still-running command buffer after a timeout crashed the process). The core
// then refuses further work on the context (docs/architecture.md, "Faults"), and closing waits for the
// batch, bounded.
void VulkanDevice::finish_pending() {
  for (size_t i = 0; i < batches_.size(); ++i) {
    Batch& b = batches_[(open_ + i) % batches_.size()];  // open_ (unless recording) is the oldest
    if (b.pending) wait_batch(b);
  }
  destroy_retired();
}

void VulkanDevice::wait_batch(Batch& b) {
  const uint64_t ns = static_cast<uint64_t>(std::max(0.001, options_.timeout_s) * 1e9);
  const VkResult r = vkWaitForFences(device_, 1, &b.fence, VK_TRUE, ns);
  if (r == VK_TIMEOUT)
    throw Error(ErrorCode::Timeout, "vulkan: the device did not finish " + std::to_string(b.commands) +
                                        " recorded commands within " + std::to_string(options_.timeout_s) +
                                        " s (ContextOptions::timeout_s, KF_TIMEOUT_S)");
  check(r, "vkWaitForFences");
  b.pending = false;
  KF_VK(vkResetFences(device_, 1, &b.fence));
  KF_VK(vkResetCommandBuffer(b.cmd, 0));
  KF_VK(vkResetDescriptorPool(device_, b.pool, 0));
  b.retained.clear();
  b.graphs.clear();
}

void VulkanDevice::synchronize() { submit_and_wait(); }

void VulkanDevice::copy_through_staging(VkBuffer buf, void* host, size_t bytes, bool to_device) {
  char* h = static_cast<char*>(host);
  for (size_t done = 0; done < bytes; done += kStagingBytes) {
    const size_t n = std::min(kStagingBytes, bytes - done);
    if (to_device) std::memcpy(staging_mem_.mapped, h + done, n);
    begin();
    VkBufferCopy region{to_device ? 0 : done, to_device ? done : 0, n};
    if (to_device) vkCmdCopyBuffer(cmd_, staging_, buf, 1, &region);
    else vkCmdCopyBuffer(cmd_, buf, staging_, 1, &region);
    ++commands_;
    submit_and_wait();
    if (!to_device) std::memcpy(h + done, staging_mem_.mapped, n);
  }
}

void VulkanDevice::upload(Buffer& dst, const void* src, size_t bytes) {
  not_capturing("an upload");
  submit_and_wait();  // earlier dispatches may still read or write dst
  auto& b = static_cast<VkBuf&>(dst);
  copy_through_staging(b.handle(), const_cast<void*>(src), bytes, true);
}

void VulkanDevice::download(Buffer& src, void* dst, size_t bytes) {
  not_capturing("a download");
  submit_and_wait();
  copy_through_staging(static_cast<VkBuf&>(src).handle(), dst, bytes, false);
}

void VulkanDevice::fill_bytes(Buffer& dst, uint8_t pattern, size_t bytes) {
  not_capturing("a fill from the host");
  begin();
  barrier();
  const uint32_t word = pattern * 0x01010101u;
  vkCmdFillBuffer(cmd_, static_cast<VkBuf&>(dst).handle(), 0, (bytes + 3) / 4 * 4, word);
  ++commands_;
  submit_and_wait();  // dst is not retained by the batch: finish before its owner may free it
}

std::shared_ptr<Buffer> VulkanDevice::workspace(size_t bytes, int slot) {
  // One buffer per slot reused by every op that needs scratch space: the stream orders each dispatch
  // after everything recorded before it, so consecutive ops never overlap on it. A larger request
  // replaces it; the open batch keeps the old one alive until it completes. (Temporaries allocated per
  // call instead stay alive until their batch completes: 30 bf16 attention calls over 16k tokens
  // recorded in one batch held 30 GiB of K and V copies and ran out of memory on an H100.)
  bytes = std::max<size_t>(bytes, 16);
  std::shared_ptr<Buffer>& w = workspace_.at(static_cast<size_t>(slot));
  if (!w || w->size() < bytes) w = allocate(std::max<size_t>(bytes, 1 << 20));
  return w;
}

double VulkanDevice::record_matrix_peak(std::string* what) { return vk::record_matrix_peak(*this, what); }

void VulkanDevice::release_scratch() {
  submit_and_wait();
  for (auto& w : workspace_) w.reset();
  rope_ = {};
}

bool VulkanDevice::record_long_kernel(uint64_t iterations) {
  if (!has_variant("long_kernel")) return false;
  // Workgroups of one invocation, each 65,535 steps at most (long_kernel.comp), over x and y.
  struct {
    uint32_t steps;
  } pc{static_cast<uint32_t>(std::clamp<uint64_t>(iterations, 1, 65535))};
  const uint64_t groups = std::min<uint64_t>((iterations + pc.steps - 1) / pc.steps, 65535ull * 65535);
  Launch l;
  l.variant = "long_kernel";
  l.bindings[0] = workspace(16);
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  l.groups = static_cast<uint32_t>(std::min<uint64_t>(groups, 65535));
  l.groups_y = static_cast<uint32_t>((groups + l.groups - 1) / l.groups);
  record(l);
  return true;
}

bool VulkanDevice::has_variant(const std::string& name) const { return spirv_index().count(name) != 0; }

std::string VulkanDevice::runtime_variant(const std::string& base, const std::string& key, const std::string& what,
                                          const std::function<Defines()>& extra) {
  const std::string name = base + "#" + key;
  if (runtime_spirv_.count(name)) return name;
  auto it = spirv_index().find(base);
  if (it == spirv_index().end()) throw Error(ErrorCode::Internal, what + ": no SPIR-V variant '" + base + "' in this build");
  // The base variant's definitions (as the build passed them to glslc), then the extra ones.
  Defines defines = parse_defines(it->second->defines);
  const Defines more = extra();
  defines.insert(defines.end(), more.begin(), more.end());
  runtime_spirv_[name] = compile_shader(it->second->source, defines, what);  // throws before anything is kept
  return name;
}

uint32_t VulkanDevice::variant_id(const std::string& name) {
  if (auto it = variant_ids_.find(name); it != variant_ids_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(variant_names_.size());
  variant_names_.push_back(name);
  variant_ids_.emplace(name, id);
  return id;
}

VkPipeline VulkanDevice::pipeline(uint32_t variant_index, const SpecList& spec) {
  PipeKey pk{variant_index, spec};
  if (auto it = pipelines_.find(pk); it != pipelines_.end()) return it->second;
  const std::string variant = variant_names_[variant_index];  // a new pipeline: names are fine here
  std::string key = variant;
  for (uint32_t v : spec) key += ":" + std::to_string(v);
  VkShaderModule& mod = modules_[variant];
  if (!mod) {
    VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    if (auto rt = runtime_spirv_.find(variant); rt != runtime_spirv_.end()) {
      mi.codeSize = rt->second.size() * 4;
      mi.pCode = rt->second.data();
    } else {
      auto it = spirv_index().find(variant);
      if (it == spirv_index().end()) {
        modules_.erase(variant);
        throw Error(ErrorCode::Internal, "vulkan: no SPIR-V variant '" + variant + "' in this build");
      }
      mi.codeSize = it->second->words * 4;
      mi.pCode = it->second->code;
    }
    KF_VK(vkCreateShaderModule(device_, &mi, nullptr, &mod));
  }
  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * 4u, 4};
  VkSpecializationInfo si{static_cast<uint32_t>(entries.size()), entries.data(), spec.size() * 4, spec.data()};
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = mod;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = &si;
  ci.layout = pipe_layout_;
  if (pipeline_stats_) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  // The KHR cooperative-matrix kernels on a device whose default subgroup is not the size they are written
  // for (32, or the "_sg<N>" of their name; coopmat.hpp).
  VkPipelineShaderStageRequiredSubgroupSizeCreateInfo sgs{VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
  if (const uint32_t need = khr_require_subgroup_ ? khr_variant_subgroup(variant) : 0;
      need != 0 && need != info_.caps.subgroup_size) {
    sgs.requiredSubgroupSize = need;
    ci.stage.pNext = &sgs;
    ci.stage.flags |= VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
  }
  VkPipeline p;
  KF_VK(vkCreateComputePipelines(device_, pipe_cache_, 1, &ci, nullptr, &p));
  pipelines_[pk] = p;
  ++pipelines_created_;
  if (pipeline_stats_) print_pipeline_stats(p, key);
  return p;
}

void VulkanDevice::record_copy(const std::shared_ptr<Buffer>& src, const std::shared_ptr<Buffer>& dst, size_t bytes,
                               size_t src_offset, size_t dst_offset) {
  if (commands_ >= kMaxBatch && !capture_) flush();
  begin();
  barrier();
  const VkBufferCopy region{src_offset, dst_offset, bytes};
  vkCmdCopyBuffer(cmd_, static_cast<VkBuf*>(src.get())->handle(), static_cast<VkBuf*>(dst.get())->handle(), 1, &region);
  retained().push_back(src);
  retained().push_back(dst);
  ++commands_;
}

void VulkanDevice::record_fill(const std::shared_ptr<Buffer>& dst, uint32_t word, size_t bytes, size_t offset) {
  if (commands_ >= kMaxBatch && !capture_) flush();
  begin();
  barrier();
  vkCmdFillBuffer(cmd_, static_cast<VkBuf*>(dst.get())->handle(), offset, bytes, word);
  retained().push_back(dst);
  ++commands_;
}

void VulkanDevice::record(const Launch& l) {
  // may throw before anything is recorded
  VkPipeline p = pipeline(l.variant_id >= 0 ? static_cast<uint32_t>(l.variant_id) : variant_id(l.variant), l.spec);
  if (commands_ >= kMaxBatch && !capture_) flush();
  begin();
  auto& keep = retained();
  VkDescriptorBufferInfo bi[kBindings];
  VkWriteDescriptorSet w[kBindings];
  bool plain = true;  // every binding the whole buffer: the set may come from the cache
  for (uint32_t i = 0; i < kBindings; ++i) {
    // Unused bindings repeat binding 0: every binding of the layout needs a valid buffer.
    const auto& buf = l.bindings[i] ? l.bindings[i] : l.bindings[0];
    const uint64_t off = l.bindings[i] ? l.offsets[i] : l.offsets[0];
    bi[i] = {static_cast<VkBuf*>(buf.get())->handle(), off, VK_WHOLE_SIZE};
    // A part of a split call (an offset), or a buffer larger than the device's binding range: bound from
    // its offset over what the range allows (the part's tensor lies within it).
    if (off != 0 || buf->size() > max_range_) {
      bi[i].range = std::min<uint64_t>(buf->size() - off, max_range_);
      plain = false;
    }
    w[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w[i].dstBinding = i;
    w[i].descriptorCount = 1;
    w[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w[i].pBufferInfo = &bi[i];
    if (l.bindings[i]) keep.push_back(l.bindings[i]);
  }
  // The set of these buffers, from the cache (descriptors.cpp), else one written for this batch alone.
  // (VK_KHR_push_descriptor instead cost more on an H100, driver 580: 3.5-3.9 us recorded per small op
  // against 3.4-3.6, and 2.67 us of device time per dependent dispatch against 2.39; on lavapipe it
  // recorded slower too.)
  // The cache's key names buffers only: a set with offsets or bounded ranges is written for its batch alone.
  VkDescriptorSet set = VK_NULL_HANDLE;
  if (plain) {
    SetKey key;
    for (uint32_t i = 0; i < kBindings; ++i) key[i] = bi[i].buffer;
    set = cached_set(key, w);
  }
  if (!set) {
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = descriptor_pool();
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &set_layout_;
    KF_VK(vkAllocateDescriptorSets(device_, &ai, &set));
    for (auto& x : w) x.dstSet = set;
    vkUpdateDescriptorSets(device_, kBindings, w, 0, nullptr);
  }
  barrier();
  if (p != bound_) {
    vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p);
    bound_ = p;
  }
  if (set != bound_set_) {
    vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, pipe_layout_, 0, 1, &set, 0, nullptr);
    bound_set_ = set;
  }
  if (l.push_bytes && (l.push_bytes != pushed_bytes_ || std::memcmp(l.push, pushed_, l.push_bytes) != 0)) {
    vkCmdPushConstants(cmd_, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, l.push_bytes, l.push);
    if (l.push_bytes <= sizeof(pushed_)) {
      std::memcpy(pushed_, l.push, l.push_bytes);
      pushed_bytes_ = l.push_bytes;
    } else {
      pushed_bytes_ = 0;
    }
  }
  vkCmdDispatch(cmd_, l.groups, l.groups_y, l.groups_z);
  ++commands_;
}

uint32_t VulkanDevice::timestamp() {
  not_capturing("a timestamp");
  if (!queries_) throw Error(ErrorCode::Unsupported, "vulkan: " + info_.name + " has no compute timestamps");
  if (next_query_ >= kMaxQueries)
    throw Error(ErrorCode::InvalidArgument, "vulkan: more than 8192 timestamps since reset_timestamps()");
  begin();
  vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, next_query_);
  return next_query_++;
}

double VulkanDevice::elapsed_ms(uint32_t b, uint32_t e) {
  submit_and_wait();
  if (b >= next_query_ || e >= next_query_)
    throw Error(ErrorCode::InvalidArgument, "vulkan: timestamp index out of range");
  uint64_t t[2];
  KF_VK(vkGetQueryPoolResults(device_, queries_, b, 1, 8, &t[0], 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  KF_VK(vkGetQueryPoolResults(device_, queries_, e, 1, 8, &t[1], 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  return double((t[1] - t[0]) & timestamp_mask_) * info_.caps.timestamp_period_ns * 1e-6;
}

void VulkanDevice::reset_timestamps() {
  not_capturing("a timestamp reset");
  if (!queries_) return;
  begin();
  vkCmdResetQueryPool(cmd_, queries_, 0, kMaxQueries);
  next_query_ = 0;
}

void VulkanDevice::print_pipeline_stats(VkPipeline p, const std::string& key) {
  VkPipelineInfoKHR pi{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  pi.pipeline = p;
  uint32_t ne = 0;
  if (vkGetPipelineExecutablePropertiesKHR(device_, &pi, &ne, nullptr) != VK_SUCCESS) return;
  for (uint32_t e = 0; e < ne; ++e) {
    VkPipelineExecutableInfoKHR ei{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    ei.pipeline = p;
    ei.executableIndex = e;
    uint32_t ns = 0;
    if (vkGetPipelineExecutableStatisticsKHR(device_, &ei, &ns, nullptr) != VK_SUCCESS) continue;
    std::vector<VkPipelineExecutableStatisticKHR> st(ns, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    if (vkGetPipelineExecutableStatisticsKHR(device_, &ei, &ns, st.data()) != VK_SUCCESS) continue;
    std::string line = "kf pipeline-stats " + key + ":";
    for (const auto& x : st) {
      line += std::string(" ") + x.name + "=";
      switch (x.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: line += x.value.b32 ? "true" : "false"; break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: line += std::to_string(x.value.i64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: line += std::to_string(x.value.u64); break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: line += std::to_string(x.value.f64); break;
        default: line += "?";
      }
      line += ";";
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

}  // namespace kf::hal::vk
