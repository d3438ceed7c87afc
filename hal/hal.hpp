// The hardware abstraction layer (docs/architecture.md principle 3): devices, buffers, kernels, streams and
// timers. The core talks to backends only through these classes; a backend's whole surface is one
// factory function (make_<name>_backend). Backends trust their inputs: the core has checked them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/op_id.hpp"
#include "core/options.hpp"
#include "kf/attrs.hpp"
#include "kf/device.hpp"
#include "kf/error.hpp"
#include "kf/tensor.hpp"

namespace kf {
struct OpDef;
}

namespace kf::hal {

class Buffer {
 public:
  virtual ~Buffer() = default;
  size_t size() const { return size_; }  // bytes usable (allocations are padded to 16 bytes)
  // Memory the caller owns (Context::wrap_host / wrap_device), set by the core: only such buffers can
  // overlap another buffer, so the per-call alias check looks at addresses only for them.
  bool wrapped = false;

 protected:
  size_t size_ = 0;
};

// One tensor argument of a dispatch. An absent optional input has a null buffer. `offset` is where the
// tensor starts in its buffer, in bytes: 0 but for the parts of a call that the core runs in pieces
// because a tensor exceeds the device's largest binding (src/core/split.cpp); it is then a multiple of
// Caps::storage_offset_alignment, and the backend binds (or addresses) the buffer from there.
struct TensorArg {
  std::shared_ptr<Buffer> buffer;
  Shape shape;
  int64_t numel = 0;
  uint64_t offset = 0;
};

// The name of the kernel variant a dispatch ran (Context::last_variant): a string literal, kept as a pointer,
// or a string built for the call. The core copies it into a buffer it reuses, so that a dispatch whose
// variant is a literal (every small op's) allocates nothing for it.
class Variant {
 public:
  Variant(const char* literal) : literal_(literal) {}  // static storage only
  Variant(std::string text) : text_(std::move(text)) {}
  std::string_view str() const { return literal_ ? std::string_view(literal_) : std::string_view(text_); }

 private:
  const char* literal_ = nullptr;
  std::string text_;
};

// One op call as the core checked it. Backends switch on `id` and read the op's properties here, so that
// they need not include the registry. The core fills every field; a call from Context::supports(op,
// dtype) has no tensors (inputs and outputs empty): the backend answers for the op and dtype alone.
struct OpCall {
  OpId id{};  // what backends switch on
  const OpDef* op = nullptr;  // the registry entry (the CPU backend runs its reference)
  DType dtype = DType::f32;
  std::vector<TensorArg> inputs;
  std::vector<TensorArg> outputs;
  Attrs attrs;
  Family family = Family::Elementwise;
  DType out_dtype = DType::f32;  // the outputs' dtype: Attrs::out_dtype where the op takes one, else dtype
  double eps = 0;                // the normalizations' epsilon (Attrs::eps or the op's default)
  bool transcendental = false;   // the op needs exp/tanh/erf (GLSL has none in float64)
  // The (output, input) pairs that may be one tensor (the optimizers' updates in place); never null.
  const std::vector<std::pair<int, int>>* in_place = &kNoPairs;
  static inline const std::vector<std::pair<int, int>> kNoPairs{};
  const char* name() const { return op_name(id); }  // for messages
};

// A captured sequence of dispatches the device replays as a whole (a Vulkan command buffer, a CUDA graph).
class Graph {
 public:
  virtual ~Graph() = default;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;

