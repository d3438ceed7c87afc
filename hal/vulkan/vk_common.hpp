// Shared by the Vulkan backend's files: VkResult checks mapped to kf::Error, and the classes that the
// backend's files share (instance, allocator, device).
#pragma once
#include <volk.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hal/hal.hpp"
#include "kf/error.hpp"

namespace kf::hal::vk {

const char* result_name(VkResult r);
// Throws kf::Error for a failed VkResult: device lost and out of memory are distinct codes.
void check(VkResult r, const char* what);
#define KF_VK(call) ::kf::hal::vk::check((call), #call)

// The instance, shared by the devices opened from it. Validation messages are counted here.
class Instance {
 public:
  static std::shared_ptr<Instance> create(bool validation);  // throws kf::Error when Vulkan is unavailable
  ~Instance();
  VkInstance handle() const { return instance_; }
  std::vector<VkPhysicalDevice> physical_devices() const;

  // The validation layer's spec version when it is on, else 0.
  uint32_t validation_layer() const { return validation_layer_; }
  uint64_t messages() const;
  std::vector<std::string> log() const;
  void record(const std::string& msg);

 private:
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  mutable std::mutex mu_;
  std::vector<std::string> log_;
  uint64_t count_ = 0;
  uint32_t validation_layer_ = 0;
};

// Reads a physical device's description and the capabilities kernels ask about.
DeviceInfo describe(VkPhysicalDevice pd, int index);

// NVIDIA only: holds the CUDA driver's primary context of the GPU whose UUID is given, for as long as it
// lives (why: cuda_context.cpp). held() is false where libcuda is absent or fails; the device makes
// none under KF_VK_CUDA_CONTEXT=0.
class CudaContextHold {
 public:
  explicit CudaContextHold(const uint8_t (&uuid)[16]);
  ~CudaContextHold();
  CudaContextHold(const CudaContextHold&) = delete;
  CudaContextHold& operator=(const CudaContextHold&) = delete;
  bool held() const { return held_; }

 private:
  void* lib_ = nullptr;
  void* release_ = nullptr;
  int device_ = 0;
  bool held_ = false;
};

// Sub-allocates device memory from large blocks (docs/architecture.md: never one allocation per tensor).
struct Allocation {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  VkDeviceSize size = 0;
  void* mapped = nullptr;  // host pointer when the memory type is host-visible
  uint32_t type = 0;
  int block = -1;          // -1: a dedicated allocation
};

class Allocator {
 public:
  Allocator(VkPhysicalDevice pd, VkDevice dev);
  ~Allocator();
  // Memory for `req`, preferring `want` flags and requiring `need` flags.
  Allocation allocate(const VkMemoryRequirements& req, VkMemoryPropertyFlags need, VkMemoryPropertyFlags want);
  // Device-local memory of its own for `req` (never sub-allocated), with `next` chained to its
  // VkMemoryAllocateInfo (exportable memory: VkExportMemoryAllocateInfo, VkMemoryDedicatedAllocateInfo).
  Allocation allocate_dedicated(const VkMemoryRequirements& req, const void* next);
  void free(const Allocation& a);
  bool host_visible(uint32_t type) const;
  // Bytes of live allocations (as requested, device-local and host-visible alike) and their peak.
  MemoryUsage usage() const;
  void reset_peak();

 private:
  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkDeviceSize size = 0;
    uint32_t type = 0;
    void* mapped = nullptr;
    std::map<VkDeviceSize, VkDeviceSize> free;  // offset -> size, coalesced
  };
  int find_type(uint32_t bits, VkMemoryPropertyFlags need, VkMemoryPropertyFlags want) const;
  VkDevice dev_;
  VkPhysicalDeviceMemoryProperties props_{};
  std::vector<Block> blocks_;
  mutable std::mutex mu_;
  uint64_t live_ = 0, peak_ = 0;
  static constexpr VkDeviceSize kBlockSize = 256ull << 20;
};

}  // namespace kf::hal::vk
