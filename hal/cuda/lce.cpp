// linear_cross_entropy and its backward on the CUDA backend (src/ops/linear_xent.cpp says what they
// compute), as the Vulkan backend does it (hal/vulkan/lce.cpp): chunk by chunk over the rows of
// h, so that at most one chunk of logits exists in memory. Per chunk of n rows, in order on the stream:
//   1. Z = h[chunk] W^T          cuBLASLt (lt_product: the device's one handle and workspace)
//   2. the row pass of train.cu  per-row losses into the workspace (row order, by global row); for the
//                                backward G = d loss / d Z (soft-cap and z-loss included) over Z in place
//   3. d_h[chunk] = G W          cuBLASLt
//   4. d_W (+)= G^T h[chunk]     cuBLASLt, beta = 1 after the first chunk; for f16 / bf16 into a float
//                                accumulator (cuBLASLt's float output of 16-bit inputs), rounded to the
//                                dtype at the end
// then the mean over all rows (the losses added in row order by one block: the same bits whatever the
// chunks). The count of rows kept comes first, since every chunk's gradient divides by it. Rows per
// chunk: a multiple of the granule that keeps each chunk of h 256-byte aligned, as many as fit 256 MiB
// of logits (Vulkan's choice; a 16-bit backward: up to half its d_W accumulator), or KF_TUNE lce_rows
// rounded up to the granule. The logits are held in
// the op's dtype (as torch's linear would hold them), so G of a 16-bit op is rounded to that dtype.
#include <algorithm>
#include <climits>
#include <numeric>

#include "hal/cuda/device.hpp"
#include "hal/cuda/kernels.hpp"
#include "kf/error.hpp"

