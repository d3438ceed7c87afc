// The Vulkan kernels of docs/ops.md section 6 (losses, optimizers) and the section 3 backward passes.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "hal/vulkan/device.hpp"
#include "hal/vulkan/kernels_common.hpp"

namespace kf::hal::vk {

// softmax_backward, layer_norm_backward, rms_norm_backward (norm_bwd.comp): the row pass (dx, and the
// rows' statistics), then for the norms a column pass of per-chunk partial sums and their combine.
constexpr uint64_t kMaxRowChunks = 64;

// Workgroups of the fused-rows plan: at least this many where there are rows enough (then at most 64
// rows each); the partials are G x Q x L values written and read once (H100, 16384 x 4096 f32 layer:
// 512 partials, 16 MiB each way beside 768 MiB of dy, x and dx).
constexpr uint64_t kFusedGroupsRows = 512;

inline size_t acc_bytes(DType t) { return t == DType::f64 ? 8 : 4; }

namespace {
// The fused norm backward's 16-byte packs an invocation (NT of norm_bwd.comp PASS 3): 4, except 2 for
// rms_norm_backward in 16-bit (twice the invocations a row), or KF_TUNE normbwd_packs. H100, rows of 4096,
// of copy at 4 / 2 packs: layer f32 0.91 / 0.92, f16 0.88 / 0.72, bf16 0.89 / 0.71; rms f32 0.91 / 0.91,
// f16 0.82 / 0.87, bf16 0.80 / 0.83.
uint32_t fused_norm_packs(const Tuning& t, const RowPlan& plan, bool layer) {
  return t.normbwd_packs ? t.normbwd_packs : plan.vw == 8 && !layer ? 2 : 4;
}
}  // namespace

Variant dispatch_norm_backward_fused(VulkanDevice& dev, const OpCall& call, const RowPlan& plan, uint32_t B,
                                                       uint32_t G, uint32_t Q) {
  const Caps& caps = dev.info().caps;
  const TensorArg& dy = call.inputs[0];
  const uint64_t L = static_cast<uint64_t>(dy.shape.back()), R = static_cast<uint64_t>(dy.numel) / L;
  const bool has_w = call.inputs.size() > 2 && call.inputs[2].buffer;
  struct {
    uint32_t rows, feat, rchunk, nrchunks;
    float eps;
    uint32_t eps_lo, eps_hi;
  } pc{static_cast<uint32_t>(R), static_cast<uint32_t>(L), 0, G, 0, 0, 0};
  set_eps(call.eps, pc.eps, pc.eps_lo, pc.eps_hi);
  Launch l;
  l.variant = training_variant(call, call.dtype, caps);
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  const std::shared_ptr<Buffer> ws = dev.workspace(acc_bytes(call.dtype) * uint64_t(G) * Q * L);
  l.bindings[0] = dy.buffer;
  l.bindings[1] = call.inputs[1].buffer;
  if (has_w) l.bindings[2] = call.inputs[2].buffer;
  l.bindings[3] = call.outputs[0].buffer;
  l.bindings[4] = ws;
  // spec: workgroup, TPR, WIDE, CACHE_VALUES (4 packs, or KF_TUNE normbwd_packs), PASS, HAS_W, FUSED_COLS, SMEM_VALUES
  const uint32_t packs = fused_norm_packs(dev.tuning(), plan, call.id == OpId::layer_norm_backward);
  l.spec = {B, B, 1u, packs * plan.vw, 3u, has_w ? 1u : 0u, 0u, 1u};
  l.groups = G;
  dev.record(l);
  l.bindings[3] = call.outputs[1].buffer;
  if (call.outputs.size() > 2) l.bindings[5] = call.outputs[2].buffer;
  const uint32_t pair = plan.vw == 8 ? 2 : 1;
  l.spec = {kWorkgroup, kWorkgroup, 1u, 4u * plan.vw, 4u, has_w ? 1u : 0u, 0u, 2u * pair * kWorkgroup};
  l.groups = grid(Q * L / pair, 32, caps, dev.tuning());
  dev.record(l);
  return "vulkan:normbwd/" + std::string(plan.subgroup ? "subgroup" : "shared-memory") + ",workgroup=" +
         std::to_string(B) + ",16B-packs,fused-rows,partials=" + std::to_string(G);
}

Variant dispatch_norm_backward(VulkanDevice& dev, const OpCall& call) {
  const Caps& caps = dev.info().caps;
  const TensorArg& dy = call.inputs[0];
  const uint64_t L = static_cast<uint64_t>(dy.shape.back()), R = static_cast<uint64_t>(dy.numel) / L;
  const RowPlan plan = plan_rows(caps, dev.tuning(), call.dtype, R, L);
  const bool norm = call.id != OpId::softmax_backward;
  const bool has_w = norm && call.inputs.size() > 2 && call.inputs[2].buffer;
  const uint64_t npk = (L + plan.vw - 1) / plan.vw, colgroups = (npk + kWorkgroup - 1) / kWorkgroup;
  // Row chunks of the column pass: enough (row chunk, column group) units to fill a large GPU, with at
  // least 16 rows in a chunk where there are that many (fewer make the partial sums outweigh the rows).
  // The combine pass then adds nrchunks partials per column in order, one invocation per column pack:
  // few invocations, nrchunks long. Capped at kMaxRowChunks (KF_TUNE normbwd_chunks): on an H100 the
  // uncapped 1024 chunks of f16 (512 column packs) made the combine the slow part (2.1 ms in all); caps
  // of 32 / 64 / 128 / 256 gave 0.50 / 0.41 / 0.44 / 0.57 ms (f16 layer_norm_backward, 16384 x 4096).
  const uint64_t max_chunks = dev.tuning().normbwd_chunks ? dev.tuning().normbwd_chunks : kMaxRowChunks;
  const uint64_t want = std::clamp<uint64_t>((2048 + colgroups - 1) / colgroups, 1,
                                             std::min<uint64_t>(max_chunks, std::max<uint64_t>(1, R / 16)));
  uint64_t rchunk = (R + want - 1) / want, nrchunks = (R + rchunk - 1) / rchunk;
  // Rows that fit the registers: the row pass also sums the columns (FUSED_COLS in norm_bwd.comp), one
  // partial per (workgroup, row slot), so dy and x are read once. At most kFusedGroups workgroups, so that
  // the partials (written and read once more) stay small beside dy and x: 512 x 2 rows x 4096 features
  // is 32 MiB of partials for 512 MiB of dy and x at 16384 x 4096 in f32. Measured on an H100 (16384 x
  // 4096): the separate column pass (PASS 1) is faster, 0.44 ms against 0.82 ms for layer_norm_backward
  // in f32 (the fused row pass holds more registers and runs on at most 512 workgroups), so it is the
  // default; KF_TUNE normbwd_cols=2 picks the fused one.
  constexpr uint64_t kFusedGroups = 512;
  // Fused rows (PASS 3 / 4, the CUDA backend's norm_bwd_fused): rows of whole 16-byte packs that one
  // workgroup of at most 1024 invocations holds at fused_norm_packs() packs an invocation (the column
  // sums of its packs in its registers). The default there; KF_TUNE normbwd_cols=1|2 picks the older
  // paths.
  {
    const uint32_t fused_packs = fused_norm_packs(dev.tuning(), plan, call.id == OpId::layer_norm_backward);  // NT of PASS 3
    constexpr uint64_t kFusedRows = 64;  // rows a workgroup adds per column at most (plain float)
    const uint64_t Q = call.id == OpId::layer_norm_backward ? 2 : 1;
    uint32_t B = 32;
    if (plan.subgroup) B = std::max(B, caps.subgroup_size);
    const uint32_t max_b = std::min<uint32_t>(1024, caps.max_workgroup_size ? caps.max_workgroup_size : 256);
    while (B < max_b && uint64_t(B) * fused_packs < npk) B *= 2;
    const uint64_t smem = (B + 1) * acc_bytes(call.dtype);  // the reduction buffer (column sums are in registers)
    const uint64_t G = std::min<uint64_t>(R, std::max<uint64_t>((R + kFusedRows - 1) / kFusedRows, kFusedGroupsRows));
    const uint32_t cap = caps.max_workgroup_count ? std::min<uint32_t>(caps.max_workgroup_count, 65535) : 65535;
    const bool fits = norm && plan.wide && uint64_t(B) * fused_packs >= npk && smem <= caps.max_shared_bytes &&
                      G <= cap && R > 0 && (!plan.subgroup || (caps.subgroup_size >= 4 && B % caps.subgroup_size == 0)) &&
                      G * Q * L < (uint64_t(1) << 32) && R * npk < (uint64_t(1) << 32);
    if (fits && (dev.tuning().normbwd_cols == 0 || dev.tuning().normbwd_cols == 3))
      return dispatch_norm_backward_fused(dev, call, plan, B, static_cast<uint32_t>(G), static_cast<uint32_t>(Q));
  }
  const bool fused = norm && !plan.split && dev.tuning().normbwd_cols == 2;
  const uint32_t row_groups = fused ? static_cast<uint32_t>(std::min<uint64_t>(grid(R, kWorkgroup / plan.tpr, caps, dev.tuning()), kFusedGroups))
                                    : grid(R, kWorkgroup / (plan.split ? kWorkgroup : plan.tpr), caps, dev.tuning());
  if (fused) rchunk = 0, nrchunks = uint64_t(row_groups) * (kWorkgroup / plan.tpr);
  struct {
    uint32_t rows, feat, rchunk, nrchunks;
    float eps;
    uint32_t eps_lo, eps_hi;
  } pc{static_cast<uint32_t>(R), static_cast<uint32_t>(L), static_cast<uint32_t>(rchunk),
       static_cast<uint32_t>(nrchunks), 0, 0, 0};
  set_eps(norm ? call.eps : call.attrs.scale, pc.eps, pc.eps_lo, pc.eps_hi);
  // Rows longer than TPR * CACHE_VALUES are streamed (read again in each pass) rather than split.
  const uint32_t tpr = plan.split ? kWorkgroup : plan.tpr;
  Launch l;
  l.variant = training_variant(call, call.dtype, caps);
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  const auto spec = [&](uint32_t t, uint32_t pass) {
    return std::vector<uint32_t>{kWorkgroup, t, plan.wide ? 1u : 0u, plan.cache_values, pass, has_w ? 1u : 0u,
                                 fused && pass == 0 ? 1u : 0u};
  };
  const size_t acc = call.dtype == DType::f64 ? 8 : 4;
  std::shared_ptr<Buffer> ws;
  if (norm) ws = dev.workspace(acc * (3 * R + 4 * nrchunks * npk * plan.vw));  // row statistics; partials (high and low parts)
  l.bindings[0] = dy.buffer;
  l.bindings[1] = call.inputs[1].buffer;
  if (has_w) l.bindings[2] = call.inputs[2].buffer;
  l.bindings[3] = call.outputs[0].buffer;
  l.bindings[4] = ws;
  l.spec = spec(tpr, 0);
  l.groups = row_groups;
  dev.record(l);
  const std::string form = std::string(plan.subgroup ? "subgroup" : "shared-memory") + ",tpr=" +
                           std::to_string(tpr) + (plan.split ? ",streamed" : "") + (plan.wide ? ",16B-packs" : ",scalar");
  if (!norm) return "vulkan:normbwd/" + form;
  if (!fused) {
    l.spec = spec(kWorkgroup, 1);
    l.groups = grid(colgroups * nrchunks, 1, caps, dev.tuning());
    dev.record(l);
  }
  l.bindings[3] = call.outputs[1].buffer;
  if (call.outputs.size() > 2) l.bindings[5] = call.outputs[2].buffer;
  l.spec = spec(kWorkgroup, 2);
  l.groups = grid(colgroups, 1, caps, dev.tuning());
  dev.record(l);
  return "vulkan:normbwd/" + form + ",columns=" +
         (fused ? "fused-" + std::to_string(nrchunks) : std::to_string(nrchunks) + "x" + std::to_string(rchunk));
}
namespace {

}  // namespace

// cross_entropy, cross_entropy_backward and mse (loss.comp): a count pass, the row (or chunk) passes,
// and a final one-workgroup sum in row order; see the shader for what each pass does.
Variant dispatch_loss(VulkanDevice& dev, const OpCall& call) {
  const Caps& caps = dev.info().caps;
  const TensorArg& x = call.inputs[0];
  const size_t acc = call.dtype == DType::f64 ? 8 : 4;
  Launch l;
  l.variant = training_variant(call, call.dtype, caps);
  l.bindings[0] = x.buffer;
  l.bindings[1] = call.inputs[1].buffer;
  l.bindings[2] = call.outputs[0].buffer;
  if (call.outputs.size() > 1) l.bindings[3] = call.outputs[1].buffer;
  LossPush pc{};
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  const uint32_t cache_values = call.id == OpId::mse ? 32 : plan_loss_rows(caps, dev.tuning(), call.dtype, 1, 1).cache_values;
  const auto spec = [&](uint32_t tpr, bool wide, uint32_t pass) {
    return std::vector<uint32_t>{kWorkgroup, tpr, wide ? 1u : 0u, cache_values, pass};
  };
  const std::string form = use_subgroups(caps) ? "subgroup" : "shared-memory";

  if (call.id == OpId::mse) {
    const uint64_t n = static_cast<uint64_t>(x.numel), vw = pack_elems(call.dtype);
    const uint64_t packs = (n + vw - 1) / vw, per_chunk = uint64_t(kWorkgroup) * 16;
    pc.classes = static_cast<uint32_t>(n);
    pc.chunk = static_cast<uint32_t>(per_chunk);
    pc.nchunks = static_cast<uint32_t>((packs + per_chunk - 1) / per_chunk);
    l.bindings[4] = dev.workspace(acc * pc.nchunks);
    l.spec = spec(kWorkgroup, true, 1);
    l.groups = grid(pc.nchunks, 1, caps, dev.tuning());
    dev.record(l);
    l.spec = spec(kWorkgroup, true, 4);
    l.groups = 1;
    dev.record(l);
    return "vulkan:loss/" + form + ",chunks=" + std::to_string(pc.nchunks);
  }

  const uint64_t N = static_cast<uint64_t>(x.shape[0]), C = static_cast<uint64_t>(x.shape[1]);
  RowPlan plan = plan_loss_rows(caps, dev.tuning(), call.dtype, N, C);
  // Rows too long for PASS 1, of whole packs: statistics streamed (PASS 5) in chunks of at most 6144
  // packs (longer rows in chunks of about 4096), 16 packs an invocation, 32 to 256 invocations; the
  // backward's gradient streamed over the same chunks (PASS 6). H100, of copy: forward f16
  // 0.65 -> 0.92-0.94, bf16 0.71 -> 0.92-0.95, f32 0.92 -> 0.93; backward over 128k classes (streamed)
  // 16-bit 0.49-0.60 -> 0.65; over 32k (row in registers) f16 0.56 -> 0.85, bf16 0.60 -> 0.72, f32 0.66
  // -> 0.97. KF_TUNE xent_stream=1 keeps PASS 2 / 3's cached chunks.
  // The backward over rows of 1024 to 512 x NT packs (NT = 8 16-bit, 16 f32): the row in one
  // workgroup's registers (PASS 7), read once. KF_TUNE xent_stream=2 streams it (PASS 5, 6) instead.
  const uint64_t npk_all = C / pack_elems(call.dtype);
  const uint32_t regs_nt = 64 / pack_elems(call.dtype);
  const bool regs = call.id == OpId::cross_entropy_backward && plan.wide && call.dtype != DType::f64 &&
                    (dev.tuning().xent_stream == 0 || dev.tuning().xent_stream == 3) && npk_all >= 1024 &&
                    npk_all <= uint64_t(512) * regs_nt;
  uint32_t regs_wg = 32;
  while (regs_wg < 512 && uint64_t(regs_wg) * regs_nt < npk_all) regs_wg *= 2;
  if (use_subgroups(caps)) regs_wg = std::max(regs_wg, caps.subgroup_size);
  // f32's backward over longer rows keeps the cached chunks unless forced (H100: 0.66 against 0.65 streamed).
  const bool stream_bwd = call.dtype != DType::f32 || dev.tuning().xent_stream == 2;
  const bool stream = !regs && (call.id == OpId::cross_entropy || (call.id == OpId::cross_entropy_backward && stream_bwd)) &&
                      plan.split && plan.wide && call.dtype != DType::f64 &&
                      dev.tuning().xent_stream != 1;
  uint32_t stream_wg = 0;
  if (stream) {
    const uint64_t vw = pack_elems(call.dtype), npk = C / vw;
    const uint64_t splits = npk > 6144 ? (npk + 4095) / 4096 : 1, range = (npk + splits - 1) / splits;
    stream_wg = 32;
    while (stream_wg < kWorkgroup && uint64_t(stream_wg) * 16 < range) stream_wg *= 2;
    if (use_subgroups(caps)) stream_wg = std::max(stream_wg, caps.subgroup_size);
    plan.chunk = range * vw;
    plan.nchunks = splits;
  }
  pc.rows = static_cast<uint32_t>(N);
  pc.classes = static_cast<uint32_t>(C);
  pc.chunk = static_cast<uint32_t>(plan.chunk);
  pc.nchunks = static_cast<uint32_t>(plan.nchunks);
  pc.ignore_index = static_cast<int32_t>(call.attrs.ignore_index);
  pc.smoothing = static_cast<float>(call.attrs.label_smoothing);
  pc.total_rows = static_cast<uint32_t>(N);
  // Workspace: the count, a loss per row, four statistics per chunk.
  l.bindings[4] = dev.workspace(4 * (1 + N + (plan.split ? 4 * N * plan.nchunks : 0)));
  l.spec = spec(kWorkgroup, plan.wide, 0);
  l.groups = 1;
  dev.record(l);
  std::string how;
  if (regs) {
    l.spec = {regs_wg, regs_wg, 1u, 64u, 7u};
    l.groups = grid(N, 1, caps, dev.tuning());
    dev.record(l);
    how = ",row-in-registers=" + std::to_string(regs_wg) + "x" + std::to_string(regs_nt);
  } else if (!plan.split) {
    l.spec = spec(plan.tpr, plan.wide, 1);
    l.groups = grid(N, kWorkgroup / plan.tpr, caps, dev.tuning());
    dev.record(l);
    how = ",tpr=" + std::to_string(plan.tpr);
  } else {
    l.groups = grid(N * plan.nchunks, 1, caps, dev.tuning());
    if (stream) {
      l.spec = {stream_wg, stream_wg, 1u, cache_values, 5u};
      dev.record(l);
      if (call.outputs.size() > 1) {
        l.spec = {stream_wg, stream_wg, 1u, cache_values, 6u};
        dev.record(l);
      } else {
        l.spec = spec(kWorkgroup, plan.wide, 3);
        dev.record(l);
      }
    } else {
      l.spec = spec(kWorkgroup, plan.wide, 2);
      dev.record(l);
      l.spec = spec(kWorkgroup, plan.wide, 3);
      dev.record(l);
    }
    how = (stream ? ",streamed=" + std::to_string(stream_wg) + "," : ",split=") + std::to_string(plan.nchunks) +
          "x" + std::to_string(plan.chunk);
  }
  l.spec = spec(kWorkgroup, plan.wide, 4);
  l.groups = 1;
  dev.record(l);
  return "vulkan:loss/" + form + how + (plan.wide ? ",16B-packs" : ",scalar");
}
// adamw_step, sgd_step (optim.comp): one in-place kernel over the outputs. An output that is not the
// same tensor as its input (OpDef::in_place) first receives a copy of it, so that separate outputs
// leave the inputs unchanged; called in place (the normal use) nothing is copied. The list form of the
// public API records one such dispatch per tensor into the same command buffer.
Variant dispatch_optimizer(VulkanDevice& dev, const OpCall& call) {
  const Attrs& a = call.attrs;
  const bool adam = call.id == OpId::adamw_step;
  int copies = 0;
  for (const auto& [o, i] : *call.in_place) {
    if (call.outputs[o].buffer == call.inputs[i].buffer) continue;
    dev.record_copy(call.inputs[i].buffer, call.outputs[o].buffer,
                static_cast<size_t>(call.inputs[i].numel) * dtype_size(call.dtype));
    ++copies;
  }
  // The step's scalars in double precision, pushed as floats or (f64) as doubles.
  std::vector<double> vals;
  uint32_t flags = 0;
  if (adam) {
    const double eps = call.eps;
    const double bc1 = 1 - std::pow(a.beta1, double(a.step)), bc2 = 1 - std::pow(a.beta2, double(a.step));
    vals = {1 - a.lr * a.weight_decay, a.lr * std::sqrt(bc2) / bc1, a.beta1, 1 - a.beta1, a.beta2, 1 - a.beta2,
            eps * std::sqrt(bc2)};  // optim.comp's push constants
  } else {
    vals = {a.lr, a.weight_decay, a.momentum, 1 - a.dampening};
    flags = (a.momentum != 0 ? 1u : 0u) | (a.nesterov ? 2u : 0u) | (a.step == 1 ? 4u : 0u);
  }
  uint32_t push[16] = {};
  const uint32_t n = static_cast<uint32_t>(call.inputs[0].numel);
  push[0] = n;
  push[1] = flags;
  for (size_t k = 0; k < vals.size(); ++k) {
    if (call.dtype == DType::f64) {
      std::memcpy(&push[2 + 2 * k], &vals[k], 8);
    } else {
      const float f = static_cast<float>(vals[k]);
      std::memcpy(&push[2 + k], &f, 4);
    }
  }
  Launch l;
  l.variant = training_variant(call, call.dtype, dev.info().caps);
  l.spec = {kWorkgroup};
  l.bindings[0] = call.outputs[0].buffer;
  l.bindings[1] = call.inputs[1].buffer;
  l.bindings[2] = call.outputs[1].buffer;
  if (adam) l.bindings[3] = call.outputs[2].buffer;
  l.push = push;
  l.push_bytes = static_cast<uint32_t>(4 * (2 + (call.dtype == DType::f64 ? 2 : 1) * vals.size()));
  const uint32_t vw = pack_elems(call.dtype);
  l.groups = grid((uint64_t(n) + vw - 1) / vw, kWorkgroup, dev.info().caps, dev.tuning());
  dev.record(l);
  return std::string("vulkan:optim/16B-packs,") + (copies ? "copied-" + std::to_string(copies) : "in-place");
}

}  // namespace kf::hal::vk
