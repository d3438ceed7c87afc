// Section 1 of docs/ops.md: elementwise fusions, declared once for every backend.
#include <cmath>
#include <sstream>

#include "kf/error.hpp"
#include "ops/parallel.hpp"
#include "ops/reference_math.hpp"
#include "ops/registry.hpp"

namespace kf {
namespace {

int64_t features(const Shape& s) { return s.empty() ? 1 : s.back(); }

[[noreturn]] void shape_error(const OpDef& op, const std::string& arg, const Shape& got,
                              const std::string& expected) {
  throw Error(ErrorCode::Shape, op.name + ": argument '" + arg + "' has shape " + to_string(got) +
                                    "; expected " + expected);
}

// `b` either matches `a` or has the features shape [F] (it then broadcasts over rows).
void check_full_or_features(const OpDef& op, const std::vector<Shape>& in, int k) {
  const Shape& a = in[0];
  const Shape& b = in[k];
  if (b == a || b == Shape{features(a)}) return;
  shape_error(op, op.inputs[k], b, to_string(a) + " or the features shape [" + std::to_string(features(a)) + "]");
}
void check_features(const OpDef& op, const std::vector<Shape>& in, int k) {
  if (in[k] == Shape{features(in[0])}) return;
  shape_error(op, op.inputs[k], in[k], "the features shape [" + std::to_string(features(in[0])) + "]");
}
void check_features_or_scalar(const OpDef& op, const std::vector<Shape>& in, int k) {
  if (in[k] == Shape{features(in[0])} || in[k] == Shape{1}) return;
  shape_error(op, op.inputs[k], in[k], "[1] or the features shape [" + std::to_string(features(in[0])) + "]");
}
void check_same(const OpDef& op, const std::vector<Shape>& in, int k) {
  if (in[k] == in[0]) return;
  shape_error(op, op.inputs[k], in[k], to_string(in[0]) + " (the shape of '" + op.inputs[0] + "')");
}

// Value of a broadcastable operand at output element i (n elements, F features).
inline double at(const HostTensor& t, int64_t i, int64_t n, int64_t F) {
  const int64_t m = static_cast<int64_t>(t.data.size());
  return m == n ? t.data[i] : (m == 1 ? t.data[0] : t.data[i % F]);
}

template <class F>
void map_elements(std::vector<HostTensor>& out, F&& f) {
  auto& y = out[0].data;
  parallel_for(static_cast<int64_t>(y.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f(i);
  });
}

std::vector<TestCase> binary_tests() {
  return {{"n1", {{1}, {1}}},
          {"n3", {{3}, {3}}},
          {"n17", {{17}, {17}}},
          {"n1000003", {{1000003}, {1000003}}},
          {"rows7x33_bcast", {{7, 33}, {33}}},
          {"rows3x5x12_bcast", {{3, 5, 12}, {12}}},
          {"row1x65536", {{1, 65536}, {1, 65536}}},
          {"wide_range", {{4, 1001}, {4, 1001}}, {}, 30}};
}
std::vector<TestCase> bias_tests() {
  return {{"n1", {{1}, {1}}},
          {"rows3x17", {{3, 17}, {17}}},
          {"rows1000003", {{1000003, 1}, {1}}},
          {"rows7x33", {{7, 33}, {33}}},
          {"rows2x65536", {{2, 65536}, {65536}}},
          {"rows9x1000_wide_range", {{9, 1000}, {1000}}, {}, 30}};
}
// Benchmarks: 256 MiB per f32 input (kf-bench keeps bytes per input when it changes the dtype).
const Shape kBig = {16384, 4096};

OpDef binary(const std::string& name, double flops, bool transcendental, double (*fn)(double, double)) {
  OpDef op;
  op.name = name;
  op.split = Split::elements;
  op.inputs = {"a", "b"};
  op.required_inputs = 2;
  op.outputs = {"y"};
  op.transcendental = transcendental;
  op.flops_per_element = flops;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs&) {
    check_full_or_features(d, in, 1);
    return std::vector<Shape>{in[0]};
  };
  op.reference = [fn](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs&) {
    const int64_t n = static_cast<int64_t>(in[0].data.size()), F = features(in[0].shape);
    map_elements(out, [&](int64_t i) { return fn(in[0].data[i], at(in[1], i, n, F)); });
  };
  op.tests = binary_tests();
  op.bench = {{"full", {kBig, kBig}}, {"bcast", {kBig, {kBig[1]}}}};
  return op;
}

OpDef bias_act(const std::string& name, double flops, bool transcendental, double (*act)(double)) {
  OpDef op;
  op.name = name;
  op.split = Split::elements;
  op.inputs = {"x", "bias"};
  op.required_inputs = 2;
  op.outputs = {"y"};
  op.transcendental = transcendental;
  op.flops_per_element = flops;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs&) {
    check_features(d, in, 1);
    return std::vector<Shape>{in[0]};
  };
  op.reference = [act](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs&) {
    const int64_t n = static_cast<int64_t>(in[0].data.size()), F = features(in[0].shape);
    map_elements(out, [&](int64_t i) { return act(in[0].data[i] + at(in[1], i, n, F)); });
  };
  op.tests = bias_tests();
  op.bench = {{"full", {kBig, {kBig[1]}}}};
  return op;
}

