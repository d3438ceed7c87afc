// The Vulkan kernels by family: each family says which calls it supports (dtype, shapes, attributes,
// optional inputs, the forced paths of KF_TUNE) and records their dispatches; a call it accepts, its
// dispatch does not refuse. The device routes every call through a table indexed by OpId (families.cpp).
#pragma once
#include <string>

#include "hal/vulkan/device.hpp"

namespace kf::hal::vk {

struct KernelFamily {
  virtual ~KernelFamily() = default;
  virtual bool supports(const VulkanDevice& dev, const OpCall& call, std::string* why) const = 0;
  virtual std::string dispatch(VulkanDevice& dev, const OpCall& call) const = 0;
};

// The family that serves an op (the call gives its registry family).
const KernelFamily& kernel_family(const OpCall& call);

}  // namespace kf::hal::vk
