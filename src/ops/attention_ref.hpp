// Shared by the attention ops (src/ops/attention.cpp, attention_backward.cpp) and the Vulkan attention
// kernels: the geometry of a call and the float64 helpers the references use.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "plan/attention.hpp"
#include "ops/registry.hpp"
#include "plan/attention.hpp"

namespace kf {

// The geometry of a call (src/plan/attention.hpp, shared with the backends).
using plan::AttnGeometry;
using plan::attn_geometry;

// The default ALiBi slope of head h of H (2^(-8 (h + 1) / H) for H a power of two).
double alibi_default_slope(int64_t h, int64_t H);

// Rotates x[0..D) in place by the rotary embedding at position pos (layout 1 half, 2 interleaved).
void rope_rotate(double* x, int64_t D, double pos, int64_t layout, double base);

// attention's argument checks and output shapes ([o] or [o, lse]).
std::vector<Shape> attention_infer(const OpDef& d, const std::vector<Shape>& in, const Attrs& a);

// Packed sequences: cu_seqlens rise from 0 to the packed lengths (kf::Error otherwise).
void check_cu_seqlens(const std::string& op, const AttnGeometry& g, const HostTensor& cuq, const HostTensor& cuk);

// attention_backward (src/ops/attention_backward.cpp), registered by register_attention_ops.
void register_attention_backward(std::vector<OpDef>& ops);

}  // namespace kf
