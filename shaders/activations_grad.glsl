// Backward elementwise ops (docs/ops.md section 3: the activations' backward; section 6: mse_backward),
// included by eltwise.comp for variants with GRAD_OP: grad_apply(u, v) of input 0 (dy, or a) and input 1
// (x, or b). Derivatives in float from activations.glsl's functions (eltwise.comp includes it); the ops
// without exp or tanh also compile for f64.

#if !defined(DT_F64)
// Each of these derivatives crosses zero once (gelu and gelu_tanh near -0.752, silu near -1.278, mish near
// -1.192), where its closed form is a difference of two terms that cancel: an f32 evaluation then has a
// relative error far above 1e-6. Within 0.5 of the root x0 (held as two floats, hi + lo) the kernels
// use d = t q(t), t = (x - hi) - lo, with q the Taylor series of d(x) / (x - x0) about x0 to degree 12
// (coefficients from mpmath at 50 digits; truncation below 2e-8 there): relative precision at the root.
// Layout: hi, lo, then the coefficients of q.
const float ROOT_GELU[15] = float[15](-0.7517915368080139, 1.211444988769017e-08, 4.314939923e-01, 3.882849830e-01, -1.819967640e-02, -1.140082333e-01, -1.477152215e-02, 1.942167984e-02, 4.539228379e-03, -2.239538068e-03, -7.448268387e-04, 1.863397462e-04, 8.615947861e-05, -1.121438019e-05, -7.748461307e-06);  // x0 = -0.75179152469356445746
const float ROOT_GELU_TANH[15] = float[15](-0.7524614334106445, 1.1339627903339533e-08, 4.304000910e-01, 3.875184461e-01, -1.578285352e-02, -1.139444831e-01, -1.661932834e-02, 1.968230946e-02, 5.261059255e-03, -2.422731846e-03, -9.274420230e-04, 2.639276405e-04, 1.242522780e-04, -3.495617169e-05, -1.595089687e-05);  // x0 = -0.75246142207101625849
const float ROOT_SILU[15] = float[15](-1.2784645557403564, 1.2979282537628478e-08, 2.178117057e-01, 1.466487970e-01, 1.887481422e-02, -1.522265522e-02, -6.606589138e-03, 1.266274101e-04, 7.985218818e-04, 1.857072436e-04, -4.090534237e-05, -2.973354221e-05, -2.942631889e-06, 2.346029682e-06, 8.599695028e-07);  // x0 = -1.2784645427610737951
const float ROOT_MISH[15] = float[15](-1.1924312114715576, -3.0439375464652585e-09, 2.669479140e-01, 2.047312641e-01, 4.190782104e-02, -2.027182272e-02, -1.582112656e-02, -3.360684927e-03, 1.092405541e-03, 9.898181021e-04, 2.541293639e-04, -4.196149603e-05, -5.582891567e-05, -1.729927081e-05, 9.427361327e-07);  // x0 = -1.1924312145154952121
float near_root(float x, float r[15]) {
  precise float t = (x - r[0]) - r[1];  // precise: kept from being reassociated into x - (hi + lo)
  float q = r[14];
  for (int k = 13; k >= 2; --k) q = q * t + r[k];
  return t * q;
}
bool is_near(float x, float r[15]) { return abs(x - r[0]) < 0.5; }

// Written with e = exp(-|x|) (or of 2|u|) so that 1 - s, 1 + t and 1 - t^2 keep their relative precision
// where the activation saturates (1 - sigmoid(x) computed as a difference loses every digit for x > 17).
float d_sigmoid_f(float x) {
  float e = exp(-abs(x));
  return e / ((1.0 + e) * (1.0 + e));
}
float sech2_f(float u) {  // 1 - tanh(u)^2
  float e = exp(-2.0 * min(abs(u), 40.0));
  return 4.0 * e / ((1.0 + e) * (1.0 + e));
}
float d_tanh_f(float x) { return sech2_f(x); }
// Phi(x) + x phi(x): the normal distribution and density.
float d_gelu_f(float x) {
  if (is_near(x, ROOT_GELU)) return near_root(x, ROOT_GELU);
  return 0.5 * erfc_f(-x * SQRT1_2) + x * 0.3989422804014327 * exp(-0.5 * x * x);
}
float d_gelu_tanh_f(float x) {
  if (is_near(x, ROOT_GELU_TANH)) return near_root(x, ROOT_GELU_TANH);
  const float k = 0.7978845608028654, c = 0.044715;
  float u = k * (x + c * x * x * x);
  float e = exp(-2.0 * min(abs(u), 40.0));
  float one_plus_t = u >= 0.0 ? 2.0 / (1.0 + e) : 2.0 * e / (1.0 + e);  // 1 + tanh(u)
  return 0.5 * one_plus_t + 0.5 * x * sech2_f(u) * k * (1.0 + 3.0 * c * x * x);
}
float d_silu_f(float x) {
  if (is_near(x, ROOT_SILU)) return near_root(x, ROOT_SILU);
  float e = exp(-abs(x));
  float s = x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e), sm = x >= 0.0 ? e / (1.0 + e) : 1.0 / (1.0 + e);
  return s * (1.0 + x * sm);  // sm = 1 - s
}
// tanh(sp) + x sech^2(sp) sigmoid(x), sp = softplus(x). With e = e^x and n = e (e + 2) (as mish_f):
// tanh(sp) = n / a, sech^2(sp) = 4 (n + 1) / a^2, sigmoid(x) = e / b, a = n + 2, b = 1 + e, so one exp
// and one division: (n a b + 4 x e (n + 1)) / (a^2 b). (A softplus, a tanh, a sech^2 and a sigmoid
// before, four exps and four divisions: 16-bit mish_backward read 0.62-0.65 of copy on an H100.) In
// float32 against float64 over [-60, 15] outside the root's interval: relative error at most 6.7e-7.
// Above 15 the derivative is 1 in float (and a^2 b would overflow past 17.7).
float d_mish_f(float x) {
  if (is_near(x, ROOT_MISH)) return near_root(x, ROOT_MISH);
  if (x > 15.0) return 1.0;
  const float e = exp(x), n = e * (e + 2.0), a = n + 2.0, b = 1.0 + e;
  return (n * a * b + 4.0 * x * e * (n + 1.0)) / (a * a * b);
}
#endif

FT grad_apply(FT u, FT v) {
#if defined(OP_mse_backward)
  return FT(2) * (u - v) / FT(pc.n);  // d mean((a - b)^2) / d a
#elif defined(OP_relu_backward)
  return v > FT(0) ? u : FT(0);       // torch passes the gradient where x > 0
#elif defined(OP_sigmoid_backward)
  return u * d_sigmoid_f(v);
#elif defined(OP_tanh_backward)
  return u * d_tanh_f(v);
#elif defined(OP_gelu_backward)
  return u * d_gelu_f(v);
#elif defined(OP_gelu_tanh_backward)
  return u * d_gelu_tanh_f(v);
#elif defined(OP_silu_backward)
  return u * d_silu_f(v);
#elif defined(OP_mish_backward)
  return u * d_mish_f(v);
#else
#error "activations_grad.glsl: unknown OP_<name>"
#endif
}