  // Buffers. Transfers wait for recorded work that touches the device first.
  virtual std::shared_ptr<Buffer> allocate(size_t bytes) = 0;
  virtual void upload(Buffer& dst, const void* src, size_t bytes) = 0;
  virtual void download(Buffer& src, void* dst, size_t bytes) = 0;
  virtual void fill_bytes(Buffer& dst, uint8_t pattern, size_t bytes) = 0;
  // Memory the caller owns, used in place (NumPy arrays, CPU torch tensors): a buffer over `bytes` at
  // `data` that `keep_alive` keeps valid; nullptr where the backend's kernels cannot read host memory.
  virtual std::shared_ptr<Buffer> wrap_host(void* data, size_t bytes, std::shared_ptr<void> keep_alive) {
    (void)data, (void)bytes, (void)keep_alive;
    return nullptr;
  }
  // The host address of a buffer whose memory is host memory (allocated or wrapped); nullptr otherwise.
  virtual void* host_data(Buffer& buffer) { (void)buffer; return nullptr; }
  // Device memory the caller owns (a torch CUDA tensor's): a buffer over `bytes` at device address `data`
  // that `keep_alive` keeps valid; nullptr where the backend has no device addresses. Throws kf::Error
  // (Device) for memory that is not this device's, unless `known`: the caller has it from an owner that
  // names the device (a torch tensor's get_device()), so that the driver's pointer query (about a
  // microsecond per tensor, the largest host cost of a small call from Python) is not repeated.
  virtual std::shared_ptr<Buffer> wrap_device(void* data, size_t bytes, std::shared_ptr<void> keep_alive, bool known) {
    (void)data, (void)bytes, (void)keep_alive, (void)known;
    return nullptr;
  }
  // The device address of a buffer (CUDA / HIP); nullptr where the backend has none.
  virtual void* device_data(Buffer& buffer) { (void)buffer; return nullptr; }

  // Memory shared with another API of the same GPU (Context::empty_exportable, export_memory,
  // import_memory). exportable(): whether allocate_exportable works, and if not why.
  virtual bool exportable(std::string* why) const {
    if (why) *why = "the " + info().backend + " backend exports no memory (Vulkan only)";
    return false;
  }
  // A buffer in memory of its own that export_memory hands out (called only where exportable()).
  virtual std::shared_ptr<Buffer> allocate_exportable(size_t bytes) { (void)bytes; return nullptr; }
  // A new descriptor of the buffer's memory; InvalidArgument for a buffer not from allocate_exportable.
  virtual ExportedMemory export_memory(Buffer& buffer) {
    (void)buffer;
    throw Error(ErrorCode::Unsupported, "the " + info().backend + " backend exports no memory (Vulkan only)");
  }
  // Timeline semaphores shared with another API of the same GPU (kf::Timeline). Vulkan: whether
  // export_timeline works (and if not why); a new semaphore, its handle kept by the caller, and a new fd
  // of it in *fd. CUDA: import_timeline takes an fd (closed on failure) and returns the handle; it is
  // called only where imports_memory(). Both: the device's next work waits until the timeline reaches `value`;
  // everything recorded so far signals `value` when done (Vulkan submits it now).
  virtual bool timeline_exportable(std::string* why) const {
    if (why) *why = "the " + info().backend + " backend exports no semaphores (Vulkan only)";
    return false;
  }
  virtual std::shared_ptr<void> export_timeline(int* fd) {
    (void)fd;
    throw Error(ErrorCode::Unsupported, "the " + info().backend + " backend exports no semaphores (Vulkan only)");
  }
  virtual std::shared_ptr<void> import_timeline(int fd) { (void)fd; return nullptr; }
  virtual void timeline_wait(void* timeline, uint64_t value) { (void)timeline, (void)value; }
  virtual void timeline_signal(void* timeline, uint64_t value) { (void)timeline, (void)value; }
  // Whether import_memory works; it is called only then, with memory the core found to be of this GPU.
  virtual bool imports_memory() const { return false; }
  // A buffer over `bytes` of imported memory from m.offset, which takes m.fd (closed on failure).
  virtual std::shared_ptr<Buffer> import_memory(const ExportedMemory& m, size_t bytes, std::shared_ptr<void> keep_alive) {
    (void)m, (void)bytes, (void)keep_alive;
    return nullptr;
  }

