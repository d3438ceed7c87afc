// Device code shared by the CUDA/HIP kernels (as shaders/common.glsl, activations.glsl and philox.glsl
// are for the Vulkan ones): the storage dtypes and their 16-byte packs, the activations of docs/ops.md,
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

// ---- 16-byte copies from global to shared memory that hold no registers while in flight (cp.async on
// sm_80 and newer); elsewhere (HIP, the host emulation) a plain copy. kf_copy_wait() waits for this
// thread's copies: each thread reads back only the slots it copied, so no barrier is needed.
KF_DEV void kf_copy16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem) : "memory");
#else
  *static_cast<uint4*>(smem) = *static_cast<const uint4*>(gmem);
#endif
}
KF_DEV void kf_copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// ---- Math in the compute type. M = Math<C, FAST>: the vendor's accurate libm, or for FAST (16-bit
// dtypes) the hardware's approximate exp and division.
template <class C, bool FAST> struct Math;
// exp(x) and 1 / x as the bare approximate instructions with subnormals flushed (ex2.approx.ftz of
// x log2(e): two instructions; rcp.approx.ftz: one). __expf and __fdividef keep subnormal results and
// huge divisors with three to four more instructions each, which the 16-bit kernels below do not need:
// their exps only scale terms that vanish when tiny, and their divisors lie in [1, 2^60].
KF_DEV float ex2_ftz(float y) {  // 2^y
#if defined(__CUDA_ARCH__) && !defined(KF_HIP)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
  return r;
#else
  return kf_fast_exp(y * 0.69314718055994530942f);
#endif
}
KF_DEV float exp_ftz(float x) { return ex2_ftz(x * 1.44269504088896341f); }
KF_DEV float rcp_ftz(float x) {
#if defined(__CUDA_ARCH__) && !defined(KF_HIP)
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return kf_fast_div(1.0f, x);
#endif
}

// erfc(z) for z >= 0 given e = exp(-z^2) (Abramowitz & Stegun 7.1.26: absolute error below 1.5e-7),
// with the hardware's approximate reciprocal: for the 16-bit dtypes only.
KF_DEV float erfc_abs_fast(float z, float e) {
  const float t = rcp_ftz(fmaf(0.3275911f, z, 1.0f));
  const float q = t * fmaf(fmaf(fmaf(fmaf(1.061405429f, t, -1.453152027f), t, 1.421413741f), t, -0.284496736f), t, 0.254829592f);
  return q * e;
}
template <bool FAST> struct Math<float, FAST> {
  static constexpr bool kFast = FAST;
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
  // x << 0 costs at most |x| 2^-24 absolute, far inside the tolerances). The 16-bit dtypes' gelu_f
  // takes gelu_fast instead.
  static KF_DEV float one_plus_erf(float x) { return 1.0f + erff(x); }
};
template <bool FAST> struct Math<double, FAST> {
  static constexpr bool kFast = false;
  static KF_DEV double exp(double x) { return ::exp(x); }
  static KF_DEV double div(double a, double b) { return a / b; }
  static KF_DEV double tanh(double x) { return ::tanh(x); }
  static KF_DEV double one_plus_erf(double x) { return erfc(-x); }  // as the reference
};
KF_DEV float m_abs(float x) { return fabsf(x); }
KF_DEV double m_abs(double x) { return fabs(x); }
KF_DEV float m_sqrt(float x) { return sqrtf(x); }
KF_DEV double m_sqrt(double x) { return ::sqrt(x); }

