// The CUDA device (and the HIP device, from the same source through gpu_compat.hpp): one stream that
// runs every transfer, fill and kernel in order, buffers from a caching sub-allocator, events as
// timestamps, bounded waits. Every runtime call is checked and its error turned into a kf::Error.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hal/cuda/gpu_compat.hpp"
#include "hal/cuda/kernels.hpp"
#include "hal/hal.hpp"
#include "plan/attention.hpp"

namespace kf::hal::cuda {

// kf::DType as the kernels' storage dtype; false for dtypes with none (i32). (kernels.cpp)
bool dt_of(DType t, Dt* out);

// The backend's name: "cuda", or "hip" when these files are built as HIP.
#if defined(KF_HIP)
#define KF_GPU_BACKEND "hip"  // (a literal, for variant names built at compile time)
inline constexpr const char* kBackend = KF_GPU_BACKEND;
#else
#define KF_GPU_BACKEND "cuda"
inline constexpr const char* kBackend = KF_GPU_BACKEND;
#endif

// kf::Error for a failed runtime call: cudaErrorMemoryAllocation -> OutOfMemory; a fault of a kernel
// (illegal address, launch failure, watchdog, uncorrectable ECC...) -> DeviceLost; anything else ->
// Device. `what` names the call; the message adds the runtime's name and description of the error.
[[noreturn]] void throw_error(gpuError_t e, const std::string& what);
inline void check(gpuError_t e, const char* what) {
  if (e != gpuSuccess) throw_error(e, what);
}

// Device memory: blocks from cudaMalloc, never returned to the driver while the device lives (unless
// an allocation fails: then the cached large blocks are freed and it is tried again).
//  - small requests (<= kMaxSmall) are rounded up to a power of two (at least kMinSmall) and carved
//    out of kSlab-byte slabs, one size class per slab; a freed chunk goes back to its class's list;
//  - large requests are rounded up to kLargeGranule; a freed block is kept in a cache by size and
//    reused for a request of the same rounded size or up to a quarter smaller.
// Reuse needs no synchronization: the device runs everything on one stream, in order, so the next
// user of a block runs after the last use of its previous owner.
class Allocator {
 public:
  static constexpr size_t kMinSmall = 512, kMaxSmall = 1u << 20, kSlab = 4u << 20, kLargeGranule = 2u << 20;

  explicit Allocator(int ordinal) : ordinal_(ordinal) {}
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  struct Block {
    void* ptr = nullptr;
    size_t size = 0;  // the size of the block handed out (its class or rounded size)
  };
  // Throws kf::Error (OutOfMemory) when the driver has no memory left even after trim().
  Block allocate(size_t bytes);
  void release(const Block& b);
  size_t reserved() const;  // bytes obtained from the driver
  // Bytes of the blocks handed out and not yet released, and their high-water mark (kf-lce-memory,
  // Context::peak_memory): the rounded sizes, so that the figures compare with the Vulkan backend's.
  MemoryUsage usage() const;
  void reset_peak();

 private:
  Block allocate_locked(size_t bytes);  // with mu_ held
  // Frees the cached large blocks (not the slabs), with mu_ held; returns the bytes given back.
  size_t trim();
  void* device_malloc(size_t bytes);  // nullptr when out of memory
  static int size_class(size_t bytes);

  int ordinal_;
  mutable std::mutex mu_;
  std::vector<void*> slabs_;
  std::vector<std::vector<void*>> small_free_ = std::vector<std::vector<void*>>(32);
  std::multimap<size_t, void*> large_free_;
  std::vector<void*> large_all_;
  size_t reserved_ = 0;
  uint64_t live_ = 0, peak_ = 0;
};

class CudaBuf final : public Buffer {
 public:
  CudaBuf(std::shared_ptr<Allocator> a, Allocator::Block b, size_t bytes) : alloc_(std::move(a)), block_(b) {
    size_ = bytes;
  }
  // Memory the caller owns (Device::wrap_device): never released here; `keep_alive` holds it.
  CudaBuf(void* ptr, size_t bytes, std::shared_ptr<void> keep_alive)
      : block_{ptr, bytes}, keep_alive_(std::move(keep_alive)) {
    size_ = bytes;
  }
  ~CudaBuf() override {
    if (alloc_) alloc_->release(block_);
  }
  void* ptr() const { return block_.ptr; }

