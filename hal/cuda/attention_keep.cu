// Dropout's keep words of attention drawn ahead of the kernels that apply them (AttnParams::keep_words,
// keep_ready): a kernel of its own draws docs/ops.md's Philox bits at the rate the GPU's integer pipes allow,
// where drawing inside flash-wgmma or the backward's dK/dV pass sat on each warp's path between its products
// (measured on an H100). Rows of [B, Hq, SqT] without packed sequences (kbeg = 0);
// word w of row `row` holds keys 32 w .. 32 w + 31, at keep_word_at's place. A word no key of which the row sees
// (the causal mask, the window) is left as drawn 0 or unwritten.
#include <algorithm>

#include "hal/cuda/attention_common.cuh"

namespace kf::hal::cuda {
namespace {

// Block (x, y): rows 256 x .. of key pair y (keys 64 y .. 64 y + 63); each thread draws its row's two words (16
// independent Philox calls) and stores them side by side. The query index by a 32-bit remainder where the
// rows allow it (a 64-bit one is a subroutine of some 70 instructions).
__global__ void __launch_bounds__(256) attn_keep_words(const AttnParams p) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= p.keep_rows) return;
  const int64_t i = p.keep_rows <= INT32_MAX ? int64_t(static_cast<unsigned>(row) % static_cast<unsigned>(p.SqT)) : row % p.SqT;
  const int64_t off = int64_t(p.SkT) - p.SqT, j0 = 64 * int64_t(blockIdx.y);  // off: the causal diagonal
  unsigned w[2] = {0u, 0u};
  bool any = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t j = j0 + 32 * h;
    if (j >= p.SkT || (p.causal && j > i + off) || (p.window > 0 && j + 31 <= i + off - p.window)) continue;
    w[h] = keep_bits32(static_cast<uint64_t>(row) * p.SkT + static_cast<uint64_t>(j), p);
    any = true;
  }
  if (any) {
    unsigned* at = p.keep_words + 2 * (int64_t(blockIdx.y) * p.keep_rows + row);
    at[0] = w[0], at[1] = w[1];
  }
}

}  // namespace

int launch_attention_keep_words(const AttnParams& p, void* stream) {
  const int64_t pairs = (int64_t(p.SkT) + 63) / 64, blocks = (p.keep_rows + 255) / 256;
  if (pairs == 0 || blocks == 0) return 0;
  if (pairs > 65535 || blocks > INT32_MAX) return -1;  // (kernels.cpp does not ask for it then)
  attn_keep_words<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(pairs)), 256, 0, static_cast<gpuStream_t>(stream)>>>(p);
  return static_cast<int>(gpuGetLastError());
}

}  // namespace kf::hal::cuda