// ---- The activations of docs/ops.md (same functions as shaders/activations.glsl and the reference).
template <class M, class C> KF_DEV C relu_f(C x) { return x < C(0) ? C(0) : x; }  // NaN stays NaN
template <class M, class C> KF_DEV C sigmoid_f(C x) { return M::div(C(1), C(1) + M::exp(-x)); }
template <class M, class C> KF_DEV C tanh_f(C x) { return M::tanh(x); }
// gelu for the 16-bit dtypes (FAST): gelu(x) = x (1 - s) for x >= 0 and x s below, s = erfc(|x| / sqrt 2) / 2,
// from Abramowitz & Stegun 7.1.26 (erfc(z) = t P(t) exp(-z^2), t = 1 / (1 + 0.3275911 z): absolute error
// below 1.5e-7, so below 1e-7 |x| in gelu; P's coefficients halved, exactly) with the approximate exp2
// and reciprocal: 13 instructions and two MUFU, no branch. erff (two polynomials, both evaluated and one
// selected: 25 instructions) held 16-bit gelu_dropout at 0.67 of copy on an H100, bias_gelu at 0.88 and
// layer_norm_gelu at 0.70 (compute-bound). gelu(+inf) = inf, gelu(-inf) and gelu(NaN) NaN (as the
// reference); exp(-x^2 / 2) flushes to 0 below about 1e-38, where gelu is below 1e-37 (0 in 16 bits).
KF_DEV float gelu_fast(float x) {
  const float e = ex2_ftz(x * (x * -0.72134752044448170f));                 // exp(-x^2 / 2)
  const float t = rcp_ftz(fmaf(0.23164188826636040f, fabsf(x), 1.0f));     // 0.3275911 / sqrt 2
  const float s = t * fmaf(fmaf(fmaf(fmaf(0.5307027145f, t, -0.7265760135f), t, 0.7107068705f), t, -0.142248368f), t,
                           0.127414796f) * e;
  return x * (x >= 0.0f ? 1.0f - s : s);
}
template <class M, class C> KF_DEV C gelu_f(C x) {
  if constexpr (M::kFast) return gelu_fast(x);
  else return C(0.5) * x * M::one_plus_erf(x * C(0.70710678118654752440));
}
template <class M, class C> KF_DEV C gelu_tanh_f(C x) {
  return C(0.5) * x * (C(1) + M::tanh(C(0.79788456080286535588) * (x + C(0.044715) * x * x * x)));
}
template <class M, class C> KF_DEV C silu_f(C x) { return M::div(x, C(1) + M::exp(-x)); }
// mish = x tanh(softplus(x)), softplus = log1p(exp(x)) and x itself for x > 20 (docs/ops.md). With
// e = exp(x), tanh(log(1 + e)) = n / (n + 2) for n = e (e + 2): one exp, no log, no cancellation
// (for x << 0 it tends to x e). Above 20, tanh(x) is 1 in float and within 1e-17 of it in double.
template <class M, class C> KF_DEV C mish_f(C x) {
  if (x > C(20)) return x;
  const C e = M::exp(x), n = e * (e + C(2));
  return x * M::div(n, n + C(2));
}

// ---- Derivatives of the activations (the backward ops of docs/ops.md section 3), as
// shaders/activations_grad.glsl in float and as the float64 reference (src/ops/backward.cpp) in double.
// Each of d gelu, d gelu_tanh, d silu and d mish crosses zero once, where its closed form is a difference
// of two terms that cancel: within 0.5 of the root x0 (held as hi + lo floats) the float versions use
// d = t q(t), t = (x - hi) - lo, q the degree-12 Taylor series of d(x) / (x - x0) about x0 (mpmath
// coefficients; the same tables as activations_grad.glsl). Layout: hi, lo, then the coefficients of q.
struct RootSeries {
  float r[15];
};
KF_DEV float near_root(float x, const RootSeries& s) {
  const float t = __fsub_rn(__fsub_rn(x, s.r[0]), s.r[1]);  // not reassociated into x - (hi + lo)
  float q = s.r[14];
#pragma unroll
  for (int k = 13; k >= 2; --k) q = fmaf(q, t, s.r[k]);
  return t * q;
}
KF_DEV bool is_near(float x, const RootSeries& s) { return fabsf(x - s.r[0]) < 0.5f; }
#define KF_ROOT_GELU {-0.7517915368080139f, 1.211444988769017e-08f, 4.314939923e-01f, 3.882849830e-01f, -1.819967640e-02f, -1.140082333e-01f, -1.477152215e-02f, 1.942167984e-02f, 4.539228379e-03f, -2.239538068e-03f, -7.448268387e-04f, 1.863397462e-04f, 8.615947861e-05f, -1.121438019e-05f, -7.748461307e-06f}
#define KF_ROOT_GELU_TANH {-0.7524614334106445f, 1.1339627903339533e-08f, 4.304000910e-01f, 3.875184461e-01f, -1.578285352e-02f, -1.139444831e-01f, -1.661932834e-02f, 1.968230946e-02f, 5.261059255e-03f, -2.422731846e-03f, -9.274420230e-04f, 2.639276405e-04f, 1.242522780e-04f, -3.495617169e-05f, -1.595089687e-05f}
#define KF_ROOT_SILU {-1.2784645557403564f, 1.2979282537628478e-08f, 2.178117057e-01f, 1.466487970e-01f, 1.887481422e-02f, -1.522265522e-02f, -6.606589138e-03f, 1.266274101e-04f, 7.985218818e-04f, 1.857072436e-04f, -4.090534237e-05f, -2.973354221e-05f, -2.942631889e-06f, 2.346029682e-06f, 8.599695028e-07f}
#define KF_ROOT_MISH {-1.1924312114715576f, -3.0439375464652585e-09f, 2.669479140e-01f, 2.047312641e-01f, 4.190782104e-02f, -2.027182272e-02f, -1.582112656e-02f, -3.360684927e-03f, 1.092405541e-03f, 9.898181021e-04f, 2.541293639e-04f, -4.196149603e-05f, -5.582891567e-05f, -1.729927081e-05f, 9.427361327e-07f}

