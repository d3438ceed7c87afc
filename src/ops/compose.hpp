// Helpers of the composed ops (OpDef::compose: ffn, ffn_swiglu, depthwise_pointwise).
#pragma once
#include <string>
#include <vector>

#include "core/context_impl.hpp"
#include "kf/context.hpp"

namespace kf {

// Runs the parts of a composed op on its context and records their variants as the op's variant:
// "composed(linear_dropout: vulkan:...; linear: vulkan:...)".
struct Parts {
  Context& ctx;
  std::string trail;
  void run(const std::string& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
    ctx.run(op, in, out, a);
    trail += (trail.empty() ? "" : "; ") + op + ": " + ctx.last_variant();
    ctx.impl()->last_variant = "composed(" + trail + ")";
  }
};

}  // namespace kf
