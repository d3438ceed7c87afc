// The one path of the typed entry points (include/kf/ops.hpp, training.hpp, linalg.hpp, attention.hpp,
// conv.hpp): the op by name through Context::call on the context of its first given input, so that their
// checks, and the errors they raise, are those of Context::run.
#pragma once
#include <string>
#include <vector>

#include "kf/context.hpp"
#include "kf/error.hpp"
#include "ops/registry.hpp"

namespace kf::detail {

// Undefined tensors stand for optional inputs left out: trailing ones are dropped (as a caller of
// Context::call would leave them out), inner ones stay undefined, and an undefined required one gets the
// core's own error naming it.
inline std::vector<Tensor> call_op(const std::string& name, std::vector<Tensor> inputs, const Attrs& attrs = {}) {
  const OpDef& op = get_op(name);
  while (inputs.size() > static_cast<size_t>(op.required_inputs) && !inputs.back().defined()) inputs.pop_back();
  for (const Tensor& t : inputs)
    if (t.defined()) return Context::of(t).call(name, inputs, attrs);
  throw Error(ErrorCode::Shape, name + ": argument '" + (op.inputs.empty() ? std::string("1") : op.inputs[0]) +
                                    "' is required but was not given (an undefined tensor)");
}

}  // namespace kf::detail