// Float: written with e = exp(-|x|) (or of 2|u|) so that 1 - s, 1 + t and 1 - t^2 keep their relative
// precision where the activation saturates. Accurate libm (expf, erfcf) whatever the storage dtype.
KF_DEV float sech2_g(float u) {  // 1 - tanh(u)^2
  const float e = expf(-2.0f * fminf(fabsf(u), 40.0f));
  return 4.0f * e / ((1.0f + e) * (1.0f + e));
}
KF_DEV float d_sigmoid_g(float x) {
  const float e = expf(-fabsf(x));
  return e / ((1.0f + e) * (1.0f + e));
}
KF_DEV float d_tanh_g(float x) { return sech2_g(x); }
KF_DEV float d_gelu_g(float x) {
  const RootSeries s = {KF_ROOT_GELU};
  if (is_near(x, s)) return near_root(x, s);
  return 0.5f * erfcf(-x * 0.70710678118654752440f) + x * 0.3989422804014327f * expf(-0.5f * x * x);
}
KF_DEV float d_gelu_tanh_g(float x) {
  const RootSeries s = {KF_ROOT_GELU_TANH};
  if (is_near(x, s)) return near_root(x, s);
  const float k = 0.7978845608028654f, c = 0.044715f;
  const float u = k * (x + c * x * x * x);
  const float e = expf(-2.0f * fminf(fabsf(u), 40.0f));
  const float one_plus_t = u >= 0.0f ? 2.0f / (1.0f + e) : 2.0f * e / (1.0f + e);  // 1 + tanh(u)
  return 0.5f * one_plus_t + 0.5f * x * sech2_g(u) * k * (1.0f + 3.0f * c * x * x);
}
KF_DEV float d_silu_g(float x) {
  const RootSeries rs = {KF_ROOT_SILU};
  if (is_near(x, rs)) return near_root(x, rs);
  const float e = expf(-fabsf(x));
  const float s = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e), sm = x >= 0.0f ? e / (1.0f + e) : 1.0f / (1.0f + e);
  return s * (1.0f + x * sm);  // sm = 1 - s
}
// d mish = tanh(sp) + x sech(sp)^2 sigmoid(x), sp = softplus(x). With e = exp(x) and n = e (e + 2) (as
// mish_f): tanh(sp) = n / (n + 2), sech(sp)^2 = 4 (n + 1) / (n + 2)^2 = 4 (1 + e)^2 / (n + 2)^2 and
// sigmoid(x) = e / (1 + e), so d = w (n + 4 x e (1 + e) w) with w = 1 / (n + 2): one exp and one
// division in place of three exps, a log1p, a tanh and three divisions (f32 ran at 0.81 of copy on an
// H100). No cancellation but at the root (the series) and none at all for x > 0; for x << 0 it tends to
// e (1 + x). Above 20, sp = x and d = 1 in float (x sech(x)^2 < 1e-15); n + 2 stays below 2^58 there.
KF_DEV float d_mish_g(float x) {
  const RootSeries s = {KF_ROOT_MISH};
  if (is_near(x, s)) return near_root(x, s);
  if (x > 20.0f) return 1.0f;
  const float e = expf(x), n = e * (e + 2.0f), w = 1.0f / (n + 2.0f);
  return w * fmaf(4.0f * x * (e * (1.0f + e)), w, n);
}