// swiglu / geglu: act(gate) * x, with gate given or packed as the second half of x's last dim.
OpDef gated(const std::string& name, double flops, double (*act)(double)) {
  OpDef op;
  op.name = name;
  op.split = Split::elements;
  op.inputs = {"x", "gate"};
  op.required_inputs = 1;
  op.outputs = {"y"};
  op.transcendental = true;
  op.flops_per_element = flops;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs&) {
    if (!in[1].empty()) {
      check_same(d, in, 1);
      return std::vector<Shape>{in[0]};
    }
    Shape s = in[0];
    if (s.back() % 2 != 0)
      shape_error(d, "x", s, "an even last dimension [.., 2F] for the packed form (gate left out)");
    s.back() /= 2;
    return std::vector<Shape>{s};
  };
  op.reference = [act](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs&) {
    if (in[1].present()) {
      map_elements(out, [&](int64_t i) { return act(in[1].data[i]) * in[0].data[i]; });
    } else {
      const int64_t F = features(out[0].shape);
      map_elements(out, [&](int64_t i) {
        const int64_t r = i / F, f = i % F;
        return act(in[0].data[r * 2 * F + F + f]) * in[0].data[r * 2 * F + f];
      });
    }
  };
  op.tests = {{"n1", {{1}, {1}}},          {"n17", {{17}, {17}}},
              {"n1000003", {{1000003}, {1000003}}},
              {"packed_rows3x34", {{3, 34}, {}}}, {"packed_rows5x2", {{5, 2}, {}}},
              {"packed_rows2x131072", {{2, 131072}, {}}},
              {"packed_rows7x6", {{7, 6}, {}}},
              {"wide_range", {{4, 1001}, {4, 1001}}, {}, 30}};
  op.bench = {{"full", {kBig, kBig}}, {"packed", {{kBig[0], 2 * kBig[1]}, {}}}};
  return op;
}

std::vector<TestCase> with_dropout(std::vector<TestCase> cases) {
  double ps[] = {0.0, 0.5, 0.1, 0.9};
  uint64_t seeds[] = {42, 0x123456789abcdefull, 7, 1ull << 40};
  for (size_t k = 0; k < cases.size(); ++k) {
    cases[k].attrs.p = ps[k % 4];
    cases[k].attrs.seed = seeds[k % 4];
    cases[k].attrs.offset = k * 977;
  }
  return cases;
}

void check_p(const OpDef& d, const Attrs& a) {
  if (!(a.p >= 0.0 && a.p < 1.0)) {
    std::ostringstream s;
    s << d.name << ": argument 'p' is " << a.p << "; expected a probability in [0, 1)";
    throw Error(ErrorCode::InvalidArgument, s.str());
  }
}

// Dropout applied to value v of element i (the same mask on every backend).
inline double drop(double v, int64_t i, const Attrs& a, uint32_t thr) {
  if (a.p == 0) return v;
  return ref::dropout_keep(static_cast<uint64_t>(i), a.seed, a.offset, thr) ? v / (1.0 - a.p) : 0.0;
}

