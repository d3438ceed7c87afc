// The options table (options.hpp) and the parser of KF_TUNE / ContextOptions::tuning.
#include "core/options.hpp"

#include <algorithm>

#include "kf/error.hpp"

namespace kf {

const char* to_string(Applies a) {
  switch (a) {
    case Applies::vulkan: return "vulkan";
    case Applies::cuda: return "cuda";
    case Applies::both: return "vulkan, cuda";
    case Applies::all: return "all";
  }
  return "?";
}

namespace {

constexpr uint32_t kIntMax = 0x7fffffff;

Knob range(const char* name, Applies b, uint32_t Tuning::*f, uint32_t lo, uint32_t hi, uint32_t def, const char* doc) {
  return Knob{name, b, f, lo, hi, {}, {}, def, doc};
}
Knob one_of(const char* name, Applies b, uint32_t Tuning::*f, std::vector<uint32_t> values, const char* doc) {
  return Knob{name, b, f, 0, 0, std::move(values), {}, 0, doc};
}
Knob words(const char* name, Applies b, uint32_t Tuning::*f, std::vector<std::string> w, const char* doc) {
  return Knob{name, b, f, 0, 0, {}, std::move(w), 0, doc};
}

constexpr Applies V = Applies::vulkan, C = Applies::cuda, B = Applies::both;

}  // namespace

const std::vector<Knob>& knobs() {
  using T = Tuning;
  static const std::vector<Knob> table = {
      range("eltwise_items", V, &T::eltwise_items, 1, 16, 2,
            "element-wise kernels: 16-byte packs each invocation loads before computing"),
      range("max_groups", V, &T::max_groups, 1, 65535, 65535,
            "cap on workgroups per dispatch dimension (grid-stride kernels loop over the rest; attention's tiles "
            "run as several dispatches)"),
      range("max_binding", Applies::all, &T::max_binding, 0, kIntMax, 0,
            "bytes one storage binding covers at most, below the device's own limit (0: the device's "
            "limit, Caps::max_storage_range); a call with a larger tensor runs in parts where its op allows "
            "(docs/backends.md, \"Limits\"), so that small tensors take that path in tests"),
      range("mm_path", V, &T::mm_path, 0, 3, 0,
            "matrix products: 0 automatic, 1 portable tiled, 2 cooperative matrix, 3 few rows / split-K (linear only)"),
      range("mm_cfg", V, &T::mm_cfg, 0, 14, 0,
            "cooperative-matrix tile shape: entry N of kCoopmatConfigs (hal/vulkan/matmul.cpp); 0 by the shape"),
      range("mm_peak", V, &T::mm_peak, 0, 8, 0,
            "kf-bench's matrix ceiling kernel: 0 operands in registers only, N its shared-memory variant N"),
      range("mm_splitk", V, &T::mm_splitk, 0, 65535, 0,
            "few-rows kernel (mm_gemv.comp): K slices, 0 automatic, N forced (clamped to K's packs)"),
      one_of("gemv_rows", V, &T::gemv_rows, {0, 4, 8, 16},
             "few-rows kernel: rows of W per workgroup (0: automatic, 4 or 8)"),
      words("mm_epilogue", C, &T::mm_epilogue, {"cublaslt", "kernel"},
            "linear / matmul epilogue: cuBLASLt's fused epilogues where they apply, or all of it in kf's kernel"),
      range("mm_algo", C, &T::mm_algo, 0, 32, 0,
            "cuBLASLt algorithm: 0 its first heuristic answer, N its N-th (clamped to those it gives)"),
      words("coopmat", V, &T::coopmat, {"auto", "nv", "khr", "portable"},
            "tensor-core kernels of the matrix products (linear, matmul, ffn, convolutions, linear_cross_entropy): "
            "auto (KHR where the device lists a shape kf has a kernel for, else NV, else the portable kernels: "
            "KHR was the faster on an H100), or that one forced; nv or khr on a device that cannot run it: Context::create "
            "raises Unsupported naming why"),
      words("coopmat_shape", V, &T::coopmat_shape, {"auto", "16x16x16", "16x8x16", "16x8x8", "8x16x16"},
            "KHR cooperative-matrix fragment shape (M x N x K, f16 x f16 -> f32): auto (the first of these the "
            "device lists), or that one (KHR taken only where the device lists it); 8x16x16 (Intel) runs on "
            "subgroups of 8 or 16, the first the device lets a pipeline require"),
      words("attn_coopmat", V, &T::attn_coopmat, {"auto", "nv", "khr", "portable"},
            "tensor-core kernels of attention and its backward, as coopmat, at 16x16x16; auto prefers KHR (its "
            "QUAD forms were the faster on an H200)"),
      words("bf16_coopmat", V, &T::bf16_coopmat, {"auto", "native", "scaled"},
            "bf16 products on KHR tensor cores (linear, matmul, ffn): native (bf16 x bf16 -> f32 16x16x16 "
            "through VK_KHR_shader_bfloat16, the operands read as stored), scaled (as f16, rows scaled by "
            "powers of two, converted first), or auto (native wherever the device and the build allow "
            "it, being the faster); "
            "native where it cannot run: Context::create raises Unsupported naming why"),
      one_of("rows_values", B, &T::rows_values, {0, 16, 32, 64, 128},
             "row values an invocation (CUDA: a thread of a 256-thread row kernel) caches; 0 automatic "
             "(Vulkan 32, CUDA 16); CUDA runs 64 and 128 as 32"),
      range("rows_coop", V, &T::rows_coop, 0, 3, 0,
            "norms of rows past a workgroup's registers: 0 automatic (2 on GPUs, 1 on CPU devices), 1 two passes, "
            "2 one pass with P workgroups a row, 3 as 2 with a float cache"),
      one_of("rows_wg", V, &T::rows_wg, {0, 256, 512, 1024},
             "rows split over workgroups in one pass: their workgroup's invocations (0: 512)"),
      range("rows_spin", V, &T::rows_spin, 0, kIntMax, 0,
            "rows_coop's polls of a row's partial statistics before computing them itself "
            "(0: 65536 on GPUs, 64 on CPU devices)"),
      range("rows_cluster", C, &T::rows_cluster, 0, 8, 0,
            "long rows on thread-block clusters (sm_90): 0 automatic, 1 never, N clusters of N blocks"),
      range("normbwd_cols", V, &T::normbwd_cols, 0, 3, 0,
            "layer / rms_norm_backward's dw, db: 0 automatic, 1 a column pass, 2 fused, 3 fused rows where they fit"),
      one_of("normbwd_packs", V, &T::normbwd_packs, {0, 1, 2, 4},
             "fused-rows norm backward: 16-byte packs an invocation caches (0 automatic)"),
      range("normbwd_chunks", V, &T::normbwd_chunks, 0, 65535, 0,
            "norm backward's column pass: row chunks at most (0 automatic)"),
      range("xent_stream", V, &T::xent_stream, 0, 3, 0,
            "cross_entropy over long rows: 0 automatic, 1 cached chunks, 2 streamed, 3 the backward's row in "
            "registers where it fits"),
      range("lce_rows", B, &T::lce_rows, 0, kIntMax, 0,
            "linear_cross_entropy: rows of logits per chunk (0 automatic)"),
      range("attn_path", B, &T::attn_path, 0, 2, 0,
            "attention: 0 automatic, 1 the portable kernel, 2 the tensor-core kernel (Unsupported where it "
            "does not apply)"),
      range("attn_split", B, &T::attn_split, 0, 1024, 0,
            "attention key splits: 0 automatic, 1 never (one pass), N exactly N (with attn_decode=2: the decode kernel's)"),
      one_of("attn_rows", B, &T::attn_rows, {0, 8, 16, 32},
             "attention's portable kernel: query rows per workgroup at most (0 automatic)"),
      range("attn_cm", V, &T::attn_cm, 0, 4, 0,
            "cooperative-matrix attention's workgroup: 0 automatic, 1 4 subgroups, 2 8, 3 8 with prefetch, "
            "4 4 with prefetch"),
      range("attn_quad", V, &T::attn_quad, 0, 1, 0,
            "cooperative-matrix attention: softmax (backward: P and dS) on the accumulators (m16n8k16 layout) "
            "where the device's layouts were measured to have that form (0; on KHR also the A operands'), "
            "never (1: softmax through shared memory)"),
      range("attn_decode", B, &T::attn_decode, 0, 2, 0,
            "decode kernel (one query row): 0 automatic, 1 never, 2 forced (Unsupported where the call "
            "does not qualify)"),
      range("attn_decode_rs", B, &T::attn_decode_rs, 0, 1, 0,
            "decode kernel's reduce-scatter form: 0 where it applies, 1 never (the all-reduce form only)"),
      range("attn_decode_heads", C, &T::attn_decode_heads, 0, 8, 0,
            "decode kernel: query heads a block at most (0: 8)"),
      words("attn_wmma", C, &T::attn_wmma, {"auto", "regs", "smem", "mma", "wgmma"},
            "tensor-core attention kernel: auto (flash-wgmma, else flash-mma, else flash-wmma-regs), or that one "
            "forced"),
      one_of("attn_rows_per_warp", C, &T::attn_rows_per_warp, {0, 16, 32},
             "flash-mma's query rows per warp (0: 32)"),
      range("attn_bwd_bits", C, &T::attn_bwd_bits, 0, 2, 0,
            "tensor-core attention backward's dropout bits: 0 automatic, 1 drawn in both passes, 2 kept from "
            "the dK/dV pass whatever their size"),
      range("attn_fwd_bits", C, &T::attn_fwd_bits, 0, 1, 0,
            "flash-wgmma's dropout bits: 0 drawn ahead by a pre-pass, 1 drawn by the kernel itself"),
      range("conv_path", B, &T::conv_path, 0, 2, 0,
            "convolutions: 0 automatic, 1 direct / implicit GEMM (portable), 2 im2col + tensor cores / cuBLASLt"),
      one_of("optim_items", C, &T::optim_items, {0, 1, 2, 4},
             "adamw / sgd: 16-byte packs of each tensor a thread per tile (0: 2)"),
      range("optim_blocks", C, &T::optim_blocks, 0, 64, 0,
            "adamw / sgd: blocks per multiprocessor at most (0: the element-wise kernels' grid)"),
  };
  return table;
}

std::string knob_values(const Knob& k) {
  if (k.words.empty() && k.values.empty()) return std::to_string(k.min) + ".." + std::to_string(k.max);
  std::vector<std::string> v = k.words;
  for (uint32_t x : k.values) v.push_back(std::to_string(x));
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + v[i];
  return s;
}

std::string knob_default(const Knob& k) { return k.words.empty() ? std::to_string(k.def) : k.words.at(k.def); }

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

[[noreturn]] void refuse(const std::string& what) { throw Error(ErrorCode::InvalidArgument, "KF_TUNE: " + what); }

// The value of `text` for knob k, or refuse() naming the knob, the value and what the knob takes.
uint32_t value_of(const Knob& k, const std::string& text) {
  const std::string takes = std::string(k.name) + " takes " + knob_values(k) + " (docs/tuning.md)";
  const std::string item = std::string(k.name) + "=" + text;
  if (!k.words.empty()) {
    const auto it = std::find(k.words.begin(), k.words.end(), text);
    if (it == k.words.end()) refuse("'" + item + "': " + takes);
    return static_cast<uint32_t>(it - k.words.begin());
  }
  // Decimal digits only: no sign, no blanks inside, no trailing characters ("1x" is a typo, not 1).
  const bool digits = !text.empty() && text.size() <= 10 &&
                      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  const uint64_t v = digits ? std::stoull(text) : 0;
  const bool ok = digits && (k.values.empty() ? v >= k.min && v <= k.max
                                              : std::find(k.values.begin(), k.values.end(), v) != k.values.end());
  if (!ok) refuse("'" + item + "': " + takes);
  return static_cast<uint32_t>(v);
}

}  // namespace

