// The dropout generator's threshold (docs/ops.md, the dropout generator), shared by the reference and every
// backend's kernels so that they keep exactly the same elements.
#pragma once
#include <cmath>
#include <cstdint>

namespace kf::plan {

// keep(i) = u >= p with u = (word >> 8) * 2^-24, evaluated exactly as (word >> 8) >= threshold.
// Ops without dropout (linear) also compute it from whatever p holds, which nothing checks there: p
// outside [0, 1] (or NaN) is clamped rather than converted out of the uint32 range (undefined behaviour).
inline uint32_t dropout_threshold(double p) {
  if (!(p > 0)) return 0;
  if (p >= 1) return 16777216u;
  return uint32_t(std::ceil(p * 16777216.0));
}

}  // namespace kf::plan
