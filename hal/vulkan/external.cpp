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
