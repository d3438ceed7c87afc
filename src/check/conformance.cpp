// The conformance checks shared by the test suites and kf-conformance (see conformance.hpp).
#include "check/conformance.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/context_impl.hpp"
#include "kf/error.hpp"

namespace kf::check {

Tolerance tolerance(DType t) {
  switch (t) {
    case DType::f64: return {1e-12, 1e-12, 1e-12};
    case DType::f32: return {1e-6, 1e-5, 1e-5};
    case DType::f16: return {1e-3, 1e-3, 2e-3};
    case DType::bf16: return {8e-3, 8e-3, 1.6e-2};
    default: return {0, 0, 0};
  }
}

double round_to(DType t, double v) {
  unsigned char b[8];
  store_element(t, b, v);
  return load_element(t, b);
}

uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

std::vector<double> uniform(size_t n, double range, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-range, range);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<std::vector<double>> random_inputs(const std::vector<Shape>& shapes, double range, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<double>> values;
  for (const auto& s : shapes)
    values.push_back(s.empty() ? std::vector<double>{} : uniform(static_cast<size_t>(numel(s)), range, rng));
  return values;
}

const char* to_string(Values v) {
  switch (v) {
    case Values::uniform: return "uniform";
    case Values::scale: return "scale";
    case Values::outlier: return "outlier";
    case Values::large: return "large";
    case Values::subnormal: return "subnormal";
    case Values::special: return "special";
  }
  return "?";
}

std::vector<Values> all_values() {
  return {Values::uniform, Values::scale, Values::outlier, Values::large, Values::subnormal, Values::special};
}

Values parse_values(const std::string& name) {
  std::string names;
  for (Values v : all_values()) {
    if (name == to_string(v)) return v;
    names += std::string(names.empty() ? "" : ", ") + to_string(v);
  }
  throw Error(ErrorCode::InvalidArgument, "unknown input distribution '" + name + "' (one of " + names + ")");
}

std::string values_skip(const OpDef& op, DType dtype, Values values) {
  if (values == Values::uniform || values == Values::subnormal) return "";
  const std::string head = std::string("values=") + to_string(values) + ": ";
  const std::string see = " (docs/ops.md, special values)";
  if (!op.input_dtypes.empty() && op.input_dtypes[0]) return head + op.name + "'s first input holds integers";
  const std::string& n = op.name;
  // (cross_entropy_backward's first input is the logits, as cross_entropy's: defined as the loss is.)
  const bool backward = n.size() > 9 && n.compare(n.size() - 9, 9, "_backward") == 0 &&
                        n != "cross_entropy_backward" && n != "linear_cross_entropy_backward";
  if (backward)
    return head + "the gradient kernels are defined for inputs of order 1: their special values and their error at "
           "other magnitudes follow the derivative's algebraic form and the sums over rows" + see;
  const bool products = op.family == Family::Matmul || op.family == Family::Attention ||
                        n == "linear_cross_entropy" || n == "linear_cross_entropy_backward";
  if (products && (values == Values::scale || values == Values::outlier || values == Values::large))
    return head + n + " sums products whose rounding error grows with its inputs' magnitude (|x| |W| sqrt(K) ulp, "
           "cancellations included), which the tolerances' absolute atol does not follow" + see;
  if (values == Values::large && !op.composed_of.empty())
    return head + n + "'s hidden layer, rounded to the dtype, overflows" + see;
  if ((values == Values::large || values == Values::special) && (n == "swiglu" || n == "geglu"))
    return head + n + " multiplies two inputs, one through an activation that underflows f32 where float64 keeps it "
           "(inf times gelu(-20) is inf in float64, NaN in f32)" + see;
  if (values == Values::large && dtype != DType::f16 && op.family != Family::Elementwise)
    return head + n + " sums or subtracts values near " + to_string(dtype) + "'s largest, which overflows its f32 "
           "(f64) arithmetic (as PyTorch's kernels); checked in f16" + see;
  if (values == Values::special && (products || op.family == Family::Optimizer))
    return head + "which outputs a NaN or infinity of an input reaches is not defined for " + n + see;
  return "";
}

namespace {

// The largest finite value of a dtype, and its smallest normal one.
double dtype_max(DType t) {
  switch (t) {
    case DType::f16: return 65504.0;
    case DType::f64: return 1e300;
    default: return static_cast<double>(std::numeric_limits<float>::max());
  }
}
double dtype_min_normal(DType t) {
  switch (t) {
    case DType::f16: return 0x1p-14;
    case DType::f64: return std::numeric_limits<double>::min();
    default: return static_cast<double>(std::numeric_limits<float>::min());
  }
}

// Reshapes x (uniform in [-range, range]) row by row (rows of `feat`) to the distribution.
void reshape_values(std::vector<double>& x, int64_t feat, double range, DType dtype, Values values,
                    std::mt19937_64& rng) {
  if (x.empty() || feat <= 0) return;
  const size_t F = static_cast<size_t>(feat), rows = x.size() / F;
  std::uniform_real_distribution<double> unit(0, 1);
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < rows; ++r) {
    double* row = x.data() + r * F;
    const size_t pick = static_cast<size_t>(unit(rng) * static_cast<double>(F)) % F;
    switch (values) {
      case Values::uniform: break;
      case Values::scale: {
        const double s = std::pow(10.0, -3.0 + 7.0 * unit(rng));
        for (size_t j = 0; j < F; ++j) row[j] *= s;
        break;
      }
      case Values::outlier: row[pick] = (unit(rng) < 0.5 ? -1000.0 : 1000.0) * range; break;
      case Values::large:
        for (size_t j = 0; j < F; ++j)
          row[j] = (unit(rng) < 0.5 ? -1 : 1) * (0.25 + 0.75 * unit(rng)) * dtype_max(dtype);
        break;
      case Values::subnormal:
        for (size_t j = 0; j < F; j += 2) row[j] = (2 * unit(rng) - 1) * dtype_min_normal(dtype);
        break;
      case Values::special:
        // Row 0 all -inf; then rows with a NaN, a +inf, a -inf, and finite rows between.
        if (r == 0 && rows > 1) {
          for (size_t j = 0; j < F; ++j) row[j] = -inf;
        } else if (r % 4 == 1) {
          row[pick] = std::numeric_limits<double>::quiet_NaN();
        } else if (r % 4 == 2) {
          row[pick] = inf;
        } else if (r % 4 == 3) {
          row[pick] = -inf;
        }
        break;
    }
  }
}

}  // namespace

