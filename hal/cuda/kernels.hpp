// The interface between the host side of the CUDA/HIP backend (kernels.cpp: which kernel serves an op)
// and the device code (eltwise.cu, rows.cu). Plain C++: no runtime header, so it reads the same in both
// compilers. The op lists are X-macros so that the host table and the kernel switches cannot disagree.
#pragma once
#include <cstdint>

namespace kf::hal::cuda {

// Storage dtypes of the kernels (kf::DType without i32).
enum class Dt : uint8_t { f32, f16, bf16, f64 };

// Elementwise ops with a kernel in eltwise.cu (docs/ops.md section 1 and the unfused primitives).
#define KF_CUDA_ELTWISE_OPS(X)                                                                      \
  X(add_relu) X(mul_relu) X(add_sigmoid) X(mul_tanh) X(bias_relu) X(bias_gelu) X(bias_gelu_tanh)     \
  X(bias_silu) X(swiglu) X(geglu) X(mish_scale) X(prelu_bias) X(dropout) X(gelu_dropout)            \
  X(bias_gelu_dropout) X(add_dropout_residual) X(add) X(mul) X(prelu) X(copy) X(relu) X(sigmoid)    \
  X(tanh) X(gelu) X(gelu_tanh) X(silu) X(mish) X(relu_backward) X(sigmoid_backward) X(tanh_backward)    \
  X(gelu_backward) X(gelu_tanh_backward) X(silu_backward) X(mish_backward) X(mse_backward)

// Row ops with a kernel in rows.cu (docs/ops.md section 2).
#define KF_CUDA_ROW_OPS(X) X(sum_squared) X(mean_abs) X(softmax) X(log_softmax)

#define KF_CUDA_ENUM_ENTRY(name) name,
enum class EltOp : int { KF_CUDA_ELTWISE_OPS(KF_CUDA_ENUM_ENTRY) count };
enum class RowOp : int { KF_CUDA_ROW_OPS(KF_CUDA_ENUM_ENTRY) count };
#undef KF_CUDA_ENUM_ENTRY

// Layout of elementwise operands 1 and 2: the output's shape, the features shape [F] (broadcast over
// rows), one element, or absent (as eltwise.comp's MODE1 / MODE2).
enum Mode : uint32_t { kFull = 0, kFeatures = 1, kScalar = 2, kAbsent = 3 };

constexpr int kEltwiseThreads = 256;  // threads per block
constexpr int kEltwiseItems = 4;      // 16-byte packs a thread loads before computing any

struct EltwiseParams {
  const void* in0 = nullptr;
  const void* in1 = nullptr;
  const void* in2 = nullptr;
  void* out = nullptr;
  int64_t n = 0;        // output elements
  int64_t feat = 1;     // output features (last dimension)
  uint32_t mode1 = kAbsent, mode2 = kAbsent;
  uint32_t packed = 0;  // gated ops with the gate left out: input 0 is [.., 2F], x then gate
  uint32_t gather = 0;  // feat is not a multiple of the pack: broadcast / packed operands read per element
  uint32_t seed_lo = 0, seed_hi = 0, off_lo = 0, off_hi = 0;  // Philox key and counter offset
  uint32_t thr = 0;     // keep(i) = (word >> 8) >= thr (0: keep everything, p = 0)
  float keep_f = 1;     // 1 / (1 - p)
  double keep_d = 1;
  float n_f = 1;        // mse_backward: the element count n of 2 (a - b) / n
  double n_d = 1;
};

struct RowsParams {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t rows = 0;
  int64_t feat = 1;
  int tpr = 32;       // threads per row: a power of two, at least the warp, at most the block
  int wide = 1;       // feat is a multiple of the pack: rows are read and written as 16-byte packs
  float scale = 1;    // softmax / log_softmax scale
  double scale_d = 1;
  int cluster = 0;    // KF_TUNE rows_cluster: 0 automatic, 1 never, N clusters of N blocks (see ClusterPlan)
  int cc = 0;         // the device's compute capability x 10 (0: HIP, no clusters)
  int64_t smem_limit = 48 * 1024;  // shared memory a block may opt in to (the cluster kernel's packs)
  int cluster_p = 0, cluster_part = 0, smem_packs = 0;  // set by rows.cu's cluster launch (ClusterPlan)
};

// Threads per block of the row kernels: 256 for rows that a block caches (16 or 32 32-bit values' worth
// of registers per thread: KF_TUNE rows_values, default kRowCache256), 1024 (kRowCache1024) for longer
// ones. Rows of whole 16-byte packs cache rows_values / 4 packs per thread in every dtype (16-bit packs
// raw); others rows_values values (f64 half as many).
constexpr int kRowCache256 = 16, kRowCache1024 = 32;

// Long rows on thread-block clusters (sm_90; norm.cu and rows.cu): a row of npk 16-byte packs is cut
// into P parts of `part` packs (the last ones may be shorter or empty), one block of `block` threads
// each; thread t holds packs t + u block of its part, `regs` of them in registers and `smem` in shared
// memory. The blocks reduce their parts, exchange the parts' statistics through distributed shared
// memory and combine them in rank order (the same bits in every block and every run), then write their
// parts. Small blocks (up to 256 threads at 64 registers: 4 a multiprocessor, each another row's part)
// keep loads in flight while other blocks reduce, where a 1024-thread block per row left the memory idle.
// Automatic: P = packs / target, 2 to 8, target (packs a block) 4096 for softmax and the layer norms,
// 2048 for the rms norms and the add forms: the best of P = 2, 4, 8 on an H100 over rows of 65536 in
// every dtype, measured twice (softmax 0.86 -> 0.91-0.99 of
// copy against 2048, f32 layer_norm 0.84 -> 0.86; rms_norm 0.92 against 0.82-0.83 with 4096, add forms
// 0.97-1.0 against 0.81-0.88). rows_cluster=N: P = N. None (P = 0) when a part does not fit the shared
// memory.
constexpr int kClusterBlock = 256, kClusterMax = 8;
constexpr int64_t kClusterHeader = 512;  // bytes of dynamic shared memory before the packs: block sums, statistics
struct ClusterPlan {
  int P = 0, block = 0, part = 0, smem = 0;
  int64_t smem_bytes = 0;
};
// slot: bytes of shared memory per pack (16; 32 for the add forms, which keep x and r); target: packs a
// block when automatic.
inline ClusterPlan cluster_plan(int64_t npk, int regs, int64_t slot, int64_t target, int64_t smem_limit, int want) {
  ClusterPlan c;
  if (npk < 1) return c;
  int64_t P = want >= 2 ? want : (npk + target - 1) / target;
  P = P < 2 ? 2 : P > kClusterMax ? kClusterMax : P;
  const int64_t part = (npk + P - 1) / P;
  int block = 32;
  while (block < kClusterBlock && int64_t(block) * regs < part) block *= 2;
  const int64_t per = (part + block - 1) / block;
  const int64_t smem = per > regs ? per - regs : 0;
  const int64_t bytes = kClusterHeader + smem * block * slot;
  if (bytes > smem_limit) return c;
  c.P = static_cast<int>(P), c.block = block, c.part = static_cast<int>(part), c.smem = static_cast<int>(smem);
  c.smem_bytes = bytes;
  return c;
}

// ---- Sections 3 and 6 (norm.cu, train.cu). One block per row for the row kernels (fixed-order block
// sums: the same bits every run); the host picks the block size (a power of two, 32 to 1024).
enum class NormOp : int { layer, rms, layer_relu, layer_gelu, layer_silu, rms_gelu, rms_silu, add_layer, add_rms };

struct NormParams {
  const void* x = nullptr;
  const void* r = nullptr;  // the residual of the add forms
  const void* w = nullptr;  // absent: 1
  const void* b = nullptr;  // absent: 0
  void* y = nullptr;
  void* s = nullptr;        // the add forms' x + r
  int64_t rows = 0, feat = 1;
  // The affine channel of element j of row `row`: (row % groups) * cpg + j / inner (layer and rms norm:
  // groups 1, inner 1, cpg = feat; group_norm: C / G channels per group of `inner` elements each).
  int64_t groups = 1, cpg = 1, inner = 1;
  double eps = 1e-5;
  // The device's limits for the cached kernel's layout (norm.cu): shared memory a block may opt in to,
  // the L2 cache (0: unknown); smem_packs is set by the launch (packs per thread in shared memory).
  int64_t smem_limit = 48 * 1024, l2_bytes = 0;
  int smem_packs = 0;
  int cluster = 0;       // KF_TUNE rows_cluster: 0 automatic, 1 never, N clusters of N blocks (ClusterPlan)
  int cc = 0;            // the device's compute capability x 10 (0: HIP, no clusters)
  int cluster_p = 0, cluster_part = 0;  // set by the cluster launch: blocks per cluster, packs per block
};

// How launch_norm ran the cached kernel (block 0: norm_kernel, element by element): threads per row,
// packs per thread in registers, in shared memory, packs of a row streamed (read twice), blocks.
struct NormLaunch {
  int block = 0, cache = 0, smem_packs = 0, streamed = 0;
  uint32_t grid = 0;
  int cluster = 0;  // blocks per cluster (0: one block per row)
};

// layer_norm_backward / rms_norm_backward. Two plans (plan_norm_backward picks one; norm.cu says why):
//  - fused (rows of whole 16-byte packs, aligned, that one block of up to 1024 threads holds at 4 packs a
//    thread): one kernel reads each row's dy and x once, writes dx, and each block sums its rows' dy xhat
//    and dy per column in shared memory; it writes one partial per block (`grid` of them, rows block,
//    block + grid, ...) to ws, and the combine pass adds the partials in block order (Kahan).
//  - separate: the row pass writes dx and, per row, (mean hi, mean lo, rstd) to ws; the column pass sums
//    dw, db over chunks of chunk_rows rows into partials, the combine pass adds the chunks in order.
struct NormBwdParams {
  const void* dy = nullptr;
  const void* x = nullptr;
  const void* w = nullptr;
  void* dx = nullptr;
  void* dw = nullptr;
  void* db = nullptr;       // null for rms
  void* ws = nullptr;       // plan_norm_backward's ws_elems values of the compute type
  int64_t rows = 0, feat = 1;
  int64_t chunk_rows = 1, nchunks = 1;  // the separate plan's column chunks
  double eps = 1e-5;
  int layer = 1;
  int sms = 1;                          // the device's multiprocessors (the fused plan's grid)
  int64_t smem_limit = 48 * 1024;       // shared memory a block may opt in to
  int fused_grid = 0;                   // set by the plan: blocks of the fused kernel (0: separate plan)
};

// What plan_norm_backward chose: block (threads per row), grid (fused: blocks = partials), the dynamic
// shared memory of the fused kernel, and the workspace it needs (values of the compute type).
struct NormBwdLaunch {
  int fused = 0, block = 0;  // fused: 0 no, 1 column sums in shared memory, 2 in registers
  uint32_t grid = 0;
  int64_t smem = 0, ws_elems = 0;
};

struct SoftmaxBwdParams {
  const void* dy = nullptr;
  const void* y = nullptr;
  void* dx = nullptr;
  int64_t rows = 0, feat = 1;
  double scale = 1;
};

struct BatchNormParams {
  const void *x = nullptr, *w = nullptr, *b = nullptr, *mean = nullptr, *var = nullptr;
  void* y = nullptr;
  int64_t n = 0, channels = 1, inner = 1;
  double eps = 1e-5;
};

// cross_entropy(+backward): the row pass (one block per row, or per range of a row: see XentLaunch) writes
// each row's loss to ws (and its gradient row when grad); then one block adds the row losses in row order
// and divides by the count (the backward counts first, in a pass of its own: its gradient divides by it).
struct XentParams {
  const void* logits = nullptr;
  const int32_t* target = nullptr;
  void* loss = nullptr;
  void* grad = nullptr;     // null: the forward op
  void* ws = nullptr;       // [0] the count, [1 + r] the loss of row r (double for f64, else float), then
                            // the forward's split partials: 3 values (max, sum of exp, sum) per (row, split)
  int64_t rows = 0, classes = 1;
  int32_t ignore_index = -100;
  double smoothing = 0;
  // linear_cross_entropy (lce.cpp) runs the row pass on chunks of rows: the chunk's first row (targets
  // and ws indexed by row_base + row, the logits and grad by row; grad may be the logits, in place),
  // soft-capping c tanh(z / c) of the logits (0: off) and the z-loss z_loss lse^2 per kept row.
  int64_t row_base = 0;
  double softcap = 0, z_loss = 0;
  // cross_entropy_backward's long rows on thread-block clusters (train.cu xent_cluster_kernel; ClusterPlan):
  // KF_TUNE rows_cluster (0 automatic, 1 never, N clusters of N blocks) and the device's compute capability
  // x 10 (0: HIP, or a caller that wants no clusters: linear_cross_entropy).
  int cluster = 0, cc = 0;
  // Set by train.cu from its plan (xent_plan, cluster_plan), not by the callers.
  int32_t smem_packs = 0, splits = 1, count_in_final = 0;
  int64_t split_packs = 0;
  int64_t smem_limit = 48 * 1024;
  int cluster_p = 0, cluster_part = 0;
};

// The row pass's layout (train.cu xent_plan): `block` threads per row; the backward holds `regs` 16-byte
// packs a thread in registers and `smem_packs` in shared memory (the row read once), the rest (if any)
// read again for the gradient; the forward streams the row, split over `splits` blocks (partial
// statistics combined by the final pass) where the row is long; cluster > 0: the backward's
// cluster kernel ran, `cluster` blocks of `block` threads a row, `regs` and `smem_packs` packs a thread.
struct XentLaunch {
  int block = 0, regs = 0, smem_packs = 0, splits = 1;
  int cluster = 0;  // blocks per cluster (the backward's cluster kernel; 0: one block per row)
};

// linear_cross_entropy's d_W for 16-bit outputs: mode 0: acc (+)= src (dtype; first: acc = src);
// mode 1: out = acc rounded to the dtype.
struct LceDwParams {
  const void* src = nullptr;
  float* acc = nullptr;
  void* out = nullptr;
  int64_t n = 0;
  int mode = 0, first = 0;
};

// mse: fixed number of blocks, each a partial sum to ws; then one block adds them in order.
struct MseParams {
  const void* a = nullptr;
  const void* b = nullptr;
  void* loss = nullptr;
  void* ws = nullptr;
  int64_t n = 0;
  int blocks = 1;
};
// Whether mse_partial reads a and b as 16-byte packs (both aligned; train.cu), else element by element.
inline bool mse_packs(const MseParams& p) {
  return ((reinterpret_cast<uintptr_t>(p.a) | reinterpret_cast<uintptr_t>(p.b)) & 15) == 0;
}

enum class OptimOp : int { adamw, sgd };
struct OptimParams {
  const void* p = nullptr;
  const void* g = nullptr;
  const void* m = nullptr;
  const void* v = nullptr;
  void* p_out = nullptr;
  void* m_out = nullptr;
  void* v_out = nullptr;
  int64_t n = 0;
  // adamw (host-derived in double, as optim.comp): p = p decay - step_size m / (sqrt(v) + eps_hat)
  double decay = 1, step_size = 0, beta1 = 0.9, one_minus_beta1 = 0.1, beta2 = 0.999, one_minus_beta2 = 0.001,
         eps_hat = 1e-8;
  // sgd
  double lr = 0, weight_decay = 0, momentum = 0, one_minus_dampening = 1;
  int momentum_on = 0, nesterov = 0, first_step = 0;
  int items = 0;  // KF_TUNE optim_items: packs of each tensor a thread per tile (1, 2 or 4; 0: kOptimItems)
};

// The matrix products' own epilogue (where cuBLASLt's fused ones do not apply): y = act(y + bias) + res,
// in place over y [rows, n]; act as kf::Activation. The convolutions use it too (after their cuBLASLt
// product, and inside the direct kernel of conv.cu): their channel is (i / inner) % n of the NCHW output
// (n = O, inner = OH OW), and conv2d_bn_relu adds the batch norm.
struct EpilogueParams {
  void* y = nullptr;
  const void* bias = nullptr;
  const void* res = nullptr;
  int64_t total = 0, n = 1;
  int64_t inner = 1;  // the channel (bias, batch norm) of element i: (i / inner) % n
  int act = 0;
  // Batch norm in inference form after the bias (conv2d_bn_relu; src/ops/conv.cpp): v = (v - mean) s + b
  // with s = w / sqrt(var + eps), computed in the compute type. Null bn_w: none.
  const void* bn_w = nullptr;
  const void* bn_b = nullptr;
  const void* bn_mean = nullptr;
  const void* bn_var = nullptr;
  double eps = 1e-5;
  // linear_dropout: dropout after the activation, before the residual, with the Philox mask of element
  // i of y (docs/ops.md; the same words as eltwise.cu's dropout): keep(i) = (word >> 8) >= thr.
  uint32_t seed_lo = 0, seed_hi = 0, off_lo = 0, off_hi = 0, thr = 0;
  double keep_scale = 1;
};

// Attrs::out_dtype's conversions (matmul.cpp): dst[i] = To(src[i] + add[i]), src in one dtype, add (optional)
// and dst in another; the bias to f32 (add null) and the f32 product plus the residual to a 16-bit output.
struct ConvertParams {
  const void* src = nullptr;
  const void* add = nullptr;
  void* dst = nullptr;
  int64_t n = 0;
};

// ---- Section 4's convolutions (conv.cu). NCHW, as src/ops/conv.cpp: x [N, C, H, W], W [O, C / groups, KH,
// KW], y [N, O, OH, OW]; zero padding. The epilogue (bias, batch norm, activation, dropout at the output's
// linear index) as EpilogueParams with n = O, inner = OH OW (its y, res and total unused).
struct ConvParams {
  const void* x = nullptr;
  const void* w = nullptr;
  void* y = nullptr;
  int64_t N = 0, C = 0, H = 0, W = 0, O = 0, groups = 1, KH = 1, KW = 1, OH = 0, OW = 0;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;  // stride, padding, dilation {height, width}
  EpilogueParams ep;
};

// The direct kernel's output tiles (pixels x output channels of one group, 256 threads): 64 x 64 for
// more than 16 channels per group, 128 x 16 for 5 to 16, 256 x 4 for up to 4 (depthwise).
enum class ConvTile : int { t64x64, t128x16, t256x4 };

// conv.cu's depthwise kernel (groups == C, O = C * mult: one filter per output channel, each reading one
// input plane). A block of 256 threads takes a tile of tow x toh output pixels of pb input planes
// (image, channel) and every output channel of those planes (the multiplier); the tile's input window
// (the halo included, zero outside the image) is staged in shared memory as float, iwt x iht values a
// plane; each thread computes vpt neighbouring outputs along W (vpt = the 16-byte pack: 4 for f32, 8
// for f16 / bf16). Tiles of a plane: wtiles x htiles; plane groups: ptiles. vec_load: the input rows as
// 16-byte packs (W a multiple of the pack, x aligned); vec_store: the outputs as packs (OW a multiple of
// the pack, y aligned). ok false: the window of one row of outputs does not fit smem_limit (huge kernels
// or dilations): the direct kernel serves it.
struct DwPlan {
  bool ok = false, vec_load = false, vec_store = false;
  int vpt = 4, tow = 0, toh = 0, pb = 1, iwt = 0, iht = 0, kwt = 0;  // kwt: 3 or 5 (unit stride and dilation along W)
  int64_t wtiles = 0, htiles = 0, ptiles = 0, tiles = 0, smem = 0;
};

// ---- Section 4's embedding and section 5 (attention.cu).
// embedding: y[r, c] = table[tokens[r], c] + pos[r mod L, c]; ids were checked by the core (an id out of
// range would give NaN, never a read out of bounds). wide: d is a multiple of the 16-byte pack.
struct EmbeddingParams {
  const int32_t* tokens = nullptr;
  const void* table = nullptr;
  const void* pos = nullptr;  // absent: no position term
  void* y = nullptr;
  int64_t rows = 0, d = 1, L = 1, V = 0;
  int wide = 0;
};

// attention_scores and attention (forward). q [B, Hq, SqT, D], k, v [B, Hkv, SkT, D], G = Hq / Hkv; with
// cu_seqlens (varlen) B = 1 and nseq packed sequences. The optional inputs are device pointers (null:
// absent): slopes and sinks in the op's dtype, key lengths, cu_seqlens and the block mask in i32. The
// rotary table holds (cos, sin) pairs in the compute type (float; double for f64) of positions
// pos + rope_pos0 >= 0 for d < D / 2, built on the host in double. Key splits (nsplit > 1): each block
// writes its partial (accumulator, then (m, l)) to part, in the compute type, and the combine pass merges.
struct AttnParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  void* lse = nullptr;  // null: not asked
  void* part = nullptr;  // nsplit * rows * D accumulators, then nsplit * rows (m, l) pairs
  const void* slopes = nullptr;
  const void* sinks = nullptr;
  const int32_t* lens = nullptr;
  const int32_t* cuq = nullptr;  // with cuk: packed sequences
  const int32_t* cuk = nullptr;
  const int32_t* bmask = nullptr;
  const void* rope = nullptr;
  int B = 0, Hq = 0, Hkv = 0, SqT = 0, SkT = 0, G = 1, D = 0, nseq = 0;
  int nsplit = 1, split_len = 0;
  int causal = 0, window = 0, alibi = 0, rope_mode = 0, dropout = 0;
  double scale = 1, softcap = 0, keep_scale = 1;
  uint32_t seed_lo = 0, seed_hi = 0, off_lo = 0, off_hi = 0, thr = 0;
  // Dropout's keep words (attention_common.cuh keep_word_at): word w of row `row` of [B, Hq, SqT] (the bits of keys
  // 32 w .. 32 w + 31 of its sequence) at [w / 2][keep_rows][w % 2]; nullptr: the kernels draw the bits.
  // keep_ready: the words hold every bit a kernel reads (launch_attention_keep_words ran: flash-wgmma); else the
  // tensor-core backward's dK/dV pass writes the words it draws and its dQ pass reads them.
  unsigned* keep_words = nullptr;
  int64_t keep_rows = 0;
  int keep_ready = 0;
  // Philox's key for each of its 10 rounds (pairs; philox_round_keys of the seed): the attention kernels take a
  // round's key from the parameter bank instead of two adds per call.
  uint32_t rk[20] = {};
  int block_size = 1, nkb = 0;
  int rope_pos0 = 0;
  // The decode kernel (AttnKernel::Decode): dec_lk lanes per key row, dec_ppl 16-byte packs of a row per
  // lane, dec_ng query heads per block (dec_nchunk chunks of the G heads of a kv head), dec_gc the
  // kernel's register room for heads (a power of two >= dec_ng).
  int dec_lk = 0, dec_ppl = 0, dec_ng = 0, dec_gc = 0, dec_nchunk = 0;
  int dec_rs = 1;  // the reduce-scatter form where dec_lk = dec_gc x 4 (attention_decode.cu; KF_TUNE attn_decode_rs=1: never)
};

