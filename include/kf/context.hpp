// The context: one device of one backend, its tensors, and the ops run on it.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kf/attrs.hpp"
#include "kf/device.hpp"
#include "kf/graph.hpp"
#include "kf/tensor.hpp"

namespace kf {

// Threads (docs/architecture.md, "Threads"): any thread may call any method, and Tensor's methods that
// touch the device, on one context; the calls take the context's lock and are recorded and submitted one
// at a time, whole, in the order they take it (so they do not overlap: use a context per thread for that).
// Separate contexts run concurrently. A Context is a cheap shared handle; copies share one device.
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
  // A tensor over memory the caller owns (row-major, `shape` and `dtype`, numel * dtype size bytes at
  // `data`), used in place without a copy; `keep_alive` is held as long as the tensor and keeps the memory
  // valid. The CPU backend only (the ops read and write host memory there): other backends raise
  // ErrorCode::Unsupported, and a caller copies through Context::empty and Tensor::upload instead.
  Tensor wrap_host(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keep_alive = nullptr);
  // A tensor over device memory the caller owns (CUDA / HIP: a device pointer of this context's GPU, such
  // as a torch CUDA tensor's data_ptr()), used in place without a copy, row-major `shape` and `dtype`;
  // `keep_alive` is held as long as the tensor. The address must be 256-byte aligned (the alignment kf's
  // own allocations have, which the kernels and cuBLASLt rely on). The caller orders its own use of the
  // memory with the context's work (ContextOptions::stream). Other backends raise ErrorCode::Unsupported;
  // memory of another device raises ErrorCode::Device.
  Tensor wrap_device(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keep_alive = nullptr);

  // Memory shared between backends of one GPU (docs/python.md, "Vulkan and CUDA"): a Vulkan tensor in
  // exportable memory, imported by the CUDA backend as a tensor of its own over the same bytes. The caller
  // orders the two sides' work: synchronize() the writer's context before the other reads or writes.
  //
  // Whether empty_exportable works here (Vulkan with VK_KHR_external_memory_fd and opaque fds the device
  // exports for storage buffers); when not, *why names what is missing.
  bool can_export(std::string* why = nullptr) const;
  // Like empty(), in memory of its own that export_memory can hand out. Unsupported where !can_export().
  Tensor empty_exportable(const Shape& shape, DType dtype);
  // A new descriptor of the memory of `t` (a tensor of this context from empty_exportable); InvalidArgument
  // for any other tensor.
  ExportedMemory export_memory(const Tensor& t);
  // A tensor of this context (CUDA) over exported memory, `shape` and `dtype` from m.offset, used in place;
  // `keep_alive` is held as long as the tensor. The descriptor is consumed (owned by CUDA, or closed when
  // the import fails). Device when the memory is another GPU's (DeviceInfo::uuid), Unsupported on other
  // backends, InvalidArgument when the tensor does not fit in m.size.
  Tensor import_memory(const ExportedMemory& m, const Shape& shape, DType dtype,
                       std::shared_ptr<void> keep_alive = nullptr);
  // Both in one: a tensor of this context over the memory of `t` (of another context, from
  // empty_exportable), with t's shape and dtype, keeping `t` alive.
  Tensor share(const Tensor& t);

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
  // Captures the op calls `body` makes on this context into a Graph (include/kf/graph.hpp) instead of
  // running them. Calls that need the host during the capture (synchronize, timestamps, Tensor uploads
  // and downloads, an op that waits inside or would fall back to the CPU) throw kf::Error(Unsupported),
  // and the capture is dropped. Other threads' calls on this context wait until the capture ends.
  Graph capture(const std::function<void()>& body);
  // The same in two calls on one thread, for callers that cannot pass a body (Python's `with`): the
  // context's lock is held from begin_capture() to end_capture() or abort_capture(), one of which must follow.
  void begin_capture();
  Graph end_capture();
  void abort_capture();

  // Device timestamps: record one now, read the interval in milliseconds after synchronize().
  uint32_t timestamp();
  double elapsed_ms(uint32_t begin, uint32_t end);
  void reset_timestamps();

  // Device memory held by tensors and scratch buffers, and its high-water mark (kf-lce-memory).
  MemoryUsage memory_usage() const;
  void reset_peak_memory();

  // Messages the validation layer reported so far (0 when it is off).
  uint64_t validation_messages() const;
  std::vector<std::string> validation_log() const;

  ContextImpl* impl() const { return impl_.get(); }

 private:
  friend class Graph;
  std::shared_ptr<ContextImpl> impl_;
};

}  // namespace kf