// The same derivatives for the 16-bit dtypes (f16 / bf16 storage, float compute): the hardware's
// approximate exp and reciprocal, and no root series. Their output is rounded to 2^-11 (f16) or 2^-8
// (bf16) relative, and docs/ops.md's tolerances there (atol 1e-3 / 8e-3) are four orders above what the
// closed forms lose to cancellation at the roots (a few 1e-8 absolute). The accurate versions made the
// 16-bit backward ops compute-bound on an H100 (mish 0.40 of copy, gelu 0.60, gelu_tanh 0.71, silu 0.78).
KF_DEV float d_gelu_fast(float x) {  // Phi(x) + x phi(x): phi's exp serves erfc too
  const float e = ex2_ftz(x * (x * -0.72134752044448170f));  // exp(-x^2 / 2)
  const float q = erfc_abs_fast(fabsf(x) * 0.70710678118654752440f, e);  // erfc(|x| / sqrt 2) = 2 Phi(-|x|)
  const float phi_cdf = x >= 0.0f ? fmaf(-0.5f, q, 1.0f) : 0.5f * q;
  return fmaf(x * 0.3989422804014327f, e, phi_cdf);
}
KF_DEV float d_gelu_tanh_fast(float x) {
  const float k = 0.7978845608028654f, c = 0.044715f;
  const float x2 = x * x, u = k * x * fmaf(c, x2, 1.0f);
  const float e = ex2_ftz(fabsf(u) * -2.88539008177792681f), r = rcp_ftz(1.0f + e);
  const float half_one_plus_t = u >= 0.0f ? r : e * r;  // (1 + tanh(u)) / 2
  const float sech2 = 4.0f * e * r * r;
  return fmaf(0.5f * k * x * sech2, fmaf(3.0f * c, x2, 1.0f), half_one_plus_t);
}
KF_DEV float d_silu_fast(float x) {
  const float e = exp_ftz(-fabsf(x)), r = rcp_ftz(1.0f + e), er = e * r;
  const float s = x >= 0.0f ? r : er, sm = x >= 0.0f ? er : r;  // sigmoid(x), 1 - sigmoid(x)
  return s * fmaf(x, sm, 1.0f);
}
KF_DEV float d_mish_fast(float x) {  // as d_mish_g without the series
  if (x > 20.0f) return 1.0f;
  const float e = exp_ftz(x), n = e * (e + 2.0f), w = rcp_ftz(n + 2.0f);
  return w * fmaf(4.0f * x * (e * (1.0f + e)), w, n);
}

