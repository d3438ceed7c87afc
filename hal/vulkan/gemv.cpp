// The few-rows / split-K product (shaders/mm_gemv.comp) that dispatch_matmul selects for decode shapes
// (matmul.cpp: MatmulPlan::gemv).
#include <algorithm>

#include "hal/vulkan/kernels_common.hpp"
#include "plan/dropout.hpp"

namespace kf::hal::vk {
namespace {

struct GemvPush {
  uint32_t M, N, K, splits, kslice;
  uint32_t seed_lo, seed_hi, off_lo, off_hi, thr;
  float keep_scale;
};

// Workgroups that fill a large GPU (an H100 holds 8 workgroups of 256 invocations on each of its 132
// multiprocessors): split-K adds K slices until the grid reaches this many.
constexpr uint64_t kGemvTargetGroups = 1024;
// A K slice spans at least this many elements (64 invocations x 16 of them: 2-4 packs each).
constexpr uint64_t kGemvMinSlice = 1024;

}  // namespace

// linear (and linear_dropout) with W [N, K] on mm_gemv.comp: `rows` outputs per workgroup (8 by default:
// H100, N = K = 8192, of copy with 4 / 8 / 16 rows: f16 0.82 / 0.84 / 0.74, bf16 0.82 / 0.83 / 0.78, f32
// 0.95 / 0.96 / 0.93), K split over gl_WorkGroupID.z when N / rows workgroups cannot fill the device,
// partial sums combined in a fixed order.
Variant dispatch_gemv(VulkanDevice& dev, const OpCall& call) {
  const Shape& a = call.inputs[0].shape;
  const Shape& b = call.inputs[1].shape;
  const uint64_t K = static_cast<uint64_t>(a.back());
  const uint64_t N = static_cast<uint64_t>(b[0]);
  const uint64_t M = static_cast<uint64_t>(call.inputs[0].numel) / K;
  const uint32_t vw = pack_elems(call.dtype);
  const bool wide = K % vw == 0;
  const bool has_bias = call.inputs.size() > 2 && call.inputs[2].buffer;
  const bool has_res = call.inputs.size() > 3 && call.inputs[3].buffer;
  const bool drop = call.id == OpId::linear_dropout && call.attrs.p > 0;
  const uint32_t mt = static_cast<uint32_t>(std::min<uint64_t>(M, 16));
  const uint32_t rows = dev.tuning().gemv_rows ? dev.tuning().gemv_rows : 8u;
  const uint64_t groups_n = (N + rows - 1) / rows, groups_m = (M + mt - 1) / mt;
  const uint64_t align = wide ? vw : 1;
  const uint64_t kunits = (K + align - 1) / align;  // packs (or elements) of K
  uint64_t splits = 1;
  if (dev.tuning().mm_splitk) {
    splits = dev.tuning().mm_splitk;
  } else {
    const uint64_t base = groups_n * groups_m;
    if (base < kGemvTargetGroups) splits = std::min((kGemvTargetGroups + base - 1) / base, std::max<uint64_t>(1, K / kGemvMinSlice));
  }
  if (M > 65535) splits = 1;  // the combine pass puts rows on gl_WorkGroupID.y
  splits = std::clamp<uint64_t>(splits, 1, std::min<uint64_t>(kunits, 65535));
  const uint64_t kslice = (kunits + splits - 1) / splits * align;
  splits = (K + kslice - 1) / kslice;
  // groups_n and groups_m are at most 65535 (supports_matmul).

  GemvPush pc{};
  pc.M = static_cast<uint32_t>(M);
  pc.N = static_cast<uint32_t>(N);
  pc.K = static_cast<uint32_t>(K);
  pc.splits = static_cast<uint32_t>(splits);
  pc.kslice = static_cast<uint32_t>(kslice);
  pc.seed_lo = static_cast<uint32_t>(call.attrs.seed);
  pc.seed_hi = static_cast<uint32_t>(call.attrs.seed >> 32);
  pc.off_lo = static_cast<uint32_t>(call.attrs.offset);
  pc.off_hi = static_cast<uint32_t>(call.attrs.offset >> 32);
  pc.thr = plan::dropout_threshold(call.attrs.p);
  pc.keep_scale = static_cast<float>(1.0 / (1.0 - call.attrs.p));

  const std::string variant = "mm_gemv_" + std::string(to_string(call.dtype));
  const bool partial = splits > 1;
  Launch l;
  l.variant = out_dtype_variant(dev, call, variant);
  l.spec = {256u, mt, has_bias ? 1u : 0u, has_res ? 1u : 0u, static_cast<uint32_t>(call.attrs.act), wide ? 1u : 0u,
            0u, partial ? 1u : 0u, drop ? 1u : 0u, rows};
  l.bindings[0] = call.inputs[0].buffer;
  l.bindings[1] = call.inputs[1].buffer;
  if (has_bias) l.bindings[2] = call.inputs[2].buffer;
  if (has_res) l.bindings[3] = call.inputs[3].buffer;
  l.bindings[4] = call.outputs[0].buffer;
  if (partial) l.bindings[5] = dev.workspace(4 * splits * M * N);
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  l.groups = static_cast<uint32_t>(groups_n);
  l.groups_y = static_cast<uint32_t>(groups_m);
  l.groups_z = static_cast<uint32_t>(splits);
  dev.record(l);
  if (partial) {
    Launch c = l;
    c.spec[6] = 1u;  // PASS 1: the fixed-order combine and the epilogue
    c.groups = static_cast<uint32_t>((N + 255) / 256);
    c.groups_y = static_cast<uint32_t>(M);
    c.groups_z = 1;
    dev.record(c);
  }
  return "vulkan:mm/gemv-splitk" + std::to_string(splits) + ",rows" + std::to_string(rows) + (wide ? ",16B-packs" : ",scalar") +
         out_dtype_label(call);
}

}  // namespace kf::hal::vk
