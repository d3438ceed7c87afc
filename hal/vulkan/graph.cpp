// Captured graphs on Vulkan (kf::Graph): the dispatches of a capture go into a command buffer of their
// own, with their barriers, descriptor sets (from the graph's own pools) and push constants; a replay
// submits it once, after the stream's open batch, in the same vkQueueSubmit.
#include "hal/vulkan/device.hpp"

namespace kf::hal::vk {

struct VkGraph final : hal::Graph {
  explicit VkGraph(VulkanDevice& d) : dev(d) {}
  ~VkGraph() override {
    if (cmd) vkFreeCommandBuffers(dev.device_, dev.cmd_pool_, 1, &cmd);
    for (VkDescriptorPool p : pools) vkDestroyDescriptorPool(dev.device_, p, nullptr);
  }
  VulkanDevice& dev;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> pools;            // kMaxBatch descriptor sets each
  std::vector<std::shared_ptr<Buffer>> retained;  // every buffer its commands use (tensors, scratch)
  uint32_t commands = 0;
  uint32_t sets = 0;  // descriptor sets taken from `pools`
};

void VulkanDevice::not_capturing(const char* what) const {
  if (capture_)
    throw Error(ErrorCode::Unsupported, std::string("vulkan: ") + what +
                                            " cannot be captured into a graph (the op needs the host while it "
                                            "records; running it once before the capture may prepare what it needs)");
}

std::vector<std::shared_ptr<Buffer>>& VulkanDevice::retained() {
  return capture_ ? capture_->retained : batches_[open_].retained;
}

VkDescriptorPool VulkanDevice::descriptor_pool() {
  if (!capture_) return batches_[open_].pool;
  if (capture_->sets++ % kMaxBatch == 0) {
    VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kBindings * kMaxBatch};
    VkDescriptorPoolCreateInfo dp{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    dp.maxSets = kMaxBatch;
    dp.poolSizeCount = 1;
    dp.pPoolSizes = &ps;
    VkDescriptorPool p;
    KF_VK(vkCreateDescriptorPool(device_, &dp, nullptr, &p));
    capture_->pools.push_back(p);
  }
  return capture_->pools.back();
}

bool VulkanDevice::begin_capture() {
  flush();  // what the stream holds so far is submitted on its own, before any replay
  auto g = std::make_shared<VkGraph>(*this);
  VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cai.commandPool = cmd_pool_;
  cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cai.commandBufferCount = 1;
  KF_VK(vkAllocateCommandBuffers(device_, &cai, &g->cmd));
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT;  // replayed again before the last replay ends
  KF_VK(vkBeginCommandBuffer(g->cmd, &bi));
  capture_ = std::move(g);
  cmd_ = capture_->cmd;
  recording_ = true;
  commands_ = 0;
  forget_bound();
  after_submitted_ = true;  // its first command is ordered after whatever ran before the replay
  return true;
}

std::shared_ptr<hal::Graph> VulkanDevice::end_capture() {
  std::shared_ptr<VkGraph> g = std::move(capture_);
  capture_.reset();
  recording_ = false;
  g->commands = commands_;
  commands_ = 0;
  KF_VK(vkEndCommandBuffer(g->cmd));
  return g;
}

void VulkanDevice::abort_capture() {
  if (!capture_) return;
  vkEndCommandBuffer(capture_->cmd);  // its result does not matter: the buffer is freed
  capture_.reset();
  recording_ = false;
  commands_ = 0;
}

void VulkanDevice::replay(const std::shared_ptr<hal::Graph>& graph) {
  auto& g = static_cast<VkGraph&>(*graph);
  // One submission: the open batch's commands (when there are any), then the graph's.
  Batch& b = batches_[open_];
  VkCommandBuffer cmds[2];
  uint32_t n = 0;
  if (recording_) {
    recording_ = false;
    KF_VK(vkEndCommandBuffer(b.cmd));
    cmds[n++] = b.cmd;
  } else if (b.pending) {
    wait_batch(b);
  }
  cmds[n++] = g.cmd;
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = n;
  si.pCommandBuffers = cmds;
  submit(si, b.fence);
  b.pending = true;
  b.commands = commands_ + g.commands;
  b.graphs.push_back(graph);
  commands_ = 0;
  open_ = (open_ + 1) % batches_.size();
}

}  // namespace kf::hal::vk
