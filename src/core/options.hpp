// The options table: every developer knob of KF_TUNE / ContextOptions::tuning ("key=value,...") and every
// environment variable the library reads, each with its backends, its values, its default and one line
// of doc. The knobs are parsed once, when a context is created, into Tuning; the backends receive them
// (with the rest of what they need) as DeviceOptions and read no environment themselves. docs/tuning.md
// is this table, printed by `kf-info --options --markdown`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kf {

struct ContextOptions;

// One field per knob of knobs(), named as the knob, holding its value (a word knob: the word's index in
// Knob::words). The initializers are the table's defaults (tests/test_options.cpp checks that they agree).
// 0 means "automatic" wherever the table says so.
struct Tuning {
  // element-wise and grids (Vulkan)
  uint32_t eltwise_items = 2;
  uint32_t max_groups = 65535;
  uint32_t max_binding = 0;  // bytes; 0: the device's own limit
  // matrix products
  uint32_t mm_path = 0;
  uint32_t mm_cfg = 0;
  uint32_t mm_peak = 0;
  uint32_t mm_splitk = 0;
  uint32_t gemv_rows = 0;
  uint32_t mm_epilogue = 0;  // 0 cublaslt, 1 kernel
  uint32_t mm_algo = 0;
  uint32_t coopmat = 0;        // 0 auto, 1 nv, 2 khr, 3 portable
  uint32_t coopmat_shape = 0;  // 0 auto, 1 16x16x16, 2 16x8x16, 3 16x8x8, 4 8x16x16
  uint32_t attn_coopmat = 0;   // 0 auto, 1 nv, 2 khr, 3 portable
  uint32_t bf16_coopmat = 0;   // 0 auto, 1 native, 2 scaled
  // rows (norms, softmax, losses)
  uint32_t rows_values = 0;
  uint32_t rows_coop = 0;
  uint32_t rows_wg = 0;
  uint32_t rows_spin = 0;
  uint32_t rows_cluster = 0;
  uint32_t normbwd_cols = 0;
  uint32_t normbwd_packs = 0;
  uint32_t normbwd_chunks = 0;
  uint32_t xent_stream = 0;
  uint32_t lce_rows = 0;
  // attention
  uint32_t attn_path = 0;
  uint32_t attn_split = 0;
  uint32_t attn_rows = 0;
  uint32_t attn_cm = 0;
  uint32_t attn_quad = 0;
  uint32_t attn_decode = 0;
  uint32_t attn_decode_rs = 0;
  uint32_t attn_decode_heads = 0;
  uint32_t attn_wmma = 0;  // 0 auto, 1 regs, 2 smem, 3 mma, 4 wgmma
  uint32_t attn_rows_per_warp = 0;
  uint32_t attn_bwd_bits = 0;
  uint32_t attn_fwd_bits = 0;
  // convolutions, optimizers
  uint32_t conv_path = 0;
  uint32_t optim_items = 0;
  uint32_t optim_blocks = 0;
};

// Which backends read a knob or a variable. A knob is valid on every backend (an unknown key or a bad
// value is refused everywhere alike); the backends it does not name ignore it.
enum class Applies : uint8_t { vulkan = 1, cuda = 2, both = 3, all = 7 };
const char* to_string(Applies a);  // "vulkan", "cuda", "vulkan, cuda", "all"

struct Knob {
  const char* name;
  Applies backends;
  uint32_t Tuning::*field;
  // The values it takes: an integer in [min, max], or (when `values` is not empty) one of `values`, or
  // (when `words` is not empty) one of `words`, stored as its index.
  uint32_t min = 0, max = 0;
  std::vector<uint32_t> values;
  std::vector<std::string> words;
  uint32_t def = 0;
  const char* doc = "";
};

// The knobs, in the order docs/tuning.md lists them.
const std::vector<Knob>& knobs();
// "0..3", "0, 4, 8 or 16", "cublaslt or kernel"; and the default as the user writes it.
std::string knob_values(const Knob& k);
std::string knob_default(const Knob& k);

// Parses "key=value,..." (empty items skipped, blanks around keys and values ignored, the last of a
// repeated key kept). Throws kf::Error(InvalidArgument) naming the knob, the value and what it takes for
// an unknown key, a missing value or a value outside the table's.
Tuning parse_tuning(const std::string& text);

// An environment variable the library reads (context.cpp reads them, once per context).
struct EnvVar {
  const char* name;
  Applies backends;
  const char* values;
  const char* def;
  const char* doc;
};
const std::vector<EnvVar>& environment_variables();

// What a backend's Backend::open receives: the context's options that backends use, the knobs parsed,
// and the developer switches and search paths read from the environment.
struct DeviceOptions {
  bool validation = false;         // ContextOptions::validation (KF_VALIDATION)
  std::string pipeline_cache_dir;  // ContextOptions::pipeline_cache_dir (KF_CACHE_DIR, ...); "" = none
  double timeout_s = 120;          // ContextOptions::timeout_s (KF_TIMEOUT_S)
  Tuning tuning;                   // ContextOptions::tuning or KF_TUNE, parsed
  // Vulkan developer switches.
  bool pipeline_stats = false;   // KF_PIPELINE_STATS: the driver's statistics of each pipeline, on stderr
  std::string coopmat_layout;    // KF_COOPMAT_LAYOUT: "" off; any value: print the measured layouts (accumulator, f16 A operand)
  bool vk_cuda_context = true;   // KF_VK_CUDA_CONTEXT=0 turns off holding a CUDA context (cuda_context.cpp)
  // Where the CUDA backend looks for libcublasLt (hal/cuda/matmul.cpp), from the environment.
  std::string cublaslt;                      // KF_CUBLASLT: the file, tried first
  std::vector<std::string> cuda_roots;       // $CUDA_HOME, $CUDA_PATH (their lib64/)
  std::vector<std::string> python_prefixes;  // $VIRTUAL_ENV, $CONDA_PREFIX (PyTorch's nvidia wheels)
  std::string home;                          // $HOME (wheels under ~/.local)
  void* stream = nullptr;  // ContextOptions::stream: the caller's CUDA / HIP stream (not owned)
};

// The DeviceOptions of a context's options (the environment already applied to them): parses the knobs
// (throwing as parse_tuning) and reads the developer switches from the environment (context.cpp).
DeviceOptions device_options(const ContextOptions& o);

}  // namespace kf
