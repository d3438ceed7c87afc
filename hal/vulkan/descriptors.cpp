// The descriptor-set cache (device.hpp, VulkanDevice::forget_buffer): one set per combination of buffers
// a dispatch binds, written once and bound again by every later dispatch of the same buffers. Only sets
// that bind whole buffers are kept (the key names buffers, not ranges): record() writes a set with an
// offset or a bounded range (a part of a split call) for its batch alone.
#include <algorithm>

#include "hal/vulkan/device.hpp"

namespace kf::hal::vk {

VkDescriptorSet VulkanDevice::cached_set(const SetKey& key, const VkWriteDescriptorSet* writes) {
  std::lock_guard<std::mutex> lock(set_mu_);
  if (auto it = sets_.find(key); it != sets_.end()) return it->second;
  if (sets_.size() >= kCachedSets) return VK_NULL_HANDLE;  // full: the caller writes a set for its batch
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = set_pool_;
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &set_layout_;
  VkDescriptorSet set = VK_NULL_HANDLE;
  if (vkAllocateDescriptorSets(device_, &ai, &set) != VK_SUCCESS) return VK_NULL_HANDLE;  // fragmented
  VkWriteDescriptorSet w[kBindings];
  for (uint32_t i = 0; i < kBindings; ++i) {
    w[i] = writes[i];
    w[i].dstSet = set;
  }
  vkUpdateDescriptorSets(device_, kBindings, w, 0, nullptr);
  sets_.emplace(key, set);
  for (uint32_t i = 0; i < kBindings; ++i)
    if (i == 0 || key[i] != key[0]) sets_of_[key[i]].push_back(key);
  return set;
}

void VulkanDevice::forget_buffer(VkBuffer b) {
  std::lock_guard<std::mutex> lock(set_mu_);
  auto it = sets_of_.find(b);
  if (it == sets_of_.end()) return;
  const std::vector<SetKey> keys = std::move(it->second);
  sets_of_.erase(it);
  for (const SetKey& key : keys) {
    auto s = sets_.find(key);
    if (s == sets_.end()) continue;
    vkFreeDescriptorSets(device_, set_pool_, 1, &s->second);
    sets_.erase(s);
    // The key leaves the lists of its other buffers too (a long-lived weight would otherwise collect
    // the keys of every temporary it met).
    for (VkBuffer other : key) {
      if (other == b) continue;
      auto o = sets_of_.find(other);
      if (o == sets_of_.end()) continue;
      auto& v = o->second;
      v.erase(std::remove(v.begin(), v.end(), key), v.end());
      if (v.empty()) sets_of_.erase(o);
    }
  }
}

}  // namespace kf::hal::vk
