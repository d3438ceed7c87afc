// The one place the core names backends: their factories, in order of preference.
#include "core/context_impl.hpp"

namespace kf {

std::vector<std::unique_ptr<hal::Backend>> compiled_backends() {
  std::vector<std::unique_ptr<hal::Backend>> v;
#ifdef KF_HAVE_VULKAN
  v.push_back(hal::make_vulkan_backend());
#endif
  v.push_back(hal::make_cpu_backend());
  return v;
}

}  // namespace kf
