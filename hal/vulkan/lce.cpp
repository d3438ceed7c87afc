// linear_cross_entropy and its backward on Vulkan (src/ops/linear_xent.cpp says what they compute):
// chunk by chunk over the rows of h, so that at most one chunk of logits exists in memory. Per chunk of
// n rows, all recorded into the same command stream (no host round trip of data):
//   1. Z = h[chunk] W^T                 the linear kernel (dispatch_matmul: tiled, or tensor cores)
//   2. the loss pass of loss.comp       per-row losses into the workspace; for the backward, G = d loss /
//                                       d Z (soft-cap and z-loss included) written over Z in place
//   3. d_h[chunk] = G W                 the matmul kernel (dispatch_matmul)
//   4. d_W (+)= G^T h[chunk]            A transposed, accumulating into d_W after the first chunk
//                                       (record_matmul_at_b: tiled, or tensor cores)
// then the mean over all rows (loss.comp PASS 4). The count of rows kept (PASS 0) comes first, since
// every chunk's gradient divides by it. Row chunks of h and d_h are buffer views (VkBuf's view
// constructor), so the existing kernels see them as whole tensors. The chunk of logits and the loss
// statistics share the device's workspace. The logits are held in the op's dtype (as torch's linear
// would hold them); a 16-bit gradient chunk stores d Z = (softmax - onehot) / count in that dtype, so for
// f16 with very many rows and classes its smallest entries fall under f16's range (bf16 and f32 keep
// them). In bf16 on the tensor cores, W's two f16 forms (rows scaled, columns scaled) are made once per
// call, before the chunks.
#include <algorithm>
#include <numeric>

#include "hal/vulkan/device.hpp"
#include "hal/vulkan/kernels_common.hpp"

