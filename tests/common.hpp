// Helpers shared by the test suites: the devices to test, one cached context per device, and gtest
// wrappers of the library's conformance checks (fresh random inputs, the comparison against the float64
// reference with the tolerances of docs/ops.md).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "check/conformance.hpp"
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

// Every device of every compiled-in backend, usable or not (with why not), enumerated once (listing
// while contexts are open is allowed: ErrorsNoContext.ListingWhileAContextIsOpen).
inline const std::vector<DeviceEntry>& device_entries() {
  static const std::vector<DeviceEntry> list = Context::list_devices();
  return list;
}

// Every usable device of every compiled-in backend. KF_BACKEND / KF_DEVICE, when set, only narrow the
// list; they are then unset so that each context opens exactly the device asked for by its options.
inline const std::vector<DeviceRef>& devices() {
  static const std::vector<DeviceRef> list = [] {
    std::vector<DeviceRef> v;
    const char* want_backend = std::getenv("KF_BACKEND");
    const char* want_device = std::getenv("KF_DEVICE");
    const std::string wb = want_backend ? want_backend : "", wd = want_device ? want_device : "";
    for (const auto& e : device_entries()) {
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

// The usable CUDA (or HIP) devices, and why there are none, for the tests of the native backends: they
// skip with that reason where the build or the machine has no usable device.
inline std::vector<DeviceRef> cuda_devices() {
  std::vector<DeviceRef> v;
  for (const auto& d : devices())
    if (d.backend == "cuda" || d.backend == "hip") v.push_back(d);
  return v;
}

inline std::string no_cuda_reason() {
  std::string why = "no usable CUDA device (or no CUDA backend in this build)";
  for (const auto& e : device_entries())
    if ((e.info.backend == "cuda" || e.info.backend == "hip") && !e.usable) why += "; " + e.info.name + ": " + e.why_not;
  return why;
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
  explicit ValidationCheck(Context& ctx) : watch_(ctx) {}
  ~ValidationCheck() {
    if (watch_.count()) ADD_FAILURE() << watch_.report();
  }

 private:
  check::ValidationWatch watch_;
};

// The checks themselves live in the library (src/check/conformance.hpp), shared with kf-conformance.
using check::fresh_seed;
using check::round_to;
using check::tolerance;
using check::Tolerance;
using check::uniform;

inline std::vector<uint8_t> raw_bytes(const Tensor& t) {
  std::vector<uint8_t> b(t.nbytes());
  t.download(b.data(), b.size());
  return b;
}

// The byte outputs are filled with before a call that must be rejected.
constexpr uint8_t kPoison = 0xAB;

// `call` must raise kf::Error `code` whose message names every substring (the op, the argument, the
// values seen), add no validation message, and leave every defined tensor of `outs` as it was filled
// (kPoison): a rejected call writes nothing.
inline void expect_rejected(Context& ctx, const std::function<void()>& call, ErrorCode code,
                            const std::vector<std::string>& substrings, const std::vector<Tensor>& outs) {
  ValidationCheck vc(ctx);
  try {
    call();
    ADD_FAILURE() << "no kf::Error raised (expected " << to_string(code) << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& s : substrings)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << "message lacks '" << s << "': " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "raised a std::exception that is not kf::Error: " << e.what();
  }
  for (const Tensor& t : outs) {
    if (!t.defined()) continue;
    size_t changed = 0;
    for (auto b : raw_bytes(t)) changed += b != kPoison;
    EXPECT_EQ(changed, 0u) << "the rejected call wrote " << changed << " bytes of an output";
  }
}

// Compares an output with its reference (check::compare): "" when it passes, else the worst elements.
inline std::string compare(const std::vector<double>& out, const std::vector<double>& ref, DType dtype,
                           double terms) {
  return check::compare(out, ref, dtype, terms).message;
}

// Runs one op on a context with the given inputs and compares with the reference (check::run_case:
// outputs poisoned first, errors reported as messages). "" when it passes. Validation messages are left
// to ValidationCheck, which covers the whole test.
inline std::string run_and_compare(Context& ctx, const OpDef& op, DType dtype, const std::vector<Shape>& shapes,
                                   const std::vector<std::vector<double>>& values, const Attrs& attrs) {
  check::CaseOptions o;
  o.check_validation = false;
  return check::run_case(ctx, op, dtype, shapes, values, attrs, o).message;
}

// Test names accept letters, digits and underscores only.
inline std::string sanitize(std::string s) {
  for (auto& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

}  // namespace kf::test
