// The Vulkan kernels of docs/ops.md section 3 (normalizations, forward and backward): which shader
// variant serves an op, its specialization constants, push constants and grid, and the row regime
// (several rows per workgroup, one workgroup per row, or rows split over workgroups with a combine
// pass), and which section 3 and 6 calls have a kernel (supports_training). The backward passes, losses
// and optimizers are in train.cpp, linear_cross_entropy in lce.cpp.
#include <algorithm>
#include <cstring>

#include "hal/vulkan/device.hpp"
#include "hal/vulkan/kernels_common.hpp"

namespace kf::hal::vk {
namespace {

// Forward row normalizations of norm.comp.
bool is_row_norm(OpId id) {
  switch (id) {
    case OpId::layer_norm: case OpId::layer_norm_relu: case OpId::layer_norm_gelu: case OpId::layer_norm_silu:
    case OpId::rms_norm: case OpId::rms_norm_gelu: case OpId::rms_norm_silu: case OpId::add_layer_norm:
    case OpId::add_rms_norm: case OpId::group_norm:
      return true;
    default:
      return false;
  }
}

struct NormPush {
  uint32_t rows, feat, chunk, nchunks, inner, period;
  float eps;
  uint32_t eps_lo, eps_hi;
  uint32_t spin;  // PASS 3
};

}  // namespace

RowPlan plan_rows(const Caps& caps, const Tuning& tuning, DType dtype, uint64_t rows, uint64_t len) {
  RowPlan p;
  p.vw = pack_elems(dtype);
  p.cache_values = tuning.rows_values ? tuning.rows_values : 32;
  p.subgroup = use_subgroups(caps);
  p.wide = len % p.vw == 0;
  const uint64_t per_invocation = std::max<uint32_t>(1, p.cache_values / p.vw);  // items cached
  const uint64_t items = (len + p.vw - 1) / p.vw;
  uint32_t tpr = 1;
  while (uint64_t(tpr) * per_invocation < items && tpr < kWorkgroup) tpr *= 2;
  if (p.subgroup) tpr = std::max(tpr, caps.subgroup_size);
  p.tpr = std::max<uint32_t>(tpr, 1);
  p.chunk = uint64_t(kWorkgroup) * per_invocation * p.vw;
  p.split = uint64_t(p.tpr) * per_invocation < items;
  p.nchunks = p.split ? (len + p.chunk - 1) / p.chunk : 1;
  (void)rows;
  return p;
}

RowPlan plan_loss_rows(const Caps& caps, const Tuning& tuning, DType dtype, uint64_t rows, uint64_t len) {
  Tuning t = tuning;
  if (t.rows_values == 0 && dtype == DType::bf16) t.rows_values = 64;
  return plan_rows(caps, t, dtype, rows, len);
}

void set_eps(double eps, float& f, uint32_t& lo, uint32_t& hi) {
  f = static_cast<float>(eps);
  uint64_t bits;
  std::memcpy(&bits, &eps, 8);
  lo = static_cast<uint32_t>(bits);
  hi = static_cast<uint32_t>(bits >> 32);
}

std::string training_variant(const OpCall& call, DType dtype, const Caps& caps) {
  const std::string dt = to_string(dtype);
  const std::string sg = use_subgroups(caps) ? "_sg" : "";
  const std::string name = call.name();
  if (call.family == Family::Optimizer) return "optim_" + name + "_" + dt;
  if (call.family == Family::Loss) return "loss_" + name + "_" + dt + sg;
  if (call.id == OpId::batch_norm_relu) return "bn_" + dt;
  if (is_row_norm(call.id)) return "norm_" + name + "_" + dt + sg;
  return "normbwd_" + name + "_" + dt + sg;
}

namespace {
bool is_linear_cross_entropy(OpId id) {
  return id == OpId::linear_cross_entropy || id == OpId::linear_cross_entropy_backward;
}
}  // namespace

bool supports_training(const VulkanDevice& dev, const OpCall& call, std::string* why) {
  const DType dtype = call.dtype;
  const std::string name = training_variant(call, dtype, dev.info().caps);
  // linear_cross_entropy also runs the matrix-product kernel (mm.comp).
  const bool lce = is_linear_cross_entropy(call.id);
  const bool mm = !lce || dev.has_variant(std::string("mm_") + to_string(dtype));
  if (!name.empty() && dev.has_variant(name) && mm) return lce ? supports_linear_cross_entropy(dev, call, why) : true;
  if (why) {
    if (dtype == DType::f64 && call.transcendental)
      *why = std::string("GLSL has no float64 exp/tanh/erf, so ") + call.name() +
             " has no f64 Vulkan kernel (use the CPU backend or allow_cpu_fallback)";
    else
      *why = std::string("this build has no Vulkan kernel for ") + call.name() + " in " + to_string(dtype);
  }
  return false;
}

// The normalizations: batch_norm_relu, the backward passes (train.cpp), the row norms (below).
Variant dispatch_norm(VulkanDevice& dev, const OpCall& call) {
  if (call.id == OpId::batch_norm_relu) return dispatch_batch_norm(dev, call);
  if (!is_row_norm(call.id)) return dispatch_norm_backward(dev, call);

  const Caps& caps = dev.info().caps;
  const TensorArg& x = call.inputs[0];
  const bool add = call.id == OpId::add_layer_norm || call.id == OpId::add_rms_norm;
  const bool group = call.id == OpId::group_norm;
  const bool layer = group || call.id == OpId::layer_norm || call.id == OpId::layer_norm_relu ||
                     call.id == OpId::layer_norm_gelu || call.id == OpId::layer_norm_silu || call.id == OpId::add_layer_norm;
  const size_t k_aff = add ? 2 : 1;  // index of w; b follows for layer norms
  const bool has_w = call.inputs.size() > k_aff && call.inputs[k_aff].buffer;
  const bool has_b = layer && call.inputs.size() > k_aff + 1 && call.inputs[k_aff + 1].buffer;

  // Rows: the last dimension; for group_norm, each (sample, group): C / G channels of `inner` elements.
  uint64_t rows, len, inner = 1, period;
  if (group) {
    const uint64_t N = static_cast<uint64_t>(x.shape[0]), C = static_cast<uint64_t>(x.shape[1]);
    inner = static_cast<uint64_t>(x.numel) / (N * C);
    const uint64_t G = static_cast<uint64_t>(call.attrs.groups);
    rows = N * G;
    len = C / G * inner;
    period = C;
  } else {
    len = static_cast<uint64_t>(x.shape.back());
    rows = static_cast<uint64_t>(x.numel) / len;
    period = len;
  }
  // 16-bit rows that fit one workgroup at 16 values an invocation take 16 (twice the invocations a row):
  // on the H100 rows of 4096 read bf16 layer_norm 0.87 -> 0.93, rms_norm 0.91 -> 0.99 of copy, f16 0.90 ->
  // 0.97 / 0.97 -> 0.99; f32 and longer rows keep 32.
  Tuning t = dev.tuning();
  if (t.rows_values == 0 && (call.dtype == DType::f16 || call.dtype == DType::bf16) &&
      len <= uint64_t(kWorkgroup) * 16)
    t.rows_values = 16;
  RowPlan plan = plan_rows(caps, t, call.dtype, rows, len);
  // Rows that a 512-invocation workgroup holds in its registers take it rather than the split passes:
  // one read of the row instead of two (group_norm's rows of C/G x HW = 16384, for one).
  uint32_t wg = kWorkgroup;
  if (plan.split) {
    const uint32_t big = long_row_workgroup(caps);
    const uint64_t per_invocation = std::max<uint32_t>(1, plan.cache_values / plan.vw);
    if (uint64_t(big) * per_invocation >= (len + plan.vw - 1) / plan.vw) {
      wg = plan.tpr = big;
      plan.split = false;
      plan.nchunks = 1;
    }
  }
  uint32_t affine = 2;
  if (plan.wide && inner == 1) affine = 0;
  else if (plan.wide && inner % plan.vw == 0) affine = 1;

  NormPush pc{static_cast<uint32_t>(rows), static_cast<uint32_t>(len), static_cast<uint32_t>(plan.chunk),
              static_cast<uint32_t>(plan.nchunks), static_cast<uint32_t>(inner), static_cast<uint32_t>(period),
              0, 0, 0, 0};
  set_eps(call.eps, pc.eps, pc.eps_lo, pc.eps_hi);

  Launch l;
  l.variant = training_variant(call, call.dtype, caps);
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  l.bind(0, x);
  if (add) l.bind(1, call.inputs[1]);
  if (has_w) l.bind(2, call.inputs[k_aff]);
  if (has_b) l.bind(3, call.inputs[k_aff + 1]);
  const std::shared_ptr<Buffer>& y = call.outputs.back().buffer;
  const std::shared_ptr<Buffer> s = add ? call.outputs[0].buffer : nullptr;
  // The offsets of y and s (TensorArg::offset); an absent s repeats binding 0, at its offset.
  const uint64_t y_off = call.outputs.back().offset, s_off = add ? call.outputs[0].offset : 0;
  const auto spec = [&](uint32_t tpr, uint32_t pass) {
    return std::vector<uint32_t>{kWorkgroup, tpr, plan.wide ? 1u : 0u, plan.cache_values, pass,
                                 has_w ? 1u : 0u, has_b ? 1u : 0u, affine};
  };
  const std::string form = std::string(plan.subgroup ? "subgroup" : "shared-memory") +
                           (plan.wide ? ",16B-packs" : ",scalar");
  if (!plan.split) {
    l.spec = spec(plan.tpr, 0);
    l.spec[0] = wg;
    l.bindings[4] = y;
    l.bindings[5] = s;
    l.offsets[4] = y_off, l.offsets[5] = s_off;
    l.groups = grid(rows, wg / plan.tpr, caps, dev.tuning());
    dev.record(l);
    return "vulkan:norm/" + form + ",tpr=" + std::to_string(plan.tpr);
  }
  const size_t acc = call.dtype == DType::f64 ? 8 : 4;
  // Split rows in one pass (norm.comp PASS 3): P workgroups of `big` invocations per row, each holding
  // its part in registers, exchanging the parts' statistics through the workspace. 16-bit rows of whole
  // packs are cached as raw packs (64 values in the registers of 32 floats, so P = 2 for rows of 65536)
  // except for the add forms, which normalize s = x + r unrounded.
  const uint32_t coop_mode = rows_coop_mode(dev.info(), dev.tuning());
  if (coop_mode >= 2) {
    const uint32_t big = coop_workgroup(caps, dev.tuning());
    const bool raw = coop_mode == 2 && !add && plan.wide && dev.tuning().rows_values == 0 &&
                     (call.dtype == DType::f16 || call.dtype == DType::bf16);
    const uint32_t values = raw ? 64u : plan.cache_values;
    const uint64_t per_invocation = std::max<uint32_t>(1, values / plan.vw);
    const uint64_t items = (len + plan.vw - 1) / plan.vw;
    const uint64_t parts = (items + big * per_invocation - 1) / (big * per_invocation);
    const uint64_t chunk_items = (items + parts - 1) / parts;  // balanced parts
    const uint64_t P = (items + chunk_items - 1) / chunk_items;
    if (P >= 2 && P <= 32 && rows * P <= 0xffffffffull) {
      pc.chunk = static_cast<uint32_t>(chunk_items * plan.vw);
      pc.nchunks = static_cast<uint32_t>(P);
      pc.spin = rows_coop_spin(dev.info(), dev.tuning());
      const size_t flag_bytes = rows_coop_flag_bytes(rows);
      const std::shared_ptr<Buffer> ws = dev.workspace(flag_bytes + 3 * rows * P * acc);
      dev.record_fill(ws, 0u, flag_bytes);
      l.spec = {big, big, plan.wide ? 1u : 0u, values, 3u, has_w ? 1u : 0u, has_b ? 1u : 0u, affine, raw ? 1u : 0u};
      l.bindings[4] = y;
      l.bindings[5] = s;
      l.bindings[6] = ws;
      l.offsets[4] = y_off, l.offsets[5] = s_off;
      l.groups = grid(rows * P, 1, caps, dev.tuning());  // each workgroup loops over tickets
      dev.record(l);
      return "vulkan:norm/" + form + ",coop=" + std::to_string(P) + "x" + std::to_string(pc.chunk) +
             (raw ? ",raw16" : "");
    }
  }
  // Split rows: PASS 1 writes three statistics per chunk to the workspace (and s), PASS 2 normalizes.
  const std::shared_ptr<Buffer> ws = dev.workspace(3 * rows * plan.nchunks * acc);
  l.groups = grid(rows * plan.nchunks, 1, caps, dev.tuning());
  l.spec = spec(kWorkgroup, 1);
  l.bindings[4] = s;  // null for the plain forms: binding 4 then repeats binding 0, never written
  l.bindings[5] = ws;
  l.offsets[4] = s_off;
  dev.record(l);
  l.spec = spec(kWorkgroup, 2);
  l.bindings[4] = y;
  l.offsets[4] = y_off;
  dev.record(l);
  return "vulkan:norm/" + form + ",split=" + std::to_string(plan.nchunks) + "x" + std::to_string(plan.chunk);
}

// batch_norm_relu: one pack per invocation (batchnorm.comp).
Variant dispatch_batch_norm(VulkanDevice& dev, const OpCall& call) {
  const TensorArg& x = call.inputs[0];
  const uint32_t vw = pack_elems(call.dtype);
  const uint64_t C = static_cast<uint64_t>(x.shape[1]);
  const uint64_t inner = static_cast<uint64_t>(x.numel) / (static_cast<uint64_t>(x.shape[0]) * C);
  struct {
    uint32_t n, inner, channels;
    float eps;
    uint32_t eps_lo, eps_hi;
  } pc{static_cast<uint32_t>(x.numel), static_cast<uint32_t>(inner), static_cast<uint32_t>(C), 0, 0, 0};
  set_eps(call.eps, pc.eps, pc.eps_lo, pc.eps_hi);
  const bool per_pack = inner % vw == 0;
  Launch l;
  l.variant = training_variant(call, call.dtype, dev.info().caps);
  l.spec = {kWorkgroup, per_pack ? 1u : 0u};
  l.bindings[0] = x.buffer;
  l.bindings[1] = call.inputs[1].buffer;
  l.bindings[2] = call.inputs[2].buffer;
  l.bindings[3] = call.inputs[3].buffer;
  l.bindings[4] = call.outputs[0].buffer;
  l.bindings[5] = call.inputs[4].buffer;
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  l.groups = grid((static_cast<uint64_t>(x.numel) + vw - 1) / vw, kWorkgroup, dev.info().caps, dev.tuning());
  dev.record(l);
  return std::string("vulkan:batch_norm/16B-packs,") + (per_pack ? "channel-per-pack" : "channel-per-element");
}

}  // namespace kf::hal::vk
