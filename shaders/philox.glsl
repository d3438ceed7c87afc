// Philox4x32-10 (Salmon et al. 2011), bit for bit the generator of docs/KERNELS.md and the CPU reference.
uvec4 philox4x32_10(uvec4 c, uvec2 k) {
  [[unroll]] for (int r = 0; r < 10; ++r) {
    uint hi0, lo0, hi1, lo1;
    umulExtended(0xD2511F53u, c.x, hi0, lo0);
    umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
    c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k += uvec2(0x9E3779B9u, 0xBB67AE85u);
  }
  return c;
}

// keep(i) of KERNELS.md's dropout for the element i = row * cols + col (64-bit) of a [rows, cols] matrix
// (attention's probabilities: row of [B, H, Sq], col a key): Philox block i / 4, its word i % 4, the top
// 24 bits against thr.
bool philox_keep2d(uint row, uint cols, uint col, uvec2 off, uvec2 seed, uint thr) {
  uint hi, lo, carry;
  umulExtended(row, cols, hi, lo);
  lo = uaddCarry(lo, col, carry);
  hi += carry;
  const uvec4 r = philox4x32_10(uvec4((lo >> 2) | (hi << 30), hi >> 2, off.x, off.y), seed);
  return (r[lo & 3u] >> 8) >= thr;
}
