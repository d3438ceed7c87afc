#version 450
// embedding(tokens, table, pos?): y[r, c] = table[tokens[r], c] + pos[r mod L, c], r the token's linear
// index, L the last dimension of tokens (the position within it). The core has checked every id on the
// host (src/ops/linalg.cpp); an id out of range would still give NaN here, never a read out of bounds.
// WIDE (d a multiple of the 16-byte pack): one invocation per output pack. Otherwise one per output
// element, or per 32-bit word of two elements for f16 / bf16 (whole words: no atomics).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const bool HAS_POS = false;
layout(constant_id = 2) const bool WIDE = true;

layout(std430, binding = 0) readonly buffer TOK { int tok[]; };
DECLARE_BUFFER(1, T, readonly)
DECLARE_BUFFER(2, POS, readonly)
DECLARE_BUFFER(3, Y, )

layout(push_constant) uniform PC {
  uint rows, d, L, V;
  uint units;  // packs, elements or words of the output
} pc;

FT element(uint e) {
  const uint r = e / pc.d, c = e % pc.d;
  const int id = tok[r];
  FT v = (id >= 0 && uint(id) < pc.V) ? FT(LOAD_ELEM(T, uint(id) * pc.d + c)) : FT(uintBitsToFloat(0x7fc00000u));
  if (HAS_POS) v += FT(LOAD_ELEM(POS, (r % pc.L) * pc.d + c));
  return v;
}

void main() {
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint u = gl_GlobalInvocationID.x; u < pc.units; u += stride) {
    if (WIDE) {
      const uint e0 = u * VW, r = e0 / pc.d, c0 = e0 % pc.d;
      const int id = tok[r];
      FT v[VW];
      if (id >= 0 && uint(id) < pc.V) {
        unpack(T_v.v[(uint(id) * pc.d + c0) / VW], v);
      } else {
        [[unroll]] for (uint k = 0; k < VW; ++k) v[k] = FT(uintBitsToFloat(0x7fc00000u));
      }
      if (HAS_POS) {
        FT p[VW];
        unpack(POS_v.v[((r % pc.L) * pc.d + c0) / VW], p);
        [[unroll]] for (uint k = 0; k < VW; ++k) v[k] += p[k];
      }
      Y_v.v[u] = pack(v);
    } else {
#if defined(DT_F16) || defined(DT_BF16)
      const uint n = pc.rows * pc.d;
      const float a = element(2u * u), b = 2u * u + 1u < n ? element(2u * u + 1u) : 0.0;
#if defined(DT_F16)
      Y_w.w[u] = packHalf2x16(vec2(a, b));
#else
      Y_w.w[u] = pack_bf16x2(a, b);
#endif
#else
      STORE_ELEM(Y, u, element(u));
#endif
    }
  }
}