namespace kf::hal::vk {
namespace {


constexpr uint64_t kViewAlign = 256;               // the largest buffer-offset alignment Vulkan allows
constexpr uint64_t kChunkBytes = 256ull << 20;     // logits per chunk (automatic choice)

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// A product of the chunk loop as a call of linear or matmul in the op's dtype.
OpCall product_call(OpId id, DType dtype) {
  OpCall c;
  c.id = id;
  c.family = Family::Matmul;
  c.dtype = c.out_dtype = dtype;
  return c;
}

// Rows per chunk are a multiple of this, so that every chunk's view of h and d_h starts on an aligned byte.
uint64_t lce_granule(uint64_t D, uint64_t es) { return kViewAlign / std::gcd(kViewAlign, D * es); }
uint64_t lce_chunk_limit(const Caps& caps) {
  return std::min<uint64_t>(kChunkBytes, caps.max_storage_range ? caps.max_storage_range : kChunkBytes);
}

}  // namespace

bool supports_linear_cross_entropy(const VulkanDevice& dev, const OpCall& call, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (call.id == OpId::linear_cross_entropy_backward && dev.tuning().mm_path == 3)
    return no("the few-rows / split-K path was forced (KF_TUNE mm_path=3), which the backward's products "
              "(d h = G W as matmul) cannot take");
  if (call.inputs.empty()) return true;
  const uint64_t D = static_cast<uint64_t>(call.inputs[0].shape[1]), C = static_cast<uint64_t>(call.inputs[1].shape[0]);
  const uint64_t es = dtype_size(call.dtype);
  const uint64_t granule = lce_granule(D, es), limit = lce_chunk_limit(dev.info().caps);
  if (granule * C * es > limit)
    return no(std::to_string(granule) + " rows of " + std::to_string(C) + " logits exceed the chunk limit of " +
              std::to_string(limit) + " bytes (chunking over the classes is not implemented)");
  return true;
}

std::string record_matmul_at_b(VulkanDevice& dev, const std::shared_ptr<Buffer>& a, const std::shared_ptr<Buffer>& b,
                                             const std::shared_ptr<Buffer>& c, DType dtype, uint32_t M, uint32_t N,
                                             uint32_t K, bool accumulate) {
  MatmulPush pc{M, N, K, 0, 0, 0};
  // Tensor cores (mm_coopmat.comp's default shape for the grid) for f16, and for bf16 with A's and B's
  // columns (per m, per n) as f16 times powers of two (bf16_rows_to_f16.comp COLS, undone in the
  // epilogue before C's own values are added), with whole 16-byte rows of A and B; mm.comp's 64 x 64
  // tiles otherwise (KF_TUNE mm_path=1 forces those).
  uint32_t bm = 64, bn = 64;
  const bool bf16 = dtype == DType::bf16;
  std::string cm = default_coopmat_variant(M, N, 1, &bm, &bn);
  if (bf16) cm = "mm_coopmat_bf16_" + cm.substr(std::string("mm_coopmat_f16_").size());
  cm = dev.coopmat_mm().variant(cm);
  const bool coopmat = dev.coopmat_mm().path != CoopmatPath::portable && (dtype == DType::f16 || (bf16 && dev.has_variant("bf16_cols_to_f16"))) &&
                       M % 8 == 0 && N % 8 == 0 && dev.tuning().mm_path != 1 && dev.has_variant(cm);
  if (!coopmat) bm = bn = 64;
  std::shared_ptr<Buffer> a_in = a, b_in = b, scales;
  if (coopmat && bf16) {
    // Factors: A's at words [0, M), B's at [M, M + N), then the column maxima (scratch).
    a_in = dev.workspace(size_t(K) * M * 2, 1);
    b_in = dev.workspace(size_t(K) * N * 2, 2);
    scales = dev.workspace((2 * size_t(M) + 2 * size_t(N)) * 4, 3);
    record_bf16_scaled(dev, a, a_in, scales, 1, K, M, true, 0, uint64_t(M) + N);
    record_bf16_scaled(dev, b, b_in, scales, 1, K, N, true, M, uint64_t(M) + N);
    pc.scale_b = M;
  }
  Launch l;
  l.variant = coopmat ? cm : std::string("mm_") + to_string(dtype);
  // B [K, N] (B_NK off), no bias, residual or activation; A_KM on; ACC_OUT when accumulating.
  l.spec = {256u, 0u, 0u, 0u, 0u, 0u, 1u, accumulate ? 1u : 0u};  // ..., DROPOUT, A_KM, ACC_OUT
  if (scales) l.spec.insert(l.spec.end(), {0u, 0u, 1u});          // BIAS_ROW, ROW_SS off; SCALES
  l.bindings[0] = a_in;
  l.bindings[1] = b_in;
  l.bindings[4] = c;
  if (scales) l.bindings[5] = scales;
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  l.groups = (N + bn - 1) / bn;
  l.groups_y = (M + bm - 1) / bm;
  dev.record(l);
  if (!coopmat) return "portable-tiled-64x64";
  return dev.coopmat_mm().label() + (bf16 ? ",bf16-cols-as-scaled-f16" : "");
}

Variant dispatch_linear_cross_entropy(VulkanDevice& dev, const OpCall& call) {
  const bool grad = call.outputs.size() > 1;
  const Caps& caps = dev.info().caps;
  const TensorArg& h = call.inputs[0];
  const TensorArg& W = call.inputs[1];
  const uint64_t N = static_cast<uint64_t>(h.shape[0]), D = static_cast<uint64_t>(h.shape[1]);
  const uint64_t C = static_cast<uint64_t>(W.shape[0]);
  const uint64_t es = dtype_size(call.dtype);

  // Rows per chunk: a multiple of `granule`, so that every chunk's view of h and d_h starts on an
  // aligned byte; as many as fit kChunkBytes of logits (or KF_TUNE lce_rows).
  // (granule rows of logits fit the limit: supports_linear_cross_entropy)
  const uint64_t granule = lce_granule(D, es), limit = lce_chunk_limit(caps);
  uint64_t rows = dev.tuning().lce_rows ? align_up(dev.tuning().lce_rows, granule)
                                    : std::max<uint64_t>(granule, limit / (C * es) / granule * granule);
  rows = std::min<uint64_t>(rows, N);
  const uint64_t nchunks = (N + rows - 1) / rows;

  // Workspace: the chunk of logits, then loss.comp's statistics (the count, a loss per row, four values
  // per row chunk of the split row path), each seen through a view.
  const RowPlan plan = plan_loss_rows(caps, dev.tuning(), call.dtype, rows, C);
  const uint64_t logits_bytes = align_up(std::max<uint64_t>(rows * C * es, 16), kViewAlign);
  const uint64_t stats_bytes = align_up(4 * (1 + N + (plan.split ? 4 * rows * plan.nchunks : 0)), 16);
  const std::shared_ptr<Buffer> ws = dev.workspace(logits_bytes + stats_bytes);
  const auto z = std::make_shared<VkBuf>(dev, ws, 0, logits_bytes);
  const auto stats = std::make_shared<VkBuf>(dev, ws, logits_bytes, stats_bytes);

  LossPush pc{};
  pc.classes = static_cast<uint32_t>(C);
  pc.chunk = static_cast<uint32_t>(plan.chunk);
  pc.nchunks = static_cast<uint32_t>(plan.nchunks);
  pc.ignore_index = static_cast<int32_t>(call.attrs.ignore_index);
  pc.smoothing = static_cast<float>(call.attrs.label_smoothing);
  pc.total_rows = static_cast<uint32_t>(N);
  pc.softcap = static_cast<float>(call.attrs.softcap);
  pc.z_loss = static_cast<float>(call.attrs.z_loss);
  Launch loss;
  loss.variant = training_variant(call, call.dtype, caps);
  loss.bindings[0] = z;
  loss.bindings[1] = call.inputs[2].buffer;
  loss.bindings[2] = call.outputs[0].buffer;
  loss.bindings[4] = stats;
  loss.push = &pc;
  loss.push_bytes = sizeof(pc);
  const uint32_t cache_values = plan.cache_values;
  const auto spec = [&](uint32_t tpr, uint32_t pass) {
    return std::vector<uint32_t>{kWorkgroup, tpr, plan.wide ? 1u : 0u, cache_values, pass};
  };
  pc.rows = static_cast<uint32_t>(N);  // PASS 0: the count over every row
  loss.spec = spec(kWorkgroup, 0);
  loss.groups = 1;
  dev.record(loss);

  // bf16 on the tensor-core path: W (C x d, 1 GiB for a 128k vocabulary) converted once per call rather
  // than in every chunk's products: its rows scaled for Z = h W^T (workspace slot 4), its columns for
  // d_h = G W (slot 5); their factors in slot 6, after words [0, rows) that each chunk's products take
  // for A's, then the column maxima (scratch). Where a chunk's product takes another path (few rows:
  // the decode kernel) it reads W itself, so the results do not depend on this choice.
  const bool bf16_cm = call.dtype == DType::bf16 && dev.coopmat_mm().path != CoopmatPath::portable && dev.tuning().mm_path != 1 && dev.tuning().mm_path != 3 &&
                       dev.has_variant("bf16_rows_to_f16") && dev.has_variant("bf16_cols_to_f16");
  const bool w_rows = bf16_cm && D % 8 == 0 && (dev.tuning().mm_path == 2 || std::min(rows, N) > 16);
  const bool w_cols = bf16_cm && grad && D % 8 == 0 && C % 8 == 0;
  ScaledB zb, db;
  if (w_rows || w_cols) {
    const std::shared_ptr<Buffer> sc = dev.workspace(4 * (rows + C + 2 * D), 6);
    if (w_rows) {
      zb = {dev.workspace(C * D * 2, 4), sc, static_cast<uint32_t>(rows)};
      record_bf16_scaled(dev, W.buffer, zb.b, sc, 1, C, D, false, zb.scale_b);
    }
    if (w_cols) {
      db = {dev.workspace(C * D * 2, 5), sc, static_cast<uint32_t>(rows + C)};
      record_bf16_scaled(dev, W.buffer, db.b, sc, 1, C, D, true, db.scale_b, rows + C + D);
    }
  }

  std::string mm_variant, dw_variant;
  for (uint64_t r0 = 0; r0 < N; r0 += rows) {
    const uint64_t n = std::min(rows, N - r0);
    const auto part = [&](const TensorArg& t, uint64_t width) -> std::shared_ptr<Buffer> {
      if (nchunks == 1) return t.buffer;
      return std::make_shared<VkBuf>(dev, t.buffer, r0 * width * es, align_up(n * width * es, 16));
    };
    const std::shared_ptr<Buffer> hc = part(h, D);
    // 1. Z = h[chunk] W^T
    OpCall zc = product_call(OpId::linear, call.dtype);
    zc.inputs = {{hc, {int64_t(n), int64_t(D)}, int64_t(n * D)}, W, {}, {}};
    zc.outputs = {{z, {int64_t(n), int64_t(C)}, int64_t(n * C)}};
    mm_variant = std::string(dispatch_matmul(dev, zc, w_rows ? &zb : nullptr).str());
    // 2. the chunk's losses (and G over Z)
    pc.rows = static_cast<uint32_t>(n);
    pc.row_base = static_cast<uint32_t>(r0);
    if (!plan.split) {
      loss.spec = spec(plan.tpr, 1);
      loss.groups = grid(n, kWorkgroup / plan.tpr, caps, dev.tuning());
      dev.record(loss);
    } else {
      loss.groups = grid(n * plan.nchunks, 1, caps, dev.tuning());
      loss.spec = spec(kWorkgroup, 2);
      dev.record(loss);
      loss.spec = spec(kWorkgroup, 3);
      dev.record(loss);
    }
    if (!grad) continue;
    // 3. d_h[chunk] = G W (W as matmul's [K, N] operand: K = C)
    OpCall dc = product_call(OpId::matmul, call.dtype);
    dc.inputs = {{z, {int64_t(n), int64_t(C)}, int64_t(n * C)}, W, {}, {}};
    dc.outputs = {{part(call.outputs[1], D), {int64_t(n), int64_t(D)}, int64_t(n * D)}};
    dispatch_matmul(dev, dc, w_cols ? &db : nullptr);
    // 4. d_W (+)= G^T h[chunk]
    dw_variant = record_matmul_at_b(dev, z, hc, call.outputs[2].buffer, call.dtype, static_cast<uint32_t>(C),
                                    static_cast<uint32_t>(D), static_cast<uint32_t>(n), r0 > 0);
  }
  pc.rows = static_cast<uint32_t>(N);  // PASS 4: the mean over every row
  pc.row_base = 0;
  loss.spec = spec(kWorkgroup, 4);
  loss.groups = 1;
  dev.record(loss);
  return "vulkan:lce/chunks=" + std::to_string(nchunks) + "x" + std::to_string(rows) + "rows," +
         (plan.split ? "split=" + std::to_string(plan.nchunks) : "tpr=" + std::to_string(plan.tpr)) + "," +
         mm_variant.substr(mm_variant.find('/') + 1) + (grad ? ",dW:" + dw_variant : std::string());
}

}  // namespace kf::hal::vk
