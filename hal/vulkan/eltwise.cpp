// The elementwise kernels (docs/ops.md section 1, shaders/eltwise.comp): the shader variant of an op, its
// operand layouts and grid; and which elementwise, row and matrix-product calls have a kernel.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "hal/vulkan/device.hpp"
#include "plan/dropout.hpp"
#include "hal/vulkan/kernels_common.hpp"

namespace kf::hal::vk {
namespace {

// Operand layouts of eltwise.comp (MODE1 / MODE2).
enum Mode : uint32_t { kFull = 0, kFeatures = 1, kScalar = 2, kAbsent = 3 };

Mode mode_of(const TensorArg& a, int64_t n) {
  if (!a.buffer) return kAbsent;
  if (a.numel == n) return kFull;
  if (a.numel == 1) return kScalar;
  return kFeatures;
}

struct EltwisePush {
  uint32_t n, feat, seed_lo, seed_hi, off_lo, off_hi, thr;
  float keep_scale;
  uint32_t keep_scale_lo, keep_scale_hi;
};

}  // namespace

std::string kernel_variant_name(const OpCall& call, DType t, bool subgroup) {
  if (call.family == Family::Matmul) return "mm_" + std::string(to_string(t));  // linear and matmul share it
  const std::string fam = call.family == Family::Reduction ? "rows_" : "eltwise_";
  return fam + call.name() + "_" + to_string(t) + (subgroup ? "_sg" : "");
}

// The elementwise, row and matrix-product ops (this file): a kernel variant per op and dtype.
bool supports_eltwise_rows_matmul(const VulkanDevice& dev, const OpCall& call, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  const DType dtype = call.dtype;
  // The elementwise and row ops depend on the op and dtype alone: the answer is kept, so that a call
  // builds no variant name.
  const bool simple = call.family == Family::Elementwise || call.family == Family::Reduction;
  int8_t& known = dev.simple_supported(call.id, dtype);
  if (simple && known == 1) return true;
  const std::string name = kernel_variant_name(call, dtype, call.family == Family::Reduction && use_subgroups(dev.info().caps));
  if (simple) known = dev.has_variant(name) ? 1 : 0;
  if (!dev.has_variant(name)) {
    if (dtype == DType::f64 && call.transcendental)
      return no(std::string("GLSL has no float64 exp/tanh/erf, so ") + call.name() +
                " has no f64 Vulkan kernel (use the CPU backend or allow_cpu_fallback)");
    return no(std::string("this build has no Vulkan kernel for ") + call.name() + " in " + to_string(dtype));
  }
  if (call.family == Family::Matmul) return supports_matmul(dev, call, why);
  return true;
}

Variant dispatch_eltwise(VulkanDevice& dev, const OpCall& call) {
  const Caps& caps = dev.info().caps;
  const uint32_t vw = pack_elems(call.dtype);
  const TensorArg& out = call.outputs[0];
  {
    const int64_t n = out.numel;
    const int64_t feat = out.shape.empty() ? 1 : out.shape.back();
    // swiglu / geglu without a gate: x holds [value, gate] halves.
    const bool packed = (call.id == OpId::swiglu || call.id == OpId::geglu) && call.inputs.size() > 1 &&
                        !call.inputs[1].buffer;
    const Mode m1 = packed ? kAbsent : (call.inputs.size() > 1 ? mode_of(call.inputs[1], n) : kAbsent);
    const Mode m2 = call.inputs.size() > 2 ? mode_of(call.inputs[2], n) : kAbsent;
    const bool gather = (packed || m1 == kFeatures || m2 == kFeatures) && feat % vw != 0;

    EltwisePush pc{};
    pc.n = static_cast<uint32_t>(n);
    pc.feat = static_cast<uint32_t>(feat);
    pc.seed_lo = static_cast<uint32_t>(call.attrs.seed);
    pc.seed_hi = static_cast<uint32_t>(call.attrs.seed >> 32);
    pc.off_lo = static_cast<uint32_t>(call.attrs.offset);
    pc.off_hi = static_cast<uint32_t>(call.attrs.offset >> 32);
    pc.thr = plan::dropout_threshold(call.attrs.p);
    const double keep = 1.0 / (1.0 - call.attrs.p);
    pc.keep_scale = static_cast<float>(keep);
    uint64_t bits;
    std::memcpy(&bits, &keep, 8);
    pc.keep_scale_lo = static_cast<uint32_t>(bits);
    pc.keep_scale_hi = static_cast<uint32_t>(bits >> 32);

    Launch l;
    int32_t& id = dev.variant_slot(call.id, call.dtype, false);  // the name is built once per op and dtype
    if (id < 0) id = static_cast<int32_t>(dev.variant_id(kernel_variant_name(call, call.dtype, false)));
    l.variant_id = id;
    const uint32_t items = dev.tuning().eltwise_items;
    l.spec = {kWorkgroup, m1, m2, packed ? 1u : 0u, gather ? 1u : 0u, items};
    l.bind(0, call.inputs[0]);
    if (call.inputs.size() > 1) l.bind(1, call.inputs[1]);
    if (call.inputs.size() > 2) l.bind(2, call.inputs[2]);
    l.bind(3, out);
    l.push = &pc;
    l.push_bytes = sizeof(pc);
    l.groups = grid((static_cast<uint64_t>(n) + vw - 1) / vw, kWorkgroup * items, caps, dev.tuning());
    dev.record(l);
    return gather ? "vulkan:eltwise/gather" : "vulkan:eltwise/16B-packs";
  }
}

}  // namespace kf::hal::vk
