// The interface between the host side of the CUDA/HIP backend (kernels.cpp: which kernel serves an op)
// and the device code (eltwise.cu, rows.cu). Plain C++: no runtime header, so it reads the same in both
// compilers. The op lists are X-macros so that the host table and the kernel switches cannot disagree.
#pragma once
#include <cstdint>

namespace kf::hal::cuda {

// Storage dtypes of the kernels (kf::DType without i32).
enum class Dt : uint8_t { f32, f16, bf16, f64 };

// Elementwise ops with a kernel in eltwise.cu (KERNELS.md section 1 and the unfused primitives).
#define KF_CUDA_ELTWISE_OPS(X)                                                                      \
  X(add_relu) X(mul_relu) X(add_sigmoid) X(mul_tanh) X(bias_relu) X(bias_gelu) X(bias_gelu_tanh)     \
  X(bias_silu) X(swiglu) X(geglu) X(mish_scale) X(prelu_bias) X(dropout) X(gelu_dropout)            \
  X(bias_gelu_dropout) X(add_dropout_residual) X(add) X(mul) X(prelu) X(copy) X(relu) X(sigmoid)    \
  X(tanh) X(gelu) X(gelu_tanh) X(silu) X(mish)

// Row ops with a kernel in rows.cu (KERNELS.md section 2).
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
};

// Threads per block of the row kernels: 256 for rows that a block caches (16 or 32 values of its row
// per thread: KF_TUNE rows_values, default kRowCache256), 1024 (kRowCache1024 values per thread) for
// longer ones. Values of float-computed dtypes; f64 keeps half as many.
constexpr int kRowCache256 = 16, kRowCache1024 = 8;

// Launches on `stream` (a cudaStream_t / hipStream_t). Return the runtime's error code of the launch
// (0 when it was accepted): kernels.cpp turns it into a kf::Error.
int launch_eltwise(EltOp op, Dt dt, const EltwiseParams& p, uint32_t blocks, void* stream);
int launch_rows(RowOp op, Dt dt, const RowsParams& p, int block, int cache, uint32_t blocks, void* stream);

// Whether the kernels can run on the current device (0), else the runtime's error code (no kernel image
// for its architecture, typically).
int probe_kernels();

}  // namespace kf::hal::cuda
