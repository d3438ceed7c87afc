// The CUDA backend (hal/cuda/, also built as HIP through gpu_compat.hpp): enumeration, the device's
// stream, transfers, fills, timestamps and bounded waits. The CUDA runtime is linked statically and
// loads the driver (libcuda.so.1) itself when first called, so a machine without an NVIDIA driver or
// GPU runs this library too: the backend then lists one unusable entry saying why ("CUDA unavailable").
// Which kernel serves an op is kernels.cpp's business; the kernels are eltwise.cu and rows.cu.
#include "hal/cuda/device.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "hal/cuda/kernels.hpp"
#include "kf/error.hpp"

#ifndef KF_CUDA_MIN_ARCH
#define KF_CUDA_MIN_ARCH 0  // the oldest compute capability (x10) the build has code for; set by CMake
#endif
#ifndef KF_CUDA_ARCHS
#define KF_CUDA_ARCHS "?"
#endif

namespace kf::hal::cuda {
namespace {

ErrorCode code_of(gpuError_t e) {
  switch (e) {
    case gpuErrorMemoryAllocation: return ErrorCode::OutOfMemory;
    case gpuErrorIllegalAddress:
    case gpuErrorLaunchFailure:
#if defined(KF_HIP)
    case hipErrorLaunchTimeOut:
    case hipErrorECCNotCorrectable:
    case hipErrorAssert:
#else
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
#endif
      return ErrorCode::DeviceLost;
    default: return ErrorCode::Device;
  }
}

// "13.0" from CUDA's 13000, or HIP's major * 10^7 + minor * 10^5 + patch.
std::string version_text(int v) {
#if defined(KF_HIP)
  return std::to_string(v / 10000000) + "." + std::to_string(v / 100000 % 100);
#else
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
#endif
}

std::string error_text(gpuError_t e) {
  return std::string(gpuGetErrorName(e)) + " (" + gpuGetErrorString(e) + ")";
}

std::string arch_of(const gpuDeviceProp& p) {
#if defined(KF_HIP)
  return p.gcnArchName;
#else
  return "sm_" + std::to_string(p.major) + std::to_string(p.minor);
#endif
}

DeviceInfo describe(int ordinal, const gpuDeviceProp& p, int driver_version, int runtime_version) {
  DeviceInfo d;
  d.backend = kBackend;
  d.index = ordinal;
  d.name = p.name;
  d.vendor = KF_GPU_VENDOR;
  d.type = p.integrated ? "integrated" : "discrete";
  d.driver = std::string(KF_GPU_VENDOR) + " driver for " + KF_GPU_API + " " + version_text(driver_version) + ", " +
             arch_of(p) + ", " + std::to_string(p.multiProcessorCount) + " multiprocessors";
  d.api_version = std::string(KF_GPU_API) + " runtime " + version_text(runtime_version);
#if !defined(KF_HIP)
  std::memcpy(d.uuid.data(), p.uuid.bytes, 16);  // what Vulkan's deviceUUID is for the same GPU
#endif
  Caps& c = d.caps;
  c.storage16 = c.float16_arith = c.bfloat16 = c.float64 = true;  // bf16 converted by bit operations anywhere
  c.int8 = true;
#if defined(KF_HIP)
  c.int_dot = true;
  c.max_shared_bytes = static_cast<uint32_t>(p.sharedMemPerBlock);
#else
  c.int_dot = p.major * 10 + p.minor >= 61;
  c.max_shared_bytes = static_cast<uint32_t>(p.sharedMemPerBlockOptin);
#endif
  c.subgroup_arith = true;  // warp shuffles
  c.subgroup_size = static_cast<uint32_t>(p.warpSize);
  c.timestamps = true;          // events
  c.timestamp_period_ns = 500;  // cudaEventElapsedTime's documented resolution, about 0.5 us
  c.max_workgroup_size = static_cast<uint32_t>(p.maxThreadsPerBlock);
  c.max_workgroup_count = static_cast<uint32_t>(p.maxGridSize[0]);
  c.max_storage_range = p.totalGlobalMem;  // no binding limit: pointers
  c.max_allocation = p.totalGlobalMem;
  c.heaps.push_back({p.totalGlobalMem, true});
  return d;
}

// Why the runtime found no device: the driver missing or too old, no GPU, or another failure.
std::string why_no_device(gpuError_t e) {
  int driver = 0, runtime = 0;
  (void)gpuDriverGetVersion(&driver);
  (void)gpuRuntimeGetVersion(&runtime);
  (void)gpuGetLastError();
  const std::string api = KF_GPU_API;
  if (e == gpuErrorNoDevice) return api + " unavailable: the driver sees no GPU (" + error_text(e) + ")";
  if (e == gpuErrorInsufficientDriver) {
    if (driver == 0)
      return api + " unavailable: no " + KF_GPU_VENDOR + " driver is installed (" + error_text(e) + ")";
    return api + " unavailable: the driver supports " + api + " " + version_text(driver) + ", older than this build's " +
           api + " runtime " + version_text(runtime) + " (" + error_text(e) + ")";
  }
  return api + " unavailable: cudaGetDeviceCount failed: " + error_text(e);
}

std::vector<DeviceEntry> scan() {
  std::vector<DeviceEntry> out;
  auto none = [&](const std::string& why) {
    DeviceEntry e;
    e.info.backend = kBackend;
    e.info.name = std::string("(no ") + KF_GPU_API + ")";
    e.usable = false;
    e.why_not = why;
    out.push_back(e);
    return out;
  };
  int n = 0;
  const gpuError_t err = gpuGetDeviceCount(&n);
  if (err != gpuSuccess) return none(why_no_device(err));
  if (n <= 0) return none(why_no_device(gpuErrorNoDevice));
  int driver = 0, runtime = 0;
  (void)gpuDriverGetVersion(&driver);
  (void)gpuRuntimeGetVersion(&runtime);
  for (int i = 0; i < n; ++i) {
    gpuDeviceProp p;
    std::memset(&p, 0, sizeof(p));
    const gpuError_t e = gpuGetDeviceProperties(&p, i);
    DeviceEntry entry;
    if (e != gpuSuccess) {
      (void)gpuGetLastError();
      entry.info.backend = kBackend;
      entry.info.index = i;
      entry.info.name = std::string(KF_GPU_API) + " device " + std::to_string(i);
      entry.usable = false;
      entry.why_not = "cudaGetDeviceProperties failed: " + error_text(e);
      out.push_back(entry);
      continue;
    }
    entry.info = describe(i, p, driver, runtime);
#if !defined(KF_HIP)
    if (p.major * 10 + p.minor < KF_CUDA_MIN_ARCH) {
      entry.usable = false;
      entry.why_not = "compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor) +
                      " is older than every architecture this build has code for (" + KF_CUDA_ARCHS + ")";
    }
#endif
    out.push_back(entry);
  }
  return out;
}

// The devices do not change while the process runs; the runtime's start-up is paid once.
const std::vector<DeviceEntry>& devices() {
  static std::once_flag once;
  static std::vector<DeviceEntry> list;
  std::call_once(once, [] { list = scan(); });
  return list;
}

}  // namespace

void throw_error(gpuError_t e, const std::string& what) {
  const ErrorCode code = code_of(e);
  std::string msg = std::string(kBackend) + ": " + what + " failed: " + error_text(e);
  if (code == ErrorCode::DeviceLost) msg += "; the device is lost: this context's tensors can no longer be used";
  (void)gpuGetLastError();  // clears a non-sticky error, so that it is not reported again by the next check
  throw Error(code, msg);
}

// The knobs come parsed and checked against the options table (core/options.hpp); rows_values' 64 and 128
// (the Vulkan kernels') run as 32 here. attn_wmma (0 auto, 1 regs, 2 smem, 3 mma, 4 wgmma): auto takes
// flash-wgmma (Hopper's warpgroup instructions) where it applies (kernels.cpp), else flash-mma (the
// FlashAttention-2 kernel: mma.sync, the softmax and O in registers) where that applies, else
// flash-wmma-regs; wgmma and mma force theirs (Unsupported, saying why, where it does not apply); regs
// flash-wmma-regs (the accumulator in wmma fragments), smem flash-wmma (the accumulator in shared memory).
CudaDevice::CudaDevice(int ordinal, const DeviceInfo& info, const DeviceOptions& o)
    : ordinal_(ordinal), info_(info), options_(o),
      rows_values_(o.tuning.rows_values == 0 ? kRowCache256 : o.tuning.rows_values >= 32 ? 32 : 16),
      lt_epilogues_(o.tuning.mm_epilogue == 0), attn_path_(int(o.tuning.attn_path)), attn_split_(int(o.tuning.attn_split)),
      attn_rows_(int(o.tuning.attn_rows)), attn_decode_(int(o.tuning.attn_decode)), conv_path_(int(o.tuning.conv_path)),
      attn_wmma_regs_(o.tuning.attn_wmma != 2), attn_wmma_mode_(int(o.tuning.attn_wmma)),
      attn_rows_per_warp_(int(o.tuning.attn_rows_per_warp)), lce_rows_(int(o.tuning.lce_rows)),
      optim_items_(int(o.tuning.optim_items)), optim_blocks_(int(o.tuning.optim_blocks)),
      attn_decode_rs_(int(o.tuning.attn_decode_rs)), attn_decode_heads_(int(o.tuning.attn_decode_heads)),
      attn_bwd_bits_(int(o.tuning.attn_bwd_bits)), attn_fwd_bits_(int(o.tuning.attn_fwd_bits)),
      mm_algo_(int(o.tuning.mm_algo)), rows_cluster_(int(o.tuning.rows_cluster)) {
  // KF_TUNE max_binding: pointers have no binding limit, but the core's split path (src/core/split.cpp)
  // can be tried here under a lowered one.
  if (o.tuning.max_binding && o.tuning.max_binding < info_.caps.max_storage_range)
    info_.caps.max_storage_range = o.tuning.max_binding;
  make_current();
  const gpuError_t loaded = static_cast<gpuError_t>(check_kernels_load());
  if (loaded != gpuSuccess) {
    (void)gpuGetLastError();
    throw Error(ErrorCode::Device, std::string(kBackend) + ": " + info_.name + " (" + info_.driver +
                                       ") cannot run this build's kernels (built for " + KF_CUDA_ARCHS +
                                       "): " + error_text(loaded));
  }
  gpuDeviceProp p;
  std::memset(&p, 0, sizeof(p));
  check(gpuGetDeviceProperties(&p, ordinal_), "cudaGetDeviceProperties");
  sm_count_ = std::max(1, p.multiProcessorCount);
  l2_bytes_ = std::max(0, p.l2CacheSize);
#if defined(KF_HIP)
  max_shared_optin_ = static_cast<int64_t>(p.sharedMemPerBlock);
#else
  max_shared_optin_ = static_cast<int64_t>(std::max(p.sharedMemPerBlockOptin, p.sharedMemPerBlock));
  cc_ = p.major * 10 + p.minor;
#endif
  if (o.stream) {
    // 1 is the device's default (legacy NULL) stream, torch's default stream: cudaStreamLegacy's own value
    // in CUDA, the null stream in HIP.
#if defined(KF_HIP)
    stream_ = o.stream == reinterpret_cast<void*>(1) ? nullptr : static_cast<gpuStream_t>(o.stream);
#else
    stream_ = static_cast<gpuStream_t>(o.stream);
#endif
    own_stream_ = false;
    // A handle that is no stream is refused now rather than at the first kernel (busy is fine).
    const gpuError_t q = gpuStreamQuery(stream_);
    if (q != gpuSuccess && q != gpuErrorNotReady) throw_error(q, "cudaStreamQuery (ContextOptions::stream)");
  } else {
    check(gpuStreamCreateWithFlags(&stream_, gpuStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  allocator_ = std::make_shared<Allocator>(ordinal_);
}

CudaDevice::~CudaDevice() {
  if (gpuSetDevice(ordinal_) == gpuSuccess && (stream_ || !own_stream_)) {
    // The work still running (after a wait that timed out) gets one more bounded wait, at least
    // kCloseWait_s: a context whose short time-out cut a long kernel short still closes cleanly once it ends.
    options_.timeout_s = std::max(options_.timeout_s, kCloseWait_s);
    try {
      wait_stream("finishing before the device closes");
    } catch (const Error& e) {
      if (e.code() == ErrorCode::Timeout) {
        // Still running: freeing its memory would wait for it (cudaFree synchronizes), perhaps forever. Its
        // memory, handles and stream are left to the process instead (the driver reclaims them at exit), kept
        // reachable so that leak checkers do not report them.
        static auto* abandoned = new std::vector<std::shared_ptr<void>>;
        static std::mutex abandoned_mu;
        std::lock_guard<std::mutex> lock(abandoned_mu);
        abandoned->push_back(std::move(lt_));
        abandoned->push_back(std::move(long_kernel_out_));
        abandoned->push_back(std::move(allocator_));
        return;
      }
      // A lost device: nothing more to do than to let go.
    }
    lt_.reset();  // the cuBLASLt handle, before the stream and the memory go
    for (gpuEvent_t e : events_) (void)gpuEventDestroy(e);
    if (own_stream_) (void)gpuStreamDestroy(stream_);
  }
  (void)gpuGetLastError();
  allocator_.reset();  // buffers keep it alive if any is left; the last one frees the memory
}

void CudaDevice::make_current() const {
  // Every dispatch asks: the runtime's current device read first (a thread-local), set only when it differs.
  int current = -1;
  if (gpuGetDevice(&current) == gpuSuccess && current == ordinal_) return;
  check(gpuSetDevice(ordinal_), "cudaSetDevice");
}

void CudaDevice::wait_stream(const char* what) {
  const auto start = std::chrono::steady_clock::now();
  const auto limit = std::chrono::duration<double>(std::max(0.001, options_.timeout_s));
  for (int spin = 0;; ++spin) {
    const gpuError_t e = gpuStreamQuery(stream_);
    if (e == gpuSuccess) return;
    if (e != gpuErrorNotReady) throw_error(e, what);
    (void)gpuGetLastError();
    if (std::chrono::steady_clock::now() - start > limit)
      throw Error(ErrorCode::Timeout, std::string(kBackend) + ": the device did not finish its recorded work within " +
                                          std::to_string(options_.timeout_s) + " s (" + what +
                                          "); raise ContextOptions::timeout_s or KF_TIMEOUT_S for longer work");
    // Spin briefly (short kernels), then sleep a little between polls so that a long wait costs no CPU.
    if (spin < 2000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(spin < 4000 ? 20 : 200));
  }
}

void CudaDevice::wait_event(gpuEvent_t ev, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  const auto limit = std::chrono::duration<double>(std::max(0.001, options_.timeout_s));
  for (int spin = 0;; ++spin) {
    const gpuError_t e = gpuEventQuery(ev);
    if (e == gpuSuccess) return;
    if (e != gpuErrorNotReady) throw_error(e, what);
    (void)gpuGetLastError();
    if (std::chrono::steady_clock::now() - start > limit)
      throw Error(ErrorCode::Timeout, std::string(kBackend) + ": a timestamp was not reached within " +
                                          std::to_string(options_.timeout_s) + " s (" + what + ")");
    if (spin < 2000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(spin < 4000 ? 20 : 200));
  }
}

void CudaDevice::check_launch(int err, const std::string& kernel) {
  if (err != 0) throw_error(static_cast<gpuError_t>(err), "launching " + kernel);
}

void CudaDevice::no_clusters(const std::string& op) const {
  if (rows_cluster_ < 2 || cc_ >= 90) return;
  throw Error(ErrorCode::Unsupported,
              std::string(kBackend) + ": " + op + ": KF_TUNE rows_cluster=" + std::to_string(rows_cluster_) +
                  " needs thread-block clusters (CUDA, compute capability 9.0 or newer); " + info_.name +
                  (cc_ ? " has " + std::to_string(cc_ / 10) + "." + std::to_string(cc_ % 10) : " has none"));
}

std::shared_ptr<Buffer> CudaDevice::allocate(size_t bytes) {
  make_current();
  const Allocator::Block b = allocator_->allocate(bytes);
  auto buf = std::make_shared<CudaBuf>(allocator_, b, bytes);
  if (capture_buffers_) capture_buffers_->push_back(buf);
  return buf;
}

std::shared_ptr<Buffer> CudaDevice::wrap_device(void* data, size_t bytes, std::shared_ptr<void> keep_alive, bool known) {
  if (data && !known) {
    make_current();
#if defined(KF_HIP)
    hipPointerAttribute_t a{};
    const gpuError_t e = hipPointerGetAttributes(&a, data);
#if HIP_VERSION_MAJOR >= 6
    const hipMemoryType type = a.type;  // ROCm 6 renamed memoryType
#else
    const hipMemoryType type = a.memoryType;
#endif
    const bool on_device = e == gpuSuccess && (type == hipMemoryTypeDevice || a.isManaged);
#else
    cudaPointerAttributes a{};
    const gpuError_t e = cudaPointerGetAttributes(&a, data);
    const bool on_device = e == gpuSuccess && (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged);
#endif
    (void)gpuGetLastError();
    if (!on_device || a.device != ordinal_)
      throw Error(ErrorCode::Device, std::string(kBackend) + ": Context::wrap_device: the memory is not device memory of " +
                                         kBackend + " device " + std::to_string(ordinal_) + " (" + info_.name + ")" +
                                         (on_device ? ": it is device " + std::to_string(a.device) + "'s" : ""));
  }
  return std::make_shared<CudaBuf>(data, bytes, std::move(keep_alive));
}

#if !defined(KF_HIP)
std::shared_ptr<Buffer> CudaDevice::import_memory(const ExportedMemory& m, size_t bytes, std::shared_ptr<void> keep_alive) {
  try {
    make_current();
  } catch (...) {
    ::close(m.fd);
    throw;
  }
  cudaExternalMemoryHandleDesc hd{};
  hd.type = cudaExternalMemoryHandleTypeOpaqueFd;
  hd.handle.fd = m.fd;
  hd.size = m.size;
  hd.flags = m.dedicated ? cudaExternalMemoryDedicated : 0;
  cudaExternalMemory_t ext = nullptr;
  if (const cudaError_t e = cudaImportExternalMemory(&ext, &hd); e != cudaSuccess) {
    ::close(m.fd);  // owned by CUDA only once imported
    throw_error(e, "cudaImportExternalMemory (Context::import_memory, opaque fd of " + std::to_string(m.size) + " bytes)");
  }
  cudaExternalMemoryBufferDesc bd{};
  bd.offset = m.offset;
  bd.size = bytes;
  void* ptr = nullptr;
  if (const cudaError_t e = cudaExternalMemoryGetMappedBuffer(&ptr, ext, &bd); e != cudaSuccess) {
    (void)cudaDestroyExternalMemory(ext);
    throw_error(e, "cudaExternalMemoryGetMappedBuffer (Context::import_memory)");
  }
  // The mapping goes before the imported memory, and both before what keeps the exporter's tensor alive.
  const int ordinal = ordinal_;
  std::shared_ptr<void> hold(ptr, [ext, ordinal, keep = std::move(keep_alive)](void* p) mutable {
    if (exiting()) {  // exiting: the drivers may be gone; the exporter's memory stays too
      new std::shared_ptr<void>(std::move(keep));
      return;
    }
    int current = -1;
    const bool other = cudaGetDevice(&current) == cudaSuccess && current != ordinal;
    if (other) (void)cudaSetDevice(ordinal);
    (void)cudaFree(p);
    (void)cudaDestroyExternalMemory(ext);
    if (other) (void)cudaSetDevice(current);
    (void)cudaGetLastError();
    keep.reset();
  });
  return std::make_shared<CudaBuf>(ptr, bytes, std::move(hold));
}

std::shared_ptr<void> CudaDevice::import_timeline(int fd) {
  try {
    make_current();
  } catch (...) {
    ::close(fd);
    throw;
  }
  cudaExternalSemaphoreHandleDesc hd{};
  hd.type = cudaExternalSemaphoreHandleTypeTimelineSemaphoreFd;
  hd.handle.fd = fd;
  cudaExternalSemaphore_t sem = nullptr;
  if (const cudaError_t e = cudaImportExternalSemaphore(&sem, &hd); e != cudaSuccess) {
    ::close(fd);  // owned by CUDA only once imported
    throw_error(e, "cudaImportExternalSemaphore (Timeline::create, a timeline semaphore's opaque fd)");
  }
  // Destroyed once the stream has passed its waits and signals (the Vulkan side signals every value it is
  // waited for at once: cuda_after_vulkan submits the signal before the stream waits).
  return std::shared_ptr<void>(static_cast<void*>(sem), [stream = stream_](void* p) {
    if (exiting()) return;  // the drivers may be gone: left to the process
    (void)cudaStreamSynchronize(stream);
    (void)cudaDestroyExternalSemaphore(static_cast<cudaExternalSemaphore_t>(p));
    (void)cudaGetLastError();
  });
}

void CudaDevice::timeline_wait(void* timeline, uint64_t value) {
  make_current();
  auto sem = static_cast<cudaExternalSemaphore_t>(timeline);
  cudaExternalSemaphoreWaitParams p{};
  p.params.fence.value = value;
  check(cudaWaitExternalSemaphoresAsync(&sem, &p, 1, stream_), "cudaWaitExternalSemaphoresAsync (Timeline)");
}

void CudaDevice::timeline_signal(void* timeline, uint64_t value) {
  make_current();
  auto sem = static_cast<cudaExternalSemaphore_t>(timeline);
  cudaExternalSemaphoreSignalParams p{};
  p.params.fence.value = value;
  check(cudaSignalExternalSemaphoresAsync(&sem, &p, 1, stream_), "cudaSignalExternalSemaphoresAsync (Timeline)");
}
#endif

// Transfers from and to pageable host memory: wait (bounded) for the work recorded before, copy, and
// wait for the copy, so that the host buffer may be reused or read when the call returns.
void CudaDevice::upload(Buffer& dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  not_capturing("an upload");
  make_current();
  wait_stream("waiting before an upload");
  check(gpuMemcpyAsync(static_cast<CudaBuf&>(dst).ptr(), src, bytes, gpuMemcpyHostToDevice, stream_),
        "cudaMemcpyAsync (upload)");
  wait_stream("upload");
}

void CudaDevice::download(Buffer& src, void* dst, size_t bytes) {
  if (bytes == 0) return;
  not_capturing("a download");
  make_current();
  wait_stream("waiting before a download");
  check(gpuMemcpyAsync(dst, static_cast<CudaBuf&>(src).ptr(), bytes, gpuMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync (download)");
  wait_stream("download");
}

void CudaDevice::fill_bytes(Buffer& dst, uint8_t pattern, size_t bytes) {
  if (bytes == 0) return;
  not_capturing("a fill from the host");
  make_current();
  check(gpuMemsetAsync(static_cast<CudaBuf&>(dst).ptr(), pattern, bytes, stream_), "cudaMemsetAsync");
}

void CudaDevice::release_scratch() {
  synchronize();
  lt_.reset();  // the cuBLASLt handle and its workspace, created again by the next matrix product
  rope_table_.reset();
  rope_span_ = {};
  long_kernel_out_.reset();
}

// eltwise.cu: the fault tests' kernel that runs long and ends by itself (one thread, rounds x 65,536
// dependent multiply-adds on out[0]); declared here, as no other file uses it.
int launch_long_kernel(float* out, uint32_t rounds, void* stream);

bool CudaDevice::record_long_kernel(uint64_t iterations) {
  not_capturing("the fault tests' long kernel");
  make_current();
  if (!long_kernel_out_) long_kernel_out_ = allocate(16);
  const auto rounds = static_cast<uint32_t>(std::min<uint64_t>((iterations + 65535) / 65536, UINT32_MAX));
  check_launch(launch_long_kernel(static_cast<float*>(ptr_of(long_kernel_out_)), rounds, stream_), "long_kernel");
  return true;
}

void CudaDevice::synchronize() {
  not_capturing("a wait for the device");
  make_current();
  wait_stream("synchronize");
}

uint32_t CudaDevice::timestamp() {
  not_capturing("a timestamp");
  make_current();
  if (next_event_ == events_.size()) {
    gpuEvent_t e = nullptr;
    check(gpuEventCreate(&e), "cudaEventCreate");
    events_.push_back(e);
  }
  check(gpuEventRecord(events_[next_event_], stream_), "cudaEventRecord");
  return next_event_++;
}

double CudaDevice::elapsed_ms(uint32_t begin, uint32_t end) {
  if (begin >= next_event_ || end >= next_event_)
    throw Error(ErrorCode::InvalidArgument, std::string(kBackend) + ": timestamp index out of range (" +
                                                std::to_string(next_event_) + " recorded since reset_timestamps())");
  make_current();
  wait_event(events_[std::max(begin, end)], "reading timestamps");
  float ms = 0;
  check(gpuEventElapsedTime(&ms, events_[begin], events_[end]), "cudaEventElapsedTime");
  return ms;
}

void CudaDevice::reset_timestamps() { next_event_ = 0; }

void CudaDevice::not_capturing(const char* what) const {
  if (capture_)
    throw Error(ErrorCode::Unsupported, std::string(kBackend) + ": " + what +
                                            " cannot be captured into a graph (the op needs the host while it "
                                            "records; running it once before the capture may prepare what it needs)");
}

#if !defined(KF_HIP)
namespace {
struct CudaGraph final : hal::Graph {
  ~CudaGraph() override {
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<std::shared_ptr<Buffer>> buffers;  // allocated during the capture (scratch, outputs)
};
}  // namespace

bool CudaDevice::begin_capture() {
  make_current();
  auto g = std::make_shared<CudaGraph>();
  // Relaxed: the allocator may call cudaMalloc while the stream records (the memory is not captured).
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  capture_buffers_ = &g->buffers;
  capture_ = std::move(g);
  return true;
}

std::shared_ptr<hal::Graph> CudaDevice::end_capture() {
  auto g = std::static_pointer_cast<CudaGraph>(std::move(capture_));
  capture_.reset();
  capture_buffers_ = nullptr;
  make_current();
  check(cudaStreamEndCapture(stream_, &g->graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&g->exec, g->graph, 0), "cudaGraphInstantiate");
  return g;
}

void CudaDevice::abort_capture() {
  if (!capture_) return;
  capture_.reset();
  capture_buffers_ = nullptr;
  cudaGraph_t g = nullptr;
  (void)cudaStreamEndCapture(stream_, &g);
  if (g) (void)cudaGraphDestroy(g);
  (void)cudaGetLastError();
}

void CudaDevice::replay(const std::shared_ptr<hal::Graph>& graph) {
  make_current();
  check(cudaGraphLaunch(static_cast<CudaGraph&>(*graph).exec, stream_), "cudaGraphLaunch");
}

bool CudaDevice::stream_captured() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}
#endif

namespace {

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return kBackend; }
  std::vector<DeviceEntry> enumerate(const ContextOptions&) override { return devices(); }
  std::unique_ptr<Device> open(int index, const DeviceOptions& o) override {
    for (const auto& e : devices()) {
      if (e.info.index != index || e.info.backend != kBackend) continue;
      if (!e.usable) throw Error(ErrorCode::Device, std::string(kBackend) + ": " + e.info.name + ": " + e.why_not);
      return std::make_unique<CudaDevice>(index, e.info, o);
    }
    throw Error(ErrorCode::Device, std::string(kBackend) + ": no device with index " + std::to_string(index));
  }
};

}  // namespace
}  // namespace kf::hal::cuda

namespace kf::hal {
std::unique_ptr<Backend> make_cuda_backend();
std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<cuda::CudaBackend>(); }
}  // namespace kf::hal
