// Op identifiers: the names of the registry's ops as an enumeration, so that backends choose kernels with a
// switch instead of comparing strings, and the core can index tables by op. The registry (src/ops/) checks
// at start-up that every op it declares has exactly one identifier here and that every identifier has an op.
#pragma once
#include <cstdint>

namespace kf {

// X(identifier): one per registry op, the identifier spelled as the op's name.
#define KF_OPS(X) \
  X(add_relu) \
  X(mul_relu) \
  X(add_sigmoid) \
  X(mul_tanh) \
  X(bias_relu) \
  X(bias_gelu) \
  X(bias_gelu_tanh) \
  X(bias_silu) \
  X(swiglu) \
  X(geglu) \
  X(mish_scale) \
  X(prelu_bias) \
  X(dropout) \
  X(gelu_dropout) \
  X(bias_gelu_dropout) \
  X(add_dropout_residual) \
  X(add) \
  X(mul) \
  X(prelu) \
  X(copy) \
  X(relu) \
  X(sigmoid) \
  X(tanh) \
  X(gelu) \
  X(gelu_tanh) \
  X(silu) \
  X(mish) \
  X(sum_squared) \
  X(mean_abs) \
  X(softmax) \
  X(log_softmax) \
  X(linear) \
  X(matmul) \
  X(linear_dropout) \
  X(ffn) \
  X(ffn_swiglu) \
  X(embedding) \
  X(conv2d) \
  X(conv2d_bn_relu) \
  X(conv2d_gelu_dropout) \
  X(depthwise_pointwise) \
  X(layer_norm) \
  X(layer_norm_relu) \
  X(layer_norm_gelu) \
  X(layer_norm_silu) \
  X(rms_norm) \
  X(rms_norm_gelu) \
  X(rms_norm_silu) \
  X(add_layer_norm) \
  X(add_rms_norm) \
  X(batch_norm_relu) \
  X(group_norm) \
  X(cross_entropy) \
  X(cross_entropy_backward) \
  X(mse) \
  X(mse_backward) \
  X(relu_backward) \
  X(sigmoid_backward) \
  X(tanh_backward) \
  X(gelu_backward) \
  X(gelu_tanh_backward) \
  X(silu_backward) \
  X(mish_backward) \
  X(dropout_backward) \
  X(softmax_backward) \
  X(layer_norm_backward) \
  X(rms_norm_backward) \
  X(adamw_step) \
  X(sgd_step) \
  X(linear_cross_entropy) \
  X(linear_cross_entropy_backward) \
  X(attention_scores) \
  X(attention) \
  X(attention_backward)

enum class OpId : uint16_t {
#define KF_OP_ID(name) name,
  KF_OPS(KF_OP_ID)
#undef KF_OP_ID
};
inline constexpr int kOpCount = 0
#define KF_OP_COUNT(name) +1
    KF_OPS(KF_OP_COUNT)
#undef KF_OP_COUNT
    ;

// The op's registry name ("add_relu"), for messages.
const char* op_name(OpId id);
// The identifier of a registry name; false when no op has that name.
bool op_id_of(const char* name, OpId* id);

struct OpDef;
// The identifier of a registry op, for code that sees OpDef only declared (src/ops/registry.cpp).
OpId op_id(const OpDef& op);

// Families of ops, as docs/ops.md groups them. Normalization: row kernels with statistics (section 3 and
// its backward); Loss: reductions of a whole batch to one value (section 6: cross_entropy, mse);
// Optimizer: in-place parameter updates; Attention: section 5.
enum class Family { Elementwise, Reduction, Matmul, Normalization, Loss, Optimizer, Attention };

}  // namespace kf
