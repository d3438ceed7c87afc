// Backward elementwise ops (KERNELS.md section 3: the activations' backward; section 6: mse_backward),
// included by eltwise.comp for variants with GRAD_OP: grad_apply(u, v) of input 0 (dy, or a) and input 1
// (x, or b). Derivatives in float from activations.glsl's functions (eltwise.comp includes it); the ops
// without exp or tanh also compile for f64.

#if !defined(DT_F64)
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
float d_gelu_f(float x) { return 0.5 * erfc_f(-x * SQRT1_2) + x * 0.3989422804014327 * exp(-0.5 * x * x); }
float d_gelu_tanh_f(float x) {
  const float k = 0.7978845608028654, c = 0.044715;
  float u = k * (x + c * x * x * x);
  float e = exp(-2.0 * min(abs(u), 40.0));
  float one_plus_t = u >= 0.0 ? 2.0 / (1.0 + e) : 2.0 * e / (1.0 + e);  // 1 + tanh(u)
  return 0.5 * one_plus_t + 0.5 * x * sech2_f(u) * k * (1.0 + 3.0 * c * x * x);
}
float d_silu_f(float x) {
  float e = exp(-abs(x));
  float s = x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e), sm = x >= 0.0 ? e / (1.0 + e) : 1.0 / (1.0 + e);
  return s * (1.0 + x * sm);  // sm = 1 - s
}
float d_mish_f(float x) {
  float sp = softplus_f(x);
  return tanh_f(sp) + x * sech2_f(sp) * sigmoid_f(x);
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
