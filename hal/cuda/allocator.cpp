// Device memory of the CUDA/HIP backend: a caching sub-allocator over cudaMalloc (device.hpp says how).
// One cudaMalloc per slab or large block instead of one per tensor (docs/architecture.md: Kompute's mistake to
// avoid), and a freed block is reused without going back to the driver.
#include <algorithm>
#include <string>

#include "hal/cuda/device.hpp"
#include "kf/error.hpp"

namespace kf::hal::cuda {

Allocator::~Allocator() {
  // The device has synchronized its stream before it lets the allocator go; errors here (the runtime
  // shutting down at exit) are of no use to anyone.
  if (gpuSetDevice(ordinal_) != gpuSuccess) return;
  for (void* p : slabs_) (void)gpuFree(p);
  for (void* p : large_all_) (void)gpuFree(p);
  (void)gpuGetLastError();
}

int Allocator::size_class(size_t bytes) {
  int c = 0;
  size_t s = kMinSmall;
  while (s < bytes) s <<= 1, ++c;
  return c;
}

void* Allocator::device_malloc(size_t bytes) {
  // The device is set here, where the driver is called, rather than for every allocation: a block from
  // the free lists needs no driver call at all. (trim() frees after this has set it.)
  check(gpuSetDevice(ordinal_), "cudaSetDevice");
  void* p = nullptr;
  const gpuError_t e = gpuMalloc(&p, bytes);
  if (e == gpuErrorMemoryAllocation) {
    (void)gpuGetLastError();  // not sticky: clear it so that the next launch check does not see it
    return nullptr;
  }
  check(e, "cudaMalloc");
  reserved_ += bytes;
  return p;
}

Allocator::Block Allocator::allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const Block b = allocate_locked(bytes);
  live_ += b.size;  // the block's rounded size, as the Vulkan allocator counts its suballocations
  peak_ = std::max(peak_, live_);
  return b;
}

MemoryUsage Allocator::usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {live_, peak_};
}

void Allocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = live_;
}

Allocator::Block Allocator::allocate_locked(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= kMaxSmall) {
    const int c = size_class(bytes);
    const size_t chunk = kMinSmall << c;
    auto& list = small_free_[c];
    if (list.empty()) {
      char* slab = static_cast<char*>(device_malloc(kSlab));
      if (!slab && trim() > 0) slab = static_cast<char*>(device_malloc(kSlab));
      if (!slab)
        throw Error(ErrorCode::OutOfMemory, std::string(kBackend) + ": out of device memory for a slab of " +
                                                std::to_string(kSlab) + " bytes (" + std::to_string(reserved_) +
                                                " bytes held by this device's allocator)");
      slabs_.push_back(slab);
      for (size_t off = kSlab; off >= chunk; off -= chunk) list.push_back(slab + off - chunk);  // lowest last
    }
    void* p = list.back();
    list.pop_back();
    return {p, chunk};
  }
  const size_t rounded = (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
  auto it = large_free_.lower_bound(rounded);
  if (it != large_free_.end() && it->first <= rounded + rounded / 4) {
    Block b{it->second, it->first};
    large_free_.erase(it);
    return b;
  }
  void* p = device_malloc(rounded);
  if (!p && trim() > 0) p = device_malloc(rounded);
  if (!p) {
    size_t free_b = 0, total_b = 0;
    (void)gpuMemGetInfo(&free_b, &total_b);
    (void)gpuGetLastError();
    throw Error(ErrorCode::OutOfMemory, std::string(kBackend) + ": out of device memory allocating " +
                                            std::to_string(bytes) + " bytes (" + std::to_string(free_b) +
                                            " free of " + std::to_string(total_b) + "; " +
                                            std::to_string(reserved_) + " held by this device's allocator)");
  }
  large_all_.push_back(p);
  return {p, rounded};
}

void Allocator::release(const Block& b) {
  if (!b.ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  live_ -= b.size;
  if (b.size <= kMaxSmall) small_free_[size_class(b.size)].push_back(b.ptr);
  else large_free_.emplace(b.size, b.ptr);
}

size_t Allocator::trim() {
  // Called with mu_ held, from allocate(). cudaFree waits for the device to finish using the block.
  size_t freed = 0;
  for (auto& [size, p] : large_free_) {
    (void)gpuFree(p);
    for (auto it = large_all_.begin(); it != large_all_.end(); ++it)
      if (*it == p) {
        large_all_.erase(it);
        break;
      }
    freed += size;
  }
  (void)gpuGetLastError();
  large_free_.clear();
  reserved_ -= freed;
  return freed;
}

size_t Allocator::reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}

}  // namespace kf::hal::cuda