Tuning parse_tuning(const std::string& text) {
  Tuning t;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    at = end + 1;
    if (trim(item).empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = trim(item.substr(0, eq));
    const auto& table = knobs();
    const auto k = std::find_if(table.begin(), table.end(), [&](const Knob& x) { return key == x.name; });
    if (k == table.end()) {
      std::string names;
      for (const auto& x : table) names += (names.empty() ? "" : ", ") + std::string(x.name);
      refuse("unknown knob '" + key + "' in '" + trim(item) + "' (the knobs: " + names + "; docs/tuning.md)");
    }
    if (eq == std::string::npos) refuse("'" + key + "' needs a value: " + key + " takes " + knob_values(*k) + " (docs/tuning.md)");
    t.*(k->field) = value_of(*k, trim(item.substr(eq + 1)));
  }
  return t;
}

const std::vector<EnvVar>& environment_variables() {
  static const std::vector<EnvVar> table = {
      {"KF_BACKEND", Applies::all, "vulkan, cuda, hip or cpu", "automatic",
       "the backend Context::create opens (ContextOptions::backend)"},
      {"KF_DEVICE", Applies::all, "an index or a name substring", "automatic",
       "the device Context::create opens (ContextOptions::device)"},
      {"KF_VALIDATION", Applies::vulkan, "0 or 1", "0", "the Khronos validation layer (ContextOptions::validation)"},
      {"KF_CPU_FALLBACK", Applies::all, "0 or 1", "0",
       "ops the device cannot run go to the CPU backend (ContextOptions::allow_cpu_fallback)"},
      {"KF_TIMEOUT_S", Applies::all, "seconds", "120", "bound on every wait for the device (ContextOptions::timeout_s)"},
      {"KF_TUNE", Applies::all, "key=value,... (the knobs above)", "none",
       "developer knobs, read only where ContextOptions::tuning is empty"},
      {"KF_CACHE_DIR", Applies::vulkan, "a directory", "$XDG_CACHE_HOME/kf, else ~/.cache/kf",
       "the pipeline cache (ContextOptions::pipeline_cache_dir)"},
      {"KF_PIPELINE_STATS", Applies::vulkan, "0 or 1", "0",
       "prints the driver's statistics of every pipeline created (registers, shared memory, spills) on stderr"},
      {"KF_COOPMAT_LAYOUT", Applies::vulkan, "any", "unset",
       "prints the cooperative-matrix layouts measured for attention's QUAD forms (f32 accumulator, f16 A "
       "operand; NV and KHR)"},
      {"KF_VK_CUDA_CONTEXT", Applies::vulkan, "0 or 1", "1",
       "NVIDIA: hold the GPU's CUDA primary context while a Vulkan device is open (0: do not)"},
      {"KF_CUBLASLT", Applies::cuda, "a file", "unset", "libcublasLt to load, tried before the loader's search"},
      {"CUDA_HOME, CUDA_PATH", Applies::cuda, "a directory", "unset", "libcublasLt is also looked for in their lib64/"},
      {"VIRTUAL_ENV, CONDA_PREFIX, HOME", Applies::cuda, "a directory", "unset",
       "libcublasLt is also looked for in PyTorch's nvidia wheels under them"},
  };
  return table;
}

}  // namespace kf