OpDef dropout_op(const std::string& name, std::vector<std::string> inputs, double flops, bool transcendental,
                 std::function<double(const std::vector<HostTensor>&, int64_t, int64_t, int64_t)> pre,
                 std::function<double(const std::vector<HostTensor>&, int64_t, double)> post) {
  OpDef op;
  op.name = name;
  op.inputs = inputs;
  op.required_inputs = static_cast<int>(inputs.size());
  op.outputs = {"y"};
  op.random = true;
  op.transcendental = transcendental;
  op.flops_per_element = flops;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
    check_p(d, a);
    if (d.inputs.size() > 1) {
      if (d.inputs[1] == "bias") check_features(d, in, 1);
      else check_same(d, in, 1);
    }
    return std::vector<Shape>{in[0]};
  };
  op.reference = [pre, post](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
    const uint32_t thr = ref::dropout_threshold(a.p);
    const int64_t n = static_cast<int64_t>(in[0].data.size()), F = features(in[0].shape);
    map_elements(out, [&](int64_t i) { return post(in, i, drop(pre(in, i, n, F), i, a, thr)); });
  };
  std::vector<TestCase> t = {{"n1", {{1}}}, {"n3", {{3}}}, {"n17", {{17}}}, {"n1000003", {{1000003}}},
                             {"rows7x33", {{7, 33}}}, {"rows2x65536", {{2, 65536}}}};
  if (inputs.size() > 1) {
    for (auto& c : t) c.inputs.push_back(inputs[1] == "bias" ? Shape{features(c.inputs[0])} : c.inputs[0]);
  }
  op.tests = with_dropout(t);
  TestCase b{"p0.1", {kBig}, {}};
  if (inputs.size() > 1) b.inputs.push_back(inputs[1] == "bias" ? Shape{kBig[1]} : kBig);
  b.attrs.p = 0.1;
  b.attrs.seed = 1234;
  op.bench = {b};
  return op;
}

OpDef unary(const std::string& name, double flops, bool transcendental, double (*fn)(double)) {
  OpDef op;
  op.name = name;
  op.split = Split::elements;
  op.primitive = true;
  op.inputs = {"x"};
  op.required_inputs = 1;
  op.outputs = {"y"};
  op.transcendental = transcendental;
  op.flops_per_element = flops;
  op.infer = [](const OpDef&, const std::vector<Shape>& in, const Attrs&) { return std::vector<Shape>{in[0]}; };
  op.reference = [fn](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs&) {
    map_elements(out, [&](int64_t i) { return fn(in[0].data[i]); });
  };
  op.tests = {{"n1", {{1}}}, {"n17", {{17}}}, {"n1000003", {{1000003}}}, {"wide_range", {{3, 1001}}, {}, 30}};
  op.bench = {{"full", {kBig}}};
  return op;
}

// Unfused baselines: the same function as a chain of registered primitives, each step a separate
// Context::run that reads its inputs from memory and writes a temporary (as an unfused framework does).
Tensor temp_like(Context& ctx, const Tensor& t) { return unfused_temporary(ctx, t.shape(), t.dtype()); }

[[noreturn]] void no_chain(const std::string& op, const std::string& why) {
  throw Error(ErrorCode::Unsupported, op + ": no unfused chain for this form (" + why + ")");
}

// act(a (+|*) b): binary primitive, then unary primitive.
OpDef::UnfusedFn chain_binary_then(std::string bin, std::string act) {
  return [bin, act](Context& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
    Tensor t = temp_like(ctx, out[0]);
    ctx.run(bin, {in[0], in[1]}, {t});
    ctx.run(act, {t}, out);
  };
}

// act(gate) * x; the packed form has no chain (no slicing primitive).
OpDef::UnfusedFn chain_gated(std::string name, std::string act) {
  return [name, act](Context& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
    if (in.size() < 2 || !in[1].defined()) no_chain(name, "the packed form: there is no slicing primitive");
    Tensor t = temp_like(ctx, out[0]);
    ctx.run(act, {in[1]}, {t});
    ctx.run("mul", {in[0], t}, out);
  };
}

