// Activations in float, written out rather than taken from GLSL's builtins: GLSL has no erf, and the
// builtin tanh may be a low-precision hardware approximation; these stay within 1e-6 relative.
const float SQRT1_2 = 0.70710678118654752;

// Their exponentials: in f32 (storage or output) through exp_full (exp_reduced.glsl), since a driver's exp
// may err by 3 + 2|x| ULP and sigmoid, silu, gelu, gelu_tanh and mish of |x| near 20 to 90 are
// exponentials of that size (1e-5 relative on lavapipe, past f32's tolerance where an output holds only
// such values); the 16-bit dtypes keep the driver's exp, far inside their tolerance.
#include "exp_reduced.glsl"
#if defined(DT_F32) || defined(ODT_F32)
#define ACT_EXP(x) exp_full(x)
#else
#define ACT_EXP(x) exp(x)
#endif

float relu_f(float x) { return x < 0.0 ? 0.0 : x; }  // NaN stays NaN
float sigmoid_f(float x) { return 1.0 / (1.0 + ACT_EXP(-x)); }

// tanh: Cephes' odd polynomial near 0, 1 - 2 / (exp(2|x|) + 1) elsewhere (saturates without overflow).
float tanh_f(float x) {
  if (isnan(x)) return x;  // min() below would drop a NaN
  float a = abs(x);
  if (a < 0.625) {
    float z = x * x;
    return ((((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z + 1.33314422036e-1) * z -
            3.33332819422e-1) * z * x + x;
  }
  float t = 1.0 - 2.0 / (exp(2.0 * min(a, 40.0)) + 1.0);  // (near 1: exp's error vanishes)
  return x < 0.0 ? -t : t;
}

// erfc with relative error below 1.2e-7 (Chebyshev fit, Numerical Recipes' erfcc).
float erfc_f(float x) {
  float z = abs(x);
  float t = 1.0 / (1.0 + 0.5 * z);
  float r = t * ACT_EXP(-z * z - 1.26551223 +
                    t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 +
                    t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
  return x >= 0.0 ? r : 2.0 - r;
}

float gelu_f(float x) { return 0.5 * x * erfc_f(-x * SQRT1_2); }
// gelu_tanh through 1 + tanh(u) = 2 / (1 + exp(-2u)): one exp and one division, and no cancellation
// where tanh(u) nears -1 (x < -3), so no branch either. (H100: bf16 bias_gelu_tanh read at 0.81 of copy
// through tanh_f, 0.84x torch.compile's time.) exp overflows to inf for u far below 0: x / inf = -0.
float gelu_tanh_f(float x) {
  const float u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return x / (1.0 + ACT_EXP(-2.0 * u));
}
float silu_f(float x) { return x / (1.0 + ACT_EXP(-x)); }
// log1p(u) for u in [0, 1] as 2 atanh(u / (2 + u)): GLSL has no log1p, and its log is only accurate
// to 2^-21 absolute near 1, too coarse for small u.
float log1p_unit(float u) {
  float z = u / (2.0 + u), w = z * z;  // |z| <= 1/3: nine terms reach float precision
  return 2.0 * z * (1.0 + w * (1.0 / 3.0 + w * (1.0 / 5.0 + w * (1.0 / 7.0 + w * (1.0 / 9.0 + w * (1.0 / 11.0 +
         w * (1.0 / 13.0 + w * (1.0 / 15.0 + w * (1.0 / 17.0)))))))));
}
// softplus = log1p(exp(x)) = max(x, 0) + log1p(exp(-|x|)), and x itself for x > 20 (docs/ops.md).
float softplus_f(float x) { return x > 20.0 ? x : max(x, 0.0) + log1p_unit(ACT_EXP(-abs(x))); }
// mish = x tanh(log(1 + e^x)) = x n / (n + 2) with n = e^x (e^x + 2): one exp and one division instead
// of an exp, a log series and a tanh (f16 mish_scale was compute-bound at 0.70 of copy on an H100).
// Relative error 2.6e-7 against mpmath over [-60, 20] in float32; x itself above 20 (docs/ops.md).
float mish_f(float x) {
  if (x > 20.0) return x;
  const float e = ACT_EXP(x), n = e * (e + 2.0);
  return x * (n / (n + 2.0));
}
