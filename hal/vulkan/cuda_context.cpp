// On an NVIDIA GPU, the Vulkan device holds the CUDA driver's primary context of the same GPU for its
// lifetime. Why: measured on an H100 (driver 580), Vulkan kernels that stream
// gigabytes (decode attention over a 128k-key cache, add_relu on 2 GiB inputs) read at 0.27-0.58 of the
// copy bandwidth while no CUDA context exists on the GPU, and at 0.99-1.02 while one does (even one held
// by another, idle process); nvidia-smi shows the same SM and memory clocks either way. The context costs
// some device memory and nothing else: no CUDA work is ever submitted to it.
//
// libcuda.so.1 (the driver API, installed with every NVIDIA driver) is opened at run time, so this
// needs neither the CUDA toolkit nor the CUDA backend; where it is missing or fails, nothing is held and
// the device works as before. KF_VK_CUDA_CONTEXT=0 turns it off (for measuring the effect): the device
// then makes no CudaContextHold (DeviceOptions::vk_cuda_context).
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "hal/vulkan/vk_common.hpp"

namespace kf::hal::vk {

namespace {
using CUresult = int;
struct CUuuid {
  unsigned char bytes[16];
};
using PFN_cuInit = CUresult (*)(unsigned);
using PFN_cuDeviceGetCount = CUresult (*)(int*);
using PFN_cuDeviceGet = CUresult (*)(int*, int);
using PFN_cuDeviceGetUuid = CUresult (*)(CUuuid*, int);
using PFN_cuDevicePrimaryCtxRetain = CUresult (*)(void**, int);
using PFN_cuDevicePrimaryCtxRelease = CUresult (*)(int);
}  // namespace

CudaContextHold::CudaContextHold(const uint8_t (&uuid)[16]) {
  lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) return;
  const auto sym = [&](const char* name) { return dlsym(lib_, name); };
  auto init = reinterpret_cast<PFN_cuInit>(sym("cuInit"));
  auto count = reinterpret_cast<PFN_cuDeviceGetCount>(sym("cuDeviceGetCount"));
  auto get = reinterpret_cast<PFN_cuDeviceGet>(sym("cuDeviceGet"));
  auto get_uuid = reinterpret_cast<PFN_cuDeviceGetUuid>(sym("cuDeviceGetUuid_v2"));
  if (!get_uuid) get_uuid = reinterpret_cast<PFN_cuDeviceGetUuid>(sym("cuDeviceGetUuid"));
  auto retain = reinterpret_cast<PFN_cuDevicePrimaryCtxRetain>(sym("cuDevicePrimaryCtxRetain"));
  release_ = sym("cuDevicePrimaryCtxRelease_v2");
  if (!release_) release_ = sym("cuDevicePrimaryCtxRelease");
  int n = 0;
  if (!init || !count || !get || !get_uuid || !retain || !release_ || init(0) != 0 || count(&n) != 0) return;
  for (int i = 0; i < n; ++i) {
    int dev = 0;
    CUuuid u{};
    if (get(&dev, i) != 0 || get_uuid(&u, dev) != 0 || std::memcmp(u.bytes, uuid, 16) != 0) continue;
    void* ctx = nullptr;
    if (retain(&ctx, dev) == 0) {
      device_ = dev;
      held_ = true;
    }
    return;
  }
}

CudaContextHold::~CudaContextHold() {
  if (held_) reinterpret_cast<PFN_cuDevicePrimaryCtxRelease>(release_)(device_);
  // libcuda stays loaded: unloading the driver library while the process lives is not supported.
}

}  // namespace kf::hal::vk
