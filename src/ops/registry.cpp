// The registry table, lookups, the cost model, and the checks every call goes through once.
#include "ops/registry.hpp"

#include <algorithm>
#include <cmath>

#include "kf/error.hpp"

namespace kf {

const std::vector<OpDef>& registry() {
  static const std::vector<OpDef> ops = [] {
    std::vector<OpDef> v;
    register_elementwise_ops(v);
    register_reduction_ops(v);
    register_linalg_ops(v);
    register_normalization_ops(v);
    register_training_ops(v);
    register_attention_ops(v);
    // Every op has exactly one identifier and every identifier one op (core/op_id.hpp's list).
    std::vector<bool> seen(kOpCount);
    for (auto& op : v) {
      if (!op_id_of(op.name.c_str(), &op.id))
        throw Error(ErrorCode::InvalidArgument, "registry: op '" + op.name + "' has no OpId (core/op_id.hpp)");
      if (seen[static_cast<int>(op.id)])
        throw Error(ErrorCode::InvalidArgument, "registry: op '" + op.name + "' is declared twice");
      seen[static_cast<int>(op.id)] = true;
    }
    for (int k = 0; k < kOpCount; ++k)
      if (!seen[k])
        throw Error(ErrorCode::InvalidArgument, std::string("registry: OpId ") + op_name(static_cast<OpId>(k)) + " has no op");
    return v;
  }();
  return ops;
}

namespace {
// Registry entries indexed by OpId.
const std::vector<const OpDef*>& by_id() {
  static const std::vector<const OpDef*> table = [] {
    std::vector<const OpDef*> t(kOpCount);
    for (const auto& op : registry()) t[static_cast<int>(op.id)] = &op;
    return t;
  }();
  return table;
}
}  // namespace

const OpDef& get_op(OpId id) { return *by_id()[static_cast<int>(id)]; }
OpId op_id(const OpDef& op) { return op.id; }

const OpDef* find_op(const std::string& name) {
  OpId id;
  return op_id_of(name.c_str(), &id) ? by_id()[static_cast<int>(id)] : nullptr;
}

const OpDef& get_op(const std::string& name) {
  if (const OpDef* op = find_op(name)) return *op;
  throw Error(ErrorCode::InvalidArgument, "unknown op '" + name + "'");
}

Cost op_cost(const OpDef& op, DType dtype, const std::vector<Shape>& inputs, const Attrs* attrs) {
  const Attrs a = attrs ? *attrs : Attrs{.p = 0.5};
  Cost c;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (!inputs[k].empty())
      c.bytes += static_cast<double>(dtype_size(op.input_dtype(k, dtype, a))) * static_cast<double>(numel(inputs[k]));
  const auto outs = op.infer(op, inputs, a);
  for (const auto& s : outs) c.bytes += static_cast<double>(dtype_size(op.output_dtype(dtype, a))) * static_cast<double>(numel(s));
  if (op.flops) {
    c.flops = op.flops(inputs, a);
    return c;
  }
  // Elementwise ops cost per output element; reductions, normalizations and losses per input element.
  const bool per_input = op.family == Family::Reduction || op.family == Family::Normalization ||
                         op.family == Family::Loss;
  const double n = per_input ? static_cast<double>(numel(inputs[0])) : static_cast<double>(numel(outs[0]));
  c.flops = n * op.flops_per_element;
  return c;
}

DType op_dtype(const OpDef& op, const std::vector<Tensor>& inputs) {
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].defined() && !(k < op.input_dtypes.size() && op.input_dtypes[k])) return inputs[k].dtype();
  return inputs.empty() || !inputs[0].defined() ? DType::f32 : inputs[0].dtype();
}

