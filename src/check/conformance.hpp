// The conformance checks shared by the test suites and kf-conformance (no test framework here): the
// tolerances of docs/ops.md, the comparison of an output with its float64 reference, fresh random
// inputs, running one registry case on a context with poisoned outputs, and the dropout mask an op
// applied. Library-internal: the tests and the tools include it as "check/conformance.hpp".
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kf/context.hpp"
#include "kf/dtype.hpp"
#include "kf/tensor.hpp"
#include "ops/registry.hpp"

namespace kf::check {

struct Tolerance {
  double err, atol, rtol;
};

// docs/ops.md, "Tolerances against the float64 reference" (zeros for a dtype it does not list).
Tolerance tolerance(DType t);

// The value rounded to the dtype: what an exact kernel would store.
double round_to(DType t, double v);

// A fresh seed from the hardware; checks report it so that a failure can be replayed.
uint64_t fresh_seed();

// n values uniform in [-range, range].
std::vector<double> uniform(size_t n, double range, std::mt19937_64& rng);

// The inputs of a case: one vector per shape, uniform in [-range, range] from one generator seeded with
// `seed`, drawn in order; an empty Shape (an optional input left out) gets an empty vector.
std::vector<std::vector<double>> random_inputs(const std::vector<Shape>& shapes, double range, uint64_t seed);

// The input distributions of the checks (kf-conformance --values; docs/ops.md, "Special values"). They
// shape the op's first input (x, the logits, q; the others stay uniform in [-range, range]), drawn
// before OpDef::prepare_inputs makes the inputs valid:
//   uniform    uniform in [-range, range] (the registry's cases as written);
//   scale      each row scaled by 10^k, k uniform in [-3, 4] (magnitudes from 1e-3 to 1e4);
//   outlier    uniform, with one element per row 1000 range (sign random);
//   large      magnitudes in [1/4, 1] of the dtype's largest finite value (f16 65504, bf16 and f32
//              3.4e38, f64 1e300), signs random;
//   subnormal  every other element a subnormal of the dtype (f16's below 6.1e-5, f32's and bf16's
//              below 1.2e-38), the rest uniform;
//   special    uniform, with NaN, +inf and -inf in some rows and one row all -inf.
// values_skip says which ops a distribution leaves undefined (gradients, products, ...) and why.
enum class Values { uniform, scale, outlier, large, subnormal, special };
const char* to_string(Values v);
// Throws kf::Error (InvalidArgument) naming the distributions for an unknown name.
Values parse_values(const std::string& name);
std::vector<Values> all_values();

// "" when `op` defines its result for inputs of this distribution in this dtype (docs/ops.md, "Special
// values"), else why the checks skip it.
std::string values_skip(const OpDef& op, DType dtype, Values values);

// A case's inputs of the distribution: random_inputs, input 0 reshaped by `values`, then prepare_inputs.
std::vector<std::vector<double>> case_inputs(const OpDef& op, const TestCase& tc, DType dtype, Values values,
                                             uint64_t seed);

// The comparison of one output with its reference.
struct Comparison {
  bool pass = true;
  double err = 0;        // relative L2 error ||out - ref|| / ||ref|| over the finite reference values
  double err_limit = 0;  // the tolerance's err plus the error of the exactly rounded reference
  // The worst element: its error in units of its own tolerance, |out - ref| / (atol + rtol |ref|) (above 1
  // fails; infinite for a NaN or infinity where the reference has another value), where it is and the
  // values there. worst_index is -1 for an empty output.
  double worst = 0;
  double worst_abs = 0;  // |out - ref| there
  int64_t worst_index = -1;
  double worst_ref = 0, worst_out = 0;
  int64_t bad = 0;       // elements outside their tolerance
  std::string message;   // "" when it passes, else the worst elements and the limits broken
};

// Compares an output with its reference. Non-finite reference values must be matched exactly (NaN by
// NaN, an infinity by the same infinity) and are left out of the norms, and so are finite reference
// values that overflow the dtype: those must be the infinity they round to (or within tolerance of the
// reference, for values at the edge). The relative L2 error may also
// use the error of the exactly rounded reference: a dtype cannot store its result more precisely (an f16
// softmax over 10^6 features gives subnormal f16 values, whose rounding alone is a 1.7e-2 L2 error).
// `terms` (summed per output element) scales atol by sqrt(terms). `tolerance_scale` multiplies err, atol
// and rtol (below 1 it shows how much margin a kernel has; 0 accepts only the exactly rounded result).
// `state` (optional, the same size as ref): for an output that updates a tensor in place (OpDef::in_place,
// the optimizers), the values it replaces. The relative L2 error is then taken against the larger of
// ||ref|| and ||state||: an update p - lr g may cancel to almost nothing while its arithmetic works at the
// size of p, so its error is measured at that size (docs/ops.md, tolerances).
Comparison compare(const std::vector<double>& out, const std::vector<double>& ref, DType dtype, double terms,
                   double tolerance_scale = 1, const std::vector<double>* state = nullptr);

struct CaseOptions {
  bool repeat = false;            // run again on the same inputs and require the same bits
  bool check_validation = true;   // a validation message during the case fails it
  double tolerance_scale = 1;     // multiplies the tolerances (compare)
  Values values = Values::uniform;  // the inputs' distribution (run_case on a registry case)
};

// The outcome of one case of one op in one dtype on one context.
struct CaseResult {
  bool pass = false;
  bool unsupported = false;       // the device cannot run the op in this dtype (or with these options); `message` says why
  double err = 0, err_limit = 0;  // the largest relative L2 error over the outputs, and its limit
  double worst = 0, worst_abs = 0;  // the worst element over the outputs (Comparison's units)
  int64_t worst_index = -1;
  std::string worst_output;       // the name of the output that holds it
  double worst_ref = 0, worst_out = 0;
  uint64_t seed = 0;              // the input seed (0 when the caller gave the values)
  std::string variant;            // the variant that ran (Context::last_variant)
  bool deterministic = true;      // false when a repeat gave other bits
  uint64_t validation_messages = 0;
  double seconds = 0;             // wall time of the whole case, reference included
  std::string message;            // "" when it passes
};

// Runs an op on a context with the given inputs (host values; the device rounds them to the dtype and
// the reference reads the rounded values) and compares every output with the float64 reference. Outputs
// are poisoned with NaN bytes first, so an element never written fails. A kf::Error (or any other
// exception) becomes a failure with its message; an op the device does not support is reported as
// unsupported without running (unless the context was opened with allow_cpu_fallback), and so is a call
// the backend refuses as Unsupported for its options.
CaseResult run_case(Context& ctx, const OpDef& op, DType dtype, const std::vector<Shape>& shapes,
                    const std::vector<std::vector<double>>& values, const Attrs& attrs,
                    const CaseOptions& options = {});
// Same, on a registry case with fresh random inputs from `seed` (case_inputs of options.values; a
// distribution the op does not define is reported as unsupported with values_skip's reason).
CaseResult run_case(Context& ctx, const OpDef& op, DType dtype, const TestCase& tc, uint64_t seed,
                    const CaseOptions& options = {});

// The validation messages a context reported since a point: construct it, run, then ask.
class ValidationWatch {
 public:
  explicit ValidationWatch(const Context& ctx) : ctx_(ctx), before_(ctx.validation_messages()) {}
  uint64_t count() const { return ctx_.validation_messages() - before_; }
  // "" when none, else "N validation message(s) on <device>:" and the messages, one per line.
  std::string report() const;

 private:
  const Context& ctx_;
  uint64_t before_;
};

// The keep mask (1 = kept) a random op (OpDef::random: dropout and its fusions) applied, read back from
// its output on inputs chosen so that kept and dropped elements differ: x uniform in [0.5, 1.5] (so a
// kept activation is never 0), an input named "bias" 0.25, any other input (the residual r) uniform in
// [-1, 1] from `data_seed`; a dropped element then equals 0, or r where the op has one. Throws kf::Error.
std::vector<uint8_t> dropout_mask(Context& ctx, const OpDef& op, DType dtype, const std::vector<Shape>& shapes,
                                  const Attrs& attrs, uint64_t data_seed);

// The first index where two masks differ, -1 when they are equal (a size mismatch differs at the end
// of the shorter one).
int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

}  // namespace kf::check