std::vector<std::vector<double>> case_inputs(const OpDef& op, const TestCase& tc, DType dtype, Values values,
                                             uint64_t seed) {
  auto v = random_inputs(tc.inputs, tc.range, seed);
  if (values != Values::uniform && !tc.inputs.empty() && !tc.inputs[0].empty()) {
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
    reshape_values(v[0], tc.inputs[0].back(), tc.range, dtype, values, rng);
  }
  if (op.prepare_inputs) op.prepare_inputs(tc.inputs, tc.attrs, v);  // class indices, variances, ...
  return v;
}

Comparison compare(const std::vector<double>& out, const std::vector<double>& ref, DType dtype, double terms,
                   double tolerance_scale, const std::vector<double>* state) {
  Comparison c;
  Tolerance tol = tolerance(dtype);
  tol.err *= tolerance_scale;
  tol.atol *= tolerance_scale;
  tol.rtol *= tolerance_scale;
  const double atol = tol.atol * std::sqrt(terms);
  // Sums of `terms` products accumulate in f32, also for 16-bit inputs: a relative error of about
  // 2^-24 sqrt(terms) whatever order the kernel sums in, which an f32 output's 1e-6 alone cannot absorb
  // past a few hundred terms (linear at K 2048 on tensor cores: 1.8e-6). f64 accumulates in f64.
  const double accumulation = dtype == DType::f64 ? 0.0 : 2 * 0x1p-24 * std::sqrt(terms);
  const double inf = std::numeric_limits<double>::infinity();
  c.err_limit = tol.err + accumulation;
  if (out.size() != ref.size()) {
    c.pass = false;
    c.worst = inf;
    c.message = "output has " + std::to_string(out.size()) + " elements, reference " + std::to_string(ref.size());
    return c;
  }
  double diff2 = 0, ref2 = 0, round2 = 0, max_abs = 0;
  std::ostringstream s;
  s.precision(9);
  for (size_t i = 0; i < out.size(); ++i) {
    const double o = out[i], r = ref[i];
    bool ok;
    double d, ratio;
    if (std::isnan(r)) {
      ok = std::isnan(o);
      d = ok ? 0 : inf;
      ratio = ok ? 0 : inf;
    } else if (std::isinf(r)) {
      ok = o == r;
      d = ok ? 0 : inf;
      ratio = ok ? 0 : inf;
    } else if (std::isinf(round_to(dtype, r)) && o == round_to(dtype, r)) {
      ok = true;  // a finite result beyond the dtype's range: the infinity it rounds to
      d = 0;
      ratio = 0;
    } else {
      d = std::fabs(o - r);  // NaN when o is NaN or infinite: fails below
      const double allowed = atol + tol.rtol * std::fabs(r);
      ok = d <= allowed;
      if (std::isfinite(d)) {
        diff2 += d * d;
        max_abs = std::max(max_abs, d);
        ratio = allowed > 0 ? d / allowed : (d == 0 ? 0 : inf);
      } else {
        ratio = inf;
      }
      ref2 += r * r;
      const double q = round_to(dtype, r) - r;
      if (std::isfinite(q)) round2 += q * q;
    }
    if (ratio > c.worst || c.worst_index < 0) {
      c.worst = ratio;
      c.worst_abs = d;
      c.worst_index = static_cast<int64_t>(i);
      c.worst_ref = r;
      c.worst_out = o;
    }
    if (!ok && ++c.bad <= 8) s << "\n  [" << i << "] out " << o << " ref " << r;
  }
  if (c.bad) s << "\n  " << c.bad << " of " << out.size() << " elements outside atol " << atol << " + rtol " << tol.rtol;
  if (state && state->size() == ref.size()) {
    double state2 = 0;
    for (double v : *state)
      if (std::isfinite(v)) state2 += v * v;
    ref2 = std::max(ref2, state2);
  }
  if (ref2 > 0) {
    c.err = std::sqrt(diff2 / ref2);
    c.err_limit = tol.err + accumulation + std::sqrt(round2 / ref2);
    if (c.err > c.err_limit)
      s << "\n  relative L2 error " << c.err << " > " << tol.err << " + " << accumulation
        << " (f32 accumulation) + " << c.err_limit - tol.err - accumulation << " (rounding to the dtype)";
  } else if (max_abs > tol.atol) {
    s << "\n  reference is all zeros and max abs error " << max_abs << " > " << tol.atol;
  }
  c.message = s.str();
  c.pass = c.message.empty();
  return c;
}

