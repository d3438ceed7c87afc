// The dtype a matrix epilogue stores (Attrs::out_dtype of linear, linear_dropout and matmul): ODT_F32,
// ODT_F16 or ODT_BF16 when the backend compiles a variant for another output dtype than the inputs'
// (VulkanDevice::runtime_variant adds the define), else the storage dtype of common.glsl. The residual,
// read in the epilogue, has the output's dtype too. Included after common.glsl.
//   LOAD_OUT(name, i)        element i of a DECLARE_BUFFER buffer, as float
//   STORE_OUT(name, i, v)    stores element i alone (16-bit: two atomics on disjoint bits, as STORE_ELEM)
//   OUT_HALF                 whether the output is 16-bit (then OUT_PAIR(lo, hi) packs two into a word)
#if !defined(ODT_F32) && !defined(ODT_F16) && !defined(ODT_BF16) && !defined(ODT_F64)
#if defined(DT_F16)
#define ODT_F16
#elif defined(DT_BF16)
#define ODT_BF16
#elif defined(DT_F64)
#define ODT_F64
#else
#define ODT_F32
#endif
#endif

#if defined(ODT_F16)
#define OUT_HALF true
#define LOAD_OUT(name, i) (((i) & 1u) == 0u ? unpackHalf2x16(name##_w.w[(i) >> 1]).x : unpackHalf2x16(name##_w.w[(i) >> 1]).y)
#define OUT_BITS(val) (packHalf2x16(vec2(val, 0.0)) & 0xffffu)
#define OUT_PAIR(lo, hi) packHalf2x16(vec2(lo, hi))
#elif defined(ODT_BF16)
#define OUT_HALF true
#define LOAD_OUT(name, i) (((i) & 1u) == 0u ? bf16_lo(name##_w.w[(i) >> 1]) : bf16_hi(name##_w.w[(i) >> 1]))
#define OUT_BITS(val) to_bf16(val)
#define OUT_PAIR(lo, hi) pack_bf16x2(lo, hi)
#else
#define OUT_HALF false
#define OUT_PAIR(lo, hi) 0u
#endif

#if defined(ODT_F64)
#define LOAD_OUT(name, i) float(packDouble2x32(uvec2(name##_w.w[2u * (i)], name##_w.w[2u * (i) + 1u])))
#define STORE_OUT(name, i, val) { uvec2 u_ = unpackDouble2x32(double(val)); name##_w.w[2u * (i)] = u_.x; name##_w.w[2u * (i) + 1u] = u_.y; }
#elif defined(ODT_F32)
#define LOAD_OUT(name, i) uintBitsToFloat(name##_w.w[i])
#define STORE_OUT(name, i, val) { name##_w.w[i] = floatBitsToUint(float(val)); }
#else
#define STORE_OUT(name, i, val) { uint so_ = ((i) & 1u) * 16u; \
    atomicAnd(name##_w.w[(i) >> 1], ~(0xffffu << so_)); \
    atomicOr(name##_w.w[(i) >> 1], OUT_BITS(float(val)) << so_); }
#endif