  // Kernels. supports() says whether the device can run the call (its dtype, shapes, attributes and
  // optional inputs; a call without tensors asks for the op and dtype alone) and, if not, why. A call it
  // accepts is not refused by dispatch() for a reason the call shows.
  virtual bool supports(const OpCall& call, std::string* why) const = 0;
  // Records the op (it may run later, at synchronize()); returns the variant that was chosen.
  virtual Variant dispatch(const OpCall& call) = 0;

  // Streams: submit everything recorded and wait, bounded by the context's time-out.
  virtual void synchronize() = 0;

  // Capture (kf::Graph): between begin_capture() and end_capture() the dispatches are recorded into a
  // graph instead of the stream, and replay() runs that graph again, ordered after everything recorded
  // before it. A call that needs the host meanwhile (a transfer, a wait, a timestamp) throws Unsupported
  // and the core then calls abort_capture(). begin_capture() returns false where the device has no graphs
  // of its own: the core then records the calls and replays them one by one (the CPU backend).
  virtual bool begin_capture() { return false; }
  virtual std::shared_ptr<Graph> end_capture() { return nullptr; }
  virtual void abort_capture() {}
  virtual void replay(const std::shared_ptr<Graph>& graph) { (void)graph; }
  // Whether the device's stream is being captured into a graph by someone else (a CUDA graph that torch or
  // the application captures on the stream it gave kf): then, as within kf's own capture, nothing may
  // need the host mid-call, and the core leaves out its host-side value checks (embedding's ids).
  virtual bool stream_captured() const { return false; }

  // Timers: a timestamp recorded in order with the dispatches.
  virtual uint32_t timestamp() = 0;
  virtual double elapsed_ms(uint32_t begin, uint32_t end) = 0;
  virtual void reset_timestamps() = 0;

  // Bytes of live device allocations and their high-water mark (0 where a backend does not count).
  virtual MemoryUsage memory_usage() const { return {}; }
  virtual void reset_peak_memory() {}

  virtual uint64_t validation_messages() const { return 0; }
  virtual std::vector<std::string> validation_log() const { return {}; }

  // The roofline of matrix products (kf-bench): records a kernel that does nothing but the device's
  // matrix multiply-adds on operands held in registers and returns the floating-point operations it
  // performs, with what it measures in `what`; 0 when the backend has no such kernel.
  virtual double record_matrix_peak(std::string* what) { (void)what; return 0; }

  // kf-soak's accounting (detail::pipeline_stats, detail::release_scratch): the compute pipelines created
  // (each should be created once per kernel variant and specialization) and those held; zeros where a
  // backend has none. release_scratch waits for the recorded work, then frees the scratch the device keeps
  // between calls (workspaces, tables), so that memory_usage() counts the caller's tensors alone.
  struct PipelineStats {
    uint64_t created = 0, held = 0;
  };
  virtual PipelineStats pipeline_stats() const { return {}; }
  virtual void release_scratch() {}

  // Faults (detail::record_long_kernel, for tests): records a kernel of about `iterations` dependent
  // arithmetic steps that ends by itself, without waiting; false where the backend has no such kernel.
  virtual bool record_long_kernel(uint64_t iterations) { (void)iterations; return false; }

  // Vulkan on NVIDIA: the GPU's CUDA driver context is held (hal/vulkan/cuda_context.cpp); set when opened.
  bool cuda_context_held = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Devices this backend sees, best first is not required: the core ranks them.
  virtual std::vector<DeviceEntry> enumerate(const ContextOptions& options) = 0;
  // Opens a device with the context's options as the core resolved them (core/options.hpp: the knobs
  // parsed, the environment read).
  virtual std::unique_ptr<Device> open(int index, const DeviceOptions& options) = 0;
};

// Set when the process exits (the Python package's atexit handler, kernelfusion._cuda): from then on, a
// context that closes and memory one driver imported from another (Vulkan memory in CUDA) are left to the
// operating system rather than released. Objects a Python program still holds are released after the
// drivers' own exit handlers ran, which aborted the process on an H200 (driver 580).
bool& exiting();

// Backend entry points. The core refers to them only through src/core/backends.cpp.
std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_vulkan_backend();

}  // namespace kf::hal
