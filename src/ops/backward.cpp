// The backward kernels of docs/ops.md section 3 (training), declared once for every backend: the input
// gradient of every activation, of dropout and of softmax, and the input, weight and bias gradients of
// layer_norm and rms_norm. Each takes the output gradient dy first; the float64 references are the
// analytic derivatives (tests/test_grad.cpp also checks them against finite differences of the forward
// references).
#include <cmath>

#include "ops/op_checks.hpp"
#include "ops/parallel.hpp"
#include "ops/reference_math.hpp"
#include "ops/registry.hpp"

namespace kf {
namespace {

using namespace opcheck;

// d act / dx, in float64.
double d_relu(double x) { return x > 0 ? 1.0 : 0.0; }  // torch: the gradient passes where x > 0
double d_sigmoid(double x) {
  const double s = ref::sigmoid(x);
  return s * (1 - s);
}
double d_tanh(double x) {
  const double t = std::tanh(x);
  return 1 - t * t;
}
double d_gelu(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}
double d_gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  const double t = std::tanh(k * (x + c * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
}
double d_silu(double x) {
  const double s = ref::sigmoid(x);
  return s * (1 + x * (1 - s));
}
double d_mish(double x) {
  const double t = std::tanh(ref::softplus(x));
  return t + x * (1 - t * t) * ref::sigmoid(x);
}

void check_same_as_dy(const OpDef& d, const std::vector<Shape>& in, size_t k) {
  if (in[k] != in[0]) shape_error(d, d.inputs[k], in[k], to_string(in[0]) + " (the shape of 'dy')");
}

// <act>_backward(dy, x) = dy * act'(x): an elementwise op (eltwise.comp, activations_grad.glsl).
OpDef act_backward(const std::string& act, double flops, bool transcendental, double (*deriv)(double)) {
  OpDef op;
  op.name = act + "_backward";
  op.inputs = {"dy", "x"};
  op.required_inputs = 2;
  op.outputs = {"dx"};
  op.transcendental = transcendental;
  op.flops_per_element = flops;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs&) {
    check_same_as_dy(d, in, 1);
    return std::vector<Shape>{in[0]};
  };
  op.reference = [deriv](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs&) {
    auto& y = out[0].data;
    parallel_for(static_cast<int64_t>(y.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = in[0].data[i] * deriv(in[1].data[i]);
    });
  };
  op.tests = {{"n1", {{1}, {1}}},
              {"n17", {{17}, {17}}},
              {"n1000003", {{1000003}, {1000003}}},
              {"rows7x33", {{7, 33}, {7, 33}}, {}, 4},
              {"wide_range", {{3, 1001}, {3, 1001}}, {}, 30}};
  op.bench = {{"full", {{16384, 4096}, {16384, 4096}}}};
  return op;
}

// dropout_backward(dy) = dropout(dy) with the forward's (p, seed, offset): the same mask from the
// Philox generator, recomputed, never stored (eltwise.comp's dropout).
OpDef dropout_backward() {
  OpDef op;
  op.name = "dropout_backward";
  op.inputs = {"dy"};
  op.required_inputs = 1;
  op.outputs = {"dx"};
  op.random = true;
  op.flops_per_element = 2;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
    if (!(a.p >= 0 && a.p < 1)) value_error(d, "p", a.p, "a probability in [0, 1)");
    return std::vector<Shape>{in[0]};
  };
  op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
    const uint32_t thr = ref::dropout_threshold(a.p);
    auto& y = out[0].data;
    parallel_for(static_cast<int64_t>(y.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        y[i] = a.p == 0 ? in[0].data[i]
                        : (ref::dropout_keep(static_cast<uint64_t>(i), a.seed, a.offset, thr) ? in[0].data[i] / (1 - a.p) : 0.0);
    });
  };
  const double ps[] = {0.0, 0.5, 0.1, 0.9};
  const uint64_t seeds[] = {42, 0x123456789abcdefull, 7, 1ull << 40};
  const Shape shapes[] = {{1}, {17}, {1000003}, {7, 33}};
  for (int k = 0; k < 4; ++k) {
    TestCase tc{"x" + to_string(shapes[k]), {shapes[k]}};
    tc.attrs.p = ps[k];
    tc.attrs.seed = seeds[k];
    tc.attrs.offset = uint64_t(k) * 977;
    op.tests.push_back(tc);
  }
  TestCase b{"p0.1", {{16384, 4096}}};
  b.attrs.p = 0.1;
  b.attrs.seed = 1234;
  op.bench = {b};
  return op;
}

