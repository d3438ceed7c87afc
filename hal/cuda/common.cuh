// Device code shared by the CUDA/HIP kernels (as shaders/common.glsl, activations.glsl and philox.glsl
// are for the Vulkan ones): the storage dtypes and their 16-byte packs, the activations of KERNELS.md,
// and Philox4x32-10 bit for bit as the CPU reference (src/ops/reference_math.hpp).
#pragma once
#include <stdint.h>

#include "hal/cuda/gpu_compat.hpp"
#include "hal/cuda/kernels.hpp"

namespace kf::hal::cuda {

// ---- Storage dtypes. C is the compute type (float for the 16-bit and 32-bit dtypes, as every backend
// accumulates in float32 or better), VW the elements of a 16-byte pack.
struct F32 {
  using C = float;
  static constexpr int VW = 4, ES = 4;  // elements per pack, bytes per element
  static KF_DEV C load(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
  static KF_DEV void store(void* p, int64_t i, C v) { static_cast<float*>(p)[i] = v; }
  static KF_DEV void unpack(const uint4& u, C (&x)[VW]) {
    x[0] = __uint_as_float(u.x), x[1] = __uint_as_float(u.y), x[2] = __uint_as_float(u.z), x[3] = __uint_as_float(u.w);
  }
  static KF_DEV uint4 pack(const C (&x)[VW]) {
    return make_uint4(__float_as_uint(x[0]), __float_as_uint(x[1]), __float_as_uint(x[2]), __float_as_uint(x[3]));
  }
};

struct F64 {
  using C = double;
  static constexpr int VW = 2, ES = 8;
  static KF_DEV C load(const void* p, int64_t i) { return static_cast<const double*>(p)[i]; }
  static KF_DEV void store(void* p, int64_t i, C v) { static_cast<double*>(p)[i] = v; }
  static KF_DEV void unpack(const uint4& u, C (&x)[VW]) {
    x[0] = __hiloint2double(static_cast<int>(u.y), static_cast<int>(u.x));
    x[1] = __hiloint2double(static_cast<int>(u.w), static_cast<int>(u.z));
  }
  static KF_DEV uint4 pack(const C (&x)[VW]) {
    return make_uint4(static_cast<unsigned>(__double2loint(x[0])), static_cast<unsigned>(__double2hiint(x[0])),
                      static_cast<unsigned>(__double2loint(x[1])), static_cast<unsigned>(__double2hiint(x[1])));
  }
};

// 16-bit dtypes: 8 elements per pack, two per 32-bit word (low half first, little endian).
template <class Conv>
struct Half16 {
  using C = float;
  static constexpr int VW = 8, ES = 2;
  static KF_DEV C load(const void* p, int64_t i) { return Conv::to_float(static_cast<const unsigned short*>(p)[i]); }
  static KF_DEV void store(void* p, int64_t i, C v) { static_cast<unsigned short*>(p)[i] = Conv::from_float(v); }
  static KF_DEV void unpack(const uint4& u, C (&x)[VW]) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x[2 * k] = Conv::to_float(static_cast<unsigned short>(w[k] & 0xffffu));
      x[2 * k + 1] = Conv::to_float(static_cast<unsigned short>(w[k] >> 16));
    }
  }
  static KF_DEV uint4 pack(const C (&x)[VW]) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      w[k] = unsigned(Conv::from_float(x[2 * k])) | (unsigned(Conv::from_float(x[2 * k + 1])) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
};

struct HalfConv {
  static KF_DEV float to_float(unsigned short h) { return kf_half_to_float(h); }
  static KF_DEV unsigned short from_float(float f) { return kf_float_to_half(f); }
};

struct Bf16Conv {
  static KF_DEV float to_float(unsigned short b) { return __uint_as_float(unsigned(b) << 16); }
  static KF_DEV unsigned short from_float(float f) {  // round to nearest even, NaN kept quiet
    const unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((u >> 16) | 0x40u);
    return static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
};

using F16 = Half16<HalfConv>;
using BF16 = Half16<Bf16Conv>;

KF_DEV uint4 load_pack(const void* p, int64_t k) { return static_cast<const uint4*>(p)[k]; }
KF_DEV void store_pack(void* p, int64_t k, const uint4& v) { static_cast<uint4*>(p)[k] = v; }

// ---- Math in the compute type, through the vendor's accurate libm (never the fast intrinsics).
KF_DEV float m_exp(float x) { return expf(x); }
KF_DEV double m_exp(double x) { return exp(x); }
KF_DEV float m_tanh(float x) { return tanhf(x); }
KF_DEV double m_tanh(double x) { return tanh(x); }
KF_DEV float m_erfc(float x) { return erfcf(x); }
KF_DEV double m_erfc(double x) { return erfc(x); }
KF_DEV float m_log1p(float x) { return log1pf(x); }
KF_DEV double m_log1p(double x) { return log1p(x); }
KF_DEV float m_abs(float x) { return fabsf(x); }
KF_DEV double m_abs(double x) { return fabs(x); }

// ---- The activations of KERNELS.md, with the formulas of shaders/activations.glsl.
template <class C> KF_DEV C relu_f(C x) { return x < C(0) ? C(0) : x; }  // NaN stays NaN
template <class C> KF_DEV C sigmoid_f(C x) { return C(1) / (C(1) + m_exp(-x)); }
template <class C> KF_DEV C tanh_f(C x) { return m_tanh(x); }
template <class C> KF_DEV C gelu_f(C x) { return C(0.5) * x * m_erfc(-x * C(0.70710678118654752440)); }
template <class C> KF_DEV C gelu_tanh_f(C x) {
  return C(0.5) * x * (C(1) + m_tanh(C(0.79788456080286535588) * (x + C(0.044715) * x * x * x)));
}
template <class C> KF_DEV C silu_f(C x) { return x / (C(1) + m_exp(-x)); }
// softplus = log1p(exp(x)) = max(x, 0) + log1p(exp(-|x|)), and x itself for x > 20 (KERNELS.md).
template <class C> KF_DEV C softplus_f(C x) {
  return x > C(20) ? x : (x > C(0) ? x : C(0)) + m_log1p(m_exp(-m_abs(x)));
}
template <class C> KF_DEV C mish_f(C x) { return x * m_tanh(softplus_f(x)); }

// ---- Philox4x32-10 (Salmon et al. 2011): counter c, key k.
KF_DEV uint4 philox4x32_10(uint4 c, unsigned k0, unsigned k1) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const unsigned lo0 = 0xD2511F53u * c.x, hi0 = __umulhi(0xD2511F53u, c.x);
    const unsigned lo1 = 0xCD9E8D57u * c.z, hi1 = __umulhi(0xCD9E8D57u, c.z);
    c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// The Philox block of element i: counter (lo32(i >> 2), hi32(i >> 2), lo32(offset), hi32(offset)).
KF_DEV uint4 philox_block(int64_t i, const EltwiseParams& p) {
  const uint64_t blk = static_cast<uint64_t>(i) >> 2;
  return philox4x32_10(make_uint4(static_cast<unsigned>(blk), static_cast<unsigned>(blk >> 32), p.off_lo, p.off_hi),
                       p.seed_lo, p.seed_hi);
}

KF_DEV unsigned word_of(const uint4& w, int64_t i) {
  const unsigned j = static_cast<unsigned>(i) & 3u;
  return j == 0 ? w.x : j == 1 ? w.y : j == 2 ? w.z : w.w;
}

}  // namespace kf::hal::cuda
