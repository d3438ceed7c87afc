// bf16 on f16 tensor-core paths (attention's forward and backward, bf16 products): each tensor is staged
// as f16 times the power of two that puts its largest magnitude in [2^14, 2^15).

// floor(log2(value)) of a positive bf16 magnitude's bits m (sign cleared; subnormals included).
int bf16_exp(uint m) { return (m >> 7) != 0u ? int(m >> 7) - 127 : findMSB(m) - 133; }

// The power of two 2^k that puts a largest magnitude m (bf16 bits, sign cleared) in [2^14, 2^15); 1 for
// zero, infinity or NaN (which then propagate as in the reference). k is kept within [-100, 100].
float pow2_scale(uint m) {
  if (m == 0u || m >= 0x7f80u) return 1.0;
  const int e = (m >> 7) != 0u ? int(m >> 7) - 127 : findMSB(m) - 133;  // bf16_exp(m), written out: the
  return exp2(float(clamp(14 - e, -100, 100)));                         // compiled kernels stay as they were
}