// Double: the reference's formulas.
KF_DEV double d_sigmoid_g(double x) {
  const double s = 1.0 / (1.0 + ::exp(-x));
  return s * (1 - s);
}
KF_DEV double d_tanh_g(double x) {
  const double t = ::tanh(x);
  return 1 - t * t;
}
KF_DEV double d_gelu_g(double x) {
  return 0.5 * erfc(-x / 1.41421356237309504880) + x * ::exp(-0.5 * x * x) / 2.50662827463100050242;
}
KF_DEV double d_gelu_tanh_g(double x) {
  const double k = 0.79788456080286535588, c = 0.044715;
  const double t = ::tanh(k * (x + c * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
}
KF_DEV double d_silu_g(double x) {
  const double s = 1.0 / (1.0 + ::exp(-x));
  return s * (1 + x * (1 - s));
}
KF_DEV double d_mish_g(double x) {
  const double sp = x > 20 ? x : log1p(::exp(x));
  const double t = ::tanh(sp);
  return t + x * (1 - t * t) / (1.0 + ::exp(-x));
}

// ---- Block sums in a fixed order (the same bits every run): a warp butterfly (every lane ends with the
// same value: each step adds the same two operands, in either order), then the warps' sums in warp
// order. sm holds one value per warp (blockDim.x a multiple of the warp, at most 32 warps).
template <class C> KF_DEV C warp_sum(C v) {
#pragma unroll
  for (int o = KF_WARP / 2; o > 0; o >>= 1) v += KF_SHFL_XOR(v, o);
  return v;
}
template <class C> KF_DEV C warp_max(C v) {
#pragma unroll
  for (int o = KF_WARP / 2; o > 0; o >>= 1) {
    const C u = KF_SHFL_XOR(v, o);
    v = u > v ? u : v;
  }
  return v;
}
template <class C> KF_DEV C block_sum(C v, C* sm) {
  v = warp_sum(v);
  const int nw = blockDim.x / KF_WARP;
  __syncthreads();  // sm is free (a previous sum has been read)
  if (threadIdx.x % KF_WARP == 0) sm[threadIdx.x / KF_WARP] = v;
  __syncthreads();
  C t = sm[0];
  for (int k = 1; k < nw; ++k) t += sm[k];
  return t;
}
template <class C> KF_DEV C block_max(C v, C* sm) {
  v = warp_max(v);
  const int nw = blockDim.x / KF_WARP;
  __syncthreads();
  if (threadIdx.x % KF_WARP == 0) sm[threadIdx.x / KF_WARP] = v;
  __syncthreads();
  C t = sm[0];
  for (int k = 1; k < nw; ++k) t = sm[k] > t ? sm[k] : t;
  return t;
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

// ---- The matrix products' and convolutions' epilogue of one value v of output element i, channel ch
// (EpilogueParams): + bias, the batch norm (conv2d_bn_relu), the activation, then dropout with the
// Philox word of element i (docs/ops.md; the same words as eltwise.cu's dropout). The residual, which
// comes after the dropout, is the caller's. In the compute type, with the accurate libm.
template <class T> KF_DEV typename T::C epilogue_value(typename T::C v, int64_t i, int64_t ch, const EpilogueParams& p) {
  using C = typename T::C;
  using M = Math<C, false>;
  if (p.bias) v += T::load(p.bias, ch);
  if (p.bn_w) {
    const C s = T::load(p.bn_w, ch) / m_sqrt(T::load(p.bn_var, ch) + C(p.eps));
    v = (v - T::load(p.bn_mean, ch)) * s + T::load(p.bn_b, ch);
  }
  switch (p.act) {
    case 1: v = relu_f<M>(v); break;
    case 2: v = gelu_f<M>(v); break;
    case 3: v = gelu_tanh_f<M>(v); break;
    case 4: v = silu_f<M>(v); break;
    default: break;
  }
  if (p.thr != 0u) {
    const uint64_t blk = static_cast<uint64_t>(i) >> 2;
    const uint4 w = philox4x32_10(make_uint4(static_cast<unsigned>(blk), static_cast<unsigned>(blk >> 32), p.off_lo, p.off_hi),
                                  p.seed_lo, p.seed_hi);
    v = (word_of(w, i) >> 8) >= p.thr ? v * C(p.keep_scale) : C(0);
  }
  return v;
}

#if KF_HAVE_CLUSTER_LAUNCH
// The launch shared by the long-row cluster kernels (norm.cu, rows.cu, train.cu; kernels.hpp ClusterPlan):
// k on clusters of c.P blocks of c.block threads, its parameters' smem_packs, cluster_p and cluster_part
// set from c, min(rows, 2^27) clusters striding over the rows. False, nothing launched and the error
// cleared, where there is no plan, the code has no cluster body (compute_80 PTX), the shared memory cannot
// be had or the launch is refused: the caller's other kernels then.
template <class Params>
inline bool launch_on_clusters(void (*k)(Params), const ClusterPlan& c, Params p, gpuStream_t s) {
  if (!c.P || !kf_cluster_code(reinterpret_cast<const void*>(k))) return false;
  p.smem_packs = c.smem, p.cluster_p = c.P, p.cluster_part = c.part;
  if (gpuFuncSetAttribute(reinterpret_cast<const void*>(k), gpuFuncAttributeMaxDynamicSharedMemorySize,
                          static_cast<int>(c.smem_bytes)) != gpuSuccess) {
    (void)gpuGetLastError();
    return false;
  }
  const int64_t clusters = p.rows < (int64_t(1) << 27) ? p.rows : (int64_t(1) << 27);
  if (kf_launch_cluster(k, static_cast<unsigned>(clusters * c.P), static_cast<unsigned>(c.block),
                        static_cast<size_t>(c.smem_bytes), s, static_cast<unsigned>(c.P), p) != gpuSuccess) {
    (void)gpuGetLastError();  // (refused, e.g. no room for the cluster)
    return false;
  }
  return true;
}
#endif

}  // namespace kf::hal::cuda
