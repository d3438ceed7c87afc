// The table of kernel families and the device's supports / dispatch, which go through it.
#include "hal/vulkan/families.hpp"

namespace kf::hal::vk {
namespace {

// docs/ops.md section 1: elementwise (eltwise.cpp, eltwise.comp).
struct Elementwise final : KernelFamily {
  bool supports(const VulkanDevice& dev, const OpCall& call, std::string* why) const override {
    return dev.supports_eltwise_rows_matmul(call, why);
  }
  std::string dispatch(VulkanDevice& dev, const OpCall& call) const override { return dev.dispatch_eltwise(call); }
};

// Section 2: reductions and softmax over rows (rows.cpp, rows.comp).
struct Rows final : KernelFamily {
  bool supports(const VulkanDevice& dev, const OpCall& call, std::string* why) const override {
    return dev.supports_eltwise_rows_matmul(call, why);
  }
  std::string dispatch(VulkanDevice& dev, const OpCall& call) const override { return dev.dispatch_rows(call); }
};

// Section 4: linear and matmul (matmul.cpp: tiled, tensor cores; kernels_linalg.cpp: the few-rows kernel).
struct Matmul final : KernelFamily {
  bool supports(const VulkanDevice& dev, const OpCall& call, std::string* why) const override {
    return dev.supports_eltwise_rows_matmul(call, why);
  }
  std::string dispatch(VulkanDevice& dev, const OpCall& call) const override { return dev.dispatch_matmul(call); }
};

// Section 4: embedding and the convolutions (kernels_linalg.cpp).
struct Linalg final : KernelFamily {
  bool supports(const VulkanDevice& dev, const OpCall& call, std::string* why) const override {
    return dev.supports_linalg(call, why);
  }
  std::string dispatch(VulkanDevice& dev, const OpCall& call) const override { return dev.dispatch_linalg(call); }
};

// Sections 3 and 6: normalizations and their backward, losses, optimizers, linear_cross_entropy
// (kernels_norm.cpp, kernels_train.cpp, kernels_lce.cpp).
struct Training final : KernelFamily {
  bool supports(const VulkanDevice& dev, const OpCall& call, std::string* why) const override {
    return dev.supports_training(call, why);
  }
  std::string dispatch(VulkanDevice& dev, const OpCall& call) const override { return dev.dispatch_training(call); }
};

// Section 5: attention, its scores and its backward (kernels_attn.cpp).
struct Attention final : KernelFamily {
  bool supports(const VulkanDevice& dev, const OpCall& call, std::string* why) const override {
    return dev.supports_attention(call, why);
  }
  std::string dispatch(VulkanDevice& dev, const OpCall& call) const override { return dev.dispatch_attention(call); }
};

}  // namespace

const KernelFamily& kernel_family(const OpCall& call) {
  static const Elementwise eltwise;
  static const Rows rows;
  static const Matmul matmul;
  static const Linalg linalg;
  static const Training training;
  static const Attention attention;
  if (VulkanDevice::is_linalg_op(call.id)) return linalg;
  switch (call.family) {
    case Family::Elementwise: return eltwise;
    case Family::Reduction: return rows;
    case Family::Matmul: return matmul;
    case Family::Normalization:
    case Family::Loss:
    case Family::Optimizer: return training;
    case Family::Attention: return attention;
  }
  return eltwise;
}

bool VulkanDevice::supports(const OpCall& call, std::string* why) const {
  if (call.dtype == DType::f64 && !info_.caps.float64) {
    if (why) *why = "the device lacks shaderFloat64 (f64 arithmetic)";
    return false;
  }
  const KernelFamily*& f = families_[static_cast<int>(call.id)];
  if (!f) f = &kernel_family(call);
  return f->supports(*this, call, why);
}

std::string VulkanDevice::dispatch(const OpCall& call) {
  const KernelFamily*& f = families_[static_cast<int>(call.id)];
  if (!f) f = &kernel_family(call);
  return f->dispatch(*this, call);
}

}  // namespace kf::hal::vk
