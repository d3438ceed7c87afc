// Gradient checks (docs/ops.md section 3, training): every backward op against central finite differences
// of its forward op, both run in float64 on the CPU backend (the references). test_ops already checks
// every backward kernel of every device against the float64 analytic reference; this checks that the
// analytic references are the derivatives of the forward references.
#include <cmath>
#include <functional>

#include "common.hpp"

namespace kf::test {
namespace {

constexpr double kStep = 1e-6;

Context& cpu() {
  static Context ctx = Context::create(ContextOptions{.backend = "cpu"});
  return ctx;
}

struct In {
  Shape shape;
  std::vector<double> v;
  DType dtype = DType::f64;
};

In random_in(const Shape& s, uint64_t seed, double lo = -1.5, double hi = 1.5) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  In x{s, std::vector<double>(static_cast<size_t>(numel(s)))};
  for (auto& e : x.v) e = d(rng);
  return x;
}

// Runs an op on the CPU backend in float64; returns output `k`.
std::vector<double> run(const std::string& op, const std::vector<In>& in, const Attrs& a, size_t k = 0) {
  std::vector<Tensor> t;
  for (const auto& x : in) t.push_back(x.shape.empty() ? Tensor() : cpu().from_host(x.shape, x.dtype, x.v));
  return cpu().call(op, t, a).at(k).to_double();
}

// sum_i c_i f_i: the scalar whose gradient the backward ops compute when given dy = c.
double dot(const std::vector<double>& c, const std::vector<double>& f) {
  double s = 0;
  for (size_t i = 0; i < c.size(); ++i) s += c[i] * f[i];
  return s;
}

// Central differences of `loss` with respect to every element of in[k], against `grad`.
void expect_matches_fd(const std::string& what, std::vector<In> in, size_t k,
                       const std::function<double(const std::vector<In>&)>& loss, const std::vector<double>& grad) {
  ASSERT_EQ(grad.size(), in[k].v.size()) << what;
  // |fd - grad| <= 1e-6 (|grad| + max |grad|): relative where the gradient is large, and measured against
  // the gradient's scale where an element is near 0 (there the difference quotient's rounding dominates).
  double scale = 0;
  for (double g : grad) scale = std::max(scale, std::fabs(g));
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < in[k].v.size(); ++i) {
    const double x0 = in[k].v[i], h = kStep * std::max(1.0, std::fabs(x0));
    in[k].v[i] = x0 + h;
    const double up = loss(in);
    in[k].v[i] = x0 - h;
    const double down = loss(in);
    in[k].v[i] = x0;
    const double fd = (up - down) / (2 * h);
    const double err = std::fabs(fd - grad[i]) / (1e-6 * (std::fabs(grad[i]) + scale) + 1e-300);
    if (err > worst) worst = err, worst_i = i;
  }
  EXPECT_LT(worst, 1.0) << what << ": worst element " << worst_i << ", analytic " << grad[worst_i];
}

// act_backward(dy, x) = dy * act'(x), against the primitive act.
TEST(Grad, Activations) {
  for (const char* act : {"relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu", "mish"}) {
    In x = random_in({5, 7}, 1, -4, 4), c = random_in({5, 7}, 2);
    for (auto& e : x.v)
      if (std::fabs(e) < 1e-3) e = 0.5;  // relu has no derivative at 0
    const auto grad = run(std::string(act) + "_backward", {c, x}, {});
    expect_matches_fd(act, {x}, 0, [&](const std::vector<In>& in) { return dot(c.v, run(act, in, {})); }, grad);
  }
}

TEST(Grad, Dropout) {
  Attrs a;
  a.p = 0.3;
  a.seed = 99;
  a.offset = 5;
  In x = random_in({9, 11}, 3), c = random_in({9, 11}, 4);
  const auto grad = run("dropout_backward", {c}, a);
  expect_matches_fd("dropout", {x}, 0, [&](const std::vector<In>& in) { return dot(c.v, run("dropout", in, a)); }, grad);
}

TEST(Grad, Softmax) {
  for (double scale : {1.0, 0.7}) {
    Attrs a;
    a.scale = scale;
    In x = random_in({3, 8}, 5, -3, 3), c = random_in({3, 8}, 6);
    In y{x.shape, run("softmax", {x}, a)};
    const auto grad = run("softmax_backward", {c, y}, a);
    expect_matches_fd("softmax", {x}, 0, [&](const std::vector<In>& in) { return dot(c.v, run("softmax", in, a)); },
                      grad);
  }
}

// layer_norm_backward -> (dx, dw, db) against layer_norm(x, w, b); rms_norm_backward -> (dx, dw).
TEST(Grad, Norms) {
  for (bool layer : {true, false})
    for (bool with_w : {true, false})
      for (const Shape& s : {Shape{4, 6}, Shape{2, 3, 5}, Shape{3, 1}}) {
        if (!layer && s.back() == 1) continue;  // degenerate (see backward.cpp)
        const std::string fwd = layer ? "layer_norm" : "rms_norm", bwd = fwd + "_backward";
        const Shape f = {s.back()};
        Attrs a;
        a.eps = 1e-3;
        In x = random_in(s, 7), c = random_in(s, 8), w = random_in(f, 9), b = random_in(f, 10);
        std::vector<In> fin = {x};
        if (with_w) fin.push_back(w);
        if (layer) {
          if (!with_w) fin.push_back(In{});  // b without w: w left out
          fin.push_back(b);
        }
        std::vector<In> bin = {c, x};
        if (with_w) bin.push_back(w);
        const auto loss = [&](const std::vector<In>& in) { return dot(c.v, run(fwd, in, a)); };
        const std::string what = bwd + (with_w ? "" : " (no w)") + " " + to_string(s);
        expect_matches_fd(what + " dx", fin, 0, loss, run(bwd, bin, a, 0));
        if (with_w) expect_matches_fd(what + " dw", fin, 1, loss, run(bwd, bin, a, 1));
        if (layer) expect_matches_fd(what + " db", fin, fin.size() - 1, loss, run(bwd, bin, a, 2));
      }
}

