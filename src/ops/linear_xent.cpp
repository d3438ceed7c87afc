// linear_cross_entropy (docs/ops.md section 6): the loss of a language model's head without the logits.
//   logits = h W^T                                    h [N, d], W [C, d] (torch.nn.Linear's weight)
//   logits = softcap * tanh(logits / softcap)          when softcap > 0 (Gemma 2's final-logit capping)
//   loss   = cross_entropy(logits, target, ignore_index, label_smoothing)     (the mean over rows kept)
//          + z_loss * mean(lse^2) over the same rows   when z_loss > 0 (PaLM's auxiliary loss)
// Two ops, as cross_entropy: linear_cross_entropy -> loss, and linear_cross_entropy_backward -> (loss,
// d_h, d_W), the gradients of that loss (d loss = 1). A backend computes them chunk by chunk over the rows,
// so that the N x C logits never exist whole in memory (hal/vulkan/lce.cpp).
// Choices where docs/ops.md is silent: the z-loss term is added per row to the rows not ignored and
// divided by the same count as the cross entropy (as Liger-Kernel's lse_square_scale and PaLM); label
// smoothing is torch's (eps / C on every class, the smoothed term over the capped logits); with every row
// ignored the loss is NaN and the gradients are zero, as torch.nn.functional.cross_entropy.
#include <cmath>
#include <limits>

#include "ops/op_checks.hpp"
#include "ops/parallel.hpp"
#include "ops/registry.hpp"

namespace kf {
namespace {

using namespace opcheck;

// Targets: uniform over [0, C), about one row in seven set to ignore_index.
void prepare(const std::vector<Shape>& shapes, const Attrs& a, std::vector<std::vector<double>>& v) {
  const double C = static_cast<double>(shapes[1][0]);
  for (auto& t : v[2]) {
    const double u = std::fabs(t) * 1000 - std::floor(std::fabs(t) * 1000);
    const double c = std::min(C - 1, std::floor(u * C));
    t = std::fmod(std::floor(std::fabs(t) * 7919.0), 7.0) == 3.0 ? static_cast<double>(a.ignore_index) : c;
  }
}

void check(const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
  if (in[0].size() != 2) shape_error(d, "h", in[0], "[N, d] (2 dimensions)");
  if (in[1].size() != 2 || in[1][1] != in[0][1])
    shape_error(d, "W", in[1], "[C, " + std::to_string(in[0][1]) + "] (d = the last dimension of h)");
  expect_shape(d, in, 2, {in[0][0]});
  if (!(a.label_smoothing >= 0 && a.label_smoothing <= 1))
    value_error(d, "label_smoothing", a.label_smoothing, "a number in [0, 1]");
  if (!(a.z_loss >= 0) || !std::isfinite(a.z_loss)) value_error(d, "z_loss", a.z_loss, "a finite number >= 0 (0: off)");
  if (!(a.softcap >= 0) || !std::isfinite(a.softcap))
    value_error(d, "softcap", a.softcap, "a finite number >= 0 (0: no soft-capping)");
}

void reference(const std::string& name, const std::vector<HostTensor>& in, std::vector<HostTensor>& out,
               const Attrs& a, bool grad) {
  const int64_t N = in[0].shape[0], D = in[0].shape[1], C = in[1].shape[0];
  const double eps = a.label_smoothing, cap = a.softcap, zl = a.z_loss;
  const auto ignored = [&](int64_t r) { return in[2].data[r] == static_cast<double>(a.ignore_index); };
  int64_t count = 0;
  for (int64_t r = 0; r < N; ++r) {
    if (ignored(r)) continue;
    const double t = in[2].data[r];
    if (!(t >= 0 && t < static_cast<double>(C)))
      throw Error(ErrorCode::InvalidArgument, name + ": argument 'target' holds " + std::to_string(int64_t(t)) +
                                                  " at row " + std::to_string(r) + ", outside [0, " +
                                                  std::to_string(C) + ") and not ignore_index (" +
                                                  std::to_string(a.ignore_index) + ")");
    ++count;
  }
  std::vector<double> loss(static_cast<size_t>(N), 0.0);
  std::vector<double> g(grad ? static_cast<size_t>(N * C) : 0);  // d logits (before the cap's derivative: after)
  const double* h = in[0].data.data();
  const double* W = in[1].data.data();
  parallel_for(N, [&](int64_t r0, int64_t r1) {
    std::vector<double> x(static_cast<size_t>(C));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        double z = 0;
        for (int64_t k = 0; k < D; ++k) z += h[r * D + k] * W[c * D + k];
        x[c] = cap > 0 ? cap * std::tanh(z / cap) : z;
      }
      if (ignored(r)) continue;  // loss 0, gradient 0
      const int64_t t = static_cast<int64_t>(in[2].data[r]);
      double m = -std::numeric_limits<double>::infinity(), s = 0, sx = 0;
      for (int64_t c = 0; c < C; ++c) m = std::max(m, x[c]);
      for (int64_t c = 0; c < C; ++c) s += std::exp(x[c] - m), sx += x[c];
      const double lse = m + std::log(s);
      loss[r] = lse - (1 - eps) * x[t] - eps / double(C) * sx + zl * lse * lse;
      if (!grad) continue;
      for (int64_t c = 0; c < C; ++c) {
        const double p = std::exp(x[c] - lse);
        double v = (p * (1 + 2 * zl * lse) - eps / double(C) - (c == t ? 1 - eps : 0.0)) / double(count);
        if (cap > 0) v *= 1 - (x[c] / cap) * (x[c] / cap);  // d (c tanh(z / c)) / dz, exact enough in f64
        g[r * C + c] = v;
      }
    }
  }, 1);
  double total = 0;
  for (double l : loss) total += l;
  out[0].data[0] = count == 0 ? std::numeric_limits<double>::quiet_NaN() : total / double(count);
  if (!grad) return;
  double* dh = out[1].data.data();
  double* dW = out[2].data.data();
  parallel_for(N, [&](int64_t r0, int64_t r1) {  // d_h = G W
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t k = 0; k < D; ++k) {
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += g[r * C + c] * W[c * D + k];
        dh[r * D + k] = s;
      }
  }, 1);
  parallel_for(C, [&](int64_t c0, int64_t c1) {  // d_W = G^T h
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t k = 0; k < D; ++k) {
        double s = 0;
        for (int64_t r = 0; r < N; ++r) s += g[r * C + c] * h[r * D + k];
        dW[c * D + k] = s;
      }
  }, 1);
}

