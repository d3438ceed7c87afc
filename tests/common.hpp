// Helpers shared by the test suites: the devices to test, one cached context per device, fresh random
// inputs, and the comparison against the float64 reference with the tolerances of docs/KERNELS.md.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kf/kf.hpp"
#include "ops/registry.hpp"

namespace kf::test {

// One device of one backend, named "<backend><index>" in test names ("cpu0", "vulkan1").
struct DeviceRef {
  std::string backend;
  int index = 0;
  std::string name;
  std::string tag;
  friend void PrintTo(const DeviceRef& d, std::ostream* os) { *os << d.tag << " (" << d.name << ")"; }
};

// Every usable device of every compiled-in backend. KF_BACKEND / KF_DEVICE, when set, only narrow the
// list; they are then unset so that each context opens exactly the device asked for by its options.
inline const std::vector<DeviceRef>& devices() {
  static const std::vector<DeviceRef> list = [] {
    std::vector<DeviceRef> v;
    const char* want_backend = std::getenv("KF_BACKEND");
    const char* want_device = std::getenv("KF_DEVICE");
    const std::string wb = want_backend ? want_backend : "", wd = want_device ? want_device : "";
    for (const auto& e : Context::list_devices()) {
      if (!e.usable) continue;
      if (!wb.empty() && e.info.backend != wb) continue;
      if (!wd.empty() && wd != std::to_string(e.info.index) && e.info.name.find(wd) == std::string::npos) continue;
      v.push_back({e.info.backend, e.info.index, e.info.name, e.info.backend + std::to_string(e.info.index)});
    }
    unsetenv("KF_BACKEND");
    unsetenv("KF_DEVICE");
    return v;
  }();
  return list;
}

inline std::map<std::string, Context>& context_cache() {
  static std::map<std::string, Context> cache;
  return cache;
}

// Drops the cached contexts before static destruction (a Vulkan device must go before the loader).
class ContextCacheCleaner : public ::testing::Environment {
 public:
  void TearDown() override { context_cache().clear(); }
};
inline ::testing::Environment* const kCleaner = ::testing::AddGlobalTestEnvironment(new ContextCacheCleaner);

inline ContextOptions options_for(const DeviceRef& d) {
  ContextOptions o;
  o.backend = d.backend;
  // The CPU backend has one device and takes no index (Context::create matches indices on GPUs only).
  if (d.backend != "cpu") o.device = std::to_string(d.index);
  o.validation = d.backend == "vulkan";
  return o;
}

// One context per device for the whole run: creating Vulkan contexts is slow.
inline Context& context_for(const DeviceRef& d) {
  auto& cache = context_cache();
  auto it = cache.find(d.tag);
  if (it == cache.end()) it = cache.emplace(d.tag, Context::create(options_for(d))).first;
  return it->second;
}

// Checks that a test added no validation message (counts are cumulative per context).
class ValidationCheck {
 public:
  explicit ValidationCheck(Context& ctx) : ctx_(ctx), before_(ctx.validation_messages()) {}
  ~ValidationCheck() {
    const uint64_t after = ctx_.validation_messages();
    if (after == before_) return;
    std::ostringstream s;
    const auto log = ctx_.validation_log();
    for (size_t k = before_; k < log.size(); ++k) s << "\n  " << log[k];
    ADD_FAILURE() << (after - before_) << " validation message(s) on " << ctx_.device().name << ":" << s.str();
  }

