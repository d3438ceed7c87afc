// Exponentials whose error does not grow with their argument, on any conformant driver (docs/ops.md,
// special values). GLSL lets exp and exp2 err by 3 + 2|x| ULP; these call them only on a reduced
// argument of magnitude 0.5 at most and scale by a power of two. Included by the kernels that
// exponentiate large arguments in f32 (rows.comp, loss.comp, activations.glsl).
#ifndef KF_EXP_REDUCED_GLSL
#define KF_EXP_REDUCED_GLSL

// 2^t for t <= 0 (or NaN) with the driver's exp2 used only on [-0.5, 0.5]: GLSL lets exp2 err by
// 3 + 2|t| ULP, so 2^t is formed as 2^(t - n) 2^n, n = round(t) (Cody-Waite: t - n is exact), and its
// error stays within about 4 ULP for every t. Below -160 the result is 0; NaN stays NaN (the
// comparison is false for it, and any n keeps a NaN). Costs a round, a subtraction and an ldexp.
float exp2_reduced(float t) {
  const float tc = t < -160.0 ? -160.0 : t;
  const float n = round(tc);
  return ldexp(exp2(tc - n), clamp(int(n), -160, 127));
}

// e^d for d <= 0 (or NaN), the same way in base e: n = round(d log2 e), r = d - n ln2 with ln2 split in
// two (its high part has 16 bits, so n ln2_hi is exact for |n| < 256) and |r| <= 0.35, then
// ldexp(exp(r), n). Below -104 the result is 0 (e^-104 < 2^-149).
float exp_reduced(float d) {
  const float dc = d < -104.0 ? -104.0 : d;
  const float n = round(dc * 1.4426950408889634);
  const float r = (dc - n * 0.693145751953125) - n * 1.428606765330187e-6;
  return ldexp(exp(r), clamp(int(n), -160, 127));
}

// e^d for any d (the activations: sigmoid(-50) takes e^50): as exp_reduced, +inf above 88.7228 (e^d past
// f32's largest value), 0 below -104, NaN for NaN. 2^n is applied in two halves, so that neither factor
// leaves f32's range for n up to 128.
float exp_full(float d) {
  if (d > 88.7228394) return uintBitsToFloat(0x7f800000u);
  const float dc = d < -104.0 ? -104.0 : d;
  const float n = round(dc * 1.4426950408889634);
  const float r = (dc - n * 0.693145751953125) - n * 1.428606765330187e-6;
  const int e = clamp(int(n), -160, 128), h = e / 2;
  return ldexp(ldexp(exp(r), h), e - h);
}
#endif
