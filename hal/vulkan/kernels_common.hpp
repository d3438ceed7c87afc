// What the kernel families share: workgroup size, packs, grids, the row plan of the row kernels, the
// variant names of their shaders, push constants used by several of them; and the families' entry
// points (families.hpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "hal/vulkan/device.hpp"
#include "hal/vulkan/families.hpp"
#include "kf/attrs.hpp"
#include "kf/dtype.hpp"
#include "kf/error.hpp"
#include "plan/dropout.hpp"

namespace kf::hal::vk {

constexpr uint32_t kWorkgroup = 256;

inline uint32_t pack_elems(DType t) { return 16u / static_cast<uint32_t>(dtype_size(t)); }

inline bool use_subgroups(const Caps& c) {
  return c.subgroup_arith && c.subgroup_size >= 1 && c.subgroup_size <= kWorkgroup && kWorkgroup % c.subgroup_size == 0;
}

// Workgroups for `items` work items, `per_group` per workgroup, capped by the device and KF_TUNE's
// max_groups (the kernels loop over the rest).
inline uint32_t grid(uint64_t items, uint64_t per_group, const Caps& c, const Tuning& t) {
  const uint64_t g = (items + per_group - 1) / per_group;
  const uint64_t cap = std::min<uint64_t>({c.max_workgroup_count ? c.max_workgroup_count : 65535, 65535, t.max_groups});
  return static_cast<uint32_t>(std::clamp<uint64_t>(g, 1, cap));
}

// The most workgroups one dispatch gives its x dimension: the device's maxComputeWorkGroupCount[0] (65535
// where it says nothing), at most 65535 (the limit of y and z, so that a grid folded there fits too) and
// KF_TUNE max_groups, which lowers it to exercise the splits below on any device.
inline uint64_t group_cap_x(const Caps& c, const Tuning& t) {
  return std::min<uint64_t>({c.max_workgroup_count ? c.max_workgroup_count : 65535, 65535, t.max_groups});
}

// The dropout fields the kernels' push constants share (seed_lo/hi, off_lo/hi, thr, keep_scale): the
// Philox key and counter offset, and p as the threshold the 32-bit draws compare against (plan/).
template <class Push>
void set_dropout(Push& pc, const Attrs& a) {
  pc.seed_lo = static_cast<uint32_t>(a.seed);
  pc.seed_hi = static_cast<uint32_t>(a.seed >> 32);
  pc.off_lo = static_cast<uint32_t>(a.offset);
  pc.off_hi = static_cast<uint32_t>(a.offset >> 32);
  pc.thr = plan::dropout_threshold(a.p);
  pc.keep_scale = static_cast<float>(1.0 / (1.0 - a.p));
}

// Records `l` over `groups` workgroups in x as dispatches of at most group_cap_x each, setting `base` (a
// field of the push constants l.push points to, which the kernel adds to gl_WorkGroupID.x) to each one's
// first workgroup: tiled kernels whose tiles are not a grid-stride loop (attention's query and key tiles:
// causal attention over 1,048,576 tokens and 8 query heads is 65536 tiles of 128 rows) run instead of
// being refused. The dispatches write disjoint tiles. Returns how many were recorded.
inline uint32_t record_split_x(VulkanDevice& dev, Launch& l, uint64_t groups, uint32_t& base) {
  const uint64_t cap = group_cap_x(dev.info().caps, dev.tuning());
  uint32_t n = 0;
  for (uint64_t first = 0; first < std::max<uint64_t>(groups, 1); first += cap, ++n) {
    if (first > 0xffffffffull) throw Error(ErrorCode::Unsupported, "vulkan: more than 2^32 workgroups in a grid");
    base = static_cast<uint32_t>(first);
    l.groups = static_cast<uint32_t>(std::min<uint64_t>(std::max<uint64_t>(groups, 1) - first, cap));
    dev.record(l);
  }
  base = 0;
  return n;
}

// Rows longer than one 256-invocation workgroup's registers get a workgroup of kLongRowWorkgroup
// invocations where the device allows: twice the row cached, so less of it is read again (softmax) or
// the whole row in one read (norms of up to 512 x 32 values, group_norm's rows of 16384).
constexpr uint32_t kLongRowWorkgroup = 512;
inline uint32_t long_row_workgroup(const Caps& c) {
  return c.max_workgroup_size >= kLongRowWorkgroup ? kLongRowWorkgroup : kWorkgroup;
}

// The workgroup of rows split over workgroups in one pass (below): KF_TUNE rows_wg where the device
// allows it, else kLongRowWorkgroup's.
inline uint32_t coop_workgroup(const Caps& c, const Tuning& t) {
  return t.rows_wg && t.rows_wg <= c.max_workgroup_size ? t.rows_wg : long_row_workgroup(c);
}

// Rows longer than one workgroup's registers in one pass, P workgroups per row (norm.comp PASS 3,
// rows.comp COOP): KF_TUNE rows_coop, by default on GPUs and not on CPU devices (lavapipe), which run
// few workgroups at once, so that parts mostly wait out the bound and then re-read their siblings.
inline uint32_t rows_coop_mode(const DeviceInfo& d, const Tuning& t) {
  return t.rows_coop ? t.rows_coop : (d.type == "cpu" ? 1u : 2u);
}
// Its bound: polls of the rows' masks a workgroup may make over its life. lavapipe (llvmpipe) stops
// runaway loops: past about 65535 loop iterations in one invocation every loop of the shader exits at
// once (gallivm's loop limiter; a workgroup that had polled 65343 times then "recomputed" zeros), and
// the polls count towards it, so they are capped well below on CPU devices.
inline uint32_t rows_coop_spin(const DeviceInfo& d, const Tuning& t) {
  const uint32_t spin = t.rows_spin ? t.rows_spin : (d.type == "cpu" ? 64u : 65536u);
  return d.type == "cpu" ? std::min<uint32_t>(spin, 8192) : spin;
}
// The workspace of those passes: words [0, 1 + rows) (the ticket counter and the rows' masks, zeroed
// before each dispatch), rounded up to 8 bytes, then the parts' statistics.
inline size_t rows_coop_flag_bytes(uint64_t rows) { return 4 * ((rows + 2) & ~uint64_t(1)); }

// How a row kernel covers rows of `len` elements: TPR invocations per row, each caching
// cache_values / vw packs; rows longer than one workgroup caches are split into chunks of `chunk`
// elements, one workgroup each, with a combine pass.
struct RowPlan {
  uint32_t vw = 4;            // elements per 16-byte pack
  uint32_t cache_values = 32;
  uint32_t tpr = 1;
  bool subgroup = false;
  bool wide = true;           // len is a multiple of the pack: 16-byte loads
  bool split = false;
  uint64_t chunk = 0;         // elements per chunk when split
  uint64_t nchunks = 1;
};
RowPlan plan_rows(const Caps& caps, const Tuning& tuning, DType dtype, uint64_t rows, uint64_t len);
// The row plan of loss.comp (cross_entropy, linear_cross_entropy): bf16 logits are cached raw, so 64
// of them per invocation (unless KF_TUNE rows_values says otherwise) cost the registers of 32 floats.
RowPlan plan_loss_rows(const Caps& caps, const Tuning& tuning, DType dtype, uint64_t rows, uint64_t len);

// Push constants of loss.comp (cross_entropy, mse, linear_cross_entropy).
struct LossPush {
  uint32_t rows, classes, chunk, nchunks;
  int32_t ignore_index;
  float smoothing;
  uint32_t row_base, total_rows;  // linear_cross_entropy's chunk of rows; otherwise 0 and rows
  float softcap, z_loss;
};

// A double as a float and as its two 32-bit halves (push constants of the f64 variants).
void set_eps(double v, float& f, uint32_t& lo, uint32_t& hi);

// The shader variant of an elementwise op (eltwise_<op>_<dtype>), a row op (rows_<op>_<dtype>[_sg]) or a
// matrix product (mm_<dtype>: linear and matmul share it).
std::string kernel_variant_name(const OpCall& call, DType t, bool subgroup);

// The shader variant of a section 3 / 6 op: <family>_<op>_<dtype>[_sg] ("" when it has none).
std::string training_variant(const OpCall& call, DType dtype, const Caps& caps);

// The push constants of mm.comp, mm_coopmat.comp (and mm_gemv.comp's first fields).
struct MatmulPush {
  uint32_t M, N, K, stride_a, stride_b, stride_c;      // strides: elements between batches
  uint32_t seed_lo = 0, seed_hi = 0, off_lo = 0, off_hi = 0, thr = 0;  // the dropout epilogue (DROPOUT)
  float keep_scale = 1;
  uint32_t scale_b = 0, scale_stride_b = 0;  // mm_coopmat.comp SCALES: B's inverse factors (its words)
};

// mm_coopmat.comp's default tile for an M x N product (matmul.cpp): its variant and tile, by the grid
// it gives.
std::string default_coopmat_variant(uint64_t M, uint64_t N, uint64_t batches, uint32_t* bm, uint32_t* bn);

// The variant of a matrix kernel (mm.comp, mm_coopmat.comp, mm_gemv.comp) that stores the call's output
// dtype (Attrs::out_dtype): `base` itself when it is the inputs', else `base` compiled at run time with
// ODT_<dtype> (shaders/out_dtype.glsl; matmul.cpp). An f64 output of 16- or 32-bit inputs has no kernel
// (Unsupported), nor has any on a build without a shader compiler.
class VulkanDevice;
std::string out_dtype_variant(VulkanDevice& dev, const OpCall& call, const std::string& base);
// The variant label's mark of that output dtype: ",out-<dtype>", or nothing for the inputs' dtype.
std::string out_dtype_label(const OpCall& call);

}  // namespace kf::hal::vk
