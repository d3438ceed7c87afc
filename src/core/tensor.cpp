// Tensors: shapes, and host transfers through the owning device.
#include "kf/tensor.hpp"

#include <cstring>

#include "core/context_impl.hpp"
#include "kf/error.hpp"

namespace kf {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string to_string(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t Tensor::size(int d) const {
  const int n = dim();
  if (d < 0) d += n;
  if (d < 0 || d >= n)
    throw Error(ErrorCode::InvalidArgument, "Tensor::size: dimension " + std::to_string(d) + " out of range for " +
                                                std::to_string(n) + " dimensions");
  return shape_[d];
}

static void require_defined(const Tensor& t, const char* what) {
  if (!t.defined()) throw Error(ErrorCode::InvalidArgument, std::string(what) + ": the tensor is undefined");
}

void Tensor::upload(const void* data, size_t bytes) {
  require_defined(*this, "Tensor::upload");
  if (bytes != nbytes())
    throw Error(ErrorCode::InvalidArgument, "Tensor::upload: got " + std::to_string(bytes) +
                                                " bytes for a tensor of " + std::to_string(nbytes()));
  if (bytes == 0) return;  // an empty tensor: no transfer (a zero-sized copy is invalid in Vulkan)
  std::lock_guard<std::recursive_mutex> lock(owner_->mu);
  owner_->not_in_capture("Tensor::upload");
  owner_->device_call("Tensor::upload", [&] { owner_->device->upload(*buffer_, data, bytes); });
}

void Tensor::download(void* data, size_t bytes) const {
  require_defined(*this, "Tensor::download");
  if (bytes != nbytes())
    throw Error(ErrorCode::InvalidArgument, "Tensor::download: asked " + std::to_string(bytes) +
                                                " bytes of a tensor of " + std::to_string(nbytes()));
  if (bytes == 0) return;
  std::lock_guard<std::recursive_mutex> lock(owner_->mu);
  owner_->not_in_capture("Tensor::download");
  owner_->device_call("Tensor::download", [&] { owner_->device->download(*buffer_, data, bytes); });
}

void Tensor::upload_from(const std::vector<double>& values) {
  if (static_cast<int64_t>(values.size()) != numel())
    throw Error(ErrorCode::InvalidArgument, "Tensor::upload_from: got " + std::to_string(values.size()) +
                                                " values for " + std::to_string(numel()) + " elements");
  const size_t es = dtype_size(dtype_);
  std::vector<unsigned char> raw(nbytes());
  for (size_t i = 0; i < values.size(); ++i) store_element(dtype_, raw.data() + i * es, values[i]);
  upload(raw.data(), raw.size());
}

void Tensor::upload_from(const std::vector<float>& values) {
  upload_from(std::vector<double>(values.begin(), values.end()));
}

std::vector<double> Tensor::to_double() const {
  std::vector<unsigned char> raw(nbytes());
  download(raw.data(), raw.size());
  const size_t es = dtype_size(dtype_);
  std::vector<double> v(static_cast<size_t>(numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_element(dtype_, raw.data() + i * es);
  return v;
}

std::vector<float> Tensor::to_float() const {
  auto d = to_double();
  return std::vector<float>(d.begin(), d.end());
}

Tensor Tensor::reshape(const Shape& shape) const {
  require_defined(*this, "Tensor::reshape");
  bool ok = shape.size() <= static_cast<size_t>(kMaxDims);
  for (int64_t d : shape) ok = ok && d >= 0;
  if (!ok || kf::numel(shape) != numel())
    throw Error(ErrorCode::Shape, "Tensor::reshape: shape " + to_string(shape) + " does not hold the " +
                                      std::to_string(numel()) + " elements of a tensor of shape " + to_string(shape_) +
                                      " (as many elements, at most " + std::to_string(kMaxDims) + " dimensions)");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

void Tensor::fill(double v) { upload_from(std::vector<double>(static_cast<size_t>(numel()), v)); }

void Tensor::fill_bytes(uint8_t pattern) {
  require_defined(*this, "Tensor::fill_bytes");
  std::lock_guard<std::recursive_mutex> lock(owner_->mu);
  owner_->not_in_capture("Tensor::fill_bytes");
  owner_->device_call("Tensor::fill_bytes", [&] { owner_->device->fill_bytes(*buffer_, pattern, buffer_->size()); });
}

void* Tensor::host_data() const {
  return defined() ? owner_->device->host_data(*buffer_) : nullptr;
}

void* Tensor::device_data() const {
  return defined() ? owner_->device->device_data(*buffer_) : nullptr;
}

}  // namespace kf