// The binary primitives broadcast a features-shaped operand only, not a scalar [1].
void need_features_shape(const std::string& op, const std::vector<Tensor>& in, int k, const char* arg) {
  if (in[k].shape() != Shape{features(in[0].shape())})
    no_chain(op, std::string("argument '") + arg + "' of shape " + to_string(in[k].shape()) +
                     ": the binary primitives broadcast the features shape only");
}

thread_local UnfusedScratch* current_scratch = nullptr;

}  // namespace

UnfusedScratch::UnfusedScratch() : previous_(current_scratch) { current_scratch = this; }
UnfusedScratch::~UnfusedScratch() { current_scratch = previous_; }

Tensor unfused_temporary(Context& ctx, const Shape& shape, DType dtype, int slot) {
  if (current_scratch == nullptr) return ctx.empty(shape, dtype);
  std::ostringstream key;
  key << static_cast<const void*>(ctx.impl()) << ' ' << to_string(shape) << ' ' << to_string(dtype) << ' ' << slot;
  auto& pool = current_scratch->pool_;
  for (const auto& [k, t] : pool)
    if (k == key.str()) return t;
  pool.emplace_back(key.str(), ctx.empty(shape, dtype));
  return pool.back().second;
}

void register_elementwise_ops(std::vector<OpDef>& ops) {
  using namespace ref;
  ops.push_back(binary("add_relu", 2, false, [](double a, double b) { return relu(a + b); }));
  ops.back().unfused = chain_binary_then("add", "relu");
  ops.push_back(binary("mul_relu", 2, false, [](double a, double b) { return relu(a * b); }));
  ops.back().unfused = chain_binary_then("mul", "relu");
  ops.push_back(binary("add_sigmoid", 5, true, [](double a, double b) { return sigmoid(a + b); }));
  ops.back().unfused = chain_binary_then("add", "sigmoid");
  ops.push_back(binary("mul_tanh", 5, true, [](double a, double b) { return std::tanh(a * b); }));
  ops.back().unfused = chain_binary_then("mul", "tanh");

  ops.push_back(bias_act("bias_relu", 2, false, relu));
  ops.push_back(bias_act("bias_gelu", 12, true, gelu));
  ops.push_back(bias_act("bias_gelu_tanh", 10, true, gelu_tanh));
  ops.push_back(bias_act("bias_silu", 6, true, silu));
  for (const char* n : {"bias_relu", "bias_gelu", "bias_gelu_tanh", "bias_silu"}) {
    for (auto& o : ops)
      if (o.name == n) o.unfused = chain_binary_then("add", std::string(n).substr(5));  // add, then act
  }

  ops.push_back(gated("swiglu", 7, silu));
  ops.back().unfused = chain_gated("swiglu", "silu");
  ops.push_back(gated("geglu", 13, gelu));
  ops.back().unfused = chain_gated("geglu", "gelu");

  {
    OpDef op;
    op.name = "mish_scale";
    op.split = Split::elements;
    op.inputs = {"x", "s"};
    op.required_inputs = 2;
    op.outputs = {"y"};
    op.transcendental = true;
    op.flops_per_element = 10;
    op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs&) {
      check_features_or_scalar(d, in, 1);
      return std::vector<Shape>{in[0]};
    };
    op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs&) {
      const int64_t n = static_cast<int64_t>(in[0].data.size()), F = features(in[0].shape);
      map_elements(out, [&](int64_t i) { return mish(in[0].data[i]) * at(in[1], i, n, F); });
    };
    op.tests = bias_tests();
    op.tests.push_back({"scalar_s", {{5, 19}, {1}}});
    op.tests.push_back({"scalar_s_n1000003", {{1000003}, {1}}});
    op.bench = {{"full", {kBig, {kBig[1]}}}};
    op.unfused = [](Context& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
      need_features_shape("mish_scale", in, 1, "s");
      Tensor t = temp_like(ctx, out[0]);
      ctx.run("mish", {in[0]}, {t});
      ctx.run("mul", {t, in[1]}, out);
    };
    ops.push_back(op);
  }
  {
    OpDef op;
    op.name = "prelu_bias";
    op.split = Split::elements;
    op.inputs = {"x", "a", "bias"};
    op.required_inputs = 3;
    op.outputs = {"y"};
    op.flops_per_element = 3;
    op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs&) {
      check_features_or_scalar(d, in, 1);
      check_features(d, in, 2);
      return std::vector<Shape>{in[0]};
    };
    op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs&) {
      const int64_t n = static_cast<int64_t>(in[0].data.size()), F = features(in[0].shape);
      map_elements(out, [&](int64_t i) { return prelu(in[0].data[i] + at(in[2], i, n, F), at(in[1], i, n, F)); });
    };
    for (auto c : bias_tests()) {
      c.inputs = {c.inputs[0], c.inputs[1], c.inputs[1]};
      op.tests.push_back(c);
    }
    op.tests.push_back({"scalar_a", {{5, 19}, {1}, {19}}});
    op.bench = {{"full", {kBig, {kBig[1]}, {kBig[1]}}}};
    op.unfused = [](Context& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
      need_features_shape("prelu_bias", in, 1, "a");
      Tensor t = temp_like(ctx, out[0]);
      ctx.run("add", {in[0], in[2]}, {t});
      ctx.run("prelu", {t, in[1]}, out);
    };
    ops.push_back(op);
  }

  auto x0 = [](const std::vector<HostTensor>& in, int64_t i, int64_t, int64_t) { return in[0].data[i]; };
  auto same = [](const std::vector<HostTensor>&, int64_t, double v) { return v; };
  ops.push_back(dropout_op("dropout", {"x"}, 2, false, x0, same));
  ops.push_back(dropout_op(
      "gelu_dropout", {"x"}, 14, true,
      [](const std::vector<HostTensor>& in, int64_t i, int64_t, int64_t) { return gelu(in[0].data[i]); }, same));
  ops.back().unfused = [](Context& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                          const Attrs& a) {
    Tensor t = temp_like(ctx, out[0]);
    ctx.run("gelu", {in[0]}, {t});
    ctx.run("dropout", {t}, out, a);  // the same (seed, offset, index): the same mask as the fused op
  };
  ops.push_back(dropout_op(
      "bias_gelu_dropout", {"x", "bias"}, 15, true,
      [](const std::vector<HostTensor>& in, int64_t i, int64_t n, int64_t F) {
        return gelu(in[0].data[i] + at(in[1], i, n, F));
      },
      same));
  ops.back().unfused = [](Context& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                          const Attrs& a) {
    Tensor t = temp_like(ctx, out[0]);
    ctx.run("add", {in[0], in[1]}, out);  // the output serves as the first temporary
    ctx.run("gelu", out, {t});
    ctx.run("dropout", {t}, out, a);
  };
  ops.push_back(dropout_op("add_dropout_residual", {"x", "r"}, 3, false, x0,
                           [](const std::vector<HostTensor>& in, int64_t i, double v) { return in[1].data[i] + v; }));
  ops.back().unfused = [](Context& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                          const Attrs& a) {
    Tensor t = temp_like(ctx, out[0]);
    ctx.run("dropout", {in[0]}, {t}, a);
    ctx.run("add", {in[1], t}, out);  // r + dropout(x)
  };

  // Unfused primitives: the baselines kf-bench runs as chains to measure the gain of fusion.
  ops.push_back(binary("add", 1, false, [](double a, double b) { return a + b; }));
  ops.push_back(binary("mul", 1, false, [](double a, double b) { return a * b; }));
  ops.push_back(binary("prelu", 2, false, [](double x, double a) { return prelu(x, a); }));
  for (auto* o : {&ops[ops.size() - 3], &ops[ops.size() - 2], &ops[ops.size() - 1]}) o->primitive = true;
  ops.push_back(unary("copy", 0, false, [](double x) { return x; }));  // the roofline of kf-bench
  ops.push_back(unary("relu", 1, false, relu));
  ops.push_back(unary("sigmoid", 4, true, sigmoid));
  ops.push_back(unary("tanh", 4, true, [](double x) { return std::tanh(x); }));
  ops.push_back(unary("gelu", 11, true, gelu));
  ops.push_back(unary("gelu_tanh", 9, true, gelu_tanh));
  ops.push_back(unary("silu", 5, true, silu));
  ops.push_back(unary("mish", 9, true, mish));
}

}  // namespace kf
