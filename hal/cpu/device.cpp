// The CPU backend: the float64 reference of every op, run multi-threaded on host memory. It is the
// reference the tests compare against and the fallback when no GPU is usable. Kept plain on purpose:
// it is also the skeleton to copy when a new backend starts (docs/architecture.md).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "hal/hal.hpp"
#include "kf/error.hpp"
#include "ops/parallel.hpp"
#include "ops/registry.hpp"

namespace kf::hal {
namespace {

class CpuBuffer final : public Buffer {
 public:
  explicit CpuBuffer(size_t bytes) {
    data_ = static_cast<unsigned char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    if (!data_) throw Error(ErrorCode::OutOfMemory, "cpu: cannot allocate " + std::to_string(bytes) + " bytes");
    size_ = bytes;
  }
  // Memory the caller owns (Device::wrap_host): never freed here; `keep_alive` holds it.
  CpuBuffer(void* data, size_t bytes, std::shared_ptr<void> keep_alive)
      : data_(static_cast<unsigned char*>(data)), keep_alive_(std::move(keep_alive)), owned_(false) {
    size_ = bytes;
  }
  ~CpuBuffer() override {
    if (owned_) std::free(data_);
  }
  unsigned char* data() { return data_; }

 private:
  unsigned char* data_ = nullptr;
  std::shared_ptr<void> keep_alive_;
  bool owned_ = true;
};

unsigned char* bytes_of(const std::shared_ptr<Buffer>& b) { return static_cast<CpuBuffer*>(b.get())->data(); }

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    const size_t colon = line.find(": ");
    if (line.rfind("model name", 0) == 0 && colon != std::string::npos) return line.substr(colon + 2);
  }
  return "host CPU";
}

DeviceInfo cpu_info() {
  DeviceInfo d;
  d.backend = "cpu";
  d.index = 0;
  d.name = "cpu: " + cpu_name();
  d.vendor = "host";
  d.type = "cpu";
  d.driver = "kf float64 reference, " + std::to_string(std::max(1u, std::thread::hardware_concurrency())) + " threads";
  d.api_version = "-";
  d.caps.storage16 = d.caps.float16_arith = d.caps.bfloat16 = d.caps.float64 = true;
  d.caps.timestamps = true;
  d.caps.timestamp_period_ns = 1;
  return d;
}

class CpuDevice final : public Device {
 public:
  const DeviceInfo& info() const override { return info_; }
  // KF_TUNE max_binding: host memory has no binding limit, but the core's split path (src/core/split.cpp)
  // is tested here under a lowered one.
  void limit_binding(uint64_t bytes) { info_.caps.max_storage_range = bytes; }
  std::shared_ptr<Buffer> allocate(size_t bytes) override { return std::make_shared<CpuBuffer>(bytes); }
  void upload(Buffer& dst, const void* src, size_t bytes) override {
    std::memcpy(static_cast<CpuBuffer&>(dst).data(), src, bytes);
  }
  void download(Buffer& src, void* dst, size_t bytes) override {
    std::memcpy(dst, static_cast<CpuBuffer&>(src).data(), bytes);
  }
  void fill_bytes(Buffer& dst, uint8_t pattern, size_t bytes) override {
    std::memset(static_cast<CpuBuffer&>(dst).data(), pattern, bytes);
  }
  std::shared_ptr<Buffer> wrap_host(void* data, size_t bytes, std::shared_ptr<void> keep_alive) override {
    return std::make_shared<CpuBuffer>(data, bytes, std::move(keep_alive));
  }
  void* host_data(Buffer& buffer) override { return static_cast<CpuBuffer&>(buffer).data(); }
  bool supports(const OpCall&, std::string*) const override { return true; }

  Variant dispatch(const OpCall& call) override {
    const DType t = call.dtype;
    std::vector<HostTensor> in(call.inputs.size()), out(call.outputs.size());
    for (size_t k = 0; k < call.inputs.size(); ++k) {
      const auto& a = call.inputs[k];
      if (!a.buffer) continue;
      in[k].shape = a.shape;
      in[k].data.resize(static_cast<size_t>(a.numel));
      const unsigned char* src = bytes_of(a.buffer) + a.offset;
      double* dst = in[k].data.data();
      const DType tk = call.op->input_dtype(k, t, call.attrs);  // i32 class indices; the residual in out_dtype
      const size_t esk = dtype_size(tk);
      parallel_for(a.numel, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = load_element(tk, src + i * esk);
      });
    }
    for (size_t k = 0; k < call.outputs.size(); ++k) {
      out[k].shape = call.outputs[k].shape;
      out[k].data.assign(static_cast<size_t>(call.outputs[k].numel), 0.0);
    }
    call.op->reference(in, out, call.attrs);
    const DType to = call.op->output_dtype(t, call.attrs);  // Attrs::out_dtype (linear, matmul)
    const size_t eso = dtype_size(to);
    for (size_t k = 0; k < call.outputs.size(); ++k) {
      unsigned char* dst = bytes_of(call.outputs[k].buffer) + call.outputs[k].offset;
      const double* src = out[k].data.data();
      parallel_for(call.outputs[k].numel, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) store_element(to, dst + i * eso, src[i]);
      });
    }
    return "cpu:f64-reference";
  }

  void synchronize() override {}
  uint32_t timestamp() override {
    stamps_.push_back(std::chrono::steady_clock::now());
    return static_cast<uint32_t>(stamps_.size() - 1);
  }
  double elapsed_ms(uint32_t b, uint32_t e) override {
    if (b >= stamps_.size() || e >= stamps_.size())
      throw Error(ErrorCode::InvalidArgument, "cpu: timestamp index out of range");
    return std::chrono::duration<double, std::milli>(stamps_[e] - stamps_[b]).count();
  }
  void reset_timestamps() override { stamps_.clear(); }

 private:
  DeviceInfo info_ = cpu_info();
  std::vector<std::chrono::steady_clock::time_point> stamps_;
};

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::vector<DeviceEntry> enumerate(const ContextOptions&) override { return {DeviceEntry{cpu_info(), true, ""}}; }
  std::unique_ptr<Device> open(int, const DeviceOptions& o) override {
    auto d = std::make_unique<CpuDevice>();
    d->limit_binding(o.tuning.max_binding);
    return d;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace kf::hal
