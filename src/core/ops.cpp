// Typed entry points (include/kf/ops.hpp): thin wrappers over Context::call.
#include "kf/ops.hpp"

#include "core/typed_call.hpp"
#include "kf/error.hpp"

namespace kf {
namespace {

Tensor call1(const char* op, std::vector<Tensor> in, const Attrs& a = {}) {
  return detail::call_op(op, std::move(in), a)[0];
}

Attrs drop(double p, uint64_t seed, uint64_t offset) {
  Attrs a;
  a.p = p;
  a.seed = seed;
  a.offset = offset;
  return a;
}

}  // namespace

Tensor add_relu(const Tensor& a, const Tensor& b) { return call1("add_relu", {a, b}); }
Tensor mul_relu(const Tensor& a, const Tensor& b) { return call1("mul_relu", {a, b}); }
Tensor add_sigmoid(const Tensor& a, const Tensor& b) { return call1("add_sigmoid", {a, b}); }
Tensor mul_tanh(const Tensor& a, const Tensor& b) { return call1("mul_tanh", {a, b}); }
Tensor bias_relu(const Tensor& x, const Tensor& b) { return call1("bias_relu", {x, b}); }
Tensor bias_gelu(const Tensor& x, const Tensor& b) { return call1("bias_gelu", {x, b}); }
Tensor bias_gelu_tanh(const Tensor& x, const Tensor& b) { return call1("bias_gelu_tanh", {x, b}); }
Tensor bias_silu(const Tensor& x, const Tensor& b) { return call1("bias_silu", {x, b}); }
Tensor swiglu(const Tensor& x, const Tensor& gate) { return call1("swiglu", {x, gate}); }
Tensor swiglu(const Tensor& packed) { return call1("swiglu", {packed}); }
Tensor geglu(const Tensor& x, const Tensor& gate) { return call1("geglu", {x, gate}); }
Tensor geglu(const Tensor& packed) { return call1("geglu", {packed}); }
Tensor mish_scale(const Tensor& x, const Tensor& s) { return call1("mish_scale", {x, s}); }
Tensor prelu_bias(const Tensor& x, const Tensor& a, const Tensor& b) { return call1("prelu_bias", {x, a, b}); }
Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  return call1("dropout", {x}, drop(p, seed, offset));
}
Tensor gelu_dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  return call1("gelu_dropout", {x}, drop(p, seed, offset));
}
Tensor bias_gelu_dropout(const Tensor& x, const Tensor& bias, double p, uint64_t seed, uint64_t offset) {
  return call1("bias_gelu_dropout", {x, bias}, drop(p, seed, offset));
}
Tensor add_dropout_residual(const Tensor& x, const Tensor& r, double p, uint64_t seed, uint64_t offset) {
  return call1("add_dropout_residual", {x, r}, drop(p, seed, offset));
}
Tensor sum_squared(const Tensor& x) { return call1("sum_squared", {x}); }
Tensor mean_abs(const Tensor& x) { return call1("mean_abs", {x}); }
Tensor softmax(const Tensor& x, double scale) {
  Attrs a;
  a.scale = scale;
  return call1("softmax", {x}, a);
}
Tensor log_softmax(const Tensor& x, double scale) {
  Attrs a;
  a.scale = scale;
  return call1("log_softmax", {x}, a);
}

Tensor add(const Tensor& a, const Tensor& b) { return call1("add", {a, b}); }
Tensor mul(const Tensor& a, const Tensor& b) { return call1("mul", {a, b}); }
Tensor prelu(const Tensor& a, const Tensor& b) { return call1("prelu", {a, b}); }
Tensor copy(const Tensor& x) { return call1("copy", {x}); }
Tensor activation(const std::string& act, const Tensor& x) {
  static const char* const kActs[] = {"relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu", "mish"};
  for (const char* a : kActs)
    if (act == a) return call1(a, {x});
  throw Error(ErrorCode::InvalidArgument, "activation: argument 'act' is '" + act +
                                              "'; expected relu, sigmoid, tanh, gelu, gelu_tanh, silu or mish");
}

}  // namespace kf