 private:
  Context& ctx_;
  uint64_t before_;
};

// A fresh seed from the hardware, printed by the checks so that a failure can be replayed.
inline uint64_t fresh_seed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

inline std::vector<double> uniform(size_t n, double range, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-range, range);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint8_t> raw_bytes(const Tensor& t) {
  std::vector<uint8_t> b(t.nbytes());
  t.download(b.data(), b.size());
  return b;
}

struct Tolerance {
  double err, atol, rtol;
};

// KERNELS.md, "Tolerances against the float64 reference".
inline Tolerance tolerance(DType t) {
  switch (t) {
    case DType::f64: return {1e-12, 1e-12, 1e-12};
    case DType::f32: return {1e-6, 1e-5, 1e-5};
    case DType::f16: return {1e-3, 1e-3, 2e-3};
    case DType::bf16: return {8e-3, 8e-3, 1.6e-2};
    default: return {0, 0, 0};
  }
}

// The reference rounded to the dtype: what an exact kernel would store.
inline double round_to(DType t, double v) {
  unsigned char b[8];
  store_element(t, b, v);
  return load_element(t, b);
}

// Compares an output with its reference. Non-finite reference values must be matched exactly (NaN by
// NaN, an infinity by the same infinity) and are left out of the norms. The relative L2 error may also
// use the error of the exactly rounded reference: a dtype cannot store its result more precisely (an f16
// softmax over 10^6 features gives subnormal f16 values, whose rounding alone is a 1.7e-2 L2 error).
// Returns "" when it passes, else a description of the worst elements.
inline std::string compare(const std::vector<double>& out, const std::vector<double>& ref, DType dtype,
                           double terms) {
  const Tolerance tol = tolerance(dtype);
  const double atol = tol.atol * std::sqrt(terms);
  double diff2 = 0, ref2 = 0, round2 = 0, max_abs = 0;
  int64_t bad = 0;
  std::ostringstream s;
  s.precision(9);
  if (out.size() != ref.size()) return "output has " + std::to_string(out.size()) + " elements, reference " +
                                       std::to_string(ref.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const double o = out[i], r = ref[i];
    bool ok;
    if (std::isnan(r)) {
      ok = std::isnan(o);
    } else if (std::isinf(r)) {
      ok = o == r;
    } else {
      const double d = std::fabs(o - r);  // NaN when o is NaN or infinite: fails below
      ok = d <= atol + tol.rtol * std::fabs(r);
      if (std::isfinite(d)) {
        diff2 += d * d;
        max_abs = std::max(max_abs, d);
      }
      ref2 += r * r;
      const double q = round_to(dtype, r) - r;
      if (std::isfinite(q)) round2 += q * q;
    }
    if (!ok && ++bad <= 8) s << "\n  [" << i << "] out " << o << " ref " << r;
  }
  if (bad) s << "\n  " << bad << " of " << out.size() << " elements outside atol " << atol << " + rtol " << tol.rtol;
  if (ref2 > 0) {
    const double err = std::sqrt(diff2 / ref2), floor = std::sqrt(round2 / ref2);
    if (err > tol.err + floor)
      s << "\n  relative L2 error " << err << " > " << tol.err << " + " << floor << " (rounding to the dtype)";
  } else if (max_abs > tol.atol) {
    s << "\n  reference is all zeros and max abs error " << max_abs << " > " << tol.atol;
  }
  return s.str();
}

// Runs one op on a context with the given inputs (host values already rounded to the dtype) and
// compares with the reference. Outputs are poisoned with NaN bytes first: an element never written fails.
inline std::string run_and_compare(Context& ctx, const OpDef& op, DType dtype, const std::vector<Shape>& shapes,
                                   const std::vector<std::vector<double>>& values, const Attrs& attrs) {
  std::vector<Tensor> inputs;
  std::vector<HostTensor> host(op.inputs.size());
  for (size_t k = 0; k < shapes.size(); ++k) {
    if (shapes[k].empty()) {  // an optional input left out
      inputs.emplace_back();
      continue;
    }
    Tensor t = ctx.from_host(shapes[k], dtype, values[k]);
    host[k].shape = shapes[k];
    host[k].data = t.to_double();  // the values rounded to the dtype: the reference reads the same
    inputs.push_back(t);
  }
  std::vector<Shape> all_shapes = shapes;
  all_shapes.resize(op.inputs.size());
  const auto out_shapes = op.infer(op, all_shapes, attrs);
  std::vector<Tensor> outputs;
  std::vector<HostTensor> ref(out_shapes.size());
  for (size_t k = 0; k < out_shapes.size(); ++k) {
    outputs.push_back(ctx.empty(out_shapes[k], dtype));
    outputs.back().fill_bytes(0xFF);
    ref[k].shape = out_shapes[k];
    ref[k].data.assign(static_cast<size_t>(numel(out_shapes[k])), 0.0);
  }
  op.reference(host, ref, attrs);
  ctx.run(op.name, inputs, outputs, attrs);
  std::string msg;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const auto out = outputs[k].to_double();
    const std::string m = compare(out, ref[k].data, dtype, op.terms(all_shapes));
    if (!m.empty()) msg += "output '" + op.outputs[k] + "':" + m;
  }
  return msg;
}

// Test names accept letters, digits and underscores only.
inline std::string sanitize(std::string s) {
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

}  // namespace kf::test