std::string ValidationWatch::report() const {
  const uint64_t n = count();
  if (n == 0) return "";
  std::ostringstream s;
  s << n << " validation message(s) on " << ctx_.device().name << ":";
  const auto log = ctx_.validation_log();  // the first 100 messages of the context
  for (size_t k = before_; k < log.size() && k < before_ + n; ++k) s << "\n  " << log[k];
  if (before_ + n > log.size()) s << "\n  (messages past the first " << log.size() << " of the context are not kept)";
  return s.str();
}

namespace {

std::vector<uint8_t> raw_bytes(const Tensor& t) {
  std::vector<uint8_t> b(t.nbytes());
  t.download(b.data(), b.size());
  return b;
}

std::vector<double> to_doubles(const std::vector<uint8_t>& raw, DType t) {
  const size_t es = dtype_size(t);
  std::vector<double> v(raw.size() / es);
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_element(t, raw.data() + i * es);
  return v;
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (size_t k = n; k-- > 0;) s += digits[p[k] >> 4], s += digits[p[k] & 15];  // little-endian element
  return s;
}

}  // namespace

CaseResult run_case(Context& ctx, const OpDef& op, DType dtype, const std::vector<Shape>& shapes,
                    const std::vector<std::vector<double>>& values, const Attrs& attrs, const CaseOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  CaseResult r;
  const auto finish = [&](CaseResult& res) -> CaseResult& {
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return res;
  };
  // A context that may fall back to the CPU backend runs everything (Context::run moves the op there).
  std::string why;
  if (!ctx.supports(op.name, dtype, &why) && !ctx.impl()->options.allow_cpu_fallback) {
    r.unsupported = true;
    r.message = why.empty() ? "unsupported (no reason given)" : why;
    return finish(r);
  }
  const ValidationWatch watch(ctx);
  std::string msg;
  const auto add = [&msg](const std::string& m) { msg += (msg.empty() ? "" : "\n") + m; };
  try {
    std::vector<Tensor> inputs;
    std::vector<HostTensor> host(op.inputs.size());
    for (size_t k = 0; k < shapes.size(); ++k) {
      if (shapes[k].empty()) {  // an optional input left out
        inputs.emplace_back();
        continue;
      }
      Tensor t = ctx.from_host(shapes[k], op.input_dtype(k, dtype, attrs), values.at(k));  // i32 where pinned
      host[k].shape = shapes[k];
      host[k].data = t.to_double();  // the values rounded to the dtype: the reference reads the same
      inputs.push_back(t);
    }
    std::vector<Shape> all_shapes = shapes;
    all_shapes.resize(op.inputs.size());
    const auto out_shapes = op.infer(op, all_shapes, attrs);
    // The outputs' dtype (Attrs::out_dtype where the op takes one): their tolerance is that dtype's.
    const DType odt = op.output_dtype(dtype, attrs);
    std::vector<Tensor> outputs;
    std::vector<HostTensor> ref(out_shapes.size());
    for (size_t k = 0; k < out_shapes.size(); ++k) {
      outputs.push_back(ctx.empty(out_shapes[k], odt));
      outputs.back().fill_bytes(0xFF);
      ref[k].shape = out_shapes[k];
      ref[k].data.assign(static_cast<size_t>(numel(out_shapes[k])), 0.0);
    }
    // Outputs that are all empty need no reference (docs/ops.md, "Empty tensors"); the references would
    // otherwise see rows of zero features.
    bool any_output = false;
    for (const auto& o : ref) any_output |= !o.data.empty();
    if (any_output) op.reference(host, ref, attrs);
    try {
      ctx.run(op.name, inputs, outputs, attrs);
    } catch (const Error& e) {
      // An option the device's kernels lack (a custom score function on a backend that cannot compile
      // one): reported as unsupported with the backend's reason, as an unsupported dtype is.
      if (e.code() != ErrorCode::Unsupported) throw;
      r.unsupported = true;
      r.message = e.what();
      return finish(r);
    }
    r.variant = ctx.last_variant();
    const double terms = op.terms(all_shapes);
    // A device may flush f32 subnormals to zero (docs/ops.md, "Special values": Vulkan shaders do not ask
    // to keep them, and NVIDIA's driver flushes): where the inputs hold some, an output also passes when it
    // matches the reference of the inputs with those flushed.
    const float fmin = std::numeric_limits<float>::min();
    bool flushable = false;
    for (const auto& h : host)
      for (double v : h.data) flushable |= v != 0 && std::fabs(v) < fmin;
    std::vector<HostTensor> ref_flushed;
    const auto flushed_reference = [&]() -> const std::vector<HostTensor>& {
      if (ref_flushed.empty()) {
        std::vector<HostTensor> h = host;
        for (auto& t : h)
          for (double& v : t.data)
            if (std::fabs(v) < fmin) v = std::copysign(0.0, v);
        ref_flushed = ref;
        for (auto& o : ref_flushed) std::fill(o.data.begin(), o.data.end(), 0.0);
        op.reference(h, ref_flushed, attrs);
      }
      return ref_flushed;
    };
    std::vector<std::vector<uint8_t>> first(outputs.size());
    for (size_t k = 0; k < outputs.size(); ++k) {
      first[k] = raw_bytes(outputs[k]);
      const std::vector<double>* state = nullptr;  // the input this output updates in place, if any
      for (const auto& [o, i] : op.in_place)
        if (o == static_cast<int>(k) && static_cast<size_t>(i) < host.size()) state = &host[i].data;
      Comparison c = compare(to_doubles(first[k], odt), ref[k].data, odt, terms, options.tolerance_scale, state);
      if (!c.pass && flushable) {
        const Comparison f = compare(to_doubles(first[k], odt), flushed_reference()[k].data, odt, terms,
                                     options.tolerance_scale, state);
        if (f.pass) c = f;
      }
      if (k == 0 || c.err > r.err) r.err = c.err, r.err_limit = c.err_limit;
      if (k == 0 || c.worst > r.worst) {
        r.worst = c.worst;
        r.worst_abs = c.worst_abs;
        r.worst_index = c.worst_index;
        r.worst_output = op.outputs[k];
        r.worst_ref = c.worst_ref;
        r.worst_out = c.worst_out;
      }
      if (!c.pass) add("output '" + op.outputs[k] + "':" + c.message);
    }
    if (options.repeat) {
      // Reductions add in a fixed order (docs/architecture.md principle 8): the same inputs give the same bits.
      std::vector<Tensor> again;
      for (const auto& s : out_shapes) {
        again.push_back(ctx.empty(s, odt));
        again.back().fill_bytes(0xFF);
      }
      ctx.run(op.name, inputs, again, attrs);
      const size_t es = dtype_size(odt);
      for (size_t k = 0; k < again.size(); ++k) {
        const auto second = raw_bytes(again[k]);
        const auto diff = std::mismatch(first[k].begin(), first[k].end(), second.begin(), second.end());
        if (diff.first == first[k].end() && diff.second == second.end()) continue;
        r.deterministic = false;
        const size_t i = static_cast<size_t>(diff.first - first[k].begin()) / es;
        std::ostringstream s;
        s.precision(9);
        s << "output '" << op.outputs[k] << "' differs between two runs on the same inputs (variant "
          << ctx.last_variant() << "), first at element " << i;
        if ((i + 1) * es <= first[k].size() && (i + 1) * es <= second.size())
          s << ": " << load_element(odt, first[k].data() + i * es) << " ("
            << hex_bytes(first[k].data() + i * es, es) << ") then " << load_element(odt, second.data() + i * es)
            << " (" << hex_bytes(second.data() + i * es, es) << ")";
        add(s.str());
      }
    }
  } catch (const Error& e) {
    add(std::string("kf::Error: ") + e.what());
  } catch (const std::exception& e) {
    add(std::string("exception: ") + e.what());
  }
  if (options.check_validation) {
    r.validation_messages = watch.count();
    if (r.validation_messages) add(watch.report());
  }
  r.message = msg;
  r.pass = msg.empty();
  return finish(r);
}

