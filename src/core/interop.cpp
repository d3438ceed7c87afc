// Memory shared between backends of one GPU (include/kf/context.hpp, docs/python.md "Vulkan and CUDA"): the
// checks live here once; the Vulkan device exports, the CUDA device imports.
#include <unistd.h>

#include <algorithm>
#include <mutex>

#include "core/context_impl.hpp"
#include "kf/error.hpp"
#include "kf/interop.hpp"

namespace kf {

namespace {
void check_shape(const Shape& shape, const std::string& what) {
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw Error(ErrorCode::Shape, what + ": shape " + to_string(shape) + " has more than 8 dimensions");
  for (int64_t d : shape)
    if (d < 0) throw Error(ErrorCode::Shape, what + ": shape " + to_string(shape) + " has a negative size");
}

// Bytes a tensor's buffer spans: padded to 16 as Context::empty pads them (kernels move 16-byte packs).
size_t padded(const Shape& shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(numel(shape)) * dtype_size(dtype);
  return std::max<size_t>(16, (bytes + 15) / 16 * 16);
}
}  // namespace

bool Context::can_export(std::string* why) const {
  std::lock_guard<std::recursive_mutex> lock(impl_->mu);
  return impl_->device->exportable(why);
}

Tensor Context::empty_exportable(const Shape& shape, DType dtype) {
  const std::string what = "Context::empty_exportable";
  check_shape(shape, what);
  std::lock_guard<std::recursive_mutex> lock(impl_->mu);
  std::string why;
  if (!impl_->device->exportable(&why)) throw Error(ErrorCode::Unsupported, what + ": " + why);
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.buffer_ = impl_->device->allocate_exportable(padded(shape, dtype));
  t.owner_ = impl_;
  return t;
}

ExportedMemory Context::export_memory(const Tensor& t) {
  const std::string what = "Context::export_memory";
  if (!t.defined()) throw Error(ErrorCode::InvalidArgument, what + ": the tensor is undefined");
  if (t.owner() != impl_.get())
    throw Error(ErrorCode::InvalidArgument, what + ": the tensor belongs to another context");
  std::lock_guard<std::recursive_mutex> lock(impl_->mu);
  return impl_->device->export_memory(*t.buffer());
}

Tensor Context::import_memory(const ExportedMemory& m, const Shape& shape, DType dtype,
                              std::shared_ptr<void> keep_alive) {
  const std::string what = "Context::import_memory";
  // The descriptor is consumed whatever happens: closed here on every refusal before the device takes it.
  const auto refuse = [&](ErrorCode code, const std::string& msg) {
    if (m.fd >= 0) ::close(m.fd);
    throw Error(code, what + ": " + msg);
  };
  if (m.fd < 0) refuse(ErrorCode::InvalidArgument, "no file descriptor (fd " + std::to_string(m.fd) + ")");
  try {
    check_shape(shape, what);
  } catch (...) {
    ::close(m.fd);
    throw;
  }
  const size_t bytes = padded(shape, dtype);
  const size_t need = static_cast<size_t>(numel(shape)) * dtype_size(dtype);
  if (m.offset > m.size || need > m.size - m.offset)
    refuse(ErrorCode::InvalidArgument, "shape " + to_string(shape) + " " + to_string(dtype) + " needs " +
                                           std::to_string(need) + " bytes from offset " + std::to_string(m.offset) +
                                           " of memory of " + std::to_string(m.size));
  if (!impl_->device->imports_memory())
    refuse(ErrorCode::Unsupported, "the " + impl_->backend_name + " backend imports no memory (CUDA only)");
  const DeviceInfo& info = impl_->device->info();
  if (m.device_uuid != info.uuid)
    refuse(ErrorCode::Device, "the memory is of another GPU than this context's " + info.backend + " device " +
                                  std::to_string(info.index) + " (" + info.name + "): their device UUIDs differ");
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  {
    std::lock_guard<std::recursive_mutex> lock(impl_->mu);
    // The padding only where the memory has it (an allocation from empty_exportable always does).
    t.buffer_ = impl_->device->import_memory(m, std::min<size_t>(bytes, m.size - m.offset), std::move(keep_alive));
  }
  t.owner_ = impl_;
  return t;
}

Tensor Context::share(const Tensor& t) {
  if (!t.defined()) throw Error(ErrorCode::InvalidArgument, "Context::share: the tensor is undefined");
  Context from = Context::of(t);
  if (from.impl_ == impl_)
    throw Error(ErrorCode::InvalidArgument, "Context::share: the tensor already belongs to this context");
  const ExportedMemory m = from.export_memory(t);
  return import_memory(m, t.shape(), t.dtype(), std::make_shared<Tensor>(t));
}

struct TimelineImpl {
  std::shared_ptr<ContextImpl> vk, cu;
  std::shared_ptr<void> vk_sem, cu_sem;  // declared after the contexts: released before them
  std::mutex mu;
  uint64_t value = 0;  // the last value signaled or asked for
};

namespace {
// Whether a Timeline of these contexts works; if not, why and the error code for Timeline::create.
bool timeline_ok(const Context& vulkan, const Context& cuda, std::string* why, ErrorCode* code) {
  *code = ErrorCode::Unsupported;
  {
    std::lock_guard<std::recursive_mutex> lock(vulkan.impl()->mu);
    if (!vulkan.impl()->device->timeline_exportable(why)) return false;
  }
  if (!cuda.impl()->device->imports_memory()) {
    *why = "the " + cuda.backend() + " backend imports no semaphores (CUDA only)";
    return false;
  }
  if (vulkan.device().uuid != cuda.device().uuid) {
    *code = ErrorCode::Device;
    *why = "the " + vulkan.backend() + " device (" + vulkan.device().name + ") and the " + cuda.backend() +
           " device (" + cuda.device().name + ") are different GPUs: their device UUIDs differ";
    return false;
  }
  why->clear();
  return true;
}
}  // namespace

bool Timeline::supported(const Context& vulkan, const Context& cuda, std::string* why) {
  std::string w;
  ErrorCode code;
  const bool ok = timeline_ok(vulkan, cuda, &w, &code);
  if (why) *why = w;
  return ok;
}

Timeline Timeline::create(const Context& vulkan, const Context& cuda) {
  std::string why;
  ErrorCode code;
  if (!timeline_ok(vulkan, cuda, &why, &code)) throw Error(code, "Timeline::create: " + why);
  auto t = std::make_shared<TimelineImpl>();
  t->vk = vulkan.impl()->self.lock();
  t->cu = cuda.impl()->self.lock();
  int fd = -1;
  {
    std::lock_guard<std::recursive_mutex> lock(t->vk->mu);
    t->vk_sem = t->vk->device->export_timeline(&fd);
  }
  {
    std::lock_guard<std::recursive_mutex> lock(t->cu->mu);
    t->cu_sem = t->cu->device->import_timeline(fd);
  }
  if (!t->cu_sem) throw Error(ErrorCode::Unsupported, "Timeline::create: the " + cuda.backend() + " backend imports no semaphores");
  Timeline out;
  out.impl_ = std::move(t);
  return out;
}

void Timeline::vulkan_after_cuda() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const uint64_t v = ++impl_->value;
  {
    std::lock_guard<std::recursive_mutex> l(impl_->cu->mu);
    impl_->cu->device->timeline_signal(impl_->cu_sem.get(), v);
  }
  std::lock_guard<std::recursive_mutex> l(impl_->vk->mu);
  impl_->vk->device->timeline_wait(impl_->vk_sem.get(), v);
}

void Timeline::cuda_after_vulkan() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const uint64_t v = ++impl_->value;
  {
    std::lock_guard<std::recursive_mutex> l(impl_->vk->mu);
    impl_->vk->device->timeline_signal(impl_->vk_sem.get(), v);
  }
  std::lock_guard<std::recursive_mutex> l(impl_->cu->mu);
  impl_->cu->device->timeline_wait(impl_->cu_sem.get(), v);
}

}  // namespace kf
