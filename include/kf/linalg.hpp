// Typed entry points for the matrix products and the ops built on them (docs/ops.md section 4): linear,
// matmul, linear_dropout, ffn, ffn_swiglu, and embedding. Each allocates its output on the device of its
// inputs and goes through the same checks as Context::run: a rejected call raises kf::Error naming the
// op and the argument, and writes nothing. An undefined Tensor stands for an optional argument left out.
// The options' defaults are those of a default Attrs, so f(x, ...) is ctx.call("f", {x, ...}).
#pragma once
#include <cstdint>
#include <optional>

#include "kf/context.hpp"
#include "kf/tensor.hpp"

namespace kf {

// The epilogue of linear and matmul: y = act(product + bias) + residual.
struct LinearOptions {
  Activation act = kActNone;
  // The dtype y (and the residual it adds) is stored in when it is not the inputs' (f16 or bf16 inputs
  // with an f32 output, ...); empty = the inputs' dtype.
  std::optional<DType> out_dtype = std::nullopt;
};

// x [.., K], W [N, K] (as torch.nn.Linear), bias [N], residual [.., N]: y [.., N] (docs/ops.md section 4).
Tensor linear(const Tensor& x, const Tensor& W, const Tensor& bias = {}, const Tensor& residual = {},
              const LinearOptions& options = {});
// a [.., M, K] times b [.., K, N] (batched like a) or [K, N] (shared), bias [N], residual [.., M, N]:
// y [.., M, N] (docs/ops.md section 4).
Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias = {}, const Tensor& residual = {},
              const LinearOptions& options = {});

// linear with the Philox dropout of docs/ops.md in its epilogue: dropout(act(x W^T + bias)) + residual,
// element index = the output's linear index (docs/ops.md section 4). p = 0 is linear.
struct LinearDropoutOptions {
  Activation act = kActNone;
  std::optional<DType> out_dtype = std::nullopt;  // as LinearOptions::out_dtype
  double p = 0;                    // in [0, 1)
  uint64_t seed = 0, offset = 0;   // Philox key and counter offset
};
Tensor linear_dropout(const Tensor& x, const Tensor& W, const Tensor& bias = {}, const Tensor& residual = {},
                      const LinearDropoutOptions& options = {});

// ffn = linear(dropout(act(linear(x, W1, b1))), W2, b2), x [.., d], W1 [H, d], b1 [H], W2 [O, H], b2 [O]
// (docs/ops.md section 4). Its output has the inputs' dtype.
struct FfnOptions {
  Activation act = kActNone;  // of the hidden layer
  double p = 0;               // dropout of the hidden layer, in [0, 1)
  uint64_t seed = 0, offset = 0;
};
Tensor ffn(const Tensor& x, const Tensor& W1, const Tensor& b1, const Tensor& W2, const Tensor& b2,
           const FfnOptions& options = {});
// linear(swiglu(linear(x, W_gate_up)), W_down) with W_gate_up [2H, d] packed (rows 0..H-1 the value half,
// H..2H-1 the gate) and W_down [O, H] (docs/ops.md section 4).
Tensor ffn_swiglu(const Tensor& x, const Tensor& W_gate_up, const Tensor& W_down);

// tokens i32 [.., L] (ids in [0, V)), table [V, d], pos [P, d] with P >= L (optional, indexed by the
// position within the last dimension): y [.., L, d] = table[tokens] + pos (docs/ops.md section 4).
Tensor embedding(const Tensor& tokens, const Tensor& table, const Tensor& pos = {});

}  // namespace kf