// Bytes of AttnParams::keep_words for those rows and keys.
// (pairs of words past the keys: flash-wgmma's last key tile may read up to 128 keys and a word beyond them).
inline int64_t attn_keep_words_bytes(int64_t rows, int64_t SkT) { return ((SkT + 63) / 64 + 3) * rows * 8; }
// Draws the keep words of rows [B, Hq, SqT] (no packed sequences) into p.keep_words ahead of the attention kernels,
// skipping words no key of which a row sees by the causal mask or the window (attention_keep.cu).
int launch_attention_keep_words(const AttnParams& p, void* stream);

// docs/ops.md's Philox4x32-10 key schedule for a seed: round r's key (rk[2 r], rk[2 r + 1]).
inline void philox_round_keys(uint32_t seed_lo, uint32_t seed_hi, uint32_t (&rk)[20]) {
  for (int r = 0; r < 10; ++r) {
    rk[2 * r] = seed_lo + static_cast<uint32_t>(r) * 0x9E3779B9u;
    rk[2 * r + 1] = seed_hi + static_cast<uint32_t>(r) * 0xBB67AE85u;
  }
}

// The attention kernels (attention.cu, attention_decode.cu, attention_mma.cu, attention_wgmma.cu):
//  - Simt: the portable flash kernel (any dtype, f64 too): bq query rows a block, 8 threads a row, key
//    tiles of bk (32, 16 or 8) keys through shared memory; online softmax in the compute type.
//  - Wmma: the tensor-core flash kernel (f16 and bf16, D % 16 == 0; CUDA only): 64 query rows a block
//    of 4 warps, key tiles of 64 keys (32 for D > 128), Q K^T and P V through nvcuda::wmma 16x16x16 with
//    float accumulation, the softmax in float; O in shared memory (Wmma) or in accumulator fragments
//    (WmmaRegs: rescaled element by element through each element's row index).
//  - Decode: one query row per sequence (Sq = 1) against a long cache: a block of 128 threads per
//    (key split, kv head x chunk of its query heads, sequence); dec_lk lanes per key row, K and V
//    streamed from global memory into registers (no shared-memory staging), every query head of the chunk
//    served by each K/V load; RoPE (rope_mode) applied to the keys in registers, from the table rope;
//    always followed by its combine pass (one block per query row).
//  - Mma: the FlashAttention-2 kernel (f16 and bf16, D = 64 or 128, no RoPE; CUDA only): bq = 64 (16 rows
//    a warp) or 128 (32 rows a warp: two m16 row tiles sharing each K / V fragment, Q's fragments re-read
//    from shared memory) query rows a block of 4 warps, key tiles of 64 keys double-buffered by cp.async,
//    mma.sync.m16n8k16 with ldmatrix, the softmax and O in registers, P passed to P V in registers.
//    launch_attention's bq picks the form.
//  - Wgmma: the Hopper kernel (attention_wgmma.cu; sm_90a code on a compute capability 9.0 GPU, f16 and
//    bf16, D a multiple of 8 up to 256 (64, 128, 256 native, others zero-padded to them), no RoPE, dropout,
//    soft-capping, ALiBi or block mask): 128 query rows a block of
//    two warpgroups, key tiles of 128 keys (64 at D 256) double-buffered by cp.async in swizzled shared memory, both
//    products by wgmma.mma_async (P from registers), the softmax and O in registers.
enum class AttnKernel : int { Simt, Wmma, WmmaRegs, Decode, Mma, Wgmma };
// Shared memory of the kernels (bytes) for a tile.
int64_t attn_simt_shared_bytes(Dt dt, int bq, int bk, int D);
int64_t attn_wmma_shared_bytes(int bk, int D);
int64_t attn_mma_shared_bytes(int D, int rows_per_warp);  // 0 where the kernel does not take D (or 16 / 32)
// 0 where the kernel does not take D (a multiple of 8 up to 256) or this build has no sm_90a code (KF_CUDA_WGMMA).
int64_t attn_wgmma_shared_bytes(int D);
int launch_attention_wgmma(Dt dt, const AttnParams& p, uint32_t qtiles, void* stream);
// launch_attention's other parts: the decode kernel and its combine pass (attention_decode.cu); the
// tensor-core kernels flash-mma and flash-wmma(-regs) without the combine pass (attention_mma.cu; -1 on HIP).
int launch_attention_decode(Dt dt, const AttnParams& p, void* stream);
int launch_attention_mma(AttnKernel kern, Dt dt, const AttnParams& p, int bq, int bk, uint32_t qtiles, void* stream);
// Whether this build has the tensor-core kernel (false for HIP).
bool attn_wmma_built();
// The decode kernel's shared memory (bytes) and how many of its blocks a multiprocessor holds at once
// (the runtime's occupancy answer; 0 when it gave none), for p's dec_* fields and dtype (f32, f16, bf16).
int64_t attn_decode_shared_bytes(const AttnParams& p);
// Whether the decode kernel runs its reduce-scatter form for p's dec_* fields (attention_decode.cu).
bool attn_decode_rs_form(const AttnParams& p);
int attn_decode_blocks_per_sm(Dt dt, const AttnParams& p);

