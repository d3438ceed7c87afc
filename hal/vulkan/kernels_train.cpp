// The Vulkan kernels of KERNELS.md section 6 (losses, optimizers) and the section 3 backward passes.
#include "hal/vulkan/device.hpp"
#include "hal/vulkan/kernels_common.hpp"
#include "ops/registry.hpp"

namespace kf::hal::vk {

std::string VulkanDevice::dispatch_norm_backward(const OpCall& call) {
  throw Error(ErrorCode::Internal, "vulkan: no kernel for " + call.op->name);
}
std::string VulkanDevice::dispatch_loss(const OpCall& call) {
  throw Error(ErrorCode::Internal, "vulkan: no kernel for " + call.op->name);
}
std::string VulkanDevice::dispatch_optimizer(const OpCall& call) {
  throw Error(ErrorCode::Internal, "vulkan: no kernel for " + call.op->name);
}

}  // namespace kf::hal::vk
