// The one place the core names backends: their factories, in order of preference.
#include "core/context_impl.hpp"

namespace kf {

#ifdef KF_HAVE_CUDA  // hal/cuda/device.cpp: the CUDA backend, or the HIP one when built with KF_HIP
namespace hal {
std::unique_ptr<Backend> make_cuda_backend();
}
#endif

std::vector<std::unique_ptr<hal::Backend>> compiled_backends() {
  std::vector<std::unique_ptr<hal::Backend>> v;
#ifdef KF_HAVE_VULKAN
  v.push_back(hal::make_vulkan_backend());
#endif
#ifdef KF_HAVE_CUDA  // after Vulkan: the automatic choice stays on the design's main path
  v.push_back(hal::make_cuda_backend());
#endif
  v.push_back(hal::make_cpu_backend());
  return v;
}

}  // namespace kf
