// The context: one device of one backend, its tensors, and the ops run on it.
#pragma once
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kf/device.hpp"
#include "kf/tensor.hpp"

namespace kf {

// Epilogue activations of linear and matmul (Attrs::act).
enum Activation : int64_t { kActNone = 0, kActRelu = 1, kActGelu = 2, kActGeluTanh = 3, kActSilu = 4 };

// Scalar arguments of ops. Each op reads the fields it documents in docs/ops.md.
struct Attrs {
  double p = 0;            // dropout probability, in [0, 1)
  uint64_t seed = 0;       // Philox key
  uint64_t offset = 0;     // Philox counter offset
  double scale = 1;        // softmax / log_softmax scale
  double eps = 0;          // normalization epsilon (0 means the op's default)
  int64_t act = 0;         // linear / matmul epilogue activation: see kf::Activation
  // linear, linear_dropout, matmul: the dtype the epilogue stores (y, and the residual it reads), when it
  // is not the inputs' (f16 or bf16 inputs with an f32 output, ...); empty = the inputs' dtype. Other ops
  // reject it.
  std::optional<DType> out_dtype;
  int64_t groups = 1;      // group_norm: channel groups (the channels a multiple of it); conv2d*: as
                           // torch.nn.Conv2d's groups (input and output channels multiples of it)
  // conv2d, conv2d_bn_relu, conv2d_gelu_dropout, depthwise_pointwise (its depthwise conv): {height, width},
  // as torch.nn.Conv2d's stride, padding (zeros, both sides) and dilation.
  std::array<int64_t, 2> stride = {1, 1};
  std::array<int64_t, 2> padding = {0, 0};
  std::array<int64_t, 2> dilation = {1, 1};
  int64_t ignore_index = -100;   // cross_entropy: rows whose target equals it are left out of the mean
  double label_smoothing = 0;    // cross_entropy: in [0, 1]
  // Optimizers (adamw_step, sgd_step), as torch.optim.AdamW / torch.optim.SGD. eps above is Adam's
  // epsilon there (0 means its default, 1e-8). weight_decay is 0 by default for both (torch's AdamW
  // default is 1e-2: pass it).
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double weight_decay = 0;
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  int64_t step = 1;        // the step being taken, from 1 (bias correction; SGD's first momentum step)
  // linear_cross_entropy: z-loss coefficient (adds z_loss * mean(lse^2) over the rows not ignored, as
  // PaLM). softcap: logit soft-capping c > 0, logits = c tanh(logits / c) before the loss (and, in
  // attention, before masks and bias); 0 = off.
  double z_loss = 0;
  double softcap = 0;
  // Attention (docs/ops.md section 5: attention_scores, attention, attention_backward). Dropout on the
  // probabilities reads p, seed and offset above. Per-head slopes, key lengths, cu_seqlens, sinks and
  // the block mask are optional input tensors of the op, not attributes.
  double attn_scale = 0;   // scores = q k^T * attn_scale; 0 means 1 / sqrt(D)
  bool causal = false;     // query i sees key j when j <= i + (Sk - Sq) (bottom-right aligned)
  int64_t window = 0;      // sliding window w > 0: keys with i + (Sk - Sq) - j >= w are masked; 0 = none
  bool alibi = false;      // ALiBi bias (default slopes 2^(-8 (h + 1) / H); input 'alibi_slopes' also turns it on)
  // (softcap above: attention's logit soft-capping too, score = c tanh(score / c), before masks and bias)
  int64_t rope = 0;        // rotary embedding of q and k in the kernel: 0 none, 1 half (GPT-NeoX), 2 interleaved
  double rope_base = 10000;
  bool return_lse = false; // attention also returns the row log-sum-exp [B, Hq, Sq] (natural log)
  int64_t block_size = 0;  // block-sparse attention: the edge of the square blocks of input 'block_mask'
  // attention: a custom score function (docs/ops.md section 5), an expression of score, b, h, i, j giving the
  // new score (-inf masks the key), applied after soft-capping and ALiBi, before the masks; compiled into
  // the kernel at run time (Vulkan: shaderc; CUDA refuses it as Unsupported). "" = none. Example: "score - 0.05 * float(abs(i - j))".
  std::string score_mod;
};

// Device memory of a context (Context::memory_usage): bytes of live allocations now and their
// high-water mark since the context opened or since Context::reset_peak_memory().
struct MemoryUsage {
  uint64_t current = 0;
  uint64_t peak = 0;
};

struct ContextOptions {
  std::string backend;            // "" = automatic, "vulkan", "cpu" (KF_BACKEND overrides)
  std::string device;             // "" = automatic, an index or a name substring (KF_DEVICE overrides)
  bool validation = false;        // Khronos validation layer (KF_VALIDATION=1 also turns it on)
  bool allow_cpu_fallback = false;  // an op the device cannot run goes to the CPU backend instead of raising
  std::string pipeline_cache_dir;   // "" = $KF_CACHE_DIR, else $XDG_CACHE_HOME/kf, else ~/.cache/kf
  double timeout_s = 120;           // bound on every wait for the device
  // Developer knobs of the backends, "key=value,..." (docs/tuning.md). "" = $KF_TUNE; knobs given
  // here take precedence: KF_TUNE is then not read at all (its knobs are not merged with these).
  // Context::create refuses an unknown knob or a bad value (InvalidArgument) on every backend.
  std::string tuning;
};

// A device a backend can open, as kf-info lists it.
struct DeviceEntry {
  DeviceInfo info;
  bool usable = true;
  std::string why_not;
};

class Context {
 public:
  // Opens the best device (discrete GPU, integrated GPU, CPU Vulkan driver, then the CPU backend),
  // or the one the options or the environment ask for.
  static Context create(const ContextOptions& options = {});
  static std::vector<DeviceEntry> list_devices(const ContextOptions& options = {});
  static std::vector<std::string> backends();  // compiled-in backends