CaseResult run_case(Context& ctx, const OpDef& op, DType dtype, const TestCase& tc, uint64_t seed,
                    const CaseOptions& options) {
  const std::string skip = values_skip(op, dtype, options.values);
  if (!skip.empty()) {
    CaseResult r;
    r.unsupported = true;
    r.message = skip;
    r.seed = seed;
    return r;
  }
  const auto values = case_inputs(op, tc, dtype, options.values, seed);
  CaseResult r = run_case(ctx, op, dtype, tc.inputs, values, tc.attrs, options);
  r.seed = seed;
  return r;
}

std::vector<uint8_t> dropout_mask(Context& ctx, const OpDef& op, DType dtype, const std::vector<Shape>& shapes,
                                  const Attrs& attrs, uint64_t data_seed) {
  if (!op.random) throw Error(ErrorCode::InvalidArgument, "dropout_mask: " + op.name + " applies no dropout");
  if (shapes.empty() || shapes[0].empty())
    throw Error(ErrorCode::Shape, "dropout_mask: " + op.name + " needs the shape of its input 'x'");
  std::mt19937_64 rng(data_seed);
  std::uniform_real_distribution<double> pos(0.5, 1.5), any(-1, 1);
  std::vector<double> xv(static_cast<size_t>(numel(shapes[0])));
  for (auto& v : xv) v = pos(rng);
  std::vector<Tensor> in = {ctx.from_host(shapes[0], dtype, xv)};
  std::vector<double> residual;
  for (size_t k = 1; k < shapes.size(); ++k) {
    const size_t n = static_cast<size_t>(numel(shapes[k]));
    if (shapes[k].empty()) {
      in.emplace_back();
    } else if (k < op.inputs.size() && op.inputs[k] == "bias") {
      in.push_back(ctx.from_host(shapes[k], op.input_dtype(k, dtype, attrs), std::vector<double>(n, 0.25)));
    } else {
      std::vector<double> v(n);
      for (auto& e : v) e = any(rng);
      in.push_back(ctx.from_host(shapes[k], op.input_dtype(k, dtype, attrs), v));  // the residual: out_dtype
      residual = in.back().to_double();
    }
  }
  std::vector<Shape> all = shapes;
  all.resize(op.inputs.size());
  std::vector<Tensor> outs;
  for (const auto& s : op.infer(op, all, attrs)) {
    outs.push_back(ctx.empty(s, op.output_dtype(dtype, attrs)));
    outs.back().fill_bytes(0xFF);
  }
  ctx.run(op.name, in, outs, attrs);
  const auto out = outs.at(0).to_double();
  if (!residual.empty() && residual.size() != out.size())
    throw Error(ErrorCode::Internal, "dropout_mask: " + op.name + "'s residual and output sizes differ");
  std::vector<uint8_t> mask(out.size());
  for (size_t i = 0; i < out.size(); ++i) mask[i] = residual.empty() ? out[i] != 0.0 : out[i] != residual[i];
  return mask;
}

int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

}  // namespace kf::check
