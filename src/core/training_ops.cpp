// Typed entry points of kf/training.hpp: thin wrappers over Context::call and Context::run.
#include "kf/training.hpp"

#include "core/typed_call.hpp"
#include "kf/error.hpp"
#include "ops/registry.hpp"

namespace kf {
namespace {

std::vector<Tensor> call(const std::string& op, std::vector<Tensor> in, const Attrs& a = {}) {
  return detail::call_op(op, std::move(in), a);
}

Attrs eps_attrs(double eps) {
  Attrs a;
  a.eps = eps;
  return a;
}

// Checks every tensor of a list step before any dispatch, then runs each in place.
void step_lists(const std::string& op, const std::vector<std::vector<Tensor>>& lists, const Attrs& a) {
  const size_t n = lists[0].size();
  for (size_t k = 1; k < lists.size(); ++k)
    if (lists[k].size() != n)
      throw Error(ErrorCode::InvalidArgument, op + ": the tensor lists have different lengths (" + std::to_string(n) +
                                                  " and " + std::to_string(lists[k].size()) + ")");
  if (n == 0) return;
  const OpDef& def = get_op(op);
  for (size_t i = 0; i < n; ++i) {
    std::vector<const Tensor*> in;
    for (const auto& l : lists) in.push_back(&l[i]);
    if (!lists[0][i].defined())
      throw Error(ErrorCode::Shape, op + ": tensor " + std::to_string(i) + " of 'param' is undefined");
    check_call(def, in, a, lists[0][i].owner());
  }
  for (size_t i = 0; i < n; ++i) {
    std::vector<Tensor> in, out;
    for (const auto& l : lists) in.push_back(l[i]);
    for (const auto& [o, k] : def.in_place) out.push_back(in[static_cast<size_t>(k)]);
    Context::of(in[0]).run(op, in, out, a);
  }
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  return call("layer_norm", {x, w, b}, eps_attrs(eps))[0];
}
Tensor layer_norm_relu(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  return call("layer_norm_relu", {x, w, b}, eps_attrs(eps))[0];
}
Tensor layer_norm_gelu(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  return call("layer_norm_gelu", {x, w, b}, eps_attrs(eps))[0];
}
Tensor layer_norm_silu(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  return call("layer_norm_silu", {x, w, b}, eps_attrs(eps))[0];
}
Tensor rms_norm(const Tensor& x, const Tensor& w, double eps) { return call("rms_norm", {x, w}, eps_attrs(eps))[0]; }
Tensor rms_norm_gelu(const Tensor& x, const Tensor& w, double eps) {
  return call("rms_norm_gelu", {x, w}, eps_attrs(eps))[0];
}
Tensor rms_norm_silu(const Tensor& x, const Tensor& w, double eps) {
  return call("rms_norm_silu", {x, w}, eps_attrs(eps))[0];
}
std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& w, const Tensor& b,
                                         double eps) {
  auto o = call("add_layer_norm", {x, r, w, b}, eps_attrs(eps));
  return {o[0], o[1]};
}
std::pair<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& r, const Tensor& w, double eps) {
  auto o = call("add_rms_norm", {x, r, w}, eps_attrs(eps));
  return {o[0], o[1]};
}
Tensor batch_norm_relu(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& var,
                       double eps) {
  return call("batch_norm_relu", {x, w, b, mean, var}, eps_attrs(eps))[0];
}
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& w, const Tensor& b, double eps) {
  Attrs a = eps_attrs(eps);
  a.groups = groups;
  return call("group_norm", {x, w, b}, a)[0];
}

Tensor activation_backward(const std::string& act, const Tensor& dy, const Tensor& x) {
  return call(act + "_backward", {dy, x})[0];
}
Tensor dropout_backward(const Tensor& dy, double p, uint64_t seed, uint64_t offset) {
  Attrs a;
  a.p = p, a.seed = seed, a.offset = offset;
  return call("dropout_backward", {dy}, a)[0];
}
Tensor softmax_backward(const Tensor& dy, const Tensor& y, double scale) {
  Attrs a;
  a.scale = scale;
  return call("softmax_backward", {dy, y}, a)[0];
}
NormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, double eps) {
  auto o = call("layer_norm_backward", {dy, x, w}, eps_attrs(eps));
  return {o[0], o[1], o[2]};
}
NormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, double eps) {
  auto o = call("rms_norm_backward", {dy, x, w}, eps_attrs(eps));
  return {o[0], o[1], Tensor()};
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing) {
  Attrs a;
  a.ignore_index = ignore_index, a.label_smoothing = label_smoothing;
  return call("cross_entropy", {logits, target}, a)[0];
}
std::pair<Tensor, Tensor> cross_entropy_backward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                                 double label_smoothing) {
  Attrs a;
  a.ignore_index = ignore_index, a.label_smoothing = label_smoothing;
  auto o = call("cross_entropy_backward", {logits, target}, a);
  return {o[0], o[1]};
}
namespace {
Attrs lce_attrs(const LinearCrossEntropyOptions& o) {
  Attrs a;
  a.ignore_index = o.ignore_index;
  a.label_smoothing = o.label_smoothing;
  a.z_loss = o.z_loss;
  a.softcap = o.softcap;
  return a;
}
}  // namespace
Tensor linear_cross_entropy(const Tensor& h, const Tensor& W, const Tensor& target,
                            const LinearCrossEntropyOptions& options) {
  return call("linear_cross_entropy", {h, W, target}, lce_attrs(options))[0];
}
LinearCrossEntropyGrads linear_cross_entropy_backward(const Tensor& h, const Tensor& W, const Tensor& target,
                                                      const LinearCrossEntropyOptions& options) {
  auto o = call("linear_cross_entropy_backward", {h, W, target}, lce_attrs(options));
  return {o[0], o[1], o[2]};
}
Tensor mse(const Tensor& a, const Tensor& b) { return call("mse", {a, b})[0]; }
Tensor mse_backward(const Tensor& a, const Tensor& b) { return call("mse_backward", {a, b})[0]; }

void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                const std::vector<Tensor>& v, const AdamWOptions& o, int64_t step) {
  Attrs a;
  a.lr = o.lr, a.beta1 = o.beta1, a.beta2 = o.beta2, a.eps = o.eps, a.weight_decay = o.weight_decay, a.step = step;
  step_lists("adamw_step", {params, grads, m, v}, a);
}
void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              const std::vector<Tensor>& momentum_buffers, const SgdOptions& o, int64_t step) {
  Attrs a;
  a.lr = o.lr, a.momentum = o.momentum, a.dampening = o.dampening, a.weight_decay = o.weight_decay;
  a.nesterov = o.nesterov, a.step = step;
  step_lists("sgd_step", {params, grads, momentum_buffers}, a);
}

}  // namespace kf
