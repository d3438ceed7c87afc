// Exportable memory: tensors whose memory another API of the same GPU imports (the CUDA backend, through
// cudaImportExternalMemory; docs/python.md "Vulkan and CUDA"). Each is a dedicated allocation exported as an
// opaque fd (VK_KHR_external_memory_fd), the handle type CUDA imports on Linux. The extension is enabled
// only where the device lists it and exports storage buffers that way; elsewhere the device says why not.
#include <unistd.h>

#include <cstring>

#include "hal/vulkan/device.hpp"

namespace kf::hal::vk {

namespace {
constexpr VkBufferUsageFlags kUsage =
    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
constexpr VkExternalMemoryHandleTypeFlagBits kHandle = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
}  // namespace

std::string export_support(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> ext(n);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, ext.data());
  bool fd = false;
  for (const auto& e : ext) fd |= std::strcmp(e.extensionName, VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME) == 0;
  if (!fd) return "the device lacks " VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME;
  VkPhysicalDeviceExternalBufferInfo info{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_BUFFER_INFO};
  info.usage = kUsage;
  info.handleType = kHandle;
  VkExternalBufferProperties props{VK_STRUCTURE_TYPE_EXTERNAL_BUFFER_PROPERTIES};
  vkGetPhysicalDeviceExternalBufferProperties(pd, &info, &props);
  if (!(props.externalMemoryProperties.externalMemoryFeatures & VK_EXTERNAL_MEMORY_FEATURE_EXPORTABLE_BIT))
    return "the device does not export storage buffers' memory as opaque fds";
  return "";
}

VkBuf::VkBuf(VulkanDevice& dev, size_t bytes, Exportable) : exportable_(true), dev_(dev) {
  size_ = bytes;
  VkExternalMemoryBufferCreateInfo ext{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
  ext.handleTypes = kHandle;
  VkBufferCreateInfo ci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, &ext};
  ci.size = bytes;
  ci.usage = kUsage;
  ci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  KF_VK(vkCreateBuffer(dev.device(), &ci, nullptr, &buffer_));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev.device(), buffer_, &req);
  // Dedicated: the allocation is the buffer's alone, so that the importer maps all of it from offset 0.
  VkMemoryDedicatedAllocateInfo dedicated{VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO};
  dedicated.buffer = buffer_;
  VkExportMemoryAllocateInfo exp{VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO, &dedicated};
  exp.handleTypes = kHandle;
  try {
    alloc_ = dev.allocator().allocate_dedicated(req, &exp);
    KF_VK(vkBindBufferMemory(dev.device(), buffer_, alloc_.memory, 0));
  } catch (...) {
    if (alloc_.memory) dev.allocator().free(alloc_);
    vkDestroyBuffer(dev.device(), buffer_, nullptr);
    throw;
  }
}

bool VulkanDevice::exportable(std::string* why) const {
  if (why) *why = export_why_.empty() ? "" : "vulkan: " + info_.name + " exports no memory: " + export_why_;
  return export_why_.empty();
}

std::shared_ptr<Buffer> VulkanDevice::allocate_exportable(size_t bytes) {
  return std::make_shared<VkBuf>(*this, bytes, VkBuf::Exportable{});
}

ExportedMemory VulkanDevice::export_memory(Buffer& buffer) {
  auto& b = static_cast<VkBuf&>(buffer);
  if (!b.exportable())
    throw Error(ErrorCode::InvalidArgument,
                "Context::export_memory: the tensor is not in exportable memory (allocate it with empty_exportable)");
  VkMemoryGetFdInfoKHR gi{VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR};
  gi.memory = b.allocation().memory;
  gi.handleType = kHandle;
  ExportedMemory m;
  KF_VK(vkGetMemoryFdKHR(device_, &gi, &m.fd));
  m.size = b.allocation().size;
  m.offset = 0;
  m.dedicated = true;
  m.device_uuid = info_.uuid;
  return m;
}

}  // namespace kf::hal::vk