std::vector<Shape> check_call(const OpDef& op, const std::vector<const Tensor*>& inputs, const Attrs& attrs,
                              const void* device_owner) {
  const auto fail = [&](ErrorCode code, const std::string& what) { throw Error(code, op.name + ": " + what); };
  if (inputs.size() < static_cast<size_t>(op.required_inputs) || inputs.size() > op.inputs.size()) {
    fail(ErrorCode::InvalidArgument, "takes " + std::to_string(op.required_inputs) +
                                         (op.required_inputs == int(op.inputs.size())
                                              ? std::string()
                                              : " to " + std::to_string(op.inputs.size())) +
                                         " inputs, got " + std::to_string(inputs.size()));
  }
  if (attrs.out_dtype) {
    if (!op.takes_out_dtype)
      fail(ErrorCode::InvalidArgument, "argument 'out_dtype' is " + std::string(to_string(*attrs.out_dtype)) +
                                           "; this op stores its inputs' dtype (only linear, linear_dropout and "
                                           "matmul take an output dtype)");
    if (std::find(op.dtypes.begin(), op.dtypes.end(), *attrs.out_dtype) == op.dtypes.end())
      fail(ErrorCode::DType, "argument 'out_dtype' is " + std::string(to_string(*attrs.out_dtype)) +
                                 ", which this op does not take");
  }
  // Reused between calls of a thread: checking a small op then copies shapes into kept storage.
  thread_local std::vector<Shape> shapes;
  shapes.resize(op.inputs.size());
  for (auto& s : shapes) s.clear();
  const Tensor* first = nullptr;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor* t = inputs[k];
    const auto arg = [&] { return "argument '" + op.inputs[k] + "'"; };  // built only for a message
    const bool required = static_cast<int>(k) < op.required_inputs;
    if (t == nullptr || !t->defined()) {
      if (required) fail(ErrorCode::Shape, arg() + " is required but was not given (an undefined tensor)");
      continue;
    }
    if (t->dim() < 1 || t->dim() > kMaxDims)
      fail(ErrorCode::Shape, arg() + " has " + std::to_string(t->dim()) + " dimensions; expected 1 to 8");
    if (device_owner != nullptr && t->owner() != device_owner)
      fail(ErrorCode::Device, arg() + " lives on another device or context than the one running the op");
    const bool in_out_dtype = attrs.out_dtype && std::find(op.out_dtype_inputs.begin(), op.out_dtype_inputs.end(),
                                                           static_cast<int>(k)) != op.out_dtype_inputs.end();
    if (k < op.input_dtypes.size() && op.input_dtypes[k]) {  // a pinned dtype (OpDef::input_dtypes)
      if (t->dtype() != *op.input_dtypes[k])
        fail(ErrorCode::DType, arg() + " has dtype " + std::string(to_string(t->dtype())) + "; it must be " +
                                   to_string(*op.input_dtypes[k]));
    } else if (in_out_dtype) {  // the residual, added in the epilogue: the output's dtype
      if (t->dtype() != *attrs.out_dtype)
        fail(ErrorCode::DType, arg() + " has dtype " + std::string(to_string(t->dtype())) + "; it must be " +
                                   to_string(*attrs.out_dtype) + " (out_dtype: the output's dtype)");
    } else if (first == nullptr) {
      first = t;
      if (std::find(op.dtypes.begin(), op.dtypes.end(), t->dtype()) == op.dtypes.end())
        fail(ErrorCode::DType, arg() + " has dtype " + to_string(t->dtype()) + ", which this op does not take");
    } else if (t->dtype() != first->dtype()) {
      fail(ErrorCode::DType, arg() + " has dtype " + std::string(to_string(t->dtype())) + " but argument '" +
                                 op.inputs[0] + "' has dtype " + to_string(first->dtype()));
    }
    shapes[k] = t->shape();
  }
  if (op.random && !(attrs.p >= 0.0 && attrs.p < 1.0))
    fail(ErrorCode::InvalidArgument,
         "argument 'p' is " + std::to_string(attrs.p) + "; expected a probability in [0, 1)");
  return op.infer(op, shapes, attrs);
}

}  // namespace kf