std::vector<Shape> row_shapes() {
  return {{1, 1}, {300, 17}, {64, 1000}, {8, 8192}, {2, 50000}, {3, 100003}, {1000, 3}, {5, 3, 40}};
}

// softmax_backward(dy, y) = s * y * (dy - sum(dy * y)) per row, with softmax's scale s (Attrs::scale).
OpDef softmax_backward() {
  OpDef op;
  op.name = "softmax_backward";
  op.family = Family::Normalization;
  op.inputs = {"dy", "y"};
  op.required_inputs = 2;
  op.outputs = {"dx"};
  op.flops_per_element = 4;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
    if (!std::isfinite(a.scale)) value_error(d, "scale", a.scale, "a finite number");
    check_same_as_dy(d, in, 1);
    return std::vector<Shape>{in[0]};
  };
  op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
    const int64_t L = features(in[0].shape), R = rows_of(in[0].shape);
    parallel_for(R, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const double *dy = &in[0].data[r * L], *y = &in[1].data[r * L];
        double s = 0;
        for (int64_t j = 0; j < L; ++j) s += dy[j] * y[j];
        for (int64_t j = 0; j < L; ++j) out[0].data[r * L + j] = a.scale * y[j] * (dy[j] - s);
      }
    }, 1);
  };
  op.terms = [](const std::vector<Shape>& in) { return double(features(in[0])); };
  // y is a softmax output in use (positive, rows summing to 1): the tests draw it as one, so that
  // sum(dy * y) is the weighted mean it is in training rather than a sum of random signs over 10^5 terms.
  op.prepare_inputs = [](const std::vector<Shape>& shapes, const Attrs&, std::vector<std::vector<double>>& v) {
    const int64_t L = features(shapes[1]), R = rows_of(shapes[1]);
    for (int64_t r = 0; r < R; ++r) {
      double* y = &v[1][static_cast<size_t>(r * L)];
      double m = y[0], sum = 0;
      for (int64_t j = 0; j < L; ++j) m = std::max(m, y[j]);
      for (int64_t j = 0; j < L; ++j) sum += (y[j] = std::exp(y[j] - m));
      for (int64_t j = 0; j < L; ++j) y[j] /= sum;
    }
  };
  for (const Shape& s : row_shapes()) op.tests.push_back({"x" + to_string(s), {s, s}, {}, 3});
  op.tests.push_back({"scale0.5", {{4, 333}, {4, 333}}});
  op.tests.back().attrs.scale = 0.5;
  op.bench = {{"rows4096", {{16384, 4096}, {16384, 4096}}}};
  return op;
}

