// Typed entry points of kf/conv.hpp: thin wrappers over Context::call (src/core/typed_call.hpp).
#include "kf/conv.hpp"

#include "core/typed_call.hpp"

namespace kf {
namespace {

Attrs geometry(const std::array<int64_t, 2>& stride, const std::array<int64_t, 2>& padding,
               const std::array<int64_t, 2>& dilation, int64_t groups) {
  Attrs a;
  a.stride = stride;
  a.padding = padding;
  a.dilation = dilation;
  a.groups = groups;
  return a;
}

Attrs geometry(const Conv2dOptions& o) { return geometry(o.stride, o.padding, o.dilation, o.groups); }

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& W, const Tensor& bias, Activation act, const Conv2dOptions& o) {
  Attrs a = geometry(o);
  a.act = act;
  return detail::call_op("conv2d", {x, W, bias}, a)[0];
}

Tensor conv2d_bn_relu(const Tensor& x, const Tensor& W, const Tensor& bn_w, const Tensor& bn_b, const Tensor& bn_mean,
                      const Tensor& bn_var, const Tensor& conv_bias, double eps, const Conv2dOptions& o) {
  Attrs a = geometry(o);
  a.eps = eps;
  return detail::call_op("conv2d_bn_relu", {x, W, bn_w, bn_b, bn_mean, bn_var, conv_bias}, a)[0];
}

Tensor conv2d_gelu_dropout(const Tensor& x, const Tensor& W, const Tensor& bias, double p, uint64_t seed,
                           uint64_t offset, const Conv2dOptions& o) {
  Attrs a = geometry(o);
  a.p = p;
  a.seed = seed;
  a.offset = offset;
  return detail::call_op("conv2d_gelu_dropout", {x, W, bias}, a)[0];
}

Tensor depthwise_pointwise(const Tensor& x, const Tensor& W_dw, const Tensor& W_pw, const Tensor& b_dw,
                           const Tensor& b_pw, const DepthwisePointwiseOptions& o) {
  // groups stays 1: the op's depthwise conv has groups = C and does not read it.
  Attrs a = geometry(o.stride, o.padding, o.dilation, 1);
  a.act = o.act;
  return detail::call_op("depthwise_pointwise", {x, W_dw, W_pw, b_dw, b_pw}, a)[0];
}

}  // namespace kf
