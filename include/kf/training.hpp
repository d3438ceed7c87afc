// Typed entry points for the normalizations (docs/ops.md section 3, forward and backward) and the training
// fusions (section 6). Each allocates its outputs on the device of its inputs and goes through the same
// checks as Context::run (errors name the op and the argument; nothing is written when one is
// rejected). An undefined Tensor stands for an optional argument left out; eps = 0 selects the op's
// default (1e-5 for layer and group norms, 1e-6 for rms norms, 1e-8 for AdamW).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kf/context.hpp"
#include "kf/tensor.hpp"

namespace kf {

// Section 3, along the last dimension.
Tensor layer_norm(const Tensor& x, const Tensor& w = {}, const Tensor& b = {}, double eps = 0);
Tensor layer_norm_relu(const Tensor& x, const Tensor& w = {}, const Tensor& b = {}, double eps = 0);
Tensor layer_norm_gelu(const Tensor& x, const Tensor& w = {}, const Tensor& b = {}, double eps = 0);
Tensor layer_norm_silu(const Tensor& x, const Tensor& w = {}, const Tensor& b = {}, double eps = 0);
Tensor rms_norm(const Tensor& x, const Tensor& w = {}, double eps = 0);
Tensor rms_norm_gelu(const Tensor& x, const Tensor& w = {}, double eps = 0);
Tensor rms_norm_silu(const Tensor& x, const Tensor& w = {}, double eps = 0);
// s = x + r and norm(s), in one pass: returns {s, y}.
std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& w = {},
                                         const Tensor& b = {}, double eps = 0);
std::pair<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& w = {}, double eps = 0);
// NCHW (channels at dimension 1): inference batch norm then relu; group norm as torch.nn.GroupNorm.
Tensor batch_norm_relu(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& var,
                       double eps = 0);
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& w = {}, const Tensor& b = {}, double eps = 0);

// Section 3, backward: dy * act'(x) for act one of relu, sigmoid, tanh, gelu, gelu_tanh, silu, mish.
Tensor activation_backward(const std::string& act, const Tensor& dy, const Tensor& x);
Tensor dropout_backward(const Tensor& dy, double p, uint64_t seed, uint64_t offset = 0);  // the forward's mask
Tensor softmax_backward(const Tensor& dy, const Tensor& y, double scale = 1);
struct NormGrads {
  Tensor dx, dw, db;  // db is undefined for rms norm
};
NormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w = {}, double eps = 0);
NormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w = {}, double eps = 0);

// Section 6. target is int32 [N]; the loss is a 0-dimensional tensor.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0);
// The loss and d logits (of the mean loss) from one pass over the logits: returns {loss, d_logits}.
std::pair<Tensor, Tensor> cross_entropy_backward(const Tensor& logits, const Tensor& target,
                                                 int64_t ignore_index = -100, double label_smoothing = 0);
// linear_cross_entropy: cross_entropy(h W^T, target) with h [N, d] and W [C, d], computed in chunks of rows
// so that the N x C logits never exist whole; optional z-loss (z_loss * mean(lse^2)) and logit
// soft-capping (softcap * tanh(logits / softcap)); 0 turns each off.
struct LinearCrossEntropyOptions {
  int64_t ignore_index = -100;
  double label_smoothing = 0, z_loss = 0, softcap = 0;
};
Tensor linear_cross_entropy(const Tensor& h, const Tensor& W, const Tensor& target,
                            const LinearCrossEntropyOptions& options = {});
struct LinearCrossEntropyGrads {
  Tensor loss, dh, dW;
};
LinearCrossEntropyGrads linear_cross_entropy_backward(const Tensor& h, const Tensor& W, const Tensor& target,
                                                      const LinearCrossEntropyOptions& options = {});
Tensor mse(const Tensor& a, const Tensor& b);
Tensor mse_backward(const Tensor& a, const Tensor& b);  // d mse / d a

// Optimizer steps over a list of tensors, updated in place (params, and m, v or the momentum buffers):
// one dispatch per tensor, all recorded into the same command buffer and submitted together at the next
// synchronize() or download. Every tensor is checked before any is updated.
struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;  // torch's defaults
};
void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                const std::vector<Tensor>& v, const AdamWOptions& options, int64_t step);
struct SgdOptions {
  double lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              const std::vector<Tensor>& momentum_buffers, const SgdOptions& options, int64_t step);

}  // namespace kf
