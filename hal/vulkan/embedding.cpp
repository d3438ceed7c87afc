// embedding (docs/ops.md section 4; shaders/embedding.comp): rows of a table gathered by token id, plus
// an optional positional table.
#include <algorithm>

#include "hal/vulkan/kernels_common.hpp"

namespace kf::hal::vk {
namespace {

struct EmbeddingPush {
  uint32_t rows, d, L, V, units;
};

// The embedding kernel's work units: output packs (d a multiple of the pack), else elements or words.
uint64_t embedding_units(const OpCall& call) {
  const uint64_t d = static_cast<uint64_t>(call.inputs[1].shape[1]);
  const uint32_t vw = pack_elems(call.dtype);
  const uint64_t n = static_cast<uint64_t>(call.inputs[0].numel) * d;
  return d % vw == 0 ? n / vw : (dtype_size(call.dtype) == 2 ? (n + 1) / 2 : n);
}

}  // namespace

bool supports_embedding(const VulkanDevice& dev, const OpCall& call, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (!dev.has_variant("embedding_" + std::string(to_string(call.dtype))))
    return no(std::string("this build has no Vulkan kernel for ") + call.name() + " in " + to_string(call.dtype));
  if (call.inputs.empty()) return true;  // the op and dtype alone
  if (embedding_units(call) > 0xffffffffull) return no("more than 2^32 output elements");
  return true;
}

// One invocation per output pack (d a multiple of the pack), else per element / word.
Variant dispatch_embedding(VulkanDevice& dev, const OpCall& call) {
  const TensorArg& tok = call.inputs[0];
  const TensorArg& table = call.inputs[1];
  const bool has_pos = call.inputs.size() > 2 && call.inputs[2].buffer;
  const uint64_t d = static_cast<uint64_t>(table.shape[1]);
  const uint64_t rows = static_cast<uint64_t>(tok.numel);
  const uint32_t vw = pack_elems(call.dtype);
  const bool wide = d % vw == 0;
  const uint64_t units = embedding_units(call);  // at most 2^32 (supports_embedding)
  EmbeddingPush pc{static_cast<uint32_t>(rows), static_cast<uint32_t>(d), static_cast<uint32_t>(tok.shape.back()),
                   static_cast<uint32_t>(table.shape[0]), static_cast<uint32_t>(units)};
  Launch l;
  l.variant = "embedding_" + std::string(to_string(call.dtype));
  l.spec = {kWorkgroup, has_pos ? 1u : 0u, wide ? 1u : 0u};
  l.bindings[0] = tok.buffer;
  l.bindings[1] = table.buffer;
  if (has_pos) l.bindings[2] = call.inputs[2].buffer;
  l.bindings[3] = call.outputs[0].buffer;
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  l.groups = grid(units, kWorkgroup, dev.info().caps, dev.tuning());
  dev.record(l);
  return std::string("vulkan:embedding/") + (wide ? "16B-packs" : "elements");
}

}  // namespace kf::hal::vk
