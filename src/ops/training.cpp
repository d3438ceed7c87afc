// Section 6 of KERNELS.md and the section 3 backward passes.
#include "ops/registry.hpp"

namespace kf {

void register_training_ops(std::vector<OpDef>&) {}

}  // namespace kf
