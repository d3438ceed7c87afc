// Typed entry points for the 2-D convolutions (docs/ops.md section 4), NCHW as torch.nn.Conv2d: conv2d,
// conv2d_bn_relu, conv2d_gelu_dropout and depthwise_pointwise. Each allocates its output on the device of
// its inputs and goes through the same checks as Context::run: a rejected call raises kf::Error naming the
// op and the argument, and writes nothing. An undefined Tensor stands for an optional argument left out.
#pragma once
#include <array>
#include <cstdint>

#include "kf/context.hpp"
#include "kf/tensor.hpp"

namespace kf {

// The geometry of a convolution, each {height, width}, as torch.nn.Conv2d's (zero padding on both sides).
// Output size: floor((H + 2 padding - dilation (KH - 1) - 1) / stride) + 1, at least 1.
struct Conv2dOptions {
  std::array<int64_t, 2> stride = {1, 1};
  std::array<int64_t, 2> padding = {0, 0};
  std::array<int64_t, 2> dilation = {1, 1};
  int64_t groups = 1;  // input and output channels multiples of it (groups = C: depthwise)
};

// x [N, C, H, W], W [O, C / groups, KH, KW], bias [O]: y = act(conv(x) + bias) [N, O, OH, OW]
// (docs/ops.md section 4).
Tensor conv2d(const Tensor& x, const Tensor& W, const Tensor& bias = {}, Activation act = kActNone,
              const Conv2dOptions& options = {});
// relu(batch_norm(conv(x) + conv_bias)), the batch norm in inference form with per-channel [O] weight,
// bias, running mean and variance; eps = 0 selects 1e-5 (docs/ops.md section 4).
Tensor conv2d_bn_relu(const Tensor& x, const Tensor& W, const Tensor& bn_w, const Tensor& bn_b,
                      const Tensor& bn_mean, const Tensor& bn_var, const Tensor& conv_bias = {}, double eps = 0,
                      const Conv2dOptions& options = {});
// dropout(gelu(conv(x) + bias)) with the Philox mask of docs/ops.md, element index = the output's linear
// (NCHW) index (docs/ops.md section 4).
Tensor conv2d_gelu_dropout(const Tensor& x, const Tensor& W, const Tensor& bias, double p, uint64_t seed,
                           uint64_t offset = 0, const Conv2dOptions& options = {});

// The MobileNet block: act(conv1x1(act(depthwise(x) + b_dw), W_pw) + b_pw), W_dw [C, 1, KH, KW], W_pw
// [O, C, 1, 1], b_dw [C], b_pw [O]; the depthwise conv takes the geometry below, the 1x1 one stride 1
// (docs/ops.md section 4).
struct DepthwisePointwiseOptions {
  std::array<int64_t, 2> stride = {1, 1};
  std::array<int64_t, 2> padding = {0, 0};
  std::array<int64_t, 2> dilation = {1, 1};
  Activation act = kActNone;  // after each conv
};
Tensor depthwise_pointwise(const Tensor& x, const Tensor& W_dw, const Tensor& W_pw, const Tensor& b_dw = {},
                           const Tensor& b_pw = {}, const DepthwisePointwiseOptions& options = {});

}  // namespace kf
