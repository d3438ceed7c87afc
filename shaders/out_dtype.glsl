// The dtype a matrix epilogue stores (Attrs::out_dtype of linear, linear_dropout and matmul): ODT_F32,
// ODT_F16 or ODT_BF16 when the backend compiles a variant for another output dtype than the inputs'
// (VulkanDevice::runtime_variant adds the define; for the KHR cooperative-matrix kernels, which Debian's
// run-time glslang cannot compile, variants.cmake does), else the storage dtype of common.glsl. The residual,
// read in the epilogue, has the output's dtype too. Included after common.glsl.
//   LOAD_OUT(name, i)        element i of a DECLARE_BUFFER buffer, as float
//   STORE_OUT(name, i, v)    stores element i alone (16-bit: two atomics on disjoint bits, as STORE_ELEM)
//   OUT_HALF                 whether the output is 16-bit (then OUT_PAIR(lo, hi) packs two into a word,
//                            OUT_LO(w) / OUT_HI(w) unpack its halves)
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
#define OUT_LO(w) unpackHalf2x16(w).x
#define OUT_HI(w) unpackHalf2x16(w).y
#define OUT_BITS(val) (packHalf2x16(vec2(val, 0.0)) & 0xffffu)
#define OUT_PAIR(lo, hi) packHalf2x16(vec2(lo, hi))
#elif defined(ODT_BF16)
#define OUT_HALF true
#define OUT_LO(w) bf16_lo(w)
#define OUT_HI(w) bf16_hi(w)
#define OUT_BITS(val) to_bf16(val)
#define OUT_PAIR(lo, hi) pack_bf16x2(lo, hi)
#else
#define OUT_HALF false
#define OUT_PAIR(lo, hi) 0u
#define OUT_LO(w) 0.0
#define OUT_HI(w) 0.0
#endif
#if defined(ODT_F16) || defined(ODT_BF16)
#define LOAD_OUT(name, i) (((i) & 1u) == 0u ? OUT_LO(name##_w.w[(i) >> 1]) : OUT_HI(name##_w.w[(i) >> 1]))
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

// Eight consecutive elements from element i read as 16-byte packs, for epilogues where each invocation
// owns eight consecutive outputs (mm_coopmat.comp, which stores them as packs too): 16-bit needs
// i % 8 == 0 (one pack), f32 i % 4 == 0 (two packs, the second only when hi4, i.e. element i + 4
// exists). One 16-byte access instead of eight scalar ones.
#if !defined(ODT_F64)
#define LOAD_OUT8(name, i, hi4, dst) {                                                          \
    if (OUT_HALF) {                                                                             \
      const uvec4 p_ = name##_v.v[(i) >> 3];                                                    \
      [[unroll]] for (uint q_ = 0u; q_ < 4u; ++q_) {                                            \
        dst[2u * q_] = OUT_LO(p_[q_]); dst[2u * q_ + 1u] = OUT_HI(p_[q_]); }                    \
    } else {                                                                                    \
      const uvec4 p_ = name##_v.v[(i) >> 2];                                                    \
      uvec4 r_ = uvec4(0u);                                                                     \
      if (hi4) r_ = name##_v.v[((i) >> 2) + 1u];                                                \
      [[unroll]] for (uint q_ = 0u; q_ < 4u; ++q_) {                                            \
        dst[q_] = uintBitsToFloat(p_[q_]); dst[q_ + 4u] = uintBitsToFloat(r_[q_]); }            \
    } }
#endif
