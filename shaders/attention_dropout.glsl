// Attention's dropout bits for a 16 x 16 tile held in NV cooperative-matrix accumulators of the quad
// layout (mma.sync's: element (H, X, Y) of invocation `lane` at row lane / 4 + 8 H, column 2 (lane % 4)
// + X + 8 Y), drawing each Philox4x32-10 block once per subgroup instead of once per element.
// docs/ops.md's keep(i) takes word i % 4 of block i / 4, so four consecutive keys of a row share a block;
// the invocations holding them compute a share of the tile's blocks each and trade the 4-bit masks by
// shuffles (4x fewer generator calls). Rows whose first key is not at a multiple of 4 in the generator's
// index (cols % 4 != 0, or a tile start that is not) take each element's own block, as before.
// Needs philox.glsl (philox_keep4, philox_keep2d) and GL_KHR_shader_subgroup_shuffle; call in uniform
// control flow.

// Keys along the tile's columns (the forward's and dQ's P: queries x keys). Element (H, X, Y) is at row
// row_h[H] (of the [rows, cols] index) and column col0 + 2 (lane % 4) + X + 8 Y; its bit is
// 4 (H + 2 Y) + 2 (lane % 2) + X. Invocations lane and lane ^ 1 share the block of each (H, Y).
uint keep_bits_keys_in_cols(uint row0, uint row1, uint cols, uint col0, uint lane, uvec2 off, uvec2 seed, uint thr) {
  uint m = 0u;
  [[unroll]] for (uint t = 0u; t < 2u; ++t) {
    const uint c = (lane & 1u) + 2u * t, h = c & 1u, y = c >> 1;  // this invocation's (H, Y) blocks
    m |= philox_keep4(h == 0u ? row0 : row1, cols, col0 + 8u * y + 4u * ((lane & 3u) >> 1), off, seed, thr) << (4u * c);
  }
  m |= subgroupShuffleXor(m, 1u);
  [[unroll]] for (uint h = 0u; h < 2u; ++h) {
    const uint row = h == 0u ? row0 : row1;
    if (((row * cols + col0) & 3u) != 0u)  // not block-aligned: this invocation's own four elements
      [[unroll]] for (uint y = 0u; y < 2u; ++y)
        [[unroll]] for (uint x = 0u; x < 2u; ++x) {
          const uint bit = 4u * (h + 2u * y) + 2u * (lane & 1u) + x;
          const bool k = philox_keep2d(row, cols, col0 + 2u * (lane & 3u) + x + 8u * y, off, seed, thr);
          m = k ? m | (1u << bit) : m & ~(1u << bit);
        }
  }
  return m;
}

// Keys along the tile's rows (dK / dV's P^T: keys x queries). Element (H, X, Y) is at row row_xy[X + 2 Y]
// (of the [rows, cols] index: a query) and column col0 + lane / 4 + 8 H (a key); its bit is
// 4 (H + 2 X + 4 Y) + (lane / 4) % 4. Invocations lane, lane ^ 4, lane ^ 8 and lane ^ 12 share the block
// of each (H, X, Y).
uint keep_bits_keys_in_rows(uint row00, uint row10, uint row01, uint row11, uint cols, uint col0, uint lane,
                            uvec2 off, uvec2 seed, uint thr) {
  const uint g = (lane >> 2) & 3u;
  uint m = 0u;
  [[unroll]] for (uint t = 0u; t < 2u; ++t) {
    const uint c = g + 4u * t, h = c & 1u, x = (c >> 1) & 1u;  // this invocation's (H, X, Y = t) blocks
    const uint row = x == 0u ? (t == 0u ? row00 : row01) : (t == 0u ? row10 : row11);
    m |= philox_keep4(row, cols, col0 + 8u * h + 4u * (lane >> 4), off, seed, thr) << (4u * c);
  }
  m |= subgroupShuffleXor(m, 4u);
  m |= subgroupShuffleXor(m, 8u);
  [[unroll]] for (uint y = 0u; y < 2u; ++y)
    [[unroll]] for (uint x = 0u; x < 2u; ++x) {
      const uint row = x == 0u ? (y == 0u ? row00 : row01) : (y == 0u ? row10 : row11);
      if (((row * cols + col0) & 3u) != 0u)  // not block-aligned: this invocation's own elements
        [[unroll]] for (uint h = 0u; h < 2u; ++h) {
          const uint bit = 4u * (h + 2u * x + 4u * y) + g;
          const bool k = philox_keep2d(row, cols, col0 + lane / 4u + 8u * h, off, seed, thr);
          m = k ? m | (1u << bit) : m & ~(1u << bit);
        }
    }
  return m;
}