TEST(Grad, CrossEntropy) {
  struct Case {
    Shape s;
    std::vector<double> target;
    double smoothing;
    int64_t ignore;
  };
  for (const Case& k : {Case{{4, 5}, {0, 3, 4, 1}, 0, -100}, Case{{3, 7}, {6, -100, 2}, 0.2, -100},
                        Case{{5, 3}, {1, 2, 2, 0, 1}, 0.1, 2}}) {
    Attrs a;
    a.label_smoothing = k.smoothing;
    a.ignore_index = k.ignore;
    In logits = random_in(k.s, 11, -3, 3);
    In target{{k.s[0]}, k.target, DType::i32};
    const auto grad = run("cross_entropy_backward", {logits, target}, a, 1);
    EXPECT_EQ(run("cross_entropy_backward", {logits, target}, a, 0), run("cross_entropy", {logits, target}, a));
    expect_matches_fd("cross_entropy " + to_string(k.s), {logits, target}, 0,
                      [&](const std::vector<In>& in) { return run("cross_entropy", in, a)[0]; }, grad);
  }
}

TEST(Grad, Mse) {
  In p = random_in({4, 9}, 12), q = random_in({4, 9}, 13);
  const auto grad = run("mse_backward", {p, q}, {});
  expect_matches_fd("mse", {p, q}, 0, [&](const std::vector<In>& in) { return run("mse", in, {})[0]; }, grad);
}

// linear_cross_entropy_backward -> (loss, d_h, d_W) against central differences of linear_cross_entropy's
// loss, with an ignored row, label smoothing, z-loss and soft-capping (on and off).
TEST(Grad, LinearCrossEntropy) {
  for (double cap : {0.0, 1.5}) {
    Attrs a;
    a.label_smoothing = 0.1;
    a.z_loss = 0.05;
    a.softcap = cap;
    In h = random_in({4, 3}, 11), W = random_in({5, 3}, 12);
    In target{{4}, {2, -100, 0, 4}, DType::i32};
    const auto loss = [&](const std::vector<In>& in) { return run("linear_cross_entropy", in, a)[0]; };
    for (size_t k : {0, 1}) {
      const auto grad = run("linear_cross_entropy_backward", {h, W, target}, a, k + 1);
      expect_matches_fd(std::string(k ? "d_W" : "d_h") + (cap > 0 ? " softcap" : ""), {h, W, target}, k, loss, grad);
    }
  }
}

// attention_backward (dq, dk, dv from o and lse) against central differences of attention, with the
// options that change the gradient: causal, window, ALiBi, soft-capping, RoPE (both layouts), dropout,
// GQA, key lengths, sinks (through lse), packed sequences.
TEST(Grad, Attention) {
  struct Case {
    std::string label;
    Attrs a;
    std::vector<In> extra;  // attention's optional inputs (alibi_slopes .. block_mask), in order
    Shape q, kv;
  };
  std::vector<Case> cases;
  cases.push_back({"plain", {}, {}, {1, 2, 3, 8}, {1, 2, 4, 8}});
  {
    Attrs a;
    a.causal = true;
    a.softcap = 1.5;
    a.alibi = true;
    a.rope = 1;
    cases.push_back({"causal_softcap_alibi_rope_gqa", a, {}, {1, 4, 4, 8}, {1, 2, 4, 8}});
  }
  {
    Attrs a;
    a.window = 2;
    a.rope = 2;
    a.p = 0.3;
    a.seed = 5;
    a.offset = 9;
    a.attn_scale = 0.7;
    cases.push_back({"window_rope_interleaved_dropout", a, {}, {2, 1, 4, 8}, {2, 1, 5, 8}});
  }
  {
    Attrs a;
    a.causal = true;
    In lens{{2}, {3, 1}, DType::i32}, sinks{{2}, {0.3, -0.4}};
    cases.push_back({"key_lengths_sinks", a, {In{}, lens, In{}, In{}, sinks}, {2, 2, 3, 8}, {2, 2, 4, 8}});
  }
  {
    Attrs a;
    a.causal = true;
    In cuq{{3}, {0, 2, 3}, DType::i32}, cuk{{3}, {0, 1, 4}, DType::i32};
    cases.push_back({"varlen_causal", a, {In{}, In{}, cuq, cuk}, {1, 2, 3, 8}, {1, 2, 4, 8}});
  }
  uint64_t seed = 20;
  for (const Case& c : cases) {
    Attrs fa = c.a;
    fa.return_lse = true;
    In q = random_in(c.q, seed++), k = random_in(c.kv, seed++), v = random_in(c.kv, seed++);
    In dy = random_in(c.q, seed++);
    std::vector<In> fin = {q, k, v};
    for (const In& e : c.extra) fin.push_back(e);
    const auto o = run("attention", fin, fa, 0), lse = run("attention", fin, fa, 1);
    std::vector<In> bin = {q, k, v, In{c.q, o}, dy, In{{c.q[0], c.q[1], c.q[2]}, lse}};
    for (const In& e : c.extra) bin.push_back(e);
    const auto loss = [&](const std::vector<In>& in) { return dot(dy.v, run("attention", in, c.a)); };
    for (size_t arg = 0; arg < 3; ++arg)
      expect_matches_fd("attention " + c.label + " d" + std::string(1, "qkv"[arg]), fin, arg, loss,
                        run("attention_backward", bin, c.a, arg));
  }
}

}  // namespace
}  // namespace kf::test
