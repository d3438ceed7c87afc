// Optimizers (docs/ops.md section 6): adamw_step and sgd_step as torch.optim.AdamW and torch.optim.SGD,
// one tensor per op call. They update in place: each declares which outputs may be the same tensor as
// which inputs (OpDef::in_place), the one exception to the core's no-aliasing rule. Given separate
// outputs they leave the inputs as they were. The list form ("a list of tensors in one launch") is
// kf::adamw_step / kf::sgd_step of kf/training.hpp: one dispatch per tensor, all recorded into the same
// command buffer and submitted together.
#include <cmath>

#include "ops/op_checks.hpp"
#include "ops/parallel.hpp"
#include "ops/registry.hpp"

namespace kf {
namespace {

using namespace opcheck;

void check_same_shapes(const OpDef& d, const std::vector<Shape>& in) {
  for (size_t k = 1; k < in.size(); ++k)
    if (in[k] != in[0]) shape_error(d, d.inputs[k], in[k], to_string(in[0]) + " (the shape of 'param')");
}

void check_finite_nonneg(const OpDef& d, const char* arg, double v) {
  if (!(v >= 0) || !std::isfinite(v)) value_error(d, arg, v, "a finite number >= 0");
}

void check_step(const OpDef& d, const Attrs& a) {
  if (a.step < 1) value_error(d, "step", double(a.step), "the step being taken, from 1");
}

std::vector<TestCase> optimizer_tests(size_t n_inputs, const std::vector<Attrs>& forms) {
  std::vector<TestCase> t;
  const Shape shapes[] = {{1}, {17}, {1000003}, {7, 33}, {3, 4099}};
  for (size_t k = 0; k < std::size(shapes); ++k) {
    TestCase tc{"x" + to_string(shapes[k]), std::vector<Shape>(n_inputs, shapes[k])};
    tc.attrs = forms[k % forms.size()];
    t.push_back(tc);
  }
  for (size_t f = 0; f < forms.size(); ++f) {
    TestCase tc{"form" + std::to_string(f) + "_x[5, 65]", std::vector<Shape>(n_inputs, Shape{5, 65})};
    tc.attrs = forms[f];
    t.push_back(tc);
  }
  return t;
}

// adamw_step(param, grad, m, v) -> (param, m, v): decoupled weight decay, bias correction.
OpDef adamw_step() {
  OpDef op;
  op.name = "adamw_step";
  op.family = Family::Optimizer;
  op.inputs = {"param", "grad", "m", "v"};
  op.required_inputs = 4;
  op.outputs = {"param_out", "m_out", "v_out"};
  op.in_place = {{0, 0}, {1, 2}, {2, 3}};
  op.default_eps = 1e-8;
  op.flops_per_element = 14;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
    check_same_shapes(d, in);
    check_eps(d, a);
    check_finite_nonneg(d, "lr", a.lr);
    check_finite_nonneg(d, "weight_decay", a.weight_decay);
    if (!(a.beta1 >= 0 && a.beta1 < 1)) value_error(d, "beta1", a.beta1, "a number in [0, 1)");
    if (!(a.beta2 >= 0 && a.beta2 < 1)) value_error(d, "beta2", a.beta2, "a number in [0, 1)");
    check_step(d, a);
    return std::vector<Shape>{in[0], in[0], in[0]};
  };
  op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
    const double eps = a.eps == 0 ? 1e-8 : a.eps;
    const double bc1 = 1 - std::pow(a.beta1, double(a.step)), bc2 = 1 - std::pow(a.beta2, double(a.step));
    const double step_size = a.lr / bc1, sqrt_bc2 = std::sqrt(bc2);
    parallel_for(static_cast<int64_t>(in[0].data.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const double g = in[1].data[i];
        double p = in[0].data[i] * (1 - a.lr * a.weight_decay);
        const double m = a.beta1 * in[2].data[i] + (1 - a.beta1) * g;
        const double v = a.beta2 * in[3].data[i] + (1 - a.beta2) * g * g;
        p -= step_size * m / (std::sqrt(v) / sqrt_bc2 + eps);
        out[0].data[i] = p, out[1].data[i] = m, out[2].data[i] = v;
      }
    });
  };
  // The second moment is never negative.
  op.prepare_inputs = [](const std::vector<Shape>&, const Attrs&, std::vector<std::vector<double>>& v) {
    for (auto& e : v[3]) e = e * e;
  };
  op.nonneg_inputs = {3};
  std::vector<Attrs> forms(3);
  forms[1].lr = 1e-2, forms[1].weight_decay = 1e-2, forms[1].step = 10;
  forms[2].lr = 3e-4, forms[2].beta1 = 0.8, forms[2].beta2 = 0.95, forms[2].eps = 1e-6, forms[2].step = 1000;
  op.tests = optimizer_tests(4, forms);
  TestCase b{"n64M", std::vector<Shape>(4, Shape{67108864})};
  b.attrs.weight_decay = 1e-2, b.attrs.step = 10;
  op.bench = {b};
  return op;
}

