// Backward elementwise ops (KERNELS.md section 3: the activations' backward; section 6: mse_backward),
// included by eltwise.comp for variants with GRAD_OP: grad_apply(u, v) of input 0 (dy, or a) and input 1
// (x, or b). Derivatives in float from activations.glsl's functions (eltwise.comp includes it); the ops
// without exp or tanh also compile for f64.

FT grad_apply(FT u, FT v) {
#if defined(OP_mse_backward)
  return FT(2) * (u - v) / FT(pc.n);  // d mean((a - b)^2) / d a
#else
#error "activations_grad.glsl: unknown OP_<name>"
#endif
}
