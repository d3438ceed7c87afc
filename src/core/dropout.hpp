// The dropout mask's threshold (docs/ops.md, the dropout generator): an element is dropped when the low
// 24 bits of its Philox word are below it. Shared by the reference and every backend's kernels.
#pragma once
#include <cmath>
#include <cstdint>

namespace kf {

inline uint32_t dropout_threshold(double p) { return uint32_t(std::ceil(p * 16777216.0)); }

}  // namespace kf
