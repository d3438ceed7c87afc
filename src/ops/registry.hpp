// The op registry (docs/architecture.md principle 1). Each op is declared once here: its arguments and their
// checks, its float64 reference, its cost model, and the shapes it is tested and benchmarked on. The
// tests, kf-conformance and kf-bench iterate this table; backends register kernels against its names.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kf/context.hpp"
#include "kf/dtype.hpp"
#include "core/op_id.hpp"
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

// How a call runs when one of its tensors exceeds the device's largest storage binding
// (Caps::max_storage_range; src/core/split.cpp, docs/backends.md "Limits").
enum class Split : uint8_t {
  none,      // it does not: the call is refused (Unsupported, naming the tensor, its size and the limit)
  rows,      // in parts over ranges of rows: each row (the last dimension of input 0) is computed from the
             // same row of every tensor with input 0's leading dimensions (an output may hold one value
             // per row: the reductions); the others ([F], [1]) go whole
  elements,  // as rows, and at any element when no operand broadcasts over rows (only [1] ones, if any)
};

struct OpDef {
  std::string name;
  OpId id{};  // set by registry() from the name (core/op_id.hpp)
  Family family = Family::Elementwise;
  std::vector<std::string> inputs;  // argument names, in order
  int required_inputs = 0;          // the first n inputs are required; the rest optional
  std::vector<std::string> outputs;
  std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16, DType::f64};
  bool primitive = false;           // an unfused building block (add, relu, ...), not a catalog fusion
  bool random = false;              // reads p, seed, offset (Philox dropout)
  bool transcendental = false;      // needs exp/tanh/erf (GLSL has none in float64)
  double flops_per_element = 1;     // per output element, for the cost model
  // When set, the op's floating-point operations for these input shapes and attributes, in place of
  // flops_per_element per output element (matrix products: 2 M N K; linear_cross_entropy: its matrix
  // products; attention: 4 B H Sq Sk D, halved when causal).
  std::function<double(const std::vector<Shape>&, const Attrs&)> flops;
  double default_eps = 0;           // the eps that Attrs::eps == 0 selects (normalizations, Adam)
  double eps_of(const Attrs& a) const { return a.eps == 0 ? default_eps : a.eps; }
  // Per-input dtypes: an entry that holds a dtype pins that input to it whatever the op's dtype (the
  // class indices of cross_entropy are i32); an empty entry, or an input past the end, takes the op's
  // dtype, which every other input and every output shares.
  std::vector<std::optional<DType>> input_dtypes;
  // Ops whose epilogue may store another dtype than the inputs' (Attrs::out_dtype: linear, matmul). The
  // inputs listed in out_dtype_inputs (the residual, added in the epilogue) then take the output's dtype.
  bool takes_out_dtype = false;
  std::vector<int> out_dtype_inputs;
  // The dtype of the outputs of a call whose op dtype is `op_dtype`.
  DType output_dtype(DType op_dtype, const Attrs& a) const {
    return takes_out_dtype && a.out_dtype ? *a.out_dtype : op_dtype;
  }
  // The dtype input k must have: pinned, the output's (out_dtype_inputs), else the op's.
  DType input_dtype(size_t k, DType op_dtype, const Attrs& a) const {
    if (k < input_dtypes.size() && input_dtypes[k]) return *input_dtypes[k];
    for (int j : out_dtype_inputs)
      if (static_cast<size_t>(j) == k) return output_dtype(op_dtype, a);
    return op_dtype;
  }
  // In-place exception (optimizers): output `first` may be the same tensor as input `second`. The core
  // rejects every other output that is an input. A kernel must give the same result either way.
  std::vector<std::pair<int, int>> in_place;
  // Inputs whose values are never negative (adamw's second moment, batch_norm's variance): kf-bench
  // (and bench/torch_bench.py) draw them as squares of the uniform values, as prepare_inputs does for the
  // tests. Drawn in [-1, 1], adamw's sqrt(v) was NaN for half the values, and the benchmark timed CUDA's
  // division taking its slow path on NaN (H100: 0.66-0.84 ms by launch shape where Vulkan's approximate
  // division took 0.63).
  std::vector<int> nonneg_inputs;
  // Makes random test inputs valid for the op, in place (class indices in range with some ignored,
  // variances positive, ...). The conformance checks call it after drawing uniform values; empty when
  // any values are valid.
  std::function<void(const std::vector<Shape>&, const Attrs&, std::vector<std::vector<double>>&)> prepare_inputs;

  // Checks the input shapes and the attributes (beyond the generic checks every op gets) and
  // returns the output shapes. Throws kf::Error naming the op and argument.
  std::function<std::vector<Shape>(const OpDef&, const std::vector<Shape>&, const Attrs&)> infer;
  // The float64 reference: inputs and outputs on the host (outputs arrive with shapes set).
  std::function<void(const std::vector<HostTensor>&, std::vector<HostTensor>&, const Attrs&)> reference;
  // Terms summed per output element (row length for reductions): scales atol by sqrt(terms).
  std::function<double(const std::vector<Shape>&)> terms = [](const std::vector<Shape>&) { return 1.0; };

  std::vector<TestCase> tests;  // small, awkward shapes: CI and kf-conformance
  std::vector<TestCase> bench;  // large shapes: kf-bench (sizes for f32; kf-bench scales per dtype)
  // The unfused baseline (kf-bench's "speed-up of fusion"): computes the op's result as a chain of
  // registered primitive ops run through Context::run, with temporaries from unfused_temporary (so
  // each step reads and writes memory as an unfused framework would). Empty when the op has no
  // such chain (reductions and softmax: there is no reduction primitive). A chain that exists for some
  // forms of an op only (the packed swiglu / geglu, a scalar `s` or `a`: no slicing or scalar-broadcast
  // primitive) throws kf::Error with ErrorCode::Unsupported for the other forms.
  using UnfusedFn = std::function<void(Context&, const std::vector<Tensor>& inputs,
                                       const std::vector<Tensor>& outputs, const Attrs&)>;
  UnfusedFn unfused;
  // A composed op (ffn, ffn_swiglu): its real path on every backend is a sequence of registered ops run
  // through Context::run on the op's own context, with temporaries from unfused_temporary. Backends never
  // see the op itself: Context::run calls `compose` after the op's checks, and the op is supported on a
  // device when every op of `composed_of` is (in the call's dtype). The reference stays the op's own.
  UnfusedFn compose;
  std::vector<std::string> composed_of;
  // Checks of input values that shapes cannot show (embedding's token ids), run by Context::run after
  // the shape checks and before anything is dispatched, so a rejected call writes nothing. It may read
  // inputs back to the host (Tensor::download waits for the work recorded before). Empty for most ops.
  std::function<void(const OpDef&, const std::vector<Tensor>& inputs)> check_values;
  Split split = Split::none;  // (above)
};