  // The context a tensor belongs to (throws kf::Error for an undefined tensor).
  static Context of(const Tensor& t);

  const DeviceInfo& device() const;
  const std::string& backend() const;

  Tensor empty(const Shape& shape, DType dtype);
  Tensor from_host(const Shape& shape, DType dtype, const std::vector<double>& values);

  // Runs a registered op on caller-provided outputs. Arguments are checked first; a rejected
  // call raises kf::Error and writes nothing.
  void run(const std::string& op, const std::vector<Tensor>& inputs,
           const std::vector<Tensor>& outputs, const Attrs& attrs = {});
  // Same, allocating the outputs.
  std::vector<Tensor> call(const std::string& op, const std::vector<Tensor>& inputs,
                           const Attrs& attrs = {});
  // Whether this device runs an op in a dtype; when not, *why names the missing capability.
  bool supports(const std::string& op, DType dtype, std::string* why = nullptr) const;

  // The variant of the last dispatched op ("vulkan:wide", "vulkan:subgroup", "cpu:f64", ...).
  std::string last_variant() const;

  // Submits recorded work and waits for it (bounded by the time-out).
  void synchronize();

  // Device timestamps: record one now, read the interval in milliseconds after synchronize().
  uint32_t timestamp();
  double elapsed_ms(uint32_t begin, uint32_t end);
  void reset_timestamps();
  // kf-bench's matrix roofline: records the backend's in-register matrix multiply-add kernel (to be
  // timed between two timestamps) and returns its floating-point operations; 0 when there is none.
  double record_matrix_peak(std::string* what = nullptr);

  // Device memory held by tensors and scratch buffers, and its high-water mark (kf-lce-memory).
  MemoryUsage memory_usage() const;
  void reset_peak_memory();

  // Messages the validation layer reported so far (0 when it is off).
  uint64_t validation_messages() const;
  std::vector<std::string> validation_log() const;

  ContextImpl* impl() const { return impl_.get(); }

 private:
  std::shared_ptr<ContextImpl> impl_;
};

}  // namespace kf
