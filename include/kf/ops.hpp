// Typed entry points for the ops of docs/ops.md. Each allocates its output on the device of its
// inputs; Context::run takes caller-provided outputs instead. Every call checks its arguments first and
// raises kf::Error (naming the op, the argument and the values) before anything is written.
#pragma once
#include <cstdint>
#include <string>

#include "kf/context.hpp"
#include "kf/tensor.hpp"

namespace kf {

// Section 1: elementwise fusions. `b` may have the input's shape or the features shape [F].
Tensor add_relu(const Tensor& a, const Tensor& b);
Tensor mul_relu(const Tensor& a, const Tensor& b);
Tensor add_sigmoid(const Tensor& a, const Tensor& b);
Tensor mul_tanh(const Tensor& a, const Tensor& b);
Tensor bias_relu(const Tensor& x, const Tensor& bias);
Tensor bias_gelu(const Tensor& x, const Tensor& bias);
Tensor bias_gelu_tanh(const Tensor& x, const Tensor& bias);
Tensor bias_silu(const Tensor& x, const Tensor& bias);
Tensor swiglu(const Tensor& x, const Tensor& gate);
Tensor swiglu(const Tensor& packed);  // [.., 2F] -> [.., F]
Tensor geglu(const Tensor& x, const Tensor& gate);
Tensor geglu(const Tensor& packed);
Tensor mish_scale(const Tensor& x, const Tensor& s);  // s of shape [1] or [F]
Tensor prelu_bias(const Tensor& x, const Tensor& a, const Tensor& bias);
Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset = 0);
Tensor gelu_dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset = 0);
Tensor bias_gelu_dropout(const Tensor& x, const Tensor& bias, double p, uint64_t seed,
                         uint64_t offset = 0);
Tensor add_dropout_residual(const Tensor& x, const Tensor& r, double p, uint64_t seed,
                            uint64_t offset = 0);

// Section 2: reductions and softmax along the last dimension.
Tensor sum_squared(const Tensor& x);  // shape x.shape[:-1]
Tensor mean_abs(const Tensor& x);
Tensor softmax(const Tensor& x, double scale = 1);
Tensor log_softmax(const Tensor& x, double scale = 1);

// The unfused primitives, the building blocks the fusions are measured against: a + b, a * b and prelu(a, b)
// (slopes b; b of a's shape or [F] in all three), a copy, and one activation by name: relu, sigmoid, tanh,
// gelu, gelu_tanh, silu or mish (docs/ops.md, Activations).
Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor prelu(const Tensor& a, const Tensor& b);
Tensor copy(const Tensor& x);
Tensor activation(const std::string& act, const Tensor& x);

}  // namespace kf