// The op dtype of a call: the dtype of the first given input that OpDef::input_dtypes does not pin
// (embedding's table, not its i32 tokens).
DType op_dtype(const OpDef& op, const std::vector<Tensor>& inputs);

// The temporaries of the unfused chains. A chain allocates fresh ones, unless an UnfusedScratch is alive
// on this thread: then the temporary of the same context, shape, dtype and slot is reused, as a framework's
// caching allocator reuses its blocks. kf-bench keeps one alive while it times, so that its runs neither
// wait for device-memory allocation nor fragment device memory by allocating and freeing each run.
Tensor unfused_temporary(Context& ctx, const Shape& shape, DType dtype, int slot = 0);
class UnfusedScratch {
 public:
  UnfusedScratch();
  ~UnfusedScratch();
  UnfusedScratch(const UnfusedScratch&) = delete;
  UnfusedScratch& operator=(const UnfusedScratch&) = delete;

 private:
  friend Tensor unfused_temporary(Context&, const Shape&, DType, int);
  std::vector<std::pair<std::string, Tensor>> pool_;
  UnfusedScratch* previous_;
};

const std::vector<OpDef>& registry();
const OpDef* find_op(const std::string& name);     // nullptr when unknown
const OpDef& get_op(OpId id);
const OpDef& get_op(const std::string& name);      // throws kf::Error when unknown

// `attrs` (when given) are the call's: the output shapes and OpDef::flops may depend on them.
Cost op_cost(const OpDef& op, DType dtype, const std::vector<Shape>& inputs, const Attrs* attrs = nullptr);

// Generic and op-specific checks of one call; returns the output shapes. Throws kf::Error.
std::vector<Shape> check_call(const OpDef& op, const std::vector<const Tensor*>& inputs,
                              const Attrs& attrs, const void* device_owner);

// Registration helpers of each family (src/ops/<family>.cpp).
void register_elementwise_ops(std::vector<OpDef>& ops);
void register_reduction_ops(std::vector<OpDef>& ops);
void register_linalg_ops(std::vector<OpDef>& ops);
void register_normalization_ops(std::vector<OpDef>& ops);  // src/ops/normalization.cpp
void register_training_ops(std::vector<OpDef>& ops);       // src/ops/training.cpp
void register_attention_ops(std::vector<OpDef>& ops);      // src/ops/attention.cpp

}  // namespace kf
