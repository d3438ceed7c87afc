// Dense row-major tensors of up to 8 dimensions, owned by a context's device.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kf/dtype.hpp"

namespace kf {

namespace hal { class Buffer; class Device; }
class Context;
struct ContextImpl;

using Shape = std::vector<int64_t>;
constexpr int kMaxDims = 8;

int64_t numel(const Shape& s);
std::string to_string(const Shape& s);

class Tensor {
 public:
  Tensor() = default;

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return kf::numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int d) const;  // negative d counts from the end
  bool defined() const { return buffer_ != nullptr; }

  // Host transfers of raw elements in the tensor's own dtype (bytes must equal nbytes()).
  void upload(const void* data, size_t bytes);
  void download(void* data, size_t bytes) const;
  // Convenience transfers with conversion from and to double or float.
  void upload_from(const std::vector<double>& values);
  void upload_from(const std::vector<float>& values);
  std::vector<double> to_double() const;
  std::vector<float> to_float() const;
  // The same memory under another shape with as many elements (a view: writes through either are seen by
  // both), e.g. a linear's [1, 4096] output as attention's [1, 32, 1, 128] query. Shape error otherwise.
  Tensor reshape(const Shape& shape) const;
  // Sets every element to v (converted to the dtype).
  void fill(double v);
  // Sets every byte to a pattern: the tests poison outputs with it.
  void fill_bytes(uint8_t pattern);
  // The tensor's memory when it is host memory the caller may read and write in place (the CPU backend's
  // tensors, allocated or wrapped by Context::wrap_host); nullptr on other backends.
  void* host_data() const;
  // The tensor's device address where the backend has one (CUDA / HIP: allocated or wrapped by
  // Context::wrap_device), for handing the memory to another library (DLPack); nullptr elsewhere.
  void* device_data() const;

  // Internals, for the core and the backends.
  hal::Buffer* buffer() const { return buffer_.get(); }
  const std::shared_ptr<hal::Buffer>& buffer_ref() const { return buffer_; }
  ContextImpl* owner() const { return owner_.get(); }

 private:
  friend class Context;
  friend struct ContextImpl;
  Shape shape_;
  DType dtype_ = DType::f32;
  std::shared_ptr<hal::Buffer> buffer_;
  std::shared_ptr<ContextImpl> owner_;
};

}  // namespace kf
