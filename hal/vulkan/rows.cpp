// The row kernels (docs/ops.md section 2, shaders/rows.comp): reductions and softmax over the last
// dimension, invocations per row, the long-row regimes and grid.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "hal/vulkan/device.hpp"
#include "plan/dropout.hpp"
#include "hal/vulkan/kernels_common.hpp"

namespace kf::hal::vk {
namespace {

struct RowsPush {
  uint32_t rows, feat;
  float scale;
  uint32_t chunk = 0, nchunks = 0, spin = 0;  // COOP
};

}  // namespace

Variant dispatch_rows(VulkanDevice& dev, const OpCall& call) {
  const Caps& caps = dev.info().caps;
  const uint32_t vw = pack_elems(call.dtype);
  const TensorArg& out = call.outputs[0];
  // Row kernels: TPR invocations per row (a power of two; at least a subgroup when subgroups are used).
  const TensorArg& in = call.inputs[0];
  const int64_t feat = in.shape.back();
  const int64_t rows = in.numel / feat;
  const bool wide = feat % vw == 0;
  const bool sg = use_subgroups(caps);
  const uint64_t items = wide ? static_cast<uint64_t>(feat / vw) : static_cast<uint64_t>(feat);
  // Enough invocations per row that each holds about a register cache's worth of packs (rows.comp's
  // CACHE = 32 values) or, for plain reductions, two rounds of its unrolled loads: fewer invocations
  // per row mean fewer reduction steps between the load and store phases.
  // 32 cached values per invocation measured best on an H100 for f32, f16 and bf16 (64 and 128 lose
  // occupancy).
  const uint32_t cache_values = dev.tuning().rows_values ? dev.tuning().rows_values : 32;
  const uint64_t per_invocation = std::max<uint64_t>(1, wide ? cache_values / vw : 8);
  uint32_t tpr = 1;
  while (uint64_t(tpr) * per_invocation < items && tpr < kWorkgroup) tpr *= 2;
  if (sg) tpr = std::max(tpr, caps.subgroup_size);
  tpr = std::max<uint32_t>(tpr, 1);
  // Rows longer than a workgroup's cache (softmax and log_softmax re-read the rest for their output):
  // a larger workgroup per row caches twice as much. (Limiting the workgroups in flight so that their
  // rows stay in L2 for the re-read was measured slower at every budget on an H100.) The
  // plain reductions read the row once anyway.
  const bool reduction = call.id == OpId::sum_squared || call.id == OpId::mean_abs;
  uint32_t wg = kWorkgroup;
  if (!reduction && uint64_t(tpr) * per_invocation < items) wg = tpr = long_row_workgroup(caps);
  RowsPush pc{static_cast<uint32_t>(rows), static_cast<uint32_t>(feat), static_cast<float>(call.attrs.scale)};
  Launch l;
  int32_t& id = dev.variant_slot(call.id, call.dtype, sg);
  if (id < 0) id = static_cast<int32_t>(dev.variant_id(kernel_variant_name(call, call.dtype, sg)));
  l.variant_id = id;
  const bool stream = uint64_t(tpr) * per_invocation < items;  // rows.comp STREAM
  l.spec = {wg, tpr, wide ? 1u : 0u, cache_values, stream ? 1u : 0u};
  l.bind(0, in);
  l.bind(1, out);
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  // softmax / log_softmax over rows longer than the workgroup's cache in one pass (rows.comp COOP): P
  // workgroups per row, each caching its part, exchanging the parts' max and sum. bf16 parts are cached
  // raw (64 values in the registers of 32 floats: P = 2 for rows of 65536); f16 keeps the float cache,
  // whose exponentials softmax reuses for its output (a raw f16 cache converts each value twice, and on
  // an H100 those conversions cost cross_entropy more than the bytes in flight gained).
  // By default f16 keeps the two-read path: on the H100 its float-cached parts read 0.63 of copy against
  // the two-read path's 0.80 (f32 0.73 -> 0.84, bf16 raw 0.72 -> 0.80).
  const uint32_t coop_mode = rows_coop_mode(dev.info(), dev.tuning());
  const bool coop_default_off = call.dtype == DType::f16 && dev.tuning().rows_coop == 0;
  if (stream && wide && !reduction && coop_mode >= 2 && !coop_default_off) {
    const bool raw = coop_mode == 2 && call.dtype == DType::bf16 && dev.tuning().rows_values == 0;
    const uint32_t values = raw ? 64u : cache_values;
    const uint32_t cw = coop_workgroup(caps, dev.tuning());  // the parts' workgroup (tpr = cw)
    const uint64_t per_part = uint64_t(cw) * std::max<uint32_t>(1, values / vw);  // packs
    const uint64_t parts = (items + per_part - 1) / per_part;
    const uint64_t chunk_packs = (items + parts - 1) / parts;  // balanced parts
    const uint64_t P = (items + chunk_packs - 1) / chunk_packs;
    if (P >= 2 && P <= 32 && uint64_t(rows) * P <= 0xffffffffull) {
      pc.chunk = static_cast<uint32_t>(chunk_packs * vw);
      pc.nchunks = static_cast<uint32_t>(P);
      pc.spin = rows_coop_spin(dev.info(), dev.tuning());
      const size_t flag_bytes = rows_coop_flag_bytes(static_cast<uint64_t>(rows));
      const std::shared_ptr<Buffer> ws = dev.workspace(flag_bytes + 8 * static_cast<uint64_t>(rows) * P);
      dev.record_fill(ws, 0u, flag_bytes);
      l.spec = {cw, cw, 1u, values, 0u, 1u, raw ? 1u : 0u};
      l.bindings[2] = ws;
      l.groups = grid(static_cast<uint64_t>(rows) * P, 1, caps, dev.tuning());  // each workgroup loops over tickets
      dev.record(l);
      return std::string("vulkan:rows/") + (sg ? "subgroup" : "shared-memory") + ",tpr=" + std::to_string(cw) +
             ",16B-packs,coop=" + std::to_string(P) + "x" + std::to_string(pc.chunk) + (raw ? ",raw16" : "");
    }
  }
  l.groups = grid(static_cast<uint64_t>(rows), wg / tpr, caps, dev.tuning());
  dev.record(l);
  return std::string("vulkan:rows/") + (sg ? "subgroup" : "shared-memory") + ",tpr=" + std::to_string(tpr) +
         (wide ? ",16B-packs" : ",scalar");
}

}  // namespace kf::hal::vk
