// Device memory sub-allocated from 256 MiB blocks (first fit, coalescing free list); allocations
// larger than a block get memory of their own.
#include <algorithm>

#include "hal/vulkan/vk_common.hpp"

namespace kf::hal::vk {

Allocator::Allocator(VkPhysicalDevice pd, VkDevice dev) : dev_(dev) { vkGetPhysicalDeviceMemoryProperties(pd, &props_); }

Allocator::~Allocator() {
  for (auto& b : blocks_)
    if (b.memory) vkFreeMemory(dev_, b.memory, nullptr);
}

int Allocator::find_type(uint32_t bits, VkMemoryPropertyFlags need, VkMemoryPropertyFlags want) const {
  int fallback = -1;
  for (uint32_t i = 0; i < props_.memoryTypeCount; ++i) {
    if (!(bits & (1u << i))) continue;
    const auto f = props_.memoryTypes[i].propertyFlags;
    if ((f & need) != need) continue;
    if ((f & want) == want) return static_cast<int>(i);
    if (fallback < 0) fallback = static_cast<int>(i);
  }
  return fallback;
}

bool Allocator::host_visible(uint32_t type) const {
  return props_.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
}

Allocation Allocator::allocate(const VkMemoryRequirements& req, VkMemoryPropertyFlags need,
                               VkMemoryPropertyFlags want) {
  const int type = find_type(req.memoryTypeBits, need, want);
  if (type < 0) throw Error(ErrorCode::OutOfMemory, "vulkan: no memory type fits the request");
  const bool mappable = host_visible(static_cast<uint32_t>(type));
  std::lock_guard<std::mutex> lock(mu_);
  Allocation a;
  a.type = static_cast<uint32_t>(type);
  a.size = req.size;
  live_ += req.size;  // counted first: every path below returns the allocation or throws
  peak_ = std::max(peak_, live_);
  const VkDeviceSize align = std::max<VkDeviceSize>(req.alignment, 256);
  if (req.size <= kBlockSize / 2) {
    for (size_t bi = 0; bi <= blocks_.size(); ++bi) {
      if (bi == blocks_.size()) {  // no room: a new block
        Block b;
        VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
        ai.allocationSize = kBlockSize;
        ai.memoryTypeIndex = a.type;
        const VkResult r = vkAllocateMemory(dev_, &ai, nullptr, &b.memory);
        if (r != VK_SUCCESS) live_ -= req.size;
        KF_VK(r);
        b.size = kBlockSize;
        b.type = a.type;
        if (mappable) KF_VK(vkMapMemory(dev_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped));
        b.free[0] = kBlockSize;
        blocks_.push_back(std::move(b));
      }
      Block& b = blocks_[bi];
      if (b.type != a.type || !b.memory) continue;
      for (auto it = b.free.begin(); it != b.free.end(); ++it) {
        const VkDeviceSize start = (it->first + align - 1) / align * align;
        const VkDeviceSize end = it->first + it->second;
        if (start + req.size > end) continue;
        const VkDeviceSize head = start - it->first, tail = end - (start + req.size);
        const VkDeviceSize at = it->first;
        b.free.erase(it);
        if (head) b.free[at] = head;
        if (tail) b.free[start + req.size] = tail;
        a.memory = b.memory;
        a.offset = start;
        a.block = static_cast<int>(bi);
        a.mapped = b.mapped ? static_cast<char*>(b.mapped) + start : nullptr;
        return a;
      }
    }
  }
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = a.type;
  if (const VkResult r = vkAllocateMemory(dev_, &ai, nullptr, &a.memory); r != VK_SUCCESS) {
    live_ -= req.size;
    KF_VK(r);
  }
  if (mappable) KF_VK(vkMapMemory(dev_, a.memory, 0, VK_WHOLE_SIZE, 0, &a.mapped));
  return a;
}

Allocation Allocator::allocate_dedicated(const VkMemoryRequirements& req, const void* next) {
  const int type = find_type(req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  if (type < 0) throw Error(ErrorCode::OutOfMemory, "vulkan: no device-local memory type fits exportable memory");
  Allocation a;
  a.type = static_cast<uint32_t>(type);
  a.size = req.size;
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, next};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = a.type;
  KF_VK(vkAllocateMemory(dev_, &ai, nullptr, &a.memory));
  if (host_visible(a.type)) {
    if (const VkResult r = vkMapMemory(dev_, a.memory, 0, VK_WHOLE_SIZE, 0, &a.mapped); r != VK_SUCCESS) {
      vkFreeMemory(dev_, a.memory, nullptr);
      KF_VK(r);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  live_ += req.size;
  peak_ = std::max(peak_, live_);
  return a;
}

MemoryUsage Allocator::usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {live_, peak_};
}

void Allocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = live_;
}

void Allocator::free(const Allocation& a) {
  std::lock_guard<std::mutex> lock(mu_);
  live_ -= a.size;
  if (a.block < 0) {
    vkFreeMemory(dev_, a.memory, nullptr);
    return;
  }
  auto& fl = blocks_[a.block].free;
  auto [it, ok] = fl.emplace(a.offset, a.size);
  (void)ok;
  auto next = std::next(it);
  if (next != fl.end() && it->first + it->second == next->first) {  // merge with the next range
    it->second += next->second;
    fl.erase(next);
  }
  if (it != fl.begin()) {  // merge with the previous range
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      fl.erase(it);
    }
  }
}

}  // namespace kf::hal::vk
