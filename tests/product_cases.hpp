// What the tests of the matrix-product paths share (test_matmul_paths.cpp, test_coopmat.cpp): the linear /
// matmul cases, K % 8 == 0 (and N % 8 == 0 for matmul) so that the tensor-core kernels take them, with
// awkward M and N, bias, residual, batches, B shared by the batches, whole tiles; and the Vulkan devices.
#pragma once
#include <vector>

#include "kf/attrs.hpp"
#include "kf/context.hpp"
#include "kf/tensor.hpp"

namespace kf::test {

struct ProductCase {
  const char* op;
  std::vector<Shape> shapes;
  int64_t act;
};

inline const std::vector<ProductCase> kProductCases = {
    {"linear", {{130, 64}, {70, 64}, {70}, {}}, kActGelu},
    {"linear", {{1, 256}, {300, 256}, {300}, {}}, kActNone},
    {"linear", {{3, 7, 136}, {264, 136}, {}, {3, 7, 264}}, kActSilu},
    {"linear", {{257, 40}, {129, 40}, {129}, {257, 129}}, kActRelu},
    {"matmul", {{2, 67, 48}, {2, 48, 72}, {72}, {}}, kActGeluTanh},
    {"matmul", {{200, 520}, {520, 136}, {}, {}}, kActNone},
    {"linear", {{256, 64}, {128, 64}, {128}, {}}, kActGelu},  // whole 128 x 128 tiles (mm_cfg 11)
    {"matmul", {{2, 128, 48}, {2, 48, 256}, {}, {}}, kActNone},
    {"matmul", {{3, 40, 24}, {24, 56}, {56}, {3, 40, 56}}, kActRelu},  // B shared by the batches
};

// Listed once: each listing creates a Vulkan instance, and on an H100 (driver 580) the instance
// creations of listing before every tile shape ended in VK_ERROR_INCOMPATIBLE_DRIVER.
inline const std::vector<DeviceEntry>& vulkan_devices() {
  static const std::vector<DeviceEntry> v = [] {
    std::vector<DeviceEntry> r;
    for (const auto& e : Context::list_devices())
      if (e.usable && e.info.backend == "vulkan") r.push_back(e);
    return r;
  }();
  return v;
}

}  // namespace kf::test