// Launches on `stream` (a cudaStream_t / hipStream_t). Return the runtime's error code of the launch
// (0 when it was accepted): kernels.cpp turns it into a kf::Error.
int launch_eltwise(EltOp op, Dt dt, const EltwiseParams& p, uint32_t blocks, void* stream);
// clusters (optional): the cluster launch's plan when it ran (softmax, log_softmax), else P = 0.
int launch_rows(RowOp op, Dt dt, const RowsParams& p, int block, int cache, uint32_t blocks, void* stream,
                ClusterPlan* clusters = nullptr);

// cached (optional): the cached kernel's layout when it ran, else block 0.
int launch_norm(NormOp op, Dt dt, const NormParams& p, int block, void* stream, NormLaunch* cached = nullptr);
// The plan (fills l, sets p.fused_grid) then the launch with the same p; block: the separate plan's row block.
void plan_norm_backward(Dt dt, NormBwdParams& p, int block, NormBwdLaunch& l);
int launch_norm_backward(Dt dt, const NormBwdParams& p, const NormBwdLaunch& l, void* stream);
// packs_block (optional): the block of the 16-byte-pack kernel when it ran (whole packs, aligned), else 0.
int launch_softmax_backward(Dt dt, const SoftmaxBwdParams& p, int block, void* stream, int* packs_block = nullptr);
int launch_batch_norm_relu(Dt dt, const BatchNormParams& p, uint32_t blocks, void* stream);
// smem_limit: the device's opt-in shared memory per block; plan (optional): the layout that ran.
int launch_cross_entropy(Dt dt, const XentParams& p, int64_t smem_limit, void* stream, XentLaunch* plan = nullptr);
// The values (compute type) of cross_entropy's ws for rows x classes (the forward's split partials too).
int64_t xent_ws_values(Dt dt, int64_t rows, int64_t classes, bool grad);
// linear_cross_entropy's passes over XentParams: 0 the count over p.rows targets (one block), 1 the row
// pass (train.cu's layout for the chunk's rows; never split), 2 the mean over p.rows losses (one block).
int launch_lce_pass(Dt dt, const XentParams& p, int pass, int64_t smem_limit, void* stream, XentLaunch* plan = nullptr);
int launch_lce_dw(Dt dt, const LceDwParams& p, uint32_t blocks, void* stream);  // f16 / bf16
int launch_mse(Dt dt, const MseParams& p, void* stream);
int launch_optim(OptimOp op, Dt dt, const OptimParams& p, uint32_t blocks, void* stream);
int launch_epilogue(Dt dt, const EpilogueParams& p, uint32_t blocks, void* stream);
int launch_convert(Dt from, Dt to, const ConvertParams& p, uint32_t blocks, void* stream);  // f32 / f16 / bf16
int launch_embedding(Dt dt, const EmbeddingParams& p, uint32_t blocks, void* stream);
// conv.cu. The direct kernel on grid (grid_x pixel tiles, grid_y (group, channel tile) pairs), each
// looping over the rest; and the column matrix of the cuBLASLt path: col[i][k][pix] for the images
// n0 .. n0 + images - 1 (row-major [K, OH OW] per image, k = (c, kh, kw); zero outside the image;
// K and OH OW below 2^31), one block per row.
int launch_conv_direct(Dt dt, const ConvParams& p, ConvTile tile, uint32_t grid_x, uint32_t grid_y, void* stream);
int launch_im2col(Dt dt, const ConvParams& p, int64_t n0, int64_t images, void* col, uint32_t blocks, void* stream);
// The tensor-core implicit GEMM (f16 / bf16, groups 1, K = C KH KW a multiple of 8, W 16-byte aligned,
// C H W, OH OW below 2^31, H + ph and W + pw below 32767, (KH - 1) dh and (KW - 1) dw below 32768): tiles of
// 128 pixels x 64 channels, `blocks` blocks each looping over every blocks-th tile; conv_mma_smem its
// dynamic shared memory (the caller checks the device's opt-in limit). -1: not built (HIP) or dtype.
int64_t conv_mma_smem(const ConvParams& p);
int launch_conv_mma(Dt dt, const ConvParams& p, uint32_t blocks, void* stream);
// The depthwise kernel's tiles for p (Dt::f32, f16, bf16; ok false otherwise), at most smem_limit bytes of
// shared memory a block and about `items` vpt-wide output pieces a block; then its launch on `blocks`
// blocks (each looping over every blocks-th tile).
DwPlan plan_conv_depthwise(Dt dt, const ConvParams& p, int64_t smem_limit, int items = 256);
int launch_conv_depthwise(Dt dt, const ConvParams& p, const DwPlan& plan, uint32_t blocks, void* stream);
int launch_attention_scores(Dt dt, const AttnParams& p, void* stream);
// The forward kernel on grid (ceil(G * SqT / bq), Hkv, nseq * nsplit), then (nsplit > 1) the combine pass.
int launch_attention(AttnKernel kern, Dt dt, const AttnParams& p, int bq, int bk, uint32_t qtiles, void* stream);

