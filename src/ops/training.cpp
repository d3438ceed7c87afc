// Section 6 of docs/ops.md (losses, optimizers) and the backward kernels of section 3, declared once for
// every backend.
#include <cmath>
#include <limits>

#include "ops/op_checks.hpp"
#include "ops/parallel.hpp"
#include "ops/reference_math.hpp"
#include "ops/registry.hpp"

namespace kf {
namespace {

using namespace opcheck;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- cross_entropy ---------------------------------------------------------------------------------
// Two ops share one kernel: cross_entropy(logits, target) -> loss, and cross_entropy_backward(logits,
// target) -> (loss, d_logits), which computes the loss and its gradient in the same pass over the
// logits. Two ops rather than an optional output: the registry's outputs are fixed per op, so the tests,
// kf-conformance and kf-bench cover both forms without a special case, and a training step calls the
// second one only (it needs no separate forward). The gradient is of the mean loss (d loss = 1): the loss
// is the root of the graph; a caller that scales the loss scales the gradient itself.

// Class indices for the tests: uniform over [0, C), about one row in seven set to ignore_index.
void prepare_targets(const std::vector<Shape>& shapes, const Attrs& a, std::vector<std::vector<double>>& v) {
  const double C = static_cast<double>(shapes[0].back());
  for (auto& t : v[1]) {
    const double u = std::fabs(t) * 1000 - std::floor(std::fabs(t) * 1000);  // about uniform in [0, 1)
    const double c = std::min(C - 1, std::floor(u * C));
    t = std::fmod(std::floor(std::fabs(t) * 7919.0), 7.0) == 3.0 ? static_cast<double>(a.ignore_index) : c;
  }
}

void check_xent(const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
  if (in[0].size() != 2) shape_error(d, "logits", in[0], "[N, C] (2 dimensions)");
  expect_shape(d, in, 1, {in[0][0]});
  if (!(a.label_smoothing >= 0 && a.label_smoothing <= 1))
    value_error(d, "label_smoothing", a.label_smoothing, "a number in [0, 1]");
}

// The float64 reference of both ops. An out-of-range target (not ignore_index) raises kf::Error here,
// which is also the CPU backend's check.
void xent_reference(const std::string& name, const std::vector<HostTensor>& in, std::vector<HostTensor>& out,
                    const Attrs& a, bool grad) {
  const int64_t N = in[0].shape[0], C = in[0].shape[1];
  const double eps = a.label_smoothing;
  int64_t count = 0;
  for (int64_t r = 0; r < N; ++r) {
    const double t = in[1].data[r];
    if (t == static_cast<double>(a.ignore_index)) continue;
    if (!(t >= 0 && t < static_cast<double>(C)))
      throw Error(ErrorCode::InvalidArgument, name + ": argument 'target' holds " + std::to_string(int64_t(t)) +
                                                  " at row " + std::to_string(r) + ", outside [0, " +
                                                  std::to_string(C) + ") and not ignore_index (" +
                                                  std::to_string(a.ignore_index) + ")");
    ++count;
  }
  std::vector<double> loss(static_cast<size_t>(N), 0.0);
  parallel_for(N, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const double* x = &in[0].data[r * C];
      const double t = in[1].data[r];
      const bool ignored = t == static_cast<double>(a.ignore_index);
      double m = -std::numeric_limits<double>::infinity(), s = 0, sx = 0;
      for (int64_t c = 0; c < C; ++c) m = std::max(m, x[c]);
      for (int64_t c = 0; c < C; ++c) s += std::exp(x[c] - m), sx += x[c];
      const double lse = m + std::log(s);
      if (!ignored) loss[r] = lse - (1 - eps) * x[int64_t(t)] - eps / double(C) * sx;
      if (!grad) continue;
      double* g = &out[1].data[r * C];
      for (int64_t c = 0; c < C; ++c)
        g[c] = ignored ? 0.0 : (std::exp(x[c] - lse) - eps / double(C) - (c == int64_t(t) ? 1 - eps : 0.0)) / double(count);
    }
  }, 1);
  double total = 0;
  for (double l : loss) total += l;
  out[0].data[0] = count == 0 ? kNaN : total / double(count);
}