// sgd_step(param, grad, momentum_buffer) -> (param, momentum_buffer). On step 1 the buffer starts as the
// gradient (torch creates it then); with momentum 0 it is not used and comes back unchanged.
OpDef sgd_step() {
  OpDef op;
  op.name = "sgd_step";
  op.family = Family::Optimizer;
  op.inputs = {"param", "grad", "momentum_buffer"};
  op.required_inputs = 3;
  op.outputs = {"param_out", "momentum_buffer_out"};
  op.in_place = {{0, 0}, {1, 2}};
  op.flops_per_element = 6;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
    check_same_shapes(d, in);
    check_finite_nonneg(d, "lr", a.lr);
    check_finite_nonneg(d, "weight_decay", a.weight_decay);
    check_finite_nonneg(d, "momentum", a.momentum);
    if (!(a.dampening >= 0 && a.dampening <= 1)) value_error(d, "dampening", a.dampening, "a number in [0, 1]");
    if (a.nesterov && (a.momentum <= 0 || a.dampening != 0))
      value_error(d, "nesterov", 1, "momentum > 0 and dampening 0 (as torch.optim.SGD)");
    check_step(d, a);
    return std::vector<Shape>{in[0], in[0]};
  };
  op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
    parallel_for(static_cast<int64_t>(in[0].data.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const double p = in[0].data[i];
        double g = in[1].data[i] + a.weight_decay * p, buf = in[2].data[i];
        if (a.momentum != 0) {
          buf = a.step == 1 ? g : a.momentum * buf + (1 - a.dampening) * g;
          g = a.nesterov ? g + a.momentum * buf : buf;
        }
        out[0].data[i] = p - a.lr * g;
        out[1].data[i] = buf;
      }
    });
  };
  std::vector<Attrs> forms(4);
  forms[0].lr = 0.1;
  forms[1].lr = 0.05, forms[1].momentum = 0.9, forms[1].step = 3, forms[1].weight_decay = 1e-4;
  forms[2].lr = 0.05, forms[2].momentum = 0.9, forms[2].nesterov = true, forms[2].step = 5;
  forms[3].lr = 0.01, forms[3].momentum = 0.5, forms[3].dampening = 0.1, forms[3].step = 1;
  op.tests = optimizer_tests(3, forms);
  TestCase b{"n64M_momentum", std::vector<Shape>(3, Shape{67108864})};
  b.attrs.lr = 0.1, b.attrs.momentum = 0.9, b.attrs.step = 10;
  op.bench = {b};
  return op;
}

}  // namespace

void register_optimizer_ops(std::vector<OpDef>& ops) {
  ops.push_back(adamw_step());
  ops.push_back(sgd_step());
}

}  // namespace kf
