// What the CUDA backend's kernel table (kernels.cpp) says of an op, for tests/test_cuda_table.cpp, which
// checks it against the registry: the backend itself reads no registry.
#pragma once
#include <cstdint>

#include "core/op_id.hpp"

namespace kf::hal::cuda {

struct KernelSignature {
  bool present = false;      // the op has a kernel
  Family family = Family::Elementwise;
  const char* inputs = "";   // the inputs the kernel reads, in order ("x,bias")
  uint32_t i32_inputs = 0;   // bit k: input k read as int32; every other input in the op's dtype
  bool random = false;       // reads p, seed, offset (Philox dropout)
};
KernelSignature kernel_signature(OpId id);

}  // namespace kf::hal::cuda
