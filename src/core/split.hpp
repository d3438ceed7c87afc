// Calls whose tensors exceed the device's largest storage binding (Caps::max_storage_range): run in parts
// over ranges of rows or elements where the op allows (OpDef::split), else refused (docs/backends.md,
// "Limits"). Context::run's one hook; internal to the core.
#pragma once
#include <vector>

#include "core/context_impl.hpp"

namespace kf {
struct OpDef;
}

namespace kf::detail {

// Whether a tensor's buffer is larger than one binding may cover (every call asks: one load and compare
// a tensor). run_in_parts() looks at the tensors' own bytes (a buffer is padded to 16).
inline bool exceeds_binding(const ContextImpl& impl, const std::vector<Tensor>& inputs,
                            const std::vector<Tensor>& outputs) {
  const uint64_t limit = impl.device->info().caps.max_storage_range;
  if (!limit) return false;
  for (const auto* list : {&inputs, &outputs})
    for (const auto& t : *list)
      if (t.defined() && t.buffer()->size() > limit) return true;
  return false;
}

// Runs a checked call that exceeds_binding() as several dispatches over row or element ranges whose
// bindings each fit, and returns true; or throws Unsupported (naming the op, the tensor, its size and the
// limit) where the op does not split or a row alone is too large, before anything is recorded. Returns
// false, running nothing, where no tensor itself exceeds the limit (only a buffer's padding does: the
// backend binds what fits), and for the calls Context::run serves without the backend or in parts of its
// own (an empty tensor, a composed op): Context::run then goes on as for any call.
bool run_in_parts(ContextImpl& impl, const OpDef& op, const std::vector<Tensor>& inputs,
                  const std::vector<Tensor>& outputs, const Attrs& attrs);

}  // namespace kf::detail
