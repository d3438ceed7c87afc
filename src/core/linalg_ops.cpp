// Typed entry points of kf/linalg.hpp: thin wrappers over Context::call (src/core/typed_call.hpp).
#include "kf/linalg.hpp"

#include "core/typed_call.hpp"

namespace kf {
namespace {

Attrs epilogue(Activation act, const std::optional<DType>& out_dtype) {
  Attrs a;
  a.act = act;
  a.out_dtype = out_dtype;
  return a;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& W, const Tensor& bias, const Tensor& residual, const LinearOptions& o) {
  return detail::call_op("linear", {x, W, bias, residual}, epilogue(o.act, o.out_dtype))[0];
}

Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& residual, const LinearOptions& o) {
  return detail::call_op("matmul", {a, b, bias, residual}, epilogue(o.act, o.out_dtype))[0];
}

Tensor linear_dropout(const Tensor& x, const Tensor& W, const Tensor& bias, const Tensor& residual,
                      const LinearDropoutOptions& o) {
  Attrs a = epilogue(o.act, o.out_dtype);
  a.p = o.p;
  a.seed = o.seed;
  a.offset = o.offset;
  return detail::call_op("linear_dropout", {x, W, bias, residual}, a)[0];
}

Tensor ffn(const Tensor& x, const Tensor& W1, const Tensor& b1, const Tensor& W2, const Tensor& b2,
           const FfnOptions& o) {
  Attrs a;
  a.act = o.act;
  a.p = o.p;
  a.seed = o.seed;
  a.offset = o.offset;
  return detail::call_op("ffn", {x, W1, b1, W2, b2}, a)[0];
}

Tensor ffn_swiglu(const Tensor& x, const Tensor& W_gate_up, const Tensor& W_down) {
  return detail::call_op("ffn_swiglu", {x, W_gate_up, W_down})[0];
}

Tensor embedding(const Tensor& tokens, const Tensor& table, const Tensor& pos) {
  return detail::call_op("embedding", {tokens, table, pos})[0];
}

}  // namespace kf
