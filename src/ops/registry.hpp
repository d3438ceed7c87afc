// The op registry (ARCHITECTURE.md principle 1). Each op is declared once here: its arguments and their
// checks, its float64 reference, its cost model, and the shapes it is tested and benchmarked on. The
// tests, kf-conformance and kf-bench iterate this table; backends register kernels against its names.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "kf/context.hpp"
#include "kf/dtype.hpp"
#include "kf/tensor.hpp"

namespace kf {

// A host tensor of doubles: what references read and write. An absent optional input is empty.
struct HostTensor {
  Shape shape;
  std::vector<double> data;
  bool present() const { return !data.empty(); }
};

// One checked case: the shapes of the inputs (an empty Shape = optional input left out) and attributes.
struct TestCase {
  std::string label;
  std::vector<Shape> inputs;
  Attrs attrs;
  double range = 1;  // inputs are uniform in [-range, range]
};

struct Cost {
  double bytes = 0;  // bytes read and written by an ideal kernel
  double flops = 0;
};

enum class Family { Elementwise, Reduction, Matmul };

struct OpDef {
  std::string name;
  Family family = Family::Elementwise;
  std::vector<std::string> inputs;  // argument names, in order
  int required_inputs = 0;          // the first n inputs are required; the rest optional
  std::vector<std::string> outputs;
  std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16, DType::f64};
  bool primitive = false;           // an unfused building block (add, relu, ...), not a catalog fusion
  bool random = false;              // reads p, seed, offset (Philox dropout)
  bool transcendental = false;      // needs exp/tanh/erf (GLSL has none in float64)
  double flops_per_element = 1;     // per output element, for the cost model

  // Checks the input shapes and the attributes (beyond the generic checks every op gets) and
  // returns the output shapes. Throws kf::Error naming the op and argument.
  std::function<std::vector<Shape>(const OpDef&, const std::vector<Shape>&, const Attrs&)> infer;
  // The float64 reference: inputs and outputs on the host (outputs arrive with shapes set).
  std::function<void(const std::vector<HostTensor>&, std::vector<HostTensor>&, const Attrs&)> reference;
  // Terms summed per output element (row length for reductions): scales atol by sqrt(terms).
  std::function<double(const std::vector<Shape>&)> terms = [](const std::vector<Shape>&) { return 1.0; };

  std::vector<TestCase> tests;  // small, awkward shapes: CI and kf-conformance
  std::vector<TestCase> bench;  // large shapes: kf-bench (sizes for f32; kf-bench scales per dtype)
  // The unfused chain of simpler registered ops that computes the same (kf-bench's baseline).
  std::vector<std::string> unfused;
};

const std::vector<OpDef>& registry();
const OpDef* find_op(const std::string& name);     // nullptr when unknown
const OpDef& get_op(const std::string& name);      // throws kf::Error when unknown

Cost op_cost(const OpDef& op, DType dtype, const std::vector<Shape>& inputs);

// Generic and op-specific checks of one call; returns the output shapes. Throws kf::Error.
std::vector<Shape> check_call(const OpDef& op, const std::vector<const Tensor*>& inputs,
                              const Attrs& attrs, const void* device_owner);

// Registration helpers of each family (src/ops/<family>.cpp).
void register_elementwise_ops(std::vector<OpDef>& ops);
void register_reduction_ops(std::vector<OpDef>& ops);
void register_linalg_ops(std::vector<OpDef>& ops);

}  // namespace kf