 private:
  std::shared_ptr<Allocator> alloc_;  // null for the caller's memory
  Allocator::Block block_;
  std::shared_ptr<void> keep_alive_;
};

inline void* ptr_of(const std::shared_ptr<Buffer>& b) { return b ? static_cast<CudaBuf*>(b.get())->ptr() : nullptr; }
// A tensor argument's address: its buffer's plus its offset (the parts of a call the core split).
inline void* ptr_of(const TensorArg& a) {
  return a.buffer ? static_cast<char*>(static_cast<CudaBuf*>(a.buffer.get())->ptr()) + a.offset : nullptr;
}

struct LtState;    // matmul.cpp: the cuBLASLt handle and workspace
struct LtProduct;  // matmul.cpp: one (batched, repeated) column-major product

// The convolutions' product through cuBLASLt (matmul.cpp conv_gemm): for each of `images` images i,
// y_i [O, P] = W [O, K] col_i [K, P] (row-major), col_i = col + i col_step and y_i = y + i y_step
// (elements); one strided-batched call.
struct ConvGemm {
  DType dtype = DType::f32;
  int64_t O = 0, P = 0, K = 0, images = 1, col_step = 0, y_step = 0;
  const void* w = nullptr;
  const void* col = nullptr;
  void* y = nullptr;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, const DeviceInfo& info, const DeviceOptions& o);
  ~CudaDevice() override;

  const DeviceInfo& info() const override { return info_; }
  std::shared_ptr<Buffer> allocate(size_t bytes) override;
  void upload(Buffer& dst, const void* src, size_t bytes) override;
  void download(Buffer& src, void* dst, size_t bytes) override;
  void fill_bytes(Buffer& dst, uint8_t pattern, size_t bytes) override;
  // A torch CUDA tensor's memory, in place (checked to be device memory of this GPU).
  std::shared_ptr<Buffer> wrap_device(void* data, size_t bytes, std::shared_ptr<void> keep_alive, bool known) override;
  void* device_data(Buffer& buffer) override { return static_cast<CudaBuf&>(buffer).ptr(); }
#if !defined(KF_HIP)
  // Memory a Vulkan device of this GPU exported (opaque fd): imported and mapped, freed with the buffer.
  bool imports_memory() const override { return true; }
  std::shared_ptr<Buffer> import_memory(const ExportedMemory& m, size_t bytes, std::shared_ptr<void> keep_alive) override;
  // A Vulkan timeline semaphore (opaque fd), signaled and waited for on the stream.
  std::shared_ptr<void> import_timeline(int fd) override;
  void timeline_wait(void* timeline, uint64_t value) override;
  void timeline_signal(void* timeline, uint64_t value) override;
#endif
  // Whether the device runs the call (kernels.cpp): its op and dtype, and, where the call carries its tensors,
  // their shapes and the attributes, so that dispatch() refuses nothing this accepts. A call without
  // tensors asks about the op and dtype alone.
  bool supports(const OpCall& call, std::string* why) const override;
  Variant dispatch(const OpCall& call) override;                              // kernels.cpp
  void synchronize() override;
#if !defined(KF_HIP)
  // Capture (kf::Graph): the stream captured into a CUDA graph, launched once per replay.
  bool begin_capture() override;
  std::shared_ptr<hal::Graph> end_capture() override;
  void abort_capture() override;
  void replay(const std::shared_ptr<hal::Graph>& graph) override;
  bool stream_captured() const override;
#endif
  uint32_t timestamp() override;
  double elapsed_ms(uint32_t begin, uint32_t end) override;
  bool record_long_kernel(uint64_t iterations) override;
  void release_scratch() override;
  void reset_timestamps() override;
  MemoryUsage memory_usage() const override { return allocator_->usage(); }
  void reset_peak_memory() override { allocator_->reset_peak(); }