// layer_norm_backward(dy, x, w?) -> (dx, dw, db) and rms_norm_backward(dy, x, w?) -> (dx, dw), with the
// forward's eps. Without w the gradients are those of w = 1 (dw and db are still returned).
OpDef norm_backward(bool layer) {
  OpDef op;
  op.name = layer ? "layer_norm_backward" : "rms_norm_backward";
  op.family = Family::Normalization;
  op.inputs = {"dy", "x", "w"};
  op.required_inputs = 2;
  op.outputs = layer ? std::vector<std::string>{"dx", "dw", "db"} : std::vector<std::string>{"dx", "dw"};
  op.default_eps = layer ? 1e-5 : 1e-6;
  op.flops_per_element = layer ? 14 : 10;
  op.infer = [layer](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
    check_eps(d, a);
    check_same_as_dy(d, in, 1);
    const Shape f = {features(in[0])};
    expect_shape(d, in, 2, f);
    return layer ? std::vector<Shape>{in[0], f, f} : std::vector<Shape>{in[0], f};
  };
  const double def_eps = op.default_eps;
  op.reference = [layer, def_eps](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
    const double eps = a.eps == 0 ? def_eps : a.eps;
    const int64_t L = features(in[0].shape), R = rows_of(in[0].shape);
    const bool has_w = in.size() > 2 && in[2].present();
    std::vector<double> mean(static_cast<size_t>(R)), rstd(static_cast<size_t>(R));
    parallel_for(R, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const double *dy = &in[0].data[r * L], *x = &in[1].data[r * L];
        double m = 0, m2 = 0;
        if (layer) {
          for (int64_t j = 0; j < L; ++j) m += x[j];
          m /= double(L);
        }
        for (int64_t j = 0; j < L; ++j) m2 += (x[j] - m) * (x[j] - m);
        const double rs = 1 / std::sqrt(m2 / double(L) + eps);
        mean[r] = m, rstd[r] = rs;
        double sg = 0, sgx = 0;
        for (int64_t j = 0; j < L; ++j) {
          const double g = dy[j] * (has_w ? in[2].data[j] : 1.0);
          sg += g, sgx += g * (x[j] - m) * rs;
        }
        if (!layer) sg = 0;
        for (int64_t j = 0; j < L; ++j) {
          const double g = dy[j] * (has_w ? in[2].data[j] : 1.0), xhat = (x[j] - m) * rs;
          out[0].data[r * L + j] = rs * (g - sg / double(L) - xhat * sgx / double(L));
        }
      }
    }, 1);
    parallel_for(L, [&](int64_t f0, int64_t f1) {
      for (int64_t f = f0; f < f1; ++f) {
        double dw = 0, db = 0;
        for (int64_t r = 0; r < R; ++r) {
          const double dy = in[0].data[r * L + f];
          dw += dy * (in[1].data[r * L + f] - mean[r]) * rstd[r];
          db += dy;
        }
        out[1].data[f] = dw;
        if (layer) out[2].data[f] = db;
      }
    }, 64);
  };
  op.terms = [](const std::vector<Shape>& in) { return double(std::max(features(in[0]), rows_of(in[0]))); };
  int k = 0;
  for (Shape s : row_shapes()) {
    // A row of one element is degenerate for rms norm: its output is sign(x), the gradient the rounding
    // residue of 1 - xhat^2 (an f32 kernel cannot match the float64 value in relative terms).
    if (!layer && s == Shape{1, 1}) s = {1, 7};
    TestCase tc{"x" + to_string(s), {s, s}, {}, 2};
    if (k++ % 2 == 0) tc.inputs.push_back({features(s)});
    else tc.label += "_no_w";
    op.tests.push_back(tc);
  }
  op.tests.push_back({"x[6, 257]_eps0.5", {{6, 257}, {6, 257}, {257}}, {}, 3});
  op.tests.back().attrs.eps = 0.5;
  op.tests.push_back({"x[4096, 24]_many_rows", {{4096, 24}, {4096, 24}, {24}}});
  // The bench's row length with w: the CUDA fused kernel's column sums and w take exactly 48 KiB of
  // shared memory there in f32 (a launch failure on the H100 until the opt-in covered it).
  op.tests.push_back({"x[40, 4096]", {{40, 4096}, {40, 4096}, {4096}}});
  op.bench = {{"rows4096", {{16384, 4096}, {16384, 4096}, {4096}}}};
  return op;
}

}  // namespace

void register_backward_ops(std::vector<OpDef>& ops) {
  ops.push_back(act_backward("relu", 1, false, d_relu));
  ops.push_back(act_backward("sigmoid", 6, true, d_sigmoid));
  ops.push_back(act_backward("tanh", 6, true, d_tanh));
  ops.push_back(act_backward("gelu", 20, true, d_gelu));
  ops.push_back(act_backward("gelu_tanh", 16, true, d_gelu_tanh));
  ops.push_back(act_backward("silu", 8, true, d_silu));
  ops.push_back(act_backward("mish", 16, true, d_mish));
  ops.push_back(dropout_backward());
  ops.push_back(softmax_backward());
  ops.push_back(norm_backward(true));
  ops.push_back(norm_backward(false));
}

}  // namespace kf
