// Ordering work between a Vulkan context and a CUDA context of one GPU on the device (docs/python.md,
// "Vulkan and CUDA"); the memory they share comes from Context::empty_exportable and Context::share.
#pragma once
#include <memory>
#include <string>

#include "kf/context.hpp"

namespace kf {

struct TimelineImpl;

// A timeline semaphore of a Vulkan context exported as an opaque fd (VK_KHR_external_semaphore_fd) and
// imported by a CUDA context of the same GPU (cudaImportExternalSemaphore): each side's work waits for the
// other's on the device, and neither host waits. A cheap shared handle; safe to call from any thread.
class Timeline {
 public:
  // Whether create() works for these two contexts; when not, *why says what is missing.
  static bool supported(const Context& vulkan, const Context& cuda, std::string* why = nullptr);
  // Unsupported (saying what is missing) unless `vulkan` exports timeline semaphores and `cuda` imports
  // them; Device when they are different GPUs (DeviceInfo::uuid).
  static Timeline create(const Context& vulkan, const Context& cuda);
  // The CUDA context's work recorded so far (on its stream) runs before the Vulkan context's next work.
  void vulkan_after_cuda();
  // The Vulkan context's work recorded so far is submitted now and runs before the CUDA context's work
  // recorded from now on.
  void cuda_after_vulkan();

 private:
  std::shared_ptr<TimelineImpl> impl_;
};

}  // namespace kf