 private:
  void make_current() const;
  // Waits until the stream has run everything recorded, polling, bounded by the context's time-out.
  void wait_stream(const char* what);
  void wait_event(gpuEvent_t e, const char* what);
  void check_launch(int err, const std::string& kernel);
  // KF_TUNE rows_cluster=N (N >= 2) on a device without thread-block clusters: Unsupported, naming op.
  void no_clusters(const std::string& op) const;
  // linear and matmul (matmul.cpp): whether cuBLASLt could be loaded (why not), and the dispatch.
  bool matmul_supported(std::string* why) const;
  std::string dispatch_matmul(const OpCall& call);
  // Attrs::out_dtype's form (matmul.cpp): the product in f32, the epilogue, then the output's dtype.
  std::string dispatch_matmul_out_dtype(const OpCall& call, DType odt, bool trans_a, int64_t M, int64_t N, int64_t K,
                                        int64_t batches);
#if !defined(KF_HIP)
  LtState& lt_state(const std::string& op);  // the handle and workspace (matmul.cpp), created once
#endif
  // A column-major product through cuBLASLt (matmul.cpp): D (m x n) = op(A) op(B) (+ D when accumulate);
  // false when cuBLASLt has no algorithm for it.
  bool lt_product(const std::string& op, DType in, DType out, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  const void* A, int64_t lda, const void* B, int64_t ldb, void* D, int64_t ldd, bool accumulate);
  // linear_cross_entropy and its backward (lce.cpp).
  std::string dispatch_linear_cross_entropy(const OpCall& call, Dt dt);
  // One cuBLASLt product on the device's handle (matmul.cpp); returns the cublasLtEpilogue_t that ran.
  int lt_run(const LtProduct& g, const std::string& op);
  void conv_gemm(const ConvGemm& c, const std::string& op);
  // conv2d, conv2d_bn_relu, conv2d_gelu_dropout (kernels.cpp; the kernels in conv.cu): the direct kernel
  // or im2col + cuBLASLt + the epilogue kernel.
  std::string dispatch_conv(const OpCall& call, Dt dt);
  // Sections 3 and 6 (kernels.cpp): kern is kernels.cpp's Kern, id its op within the family.
  std::string dispatch_training(const OpCall& call, int kern, int id, Dt dt);
  // embedding, attention_scores, attention (kernels.cpp; the kernels in attention.cu).
  std::string dispatch_attention(const OpCall& call, Dt dt);
  // attention_backward (kernels.cpp; the kernels in attention_bwd.cu).
  std::string dispatch_attention_backward(const OpCall& call, Dt dt);
  // The rotary cos/sin table of attention (kernels.cpp), cached while its parameters do not change.
  std::shared_ptr<Buffer> rope_table(int64_t D, double base, int64_t pmin, int64_t npos, bool f64, int64_t* first);
  // A temporary device buffer for one dispatch (row statistics, partial sums): released when the
  // dispatch returns; reuse is safe since everything runs in order on one stream.
  std::shared_ptr<Buffer> scratch(size_t bytes) { return allocate(bytes < 16 ? 16 : bytes); }

  // The open capture (a CudaGraph), which keeps every buffer allocated while it records: scratch freed
  // back to the allocator during the capture would be handed to the next call while the graph still
  // uses it at replay.
  std::shared_ptr<hal::Graph> capture_;
  std::vector<std::shared_ptr<Buffer>>* capture_buffers_ = nullptr;
  // Throws Unsupported while a capture is open: `what` waits for the device.
  void not_capturing(const char* what) const;