OpDef cross_entropy(bool grad) {
  OpDef op;
  op.name = grad ? "cross_entropy_backward" : "cross_entropy";
  op.family = Family::Loss;
  op.inputs = {"logits", "target"};
  op.required_inputs = 2;
  op.input_dtypes = {std::nullopt, DType::i32};
  op.outputs = grad ? std::vector<std::string>{"loss", "d_logits"} : std::vector<std::string>{"loss"};
  op.dtypes = {DType::f32, DType::f16, DType::bf16, DType::f64};
  op.transcendental = true;
  op.flops_per_element = grad ? 8 : 5;
  op.infer = [grad](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
    check_xent(d, in, a);
    return grad ? std::vector<Shape>{Shape{}, in[0]} : std::vector<Shape>{Shape{}};
  };
  const std::string name = op.name;
  op.reference = [name, grad](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
    xent_reference(name, in, out, a, grad);
  };
  op.prepare_inputs = prepare_targets;
  op.terms = [](const std::vector<Shape>& in) { return double(in[0].back()); };
  struct C {
    int64_t n, c;
    double smoothing;
    int64_t ignore;
  };
  // Short rows (several per workgroup), one workgroup per row, rows split in chunks (vocabularies up to
  // 256k), sizes off the pack, label smoothing and another ignore_index.
  for (const C& c : {C{1, 1, 0, -100}, C{300, 17, 0, -100}, C{64, 1000, 0.1, -100}, C{8, 8192, 0, -100},
                     C{6, 20000, 0.1, -100}, C{4, 50000, 0, -100}, C{3, 100003, 0.2, -100}, C{2, 262144, 0, -100}, C{33, 10, 0.05, 3},
                     C{5, 4097, 1.0, 0}}) {
    TestCase tc{"n" + std::to_string(c.n) + "_c" + std::to_string(c.c), {{c.n, c.c}, {c.n}}, {}, 4};
    tc.attrs.label_smoothing = c.smoothing;
    tc.attrs.ignore_index = c.ignore;
    if (c.smoothing > 0) tc.label += "_smoothing" + std::to_string(c.smoothing).substr(0, 4);
    if (c.ignore != -100) tc.label += "_ignore" + std::to_string(c.ignore);
    op.tests.push_back(tc);
  }
  op.bench = {{"n4096_c32768", {{4096, 32768}, {4096}}}, {"n1024_c131072", {{1024, 131072}, {1024}}}};
  return op;
}

// ---- mse -------------------------------------------------------------------------------------------
OpDef mse() {
  OpDef op;
  op.name = "mse";
  op.family = Family::Loss;
  op.inputs = {"a", "b"};
  op.required_inputs = 2;
  op.outputs = {"loss"};
  op.flops_per_element = 3;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs&) {
    if (in[1] != in[0]) shape_error(d, "b", in[1], to_string(in[0]) + " (the shape of 'a')");
    return std::vector<Shape>{Shape{}};
  };
  op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs&) {
    double s = 0;
    for (size_t i = 0; i < in[0].data.size(); ++i) s += (in[0].data[i] - in[1].data[i]) * (in[0].data[i] - in[1].data[i]);
    out[0].data[0] = s / double(in[0].data.size());
  };
  op.terms = [](const std::vector<Shape>& in) { return double(numel(in[0])); };
  for (const Shape& s : {Shape{1}, Shape{3}, Shape{17}, Shape{1000003}, Shape{7, 33}, Shape{2, 65536}, Shape{4099, 3}})
    op.tests.push_back({"x" + to_string(s), {s, s}});
  op.bench = {{"n64M", {{16384, 4096}, {16384, 4096}}}};
  return op;
}

OpDef mse_backward() {
  OpDef op;
  op.name = "mse_backward";
  op.family = Family::Elementwise;  // eltwise.comp: 2 (a - b) / n
  op.inputs = {"a", "b"};
  op.required_inputs = 2;
  op.outputs = {"d_a"};
  op.flops_per_element = 3;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs&) {
    if (in[1] != in[0]) shape_error(d, "b", in[1], to_string(in[0]) + " (the shape of 'a')");
    return std::vector<Shape>{in[0]};
  };
  op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs&) {
    const double n = double(in[0].data.size());
    for (size_t i = 0; i < in[0].data.size(); ++i) out[0].data[i] = 2 * (in[0].data[i] - in[1].data[i]) / n;
  };
  for (const Shape& s : {Shape{1}, Shape{3}, Shape{17}, Shape{1000003}, Shape{7, 33}, Shape{2, 65536}})
    op.tests.push_back({"x" + to_string(s), {s, s}});
  op.bench = {{"n64M", {{16384, 4096}, {16384, 4096}}}};
  return op;
}

}  // namespace

void register_training_ops(std::vector<OpDef>& ops) {
  ops.push_back(cross_entropy(false));
  ops.push_back(cross_entropy(true));
  ops.push_back(mse());
  ops.push_back(mse_backward());
  register_backward_ops(ops);
  register_optimizer_ops(ops);
  register_linear_cross_entropy_ops(ops);
}

}  // namespace kf
