// The table of kernel families and the device's supports / dispatch, which go through it.
#include "hal/vulkan/families.hpp"

namespace kf::hal::vk {
namespace {

// A family from its two entry points.
template <bool (*Supports)(const VulkanDevice&, const OpCall&, std::string*),
          Variant (*Dispatch)(VulkanDevice&, const OpCall&)>
struct Entry final : KernelFamily {
  bool supports(const VulkanDevice& dev, const OpCall& call, std::string* why) const override {
    return Supports(dev, call, why);
  }
  Variant dispatch(VulkanDevice& dev, const OpCall& call) const override { return Dispatch(dev, call); }
};

Variant dispatch_matmul_call(VulkanDevice& dev, const OpCall& call) { return dispatch_matmul(dev, call); }

// docs/ops.md section 1: elementwise (eltwise.cpp, eltwise.comp).
using Elementwise = Entry<supports_eltwise_rows_matmul, dispatch_eltwise>;
// Section 2: reductions and softmax over rows (rows.cpp, rows.comp).
using Rows = Entry<supports_eltwise_rows_matmul, dispatch_rows>;
// Section 4: linear and matmul (matmul.cpp: tiled, tensor cores; gemv.cpp: the few-rows kernel),
// embedding (embedding.cpp), the convolutions (conv.cpp).
using Matmul = Entry<supports_eltwise_rows_matmul, dispatch_matmul_call>;
using Embedding = Entry<supports_embedding, dispatch_embedding>;
using Conv = Entry<supports_conv, dispatch_conv>;
// Sections 3 and 6: normalizations and their backward (norm.cpp, train.cpp), losses and optimizers
// (train.cpp), linear_cross_entropy (lce.cpp).
using Norm = Entry<supports_training, dispatch_norm>;
using Loss = Entry<supports_training, dispatch_loss>;
using Optimizer = Entry<supports_training, dispatch_optimizer>;
using LinearCrossEntropy = Entry<supports_training, dispatch_linear_cross_entropy>;
// Section 5: attention, its scores and its backward (attention.cpp).
using Attention = Entry<supports_attention, dispatch_attention>;

}  // namespace

const KernelFamily& kernel_family(const OpCall& call) {
  static const Elementwise eltwise;
  static const Rows rows;
  static const Matmul matmul;
  static const Embedding embedding;
  static const Conv conv;
  static const Norm norm;
  static const Loss loss;
  static const Optimizer optimizer;
  static const LinearCrossEntropy lce;
  static const Attention attention;
  switch (call.id) {
    case OpId::embedding: return embedding;
    case OpId::conv2d:
    case OpId::conv2d_bn_relu:
    case OpId::conv2d_gelu_dropout: return conv;
    case OpId::linear_cross_entropy:
    case OpId::linear_cross_entropy_backward: return lce;
    default: break;
  }
  switch (call.family) {
    case Family::Elementwise: return eltwise;
    case Family::Reduction: return rows;
    case Family::Matmul: return matmul;
    case Family::Normalization: return norm;
    case Family::Loss: return loss;
    case Family::Optimizer: return optimizer;
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

Variant VulkanDevice::dispatch(const OpCall& call) {
  const KernelFamily*& f = families_[static_cast<int>(call.id)];
  if (!f) f = &kernel_family(call);
  return f->dispatch(*this, call);
}

}  // namespace kf::hal::vk
