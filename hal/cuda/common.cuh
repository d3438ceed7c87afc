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
// FAST: the activations may use the hardware's approximate exp and division (16-bit dtypes only).
struct F32 {
  using C = float;
  static constexpr int VW = 4, ES = 4;  // elements per pack, bytes per element
  static constexpr bool FAST = false;
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
  static constexpr bool FAST = false;
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
  static constexpr bool FAST = true;
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
    for (int k = 0; k < 4; ++k) w[k] = Conv::pack2(x[2 * k], x[2 * k + 1]);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
};

struct HalfConv {
  static KF_DEV float to_float(unsigned short h) { return kf_half_to_float(h); }
  static KF_DEV unsigned short from_float(float f) { return kf_float_to_half(f); }
  static KF_DEV unsigned pack2(float lo, float hi) { return kf_pack_half2(lo, hi); }
};

struct Bf16Conv {
  static KF_DEV float to_float(unsigned short b) { return __uint_as_float(unsigned(b) << 16); }
  static KF_DEV unsigned short from_float(float f) {  // round to nearest even, NaN kept quiet
    const unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((u >> 16) | 0x40u);
    return static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  static KF_DEV unsigned pack2(float lo, float hi) {
#if KF_HAVE_BF16_PAIR
    return kf_pack_bf162(lo, hi);
#else
    return unsigned(from_float(lo)) | (unsigned(from_float(hi)) << 16);
#endif
  }
};

using F16 = Half16<HalfConv>;
using BF16 = Half16<Bf16Conv>;

KF_DEV uint4 load_pack(const void* p, int64_t k) { return static_cast<const uint4*>(p)[k]; }
KF_DEV void store_pack(void* p, int64_t k, const uint4& v) { static_cast<uint4*>(p)[k] = v; }

// ---- Math in the compute type. M = Math<C, FAST>: the vendor's accurate libm, or for FAST (16-bit
// dtypes) the hardware's approximate exp and division.
template <class C, bool FAST> struct Math;
template <bool FAST> struct Math<float, FAST> {
  static KF_DEV float exp(float x) {
    if constexpr (FAST) return kf_fast_exp(x);
    else return expf(x);
  }
  static KF_DEV float div(float a, float b) {
    if constexpr (FAST) return kf_fast_div(a, b);
    else return a / b;
  }
  static KF_DEV float tanh(float x) { return tanhf(x); }
  // gelu's erf term: 1 + erf(x / sqrt 2) (erff is much cheaper than erfcf; the cancellation for
  // x << 0 costs at most |x| 2^-24 absolute, far inside the tolerances).
  static KF_DEV float one_plus_erf(float x) { return 1.0f + erff(x); }
};
template <bool FAST> struct Math<double, FAST> {
  static KF_DEV double exp(double x) { return ::exp(x); }
  static KF_DEV double div(double a, double b) { return a / b; }
  static KF_DEV double tanh(double x) { return ::tanh(x); }
  static KF_DEV double one_plus_erf(double x) { return erfc(-x); }  // as the reference
};
KF_DEV float m_abs(float x) { return fabsf(x); }
KF_DEV double m_abs(double x) { return fabs(x); }

// ---- The activations of KERNELS.md (same functions as shaders/activations.glsl and the reference).
template <class M, class C> KF_DEV C relu_f(C x) { return x < C(0) ? C(0) : x; }  // NaN stays NaN
template <class M, class C> KF_DEV C sigmoid_f(C x) { return M::div(C(1), C(1) + M::exp(-x)); }
template <class M, class C> KF_DEV C tanh_f(C x) { return M::tanh(x); }
template <class M, class C> KF_DEV C gelu_f(C x) { return C(0.5) * x * M::one_plus_erf(x * C(0.70710678118654752440)); }
template <class M, class C> KF_DEV C gelu_tanh_f(C x) {
  return C(0.5) * x * (C(1) + M::tanh(C(0.79788456080286535588) * (x + C(0.044715) * x * x * x)));
}
template <class M, class C> KF_DEV C silu_f(C x) { return M::div(x, C(1) + M::exp(-x)); }
// mish = x tanh(softplus(x)), softplus = log1p(exp(x)) and x itself for x > 20 (KERNELS.md). With
// e = exp(x), tanh(log(1 + e)) = n / (n + 2) for n = e (e + 2): one exp, no log, no cancellation
// (for x << 0 it tends to x e). Above 20, tanh(x) is 1 in float and within 1e-17 of it in double.
template <class M, class C> KF_DEV C mish_f(C x) {
  if (x > C(20)) return x;
  const C e = M::exp(x), n = e * (e + C(2));
  return x * M::div(n, n + C(2));
}

// ---- Philox4x32-10 (Salmon et al. 2011): counter c, key k.
KF_DEV uint4 philox4x32_10(uint4 c, unsigned k0, unsigned k1) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    // 32 x 32 -> 64-bit products: one wide multiply-add each on NVIDIA GPUs.
    const unsigned long long p0 = 0xD2511F53ull * c.x, p1 = 0xCD9E8D57ull * c.z;
    const unsigned lo0 = static_cast<unsigned>(p0), hi0 = static_cast<unsigned>(p0 >> 32);
    const unsigned lo1 = static_cast<unsigned>(p1), hi1 = static_cast<unsigned>(p1 >> 32);
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
