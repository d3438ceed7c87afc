// Philox4x32-10 (Salmon et al. 2011), bit for bit the generator of docs/ops.md and the CPU reference.
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

// The Philox block holding element i = row * cols + col (64-bit) of a [rows, cols] matrix (attention's
// probabilities: row of [B, H, Sq], col a key): block i / 4; k = i % 4, the element's word in it.
uvec4 philox_block2d(uint row, uint cols, uint col, uvec2 off, uvec2 seed, out uint k) {
  uint hi, lo, carry;
  umulExtended(row, cols, hi, lo);
  lo = uaddCarry(lo, col, carry);
  hi += carry;
  k = lo & 3u;
  return philox4x32_10(uvec4((lo >> 2) | (hi << 30), hi >> 2, off.x, off.y), seed);
}

// keep(i) of docs/ops.md's dropout for that element: its word's top 24 bits against thr.
bool philox_keep2d(uint row, uint cols, uint col, uvec2 off, uvec2 seed, uint thr) {
  uint k;
  const uvec4 r = philox_block2d(row, cols, col, off, seed, k);
  return (r[k] >> 8) >= thr;
}

// The 4 keep bits of the block holding that element (bit k: element 4 (i / 4) + k).
uint philox_keep4(uint row, uint cols, uint col, uvec2 off, uvec2 seed, uint thr) {
  uint k;
  const uvec4 r = philox_block2d(row, cols, col, off, seed, k);
  return ((r.x >> 8) >= thr ? 1u : 0u) | ((r.y >> 8) >= thr ? 2u : 0u) | ((r.z >> 8) >= thr ? 4u : 0u) |
         ((r.w >> 8) >= thr ? 8u : 0u);
}
