// libFuzzer target: Context::run's argument checking on the CPU backend. The input picks an op, a dtype,
// the inputs' shapes (some left out, some of the wrong rank) and attributes. A call the checks accept
// runs and must match the float64 reference (check::run_case, small shapes only); a rejected one must be
// a kf::Error and leave the context usable, never a crash.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>

#include "check/conformance.hpp"
#include "kf/kf.hpp"
#include "ops/registry.hpp"

namespace {

struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t byte() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  bool extreme = false;  // an attribute far outside any useful range was drawn
  double real() {  // a few values that the attributes' checks care about
    static const double v[] = {0, 1, -1, 0.5, 2, 1e-6, 1e6, -0.25, 0.999, 1.5, 1e300, -1e300, 3, 64, 0.1, 7};
    const double x = v[byte() % 16];
    extreme |= std::abs(x) > 1e6;
    return x;
  }
};

kf::Context& context() {
  static kf::Context ctx = [] {
    kf::ContextOptions o;
    o.backend = "cpu";
    return kf::Context::create(o);
  }();
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r{data, size};
  const auto& ops = kf::registry();
  const kf::OpDef& op = ops[r.byte() % ops.size()];
  if (op.tests.empty()) return 0;
  static const kf::DType dtypes[] = {kf::DType::f32, kf::DType::f16, kf::DType::bf16, kf::DType::f64, kf::DType::i32};
  const kf::DType dtype = dtypes[r.byte() % 5];
  // Shapes: the op's first case, mutated dimension by dimension (kept small so that the reference is quick).
  const kf::TestCase& tc = op.tests[r.byte() % op.tests.size()];
  std::vector<kf::Shape> shapes = tc.inputs;
  const int mutations = r.byte() % 4;
  for (int m = 0; m < mutations && !shapes.empty(); ++m) {
    auto& s = shapes[r.byte() % shapes.size()];
    const uint8_t what = r.byte();
    if (what % 4 == 0) {
      s.clear();  // left out
    } else if (what % 4 == 1 && s.size() < 9) {
      s.push_back(1 + r.byte() % 3);
    } else if (!s.empty()) {
      s[r.byte() % s.size()] = static_cast<int64_t>(r.byte() % 9);  // 0 included
    }
  }
  int64_t total = 0;
  for (const auto& s : shapes) total += s.empty() ? 0 : std::max<int64_t>(1, kf::numel(s));
  if (total > (1 << 16)) return 0;
  kf::Attrs a = tc.attrs;
  const uint8_t attrs = r.byte();
  if (attrs & 1) a.p = r.real();
  if (attrs & 2) a.eps = r.real();
  if (attrs & 4) a.groups = static_cast<int64_t>(r.byte() % 5) - 1;
  if (attrs & 8) a.scale = r.real();
  if (attrs & 16) a.causal = !a.causal;
  if (attrs & 32) a.window = static_cast<int64_t>(r.byte() % 6) - 1;
  if (attrs & 64) a.label_smoothing = r.real();
  if (attrs & 128) a.out_dtype = dtypes[r.byte() % 5];
  kf::Context& ctx = context();
  // Tensors of the dtype each input takes, or a wrong one now and then, zero-filled for the checks.
  std::vector<kf::Tensor> inputs;
  std::vector<std::vector<double>> values = kf::check::random_inputs(shapes, tc.range, size);
  for (size_t k = 0; k < shapes.size(); ++k) {
    if (shapes[k].empty()) {
      inputs.emplace_back();
      continue;
    }
    const bool wrong = r.byte() % 16 == 0;
    kf::DType t = wrong ? dtypes[r.byte() % 5] : op.input_dtype(k, dtype, a);
    inputs.push_back(ctx.empty(shapes[k], t));
    inputs.back().fill(0);  // valid for every input (token ids, class indices, variances)
  }
  try {
    (void)ctx.call(op.name, inputs, a);
  } catch (const kf::Error&) {
    return 0;  // rejected cleanly
  }
  // An accepted call with an extreme attribute (a softmax scale of 1e300) must run without a crash, but its
  // results may lie beyond the dtype's range, where the float64 reference stays finite: not compared.
  if (r.extreme) return 0;
  // Accepted: the same call on valid values (prepare_inputs makes them valid) must match the reference.
  // check::run_case turns a kf::Error into a failure whose message starts "kf::Error: " (a value check,
  // class indices in range, may refuse values prepare_inputs did not fix for a mutated shape): only a
  // mismatch or another exception aborts.
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].defined() && inputs[k].dtype() != op.input_dtype(k, dtype, a)) return 0;
  if (op.prepare_inputs) op.prepare_inputs(shapes, a, values);
  const kf::check::CaseResult res = kf::check::run_case(ctx, op, dtype, shapes, values, a);
  if (!res.pass && !res.unsupported && res.message.rfind("kf::Error: ", 0) != 0) {
    std::fprintf(stderr, "%s (%s): %s\n", op.name.c_str(), kf::to_string(dtype), res.message.c_str());
    std::abort();
  }
  return 0;
}
