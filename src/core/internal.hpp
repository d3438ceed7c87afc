// Internals that kf's own tools use (kf-bench, kf-info): not part of the public API and not installed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kf/context.hpp"

namespace kf {
struct OpDef;
}

namespace kf::detail {

// Context::run for an op already looked up (get_op(OpId)): the Python module's per-call path
// (python/src/fast_call.cpp) names ops by OpId rather than by name. `checked`: the output shapes that
// check_call returned for these inputs and attributes, when the caller has just checked them to allocate
// the outputs (Context::call, fast_call), so that a call is checked once; the outputs are checked either way.
void run_op(Context& ctx, const OpDef& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            const Attrs& attrs, const std::vector<Shape>* checked = nullptr);

// Context::wrap_device for memory whose owner names this context's device (a torch CUDA tensor whose
// get_device() is the context's): the backend skips its query of the address (python/src/fast_call.cpp).
Tensor wrap_known_device(Context& ctx, void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keep_alive);

// kf-bench's matrix roofline: records the backend's in-register matrix multiply-add kernel (to be timed
// between two timestamps) and returns its floating-point operations, with what it measures in `what`; 0
// when the backend has none.
double record_matrix_peak(Context& ctx, std::string* what = nullptr);

// Faults (tests/test_faults.cpp): records a kernel that runs long and then ends by itself, about
// `iterations` dependent arithmetic steps (its time per step is the device's: calibrate), without waiting
// for it; false where the backend has none (the CPU backend runs kernels inline: there is no wait to bound).
bool record_long_kernel(Context& ctx, uint64_t iterations);

// kf-soak: the device's pipeline counts (hal::Device::pipeline_stats; zeros where the backend has none),
// and a wait for the recorded work followed by freeing the scratch the device keeps between calls
// (workspaces, tables), after which memory_usage() counts the caller's tensors alone.
struct PipelineStats {
  uint64_t created = 0;  // compute pipelines created since the context opened
  uint64_t held = 0;     // distinct pipelines (kernel variant and specialization) it holds
};
PipelineStats pipeline_stats(const Context& ctx);
void release_scratch(Context& ctx);

// Vulkan on NVIDIA: whether the opened device holds the GPU's CUDA driver context
// (hal/vulkan/cuda_context.cpp; KF_VK_CUDA_CONTEXT=0 turns it off). False on every other device.
bool holds_cuda_context(const Context& ctx);

}  // namespace kf::detail