namespace kf::hal::cuda {
namespace {

constexpr uint64_t kChunkAlign = 256;          // the alignment of every chunk of h and d_h (bytes)
constexpr uint64_t kChunkBytes = 256ull << 20;  // logits per chunk (automatic choice), as Vulkan

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

std::string CudaDevice::dispatch_linear_cross_entropy(const OpCall& call, Dt dt) {
  const std::string name = op_name(call.id);
  const bool grad = call.outputs.size() > 1;
  const std::string prefix = std::string(kBackend) + ":";
  const TensorArg& h = call.inputs[0];
  const TensorArg& W = call.inputs[1];
  const uint64_t N = static_cast<uint64_t>(h.shape[0]), D = static_cast<uint64_t>(h.shape[1]);
  const uint64_t C = static_cast<uint64_t>(W.shape[0]);
  const uint64_t es = dtype_size(call.dtype), cs = call.dtype == DType::f64 ? 8 : 4;
  const bool half = call.dtype == DType::f16 || call.dtype == DType::bf16;
  // (C and D in [1, 2^31), N at most 2^40: supports())

  // Rows per chunk: a multiple of the granule, as many as fit kChunkBytes of logits (Vulkan's choice).
  // The backward of a 16-bit op reads and writes d_W's float accumulator (C x d x 4 bytes, held anyway)
  // once per chunk, so its chunks may hold up to half that in logits: on an H100 (N 8192, d 4096, 131072
  // classes, f16) 1024 rows a chunk took 44.8-45.6 ms, 2048 39.6-39.9, 4096 36.9-37.9; the peak above the inputs and outputs is then at most 1.5 accumulators.
  const uint64_t chunk_bytes = grad && half ? std::max<uint64_t>(kChunkBytes, C * D * 2) : kChunkBytes;
  const uint64_t granule = kChunkAlign / std::gcd(kChunkAlign, D * es);
  if (granule * C * es > chunk_bytes)
    throw Error(ErrorCode::Unsupported, name + ": " + std::to_string(granule) + " rows of " + std::to_string(C) +
                                            " logits exceed the chunk limit of " + std::to_string(chunk_bytes) +
                                            " bytes (chunking over the classes is not implemented)");
  uint64_t rows = lce_rows_ ? align_up(static_cast<uint64_t>(lce_rows_), granule)
                            : std::max<uint64_t>(granule, chunk_bytes / (C * es) / granule * granule);
  rows = std::max<uint64_t>(1, std::min<uint64_t>(rows, N));
  const uint64_t nchunks = (N + rows - 1) / rows;

  // The chunk of logits (and of G), the count and per-row losses (compute type), d_W's float accumulator.
  const std::shared_ptr<Buffer> z = scratch(static_cast<size_t>(rows * C * es));
  const std::shared_ptr<Buffer> stats = scratch(static_cast<size_t>((1 + N) * cs));
  std::shared_ptr<Buffer> acc, tmp;
  if (grad && half) acc = scratch(static_cast<size_t>(C * D * 4));

  XentParams xp;
  xp.logits = ptr_of(z);
  xp.target = static_cast<const int32_t*>(ptr_of(call.inputs[2]));
  xp.loss = ptr_of(call.outputs[0]);
  xp.grad = grad ? ptr_of(z) : nullptr;  // in place over the logits
  xp.ws = ptr_of(stats);
  xp.classes = static_cast<int64_t>(C);
  xp.ignore_index = static_cast<int32_t>(std::clamp<int64_t>(call.attrs.ignore_index, INT32_MIN, INT32_MAX));
  xp.smoothing = call.attrs.label_smoothing;
  xp.softcap = call.attrs.softcap;
  xp.z_loss = call.attrs.z_loss;
  XentLaunch layout;  // train.cu's row pass (its choice for rows of C classes)

  make_current();
  xp.rows = static_cast<int64_t>(N);  // the count over every row
  check_launch(launch_lce_pass(dt, xp, 0, max_shared_optin_, stream_), name + " count");

  const auto product = [&](DType out, bool ta, bool tb, uint64_t m, uint64_t n, uint64_t k, const void* A, uint64_t lda,
                           const void* B, uint64_t ldb, void* Dp, uint64_t ldd, bool accumulate) {
    return lt_product(name, call.dtype, out, ta, tb, int64_t(m), int64_t(n), int64_t(k), A, int64_t(lda), B,
                      int64_t(ldb), Dp, int64_t(ldd), accumulate);
  };
  const auto no_algorithm = [&](const char* what) {
    return Error(ErrorCode::Unsupported, prefix + " " + name + ": cuBLASLt has no algorithm for " + what + " in " +
                                             to_string(call.dtype));
  };
  const auto* hp = static_cast<const unsigned char*>(ptr_of(h));
  const void* Wp = ptr_of(W);
  bool dw_fallback = false;
  for (uint64_t r0 = 0; r0 < N; r0 += rows) {
    const uint64_t n = std::min(rows, N - r0);
    const void* hc = hp + r0 * D * es;
    // 1. Z [n, C] = h[chunk] W^T: column-major Z^T (C x n) = W^T (W stored d x C) h^T (d x n).
    if (!product(call.dtype, true, false, C, n, D, Wp, D, hc, D, ptr_of(z), C, false)) throw no_algorithm("h W^T");
    // 2. the chunk's losses (and G over Z)
    xp.rows = static_cast<int64_t>(n);
    xp.row_base = static_cast<int64_t>(r0);
    check_launch(launch_lce_pass(dt, xp, 1, max_shared_optin_, stream_, &layout), name + " rows");
    if (!grad) continue;
    // 3. d_h[chunk] [n, d] = G W: column-major d_h^T (d x n) = W (d x C) G^T (C x n).
    void* dhc = static_cast<unsigned char*>(ptr_of(call.outputs[1])) + r0 * D * es;
    if (!product(call.dtype, false, false, D, n, C, Wp, D, ptr_of(z), C, dhc, D, false)) throw no_algorithm("G W");
    // 4. d_W [C, d] (+)= G^T h[chunk]: column-major d_W^T (d x C) (+)= h^T (d x n) G (G stored C x n, transposed).
    if (!half) {
      if (!product(call.dtype, false, true, D, C, n, hc, D, ptr_of(z), C, ptr_of(call.outputs[2]), D, r0 > 0))
        throw no_algorithm("G^T h");
      continue;
    }
    if (!dw_fallback && product(DType::f32, false, true, D, C, n, hc, D, ptr_of(z), C, ptr_of(acc), D, r0 > 0)) continue;
    // No float-output product of 16-bit inputs: the chunk's product in the dtype, added to the float
    // accumulator by a kernel (one more rounding per chunk).
    dw_fallback = true;
    if (!tmp) tmp = scratch(static_cast<size_t>(C * D * es));
    if (!product(call.dtype, false, true, D, C, n, hc, D, ptr_of(z), C, ptr_of(tmp), D, false)) throw no_algorithm("G^T h");
    LceDwParams dp;
    dp.src = ptr_of(tmp);
    dp.acc = static_cast<float*>(ptr_of(acc));
    dp.n = static_cast<int64_t>(C * D);
    dp.mode = 0;
    dp.first = r0 == 0;
    const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>((dp.n + 255) / 256, 1, int64_t(sm_count_) * 32));
    check_launch(launch_lce_dw(dt, dp, blocks, stream_), name + " d_W accumulate");
  }
  xp.rows = static_cast<int64_t>(N);  // the mean over every row, in row order
  xp.row_base = 0;
  check_launch(launch_lce_pass(dt, xp, 2, max_shared_optin_, stream_), name + " mean");
  if (grad) {
    if (N == 0) {
      fill_bytes(*call.outputs[2].buffer, 0, static_cast<size_t>(C * D * es));
    } else if (half) {
      LceDwParams dp;
      dp.acc = static_cast<float*>(ptr_of(acc));
      dp.out = ptr_of(call.outputs[2]);
      dp.n = static_cast<int64_t>(C * D);
      dp.mode = 1;
      const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>((dp.n + 255) / 256, 1, int64_t(sm_count_) * 32));
      check_launch(launch_lce_dw(dt, dp, blocks, stream_), name + " d_W store");
    }
  }
  return prefix + "lce/chunks=" + std::to_string(nchunks) + "x" + std::to_string(rows) + "rows,block=" +
         std::to_string(layout.block) + (grad ? ",regs=" + std::to_string(layout.regs) + ",smem=" + std::to_string(layout.smem_packs) : "") +
         ",cublaslt" + (grad && half ? (dw_fallback ? ",dW-f32-acc-kernel" : ",dW-f32-acc") : "");
}

}  // namespace kf::hal::cuda
