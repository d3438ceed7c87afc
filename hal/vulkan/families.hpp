// The Vulkan kernels by family: each family says which calls it supports (dtype, shapes, attributes,
// optional inputs, the forced paths of KF_TUNE) and records their dispatches; a call it accepts, its
// dispatch does not refuse. The device routes every call through a table indexed by OpId (families.cpp).
// The families' entry points below are free functions over the device core (device.hpp), one file each.
#pragma once
#include <memory>
#include <string>

#include "hal/vulkan/device.hpp"

namespace kf::hal::vk {

struct KernelFamily {
  virtual ~KernelFamily() = default;
  virtual bool supports(const VulkanDevice& dev, const OpCall& call, std::string* why) const = 0;
  virtual Variant dispatch(VulkanDevice& dev, const OpCall& call) const = 0;
};

// The family that serves an op (the call gives its op and registry family).
const KernelFamily& kernel_family(const OpCall& call);

// docs/ops.md section 1 (eltwise.cpp) and 2 (rows.cpp: reductions, softmax over rows). Which elementwise,
// row and product calls have a kernel (the product's own limits: supports_matmul).
bool supports_eltwise_rows_matmul(const VulkanDevice& dev, const OpCall& call, std::string* why);
Variant dispatch_eltwise(VulkanDevice& dev, const OpCall& call);
Variant dispatch_rows(VulkanDevice& dev, const OpCall& call);

// Section 4: linear and matmul (matmul.cpp), the few-rows / split-K product it selects for decode shapes
// (gemv.cpp), embedding (embedding.cpp), the convolutions (conv.cpp).
// B of a bf16 product already converted for the tensor-core path (linear_cross_entropy converts W once
// per call): as f16 times powers of two per row (linear's W [N, K]) or per column (matmul's [K, N]),
// its inverse factors at word scale_b of `scales`, whose words [0, batches * M) the product takes for
// A's. Ignored where the product does not take the tensor-core path.
struct ScaledB {
  std::shared_ptr<Buffer> b, scales;
  uint32_t scale_b = 0;
};
bool supports_matmul(const VulkanDevice& dev, const OpCall& call, std::string* why);  // forced paths, grids
Variant dispatch_matmul(VulkanDevice& dev, const OpCall& call, const ScaledB* scaled_b = nullptr);
Variant dispatch_gemv(VulkanDevice& dev, const OpCall& call);
// A bf16 operand of the tensor-core products (mm_coopmat.comp SCALES): src [batches, rows, cols] as
// f16 times a power of two per row (the batches' rows in order) or, by_cols, per column of each batch
// into dst (bf16_rows_to_f16.comp), the inverse factors to words scale_off + (batch * cols + col | row)
// of `scales`; by_cols takes words [max_off, max_off + batches * cols) of it as scratch.
void record_bf16_scaled(VulkanDevice& dev, const std::shared_ptr<Buffer>& src, const std::shared_ptr<Buffer>& dst,
                        const std::shared_ptr<Buffer>& scales, uint64_t batches, uint64_t rows, uint64_t cols,
                        bool by_cols, uint64_t scale_off, uint64_t max_off = 0);
// Why record_bf16_scaled cannot convert such an operand ("" when it can): 32-bit indices, grid.
std::string bf16_scaled_refusal(uint64_t batches, uint64_t rows, uint64_t cols, bool by_cols, uint64_t scale_off);
// Device::record_matrix_peak: the tensor-core product's peak multiply-add rate kernel.
double record_matrix_peak(VulkanDevice& dev, std::string* what);
bool supports_embedding(const VulkanDevice& dev, const OpCall& call, std::string* why);
Variant dispatch_embedding(VulkanDevice& dev, const OpCall& call);
bool supports_conv(const VulkanDevice& dev, const OpCall& call, std::string* why);
Variant dispatch_conv(VulkanDevice& dev, const OpCall& call);

// Sections 3 and 6: which normalization, loss and optimizer calls have a kernel (norm.cpp); the
// normalizations (norm.cpp) and their backward (train.cpp), losses and optimizers (train.cpp),
// linear_cross_entropy and its backward (lce.cpp).
bool supports_training(const VulkanDevice& dev, const OpCall& call, std::string* why);
Variant dispatch_norm(VulkanDevice& dev, const OpCall& call);
Variant dispatch_batch_norm(VulkanDevice& dev, const OpCall& call);
Variant dispatch_norm_backward(VulkanDevice& dev, const OpCall& call);
Variant dispatch_loss(VulkanDevice& dev, const OpCall& call);
Variant dispatch_optimizer(VulkanDevice& dev, const OpCall& call);
bool supports_linear_cross_entropy(const VulkanDevice& dev, const OpCall& call, std::string* why);
Variant dispatch_linear_cross_entropy(VulkanDevice& dev, const OpCall& call);
// C (+)= A^T B with A [K, M] and B [K, N] (accumulate: C += ...), for linear_cross_entropy's d W;
// separate from dispatch_matmul (lce.cpp). Returns the path taken.
std::string record_matmul_at_b(VulkanDevice& dev, const std::shared_ptr<Buffer>& a, const std::shared_ptr<Buffer>& b,
                               const std::shared_ptr<Buffer>& c, DType dtype, uint32_t M, uint32_t N, uint32_t K,
                               bool accumulate);

// Section 5: attention, its scores and its backward (attention.cpp).
bool supports_attention(const VulkanDevice& dev, const OpCall& call, std::string* why);
Variant dispatch_attention(VulkanDevice& dev, const OpCall& call);
// The element layout of NV (khr: KHR) cooperative-matrix accumulators when it has the quad form that
// the attention kernels' QUAD variants take (its QLAYOUT code), else -1; for KHR also only where f16 A
// operands hold element i at the same row and column as accumulators (the QUAD forms build A operands
// from accumulators element by element). Found once per device and path by running coopmat_layout.comp.
int64_t coopmat_quad_layout(VulkanDevice& dev, bool khr);
// Attention's rotary cos/sin table (npos positions from pmin, head dim D), cached on the device.
std::shared_ptr<Buffer> rope_table(VulkanDevice& dev, int64_t D, double base, int64_t pmin, int64_t npos,
                                   int64_t* first);

}  // namespace kf::hal::vk
