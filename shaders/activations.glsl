// Activations in float, written out rather than taken from GLSL's builtins: GLSL has no erf, and the
// builtin tanh may be a low-precision hardware approximation; these stay within 1e-6 relative.
const float SQRT1_2 = 0.70710678118654752;

float relu_f(float x) { return x < 0.0 ? 0.0 : x; }  // NaN stays NaN
float sigmoid_f(float x) { return 1.0 / (1.0 + exp(-x)); }

// tanh: Cephes' odd polynomial near 0, 1 - 2 / (exp(2|x|) + 1) elsewhere (saturates without overflow).
float tanh_f(float x) {
  float a = abs(x);
  if (a < 0.625) {
    float z = x * x;
    return ((((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z + 1.33314422036e-1) * z -
            3.33332819422e-1) * z * x + x;
  }
  float t = 1.0 - 2.0 / (exp(2.0 * min(a, 40.0)) + 1.0);
  return x < 0.0 ? -t : t;
}

// erfc with relative error below 1.2e-7 (Chebyshev fit, Numerical Recipes' erfcc).
float erfc_f(float x) {
  float z = abs(x);
  float t = 1.0 / (1.0 + 0.5 * z);
  float r = t * exp(-z * z - 1.26551223 +
                    t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 +
                    t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
  return x >= 0.0 ? r : 2.0 - r;
}

float gelu_f(float x) { return 0.5 * x * erfc_f(-x * SQRT1_2); }
float gelu_tanh_f(float x) { return 0.5 * x * (1.0 + tanh_f(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
float silu_f(float x) { return x / (1.0 + exp(-x)); }
float softplus_f(float x) { return x > 20.0 ? x : (x < -15.0 ? exp(x) : log(1.0 + exp(x))); }
float mish_f(float x) { return x * tanh_f(softplus_f(x)); }