// attention_backward (attention_bwd.cu), as shaders/attention_bwd.comp: a PRE pass (D_i = do_i . o_i per
// query row into dsum, in the compute type), a dK/dV pass (one block per (key tile of bk keys, kv head,
// sequence), 8 threads per key, looping over the query rows of the G heads that share the kv head in
// tiles of bq: dk and dv summed in a fixed order, no atomics) and a dQ pass (one block per (query tile
// of bq rows, kv head, sequence), looping over the key tiles). a carries q, k, v, the optional inputs
// and the options as for the forward (a.o, a.lse and a.part unused; a.nsplit 1).
struct AttnBwdParams {
  AttnParams a;
  const void* o = nullptr;
  const void* dout = nullptr;
  const void* lse = nullptr;  // the forward's row log-sum-exp [B, Hq, SqT], op dtype
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  void* dsum = nullptr;       // B * Hq * SqT values of D_i (compute type: float; double for f64)
  int bq = 8, bk = 8;         // the tile (set by launch_attention_backward)
};
// Shared memory (bytes) of the dK/dV and dQ passes for a (bq, bk) tile.
int64_t attn_bwd_shared_bytes(Dt dt, int bq, int bk, int D);
// PRE, then dK/dV on (ceil(SkT / bk), Hkv, nseq) blocks of bk * 8 threads, then dQ on
// (ceil(G * SqT / bq), Hkv, nseq) blocks of bq * 8 threads (bq, bk in {8, 16}).
int launch_attention_backward(Dt dt, const AttnBwdParams& p, int bq, int bk, void* stream);
// The tensor-core backward (attention_bwd_mma.cu: f16 / bf16, D 32, 64, 80, 96 or 128, dropout, soft-capping,
// ALiBi; no block mask or RoPE; tiles of 64): launch_attention_backward_pre (attention_bwd.cu's PRE pass, D_i into
// p.dsum) first, then its dK/dV and dQ passes. Shared memory of those passes (0: not built, HIP).
int launch_attention_backward_pre(Dt dt, const AttnBwdParams& p, void* stream);
int64_t attn_bwd_mma_shared_bytes(int D);
int launch_attention_backward_mma(Dt dt, const AttnBwdParams& p, void* stream);
// Its warpgroup form (attention_bwd_mma.cu, sm_90a: the same passes on wgmma.mma_async, D 64 and 128 only), run
// after launch_attention_backward_pre as the other. Shared memory of its passes (0: D not 64 / 128, or no sm_90a
// code in this build).
int64_t attn_bwd_wgmma_shared_bytes(int D);
int launch_attention_backward_wgmma(Dt dt, const AttnBwdParams& p, void* stream);

// Whether the kernels can run on the current device (0), else the runtime's error code (no kernel image
// for its architecture, typically).
int check_kernels_load();

}  // namespace kf::hal::cuda
