// What the core needs of the CPU backend beyond the HAL: tensors over memory the caller owns (NumPy
// arrays, CPU torch tensors), shared without a copy. The CPU backend runs every op synchronously on host
// memory, so a wrapped buffer is read and written in place.
#pragma once
#include <cstddef>
#include <memory>

#include "hal/hal.hpp"

namespace kf::hal {

// A CPU buffer over `bytes` bytes at `data`, which `keep_alive` keeps valid for the buffer's life.
std::shared_ptr<Buffer> wrap_cpu_memory(void* data, size_t bytes, std::shared_ptr<void> keep_alive);
// The host memory of a buffer of the CPU backend (allocated or wrapped).
void* cpu_buffer_data(Buffer& buffer);

}  // namespace kf::hal
