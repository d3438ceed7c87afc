// The geometry of an attention call, shared by the attention ops' checks and references (src/ops/) and
// the backends' kernels, which must not include the references.
#pragma once
#include <cstdint>
#include <vector>

#include "kf/tensor.hpp"

namespace kf {

// q [B, Hq, SqT, D], k and v [B, Hkv, SkT, D]; nseq sequences: B, or N when packed (cu_seqlens, B = 1).
struct AttnGeometry {
  int64_t B = 0, Hq = 0, Hkv = 0, SqT = 0, SkT = 0, D = 0, nseq = 0;
  bool varlen = false;
};
AttnGeometry attn_geometry(const std::vector<Shape>& inputs);  // src/ops/attention.cpp

}  // namespace kf
