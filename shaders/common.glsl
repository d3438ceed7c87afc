// Shared by every kernel: the storage dtype (one of DT_F32, DT_F16, DT_BF16, DT_F64), 16-byte packs,
// and element access. 16-bit dtypes are stored packed in 32-bit words and converted in the shader, so
// every variant runs on any Vulkan 1.2 device, with or without 16-bit storage.
#extension GL_EXT_control_flow_attributes : enable

#if defined(DT_F64)
#define FT double
#define VW 2u  // elements per 16-byte pack
#elif defined(DT_F16) || defined(DT_BF16)
#define FT float
#define VW 8u
#else
#define FT float
#define VW 4u
#endif

#define PACK_T(name) FT name[VW]

// Declares binding B twice: as 16-byte packs (name##_v) and as 32-bit words (name##_w).
#define DECLARE_BUFFER(B, name, access)                                   \
  layout(std430, binding = B) access buffer name##_V { uvec4 v[]; } name##_v; \
  layout(std430, binding = B) access buffer name##_W { uint w[]; } name##_w;

#if defined(DT_BF16) || defined(ODT_BF16)  // (ODT_*: out_dtype.glsl)
float bf16_lo(uint w) { return uintBitsToFloat(w << 16); }
float bf16_hi(uint w) { return uintBitsToFloat(w & 0xffff0000u); }
uint to_bf16(float f) {  // round to nearest even, NaN kept quiet
  uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
// Two values rounded to nearest even and packed (lo in the low half): the same bits as to_bf16 twice,
// in fewer instructions, since without native bf16 conversion this integer rounding is what holds
// bf16 kernels below f16 (H100): a bit extract and a three-input add per value, one byte permute
// for the pair, and one unordered compare that sends a pair holding a NaN to to_bf16.
uint pack_bf16x2(float lo, float hi) {
  uint a = floatBitsToUint(lo), b = floatBitsToUint(hi);
  a += 0x7fffu + bitfieldExtract(a, 16, 1);
  b += 0x7fffu + bitfieldExtract(b, 16, 1);
  const uint r = (a >> 16) | (b & 0xffff0000u);
  return any(isnan(vec2(lo, hi))) ? (to_bf16(lo) | (to_bf16(hi) << 16)) : r;
}
#endif

// Unpacks 16 bytes into VW values.
void unpack(uvec4 u, out FT x[VW]) {
#if defined(DT_F64)
  x[0] = packDouble2x32(u.xy);
  x[1] = packDouble2x32(u.zw);
#elif defined(DT_F16)
  [[unroll]] for (uint k = 0; k < 4u; ++k) {
    vec2 h = unpackHalf2x16(u[k]);
    x[2u * k] = h.x;
    x[2u * k + 1u] = h.y;
  }
#elif defined(DT_BF16)
  [[unroll]] for (uint k = 0; k < 4u; ++k) {
    x[2u * k] = bf16_lo(u[k]);
    x[2u * k + 1u] = bf16_hi(u[k]);
  }
#else
  x[0] = uintBitsToFloat(u.x);
  x[1] = uintBitsToFloat(u.y);
  x[2] = uintBitsToFloat(u.z);
  x[3] = uintBitsToFloat(u.w);
#endif
}

uvec4 pack(FT x[VW]) {
#if defined(DT_F64)
  return uvec4(unpackDouble2x32(x[0]), unpackDouble2x32(x[1]));
#elif defined(DT_F16)
  uvec4 u;
  [[unroll]] for (uint k = 0; k < 4u; ++k) u[k] = packHalf2x16(vec2(x[2u * k], x[2u * k + 1u]));
  return u;
#elif defined(DT_BF16)
  uvec4 u;
  [[unroll]] for (uint k = 0; k < 4u; ++k) u[k] = pack_bf16x2(x[2u * k], x[2u * k + 1u]);
  return u;
#else
  return uvec4(floatBitsToUint(x[0]), floatBitsToUint(x[1]), floatBitsToUint(x[2]), floatBitsToUint(x[3]));
#endif
}

// Element i of a buffer declared with DECLARE_BUFFER, read through its word view.
#if defined(DT_F64)
#define LOAD_ELEM(name, i) packDouble2x32(uvec2(name##_w.w[2u * (i)], name##_w.w[2u * (i) + 1u]))
#elif defined(DT_F16)
#define LOAD_ELEM(name, i) (((i) & 1u) == 0u ? unpackHalf2x16(name##_w.w[(i) >> 1]).x : unpackHalf2x16(name##_w.w[(i) >> 1]).y)
#elif defined(DT_BF16)
#define LOAD_ELEM(name, i) (((i) & 1u) == 0u ? bf16_lo(name##_w.w[(i) >> 1]) : bf16_hi(name##_w.w[(i) >> 1]))
#else
#define LOAD_ELEM(name, i) uintBitsToFloat(name##_w.w[i])
#endif

// Stores element i alone. 16-bit elements share a word with a neighbour that another invocation may
// own, so they are merged with two atomics on disjoint bits (used only off the wide paths).
#if defined(DT_F64)
#define STORE_ELEM(name, i, val) { uvec2 u_ = unpackDouble2x32(val); name##_w.w[2u * (i)] = u_.x; name##_w.w[2u * (i) + 1u] = u_.y; }
#elif defined(DT_F16) || defined(DT_BF16)
#if defined(DT_F16)
#define HALF_BITS(val) (packHalf2x16(vec2(val, 0.0)) & 0xffffu)
#else
#define HALF_BITS(val) to_bf16(val)
#endif
#define STORE_ELEM(name, i, val) { uint sh_ = ((i) & 1u) * 16u; \
    atomicAnd(name##_w.w[(i) >> 1], ~(0xffffu << sh_)); \
    atomicOr(name##_w.w[(i) >> 1], HALF_BITS(val) << sh_); }
#else
#define STORE_ELEM(name, i, val) { name##_w.w[i] = floatBitsToUint(val); }
#endif