OpDef linear_cross_entropy(bool grad) {
  OpDef op;
  op.name = grad ? "linear_cross_entropy_backward" : "linear_cross_entropy";
  op.family = Family::Loss;
  op.inputs = {"h", "W", "target"};
  op.required_inputs = 3;
  op.input_dtypes = {std::nullopt, std::nullopt, DType::i32};
  op.outputs = grad ? std::vector<std::string>{"loss", "d_h", "d_W"} : std::vector<std::string>{"loss"};
  op.dtypes = {DType::f32, DType::f16, DType::bf16, DType::f64};  // f64: CPU only (exp, tanh)
  op.transcendental = true;
  op.infer = [grad](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
    check(d, in, a);
    return grad ? std::vector<Shape>{Shape{}, in[0], in[1]} : std::vector<Shape>{Shape{}};
  };
  const std::string name = op.name;
  op.reference = [name, grad](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
    reference(name, in, out, a, grad);
  };
  op.prepare_inputs = prepare;
  // The loss sums C logits of d products per row; d_h sums C terms, d_W sums N.
  op.terms = [](const std::vector<Shape>& in) { return double(in[1][0] + in[0][1] + in[0][0]); };
  // The matrix products: h W^T, then for the gradients G W and G^T h (2 N C d each).
  op.flops = [grad](const std::vector<Shape>& in, const Attrs&) {
    return (grad ? 6.0 : 2.0) * double(in[0][0]) * double(in[1][0]) * double(in[0][1]);
  };
  struct K {
    int64_t n, d, c;
    double smoothing, z, cap;
    int64_t ignore;
  };
  // One row and one class; sizes off every pack and tile; label smoothing; z-loss; soft-capping (with
  // logits large enough to saturate it); all three; rows longer than a workgroup's registers (the split
  // row path of the loss kernel, forward only: d_h = G W sums C products, and a sum of 10^4 products in
  // f32 alone is off by about 2e-6 relative, over the f32 limit; tests/test_training.cpp checks the
  // backward's split path with that allowance); another ignore_index.
  std::vector<K> cases = {K{1, 1, 1, 0, 0, 0, -100},          K{17, 5, 33, 0.1, 0, 0, -100},
                          K{37, 24, 1000, 0, 1e-2, 0, -100},  K{33, 70, 130, 0, 0, 3.0, -100},
                          K{65, 16, 257, 0.2, 5e-3, 5.0, -100}, K{20, 33, 67, 0, 0, 0, 4},
                          // C and d multiples of 8, n not of 32: the three products take the tensor
                          // cores where the device has them (f16 and bf16), d W with a partial K slice
                          K{40, 64, 264, 0.1, 1e-3, 0, -100}, K{24, 72, 136, 0, 1e-3, 3.0, -100}};
  if (!grad) cases.push_back(K{6, 8, 10003, 0.05, 1e-3, 2.0, -100});
  for (const K& k : cases) {
    TestCase tc{"n" + std::to_string(k.n) + "_d" + std::to_string(k.d) + "_c" + std::to_string(k.c),
                {{k.n, k.d}, {k.c, k.d}, {k.n}}, {}, 1};
    tc.attrs.label_smoothing = k.smoothing;
    tc.attrs.z_loss = k.z;
    tc.attrs.softcap = k.cap;
    tc.attrs.ignore_index = k.ignore;
    if (k.smoothing > 0) tc.label += "_smoothing" + std::to_string(k.smoothing).substr(0, 4);
    if (k.z > 0) tc.label += "_zloss";
    if (k.cap > 0) tc.label += "_softcap" + std::to_string(int(k.cap));
    if (k.ignore != -100) tc.label += "_ignore" + std::to_string(k.ignore);
    if (k.d == 70) tc.range = 1.5;  // logits up to about 10: the cap saturates
    op.tests.push_back(tc);
  }
  // A language model's head: 8192 tokens, hidden 4096, a 128k vocabulary (the full logits would be 4 GiB
  // in f32).
  op.bench = {{"n8192_d4096_c131072", {{8192, 4096}, {131072, 4096}, {8192}}}};
  if (!grad) {
    // The unfused baseline: the logits in memory, then cross_entropy (the plain form only).
    op.unfused = [](Context& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
      if (a.z_loss != 0 || a.softcap != 0)
        throw Error(ErrorCode::Unsupported, "linear_cross_entropy: no unfused chain with z_loss or softcap");
      Tensor logits = unfused_temporary(ctx, {in[0].shape()[0], in[1].shape()[0]}, in[0].dtype());
      ctx.run("linear", {in[0], in[1]}, {logits});
      ctx.run("cross_entropy", {logits, in[2]}, {out[0]}, a);
    };
  }
  return op;
}

}  // namespace

void register_linear_cross_entropy_ops(std::vector<OpDef>& ops) {
  ops.push_back(linear_cross_entropy(false));
  ops.push_back(linear_cross_entropy(true));
}

}  // namespace kf