  int ordinal_;
  DeviceInfo info_;
  DeviceOptions options_;
  int sm_count_ = 1;
  int rows_values_ = 16;  // KF_TUNE rows_values: row values a thread caches in 256-thread row kernels
  gpuStream_t stream_ = nullptr;
  bool own_stream_ = true;  // false: the caller's stream (ContextOptions::stream), never destroyed here
  std::shared_ptr<Allocator> allocator_;
  std::vector<gpuEvent_t> events_;  // a pool: timestamp() records the next one
  uint32_t next_event_ = 0;
  std::shared_ptr<LtState> lt_;  // created by the first matrix product
  std::shared_ptr<Buffer> long_kernel_out_;  // record_long_kernel's output, kept while the kernel may run
  static constexpr double kCloseWait_s = 10;  // the least that closing waits for running work
  bool lt_epilogues_ = true;     // KF_TUNE mm_epilogue: cuBLASLt's fused epilogues (true) or the kernel's
  int attn_path_ = 0;   // KF_TUNE attn_path: 0 automatic, 1 the portable kernel, 2 the tensor-core kernel
  int attn_split_ = 0;  // KF_TUNE attn_split: 0 automatic, 1 one pass, N exactly N key splits
  int attn_rows_ = 0;   // KF_TUNE attn_rows: the portable kernel's query rows per block at most (8, 16, 32)
  int attn_decode_ = 0; // KF_TUNE attn_decode: 0 automatic, 1 never the decode kernel, 2 always (Unsupported where it does not apply)
  int conv_path_ = 0;   // KF_TUNE conv_path: 0 automatic, 1 the direct kernel, 2 im2col + cuBLASLt
  bool attn_wmma_regs_ = false;  // KF_TUNE attn_wmma=regs: the tensor-core kernel's accumulator in registers
  int attn_wmma_mode_ = 0;       // KF_TUNE attn_wmma: 0 absent (flash-wgmma / flash-mma where they apply), 1 regs, 2 smem, 3 mma, 4 wgmma
  int attn_rows_per_warp_ = 0;   // KF_TUNE attn_rows_per_warp: flash-mma's query rows per warp, 16 or 32 (0: absent, 32)
  int lce_rows_ = 0;    // KF_TUNE lce_rows: linear_cross_entropy's rows per chunk (0: automatic)
  int optim_items_ = 0;   // KF_TUNE optim_items: adamw / sgd packs a thread per tile (1, 2, 4; 0: 2)
  int optim_blocks_ = 0;  // KF_TUNE optim_blocks: their blocks per multiprocessor at most (0: 32)
  int attn_decode_rs_ = 0;     // KF_TUNE attn_decode_rs=1: the decode kernel's all-reduce form only
  int attn_decode_heads_ = 0;  // KF_TUNE attn_decode_heads: the decode kernel's query heads a block at most (0: 8)
  int attn_bwd_bits_ = 0;  // KF_TUNE attn_bwd_bits: 0 automatic, 1 the tensor-core backward draws dropout's bits in both passes, 2 keeps the dK/dV pass's whatever their size
  int attn_fwd_bits_ = 0;  // KF_TUNE attn_fwd_bits: 0 automatic, 1 flash-wgmma draws dropout's bits itself (not ahead)
  int mm_algo_ = 0;     // KF_TUNE mm_algo: 0 cuBLASLt's first heuristic answer, N its N-th (clamped to those it gives)
  int rows_cluster_ = 0;  // KF_TUNE rows_cluster: long rows on clusters, 0 automatic, 1 never, N of N blocks
  int cc_ = 0;            // compute capability x 10 (0: HIP)
  int64_t max_shared_optin_ = 48 * 1024;  // shared memory a block may opt in to (bytes)
  int64_t l2_bytes_ = 0;                   // the L2 cache (bytes; 0: unknown)
  plan::RopeTable rope_span_;  // the positions rope_table_ holds
  std::shared_ptr<Buffer> rope_table_;
};

}  // namespace kf::hal::cuda