// Timeline semaphores: the CUDA side signals and waits on its stream (cudaSignal/WaitExternalSemaphoresAsync),
// this side on its queue, so that neither host waits for the other's work.
namespace kf::hal::vk {

std::string timeline_export_support(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> ext(n);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, ext.data());
  bool fd = false;
  for (const auto& e : ext) fd |= std::strcmp(e.extensionName, VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME) == 0;
  if (!fd) return "the device lacks " VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME;
  VkSemaphoreTypeCreateInfo type{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  VkPhysicalDeviceExternalSemaphoreInfo info{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_SEMAPHORE_INFO, &type};
  info.handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
  VkExternalSemaphoreProperties props{VK_STRUCTURE_TYPE_EXTERNAL_SEMAPHORE_PROPERTIES};
  vkGetPhysicalDeviceExternalSemaphoreProperties(pd, &info, &props);
  if (!(props.externalSemaphoreFeatures & VK_EXTERNAL_SEMAPHORE_FEATURE_EXPORTABLE_BIT))
    return "the device does not export timeline semaphores as opaque fds";
  return "";
}

bool VulkanDevice::timeline_exportable(std::string* why) const {
  if (why) *why = timeline_why_.empty() ? "" : "vulkan: " + info_.name + " exports no semaphores: " + timeline_why_;
  return timeline_why_.empty();
}

std::shared_ptr<void> VulkanDevice::export_timeline(int* fd) {
  if (!timeline_why_.empty()) {
    std::string why;
    timeline_exportable(&why);
    throw Error(ErrorCode::Unsupported, why);
  }
  VkExportSemaphoreCreateInfo exp{VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO};
  exp.handleTypes = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
  VkSemaphoreTypeCreateInfo type{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO, &exp};
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type.initialValue = 0;
  VkSemaphoreCreateInfo ci{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &type};
  VkSemaphore sem = VK_NULL_HANDLE;
  KF_VK(vkCreateSemaphore(device_, &ci, nullptr, &sem));
  VkSemaphoreGetFdInfoKHR gi{VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR};
  gi.semaphore = sem;
  gi.handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
  if (const VkResult r = vkGetSemaphoreFdKHR(device_, &gi, fd); r != VK_SUCCESS) {
    vkDestroySemaphore(device_, sem, nullptr);
    KF_VK(r);
  }
  // Destroyed once no submitted batch names it (finish_pending, or the device's end).
  return std::shared_ptr<void>(reinterpret_cast<void*>(sem), [this](void* p) {
    std::lock_guard<std::mutex> lock(retired_mu_);
    retired_sems_.push_back(reinterpret_cast<VkSemaphore>(p));
  });
}

void VulkanDevice::timeline_wait(void* timeline, uint64_t value) {
  wait_sems_.push_back(reinterpret_cast<VkSemaphore>(timeline));
  wait_values_.push_back(value);
}

void VulkanDevice::timeline_signal(void* timeline, uint64_t value) {
  not_capturing("a semaphore signal");
  begin();  // a batch to carry the signal, empty when nothing is recorded
  signal_sem_ = reinterpret_cast<VkSemaphore>(timeline);
  signal_value_ = value;
  flush();
}

void VulkanDevice::submit(VkSubmitInfo& si, VkFence fence) {
  VkTimelineSemaphoreSubmitInfo ts{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  std::vector<VkPipelineStageFlags> stages(wait_sems_.size(), VK_PIPELINE_STAGE_ALL_COMMANDS_BIT);
  if (!wait_sems_.empty() || signal_sem_) {
    si.waitSemaphoreCount = static_cast<uint32_t>(wait_sems_.size());
    si.pWaitSemaphores = wait_sems_.data();
    si.pWaitDstStageMask = stages.data();
    ts.waitSemaphoreValueCount = si.waitSemaphoreCount;
    ts.pWaitSemaphoreValues = wait_values_.data();
    if (signal_sem_) {
      si.signalSemaphoreCount = 1;
      si.pSignalSemaphores = &signal_sem_;
      ts.signalSemaphoreValueCount = 1;
      ts.pSignalSemaphoreValues = &signal_value_;
    }
    ts.pNext = si.pNext;
    si.pNext = &ts;
  }
  const VkResult r = vkQueueSubmit(queue_, 1, &si, fence);
  wait_sems_.clear();
  wait_values_.clear();
  signal_sem_ = VK_NULL_HANDLE;
  KF_VK(r);
}

void VulkanDevice::destroy_retired() {
  std::lock_guard<std::mutex> lock(retired_mu_);
  for (VkSemaphore s : retired_sems_) {
    for (size_t i = wait_sems_.size(); i-- > 0;)  // a wait asked for and never submitted
      if (wait_sems_[i] == s) {
        wait_sems_.erase(wait_sems_.begin() + static_cast<std::ptrdiff_t>(i));
        wait_values_.erase(wait_values_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    vkDestroySemaphore(device_, s, nullptr);
  }
  retired_sems_.clear();
}

}  // namespace kf::hal::vk
