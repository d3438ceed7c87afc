// What a device is and what it can do, read once when the device is opened.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kf {

struct MemoryHeap {
  uint64_t size = 0;
  bool device_local = false;
};

// A cooperative-matrix shape a device lists (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR): result =
// A (m x k) * B (k x n) + C (m x n). Component types as kf names them: "f16", "f32", "bf16", "s8", "u8",
// "s32", "u32", ...
struct CoopmatShape {
  uint32_t m = 0, n = 0, k = 0;
  std::string a, b, c, result;
  bool saturating = false;  // saturating integer accumulation
  std::string scope;        // "subgroup", "workgroup", ...
};

// The capabilities kernels ask about; a plain struct filled at device creation (docs/architecture.md habits).
struct Caps {
  bool storage16 = false;        // 16-bit storage buffers
  bool float16_arith = false;    // 16-bit float arithmetic in shaders
  bool bfloat16 = false;         // native bf16 in shaders (otherwise converted in the shader)
  bool float64 = false;          // 64-bit float arithmetic
  bool int8 = false;             // 8-bit storage and arithmetic
  bool int_dot = false;          // integer dot product
  bool subgroup_arith = false;   // subgroup arithmetic reductions in compute shaders
  uint32_t subgroup_size = 1;
  bool subgroup_shuffle = false; // subgroup shuffles (subgroupShuffleXor) in compute shaders
  bool coopmat_nv = false;       // VK_NV_cooperative_matrix
  bool coopmat_khr = false;      // VK_KHR_cooperative_matrix
  std::vector<CoopmatShape> coopmat_khr_shapes;  // the shapes it lists (empty without it)
  // How the matrix products use the tensor cores on a device as opened (KF_TUNE coopmat): "nv",
  // "khr 16x16x16" (the fragment shape), or "none: " and why; empty in Context::list_devices().
  std::string coopmat_products;
  std::string coopmat_attention;  // the same for attention (KF_TUNE attn_coopmat)
  // bf16 products on the tensor cores (KF_TUNE bf16_coopmat): "native" (bf16 x bf16 -> f32 16x16x16 through
  // VK_KHR_shader_bfloat16, operands read as stored), or "scaled: " and why not native (then, where the
  // products have tensor cores, bf16 runs as f16 scaled per row); empty in Context::list_devices().
  std::string coopmat_bf16;
  bool timestamps = false;       // device timestamps in compute queues
  double timestamp_period_ns = 1;
  uint32_t max_shared_bytes = 0;     // shared memory per workgroup
  uint32_t max_workgroup_size = 0;
  uint32_t max_workgroup_count = 0;  // in x
  // Largest storage-buffer binding (KF_TUNE max_binding lowers it): a call with a larger tensor runs in
  // pieces where its op allows (docs/backends.md, "Limits"); 0 where there is no such limit.
  uint64_t max_storage_range = 0;
  uint32_t storage_offset_alignment = 16;  // a binding's offset is a multiple of it (16 at least)
  uint64_t max_allocation = 0;
  std::vector<MemoryHeap> heaps;
};

struct DeviceInfo {
  std::string backend;      // "vulkan", "cpu", ...
  int index = 0;            // index within its backend
  std::string name;
  std::string vendor;
  std::string type;         // "discrete", "integrated", "virtual", "cpu", "other"
  std::string driver;       // driver name and version
  std::string api_version;  // e.g. "1.3.239"
  // The GPU's identity as Vulkan (VkPhysicalDeviceIDProperties::deviceUUID) and CUDA (cudaDeviceProp::uuid)
  // both report it, so that memory shared between the two is known to be of one GPU; all zero: unknown.
  std::array<uint8_t, 16> uuid{};
  Caps caps;
};

// A tensor's memory as another API of the same GPU imports it (Context::export_memory, docs/python.md
// "Vulkan and CUDA"): a file descriptor of the whole allocation (VK_KHR_external_memory_fd's opaque fd),
// the allocation's size and the tensor's offset in it. The descriptor is a new reference to the memory,
// owned by whoever holds this: Context::import_memory consumes it, else close() it.
struct ExportedMemory {
  int fd = -1;
  uint64_t size = 0;     // bytes of the allocation (what the importer maps memory of)
  uint64_t offset = 0;   // the tensor's first byte in it
  bool dedicated = true; // a dedicated allocation (cudaExternalMemoryDedicated)
  std::array<uint8_t, 16> device_uuid{};  // the exporting device's DeviceInfo::uuid
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
  // CUDA / HIP: the caller's stream (a cudaStream_t / hipStream_t of the chosen device, such as
  // torch.cuda.current_stream().cuda_stream) that the context records all its work on, in order with the
  // caller's own work there: no synchronization between the two beyond stream order. Not owned: the
  // caller keeps it alive as long as the context. reinterpret_cast<void*>(1): the device's default (legacy
  // NULL) stream, which is torch's default stream (cudaStreamLegacy). nullptr = a stream of the context's
  // own. Context::create refuses a stream for other backends (InvalidArgument).
  void* stream = nullptr;
};

// A device a backend can open, as kf-info lists it.
struct DeviceEntry {
  DeviceInfo info;
  bool usable = true;
  std::string why_not;
};

}  // namespace kf
