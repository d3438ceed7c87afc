#version 450
// bf16 products on the tensor-core path (mm_coopmat.comp OUT_BF16 with SCALES; there is no bf16 NV
// cooperative-matrix shape): the operands as f16 times powers of two, undone in the product's epilogue.
// Rows (the default): each row of a [rows, K] bf16 matrix (K % 8 == 0) as f16 times the power of two
// that puts the row's largest magnitude in [2^14, 2^15), so that nothing overflows f16 and every value
// down to 2^-28 of its row's largest keeps its 8 bits. Per row, not per tensor: a row of A (a token) or
// of W (an output channel) far smaller than the rest keeps its precision. The inverse of the factor goes
// to word scale_off + row of binding 5, for the product's epilogue (C[m, n] = acc * inv_a[m] * inv_w[n]).
// 64 invocations per row, 4 rows per workgroup (workgroups in x, then y): the row's bf16 bits (sign
// cleared; for non-negative numbers the bits order as the values) reduced in shared memory, then the
// row read again (from cache) and converted.
// COLS: the same per column of [batches, rows, cols] (cols % 8 == 0), for the operands stored [K, N]
// (matmul's B; linear_cross_entropy's G and h in d W = G^T h), written in the same layout; see below.
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X_ { uvec4 x[]; };
layout(std430, binding = 4) writeonly buffer Y_ { uvec4 y[]; };

#include "bf16_scale.glsl"  // pow2_scale

#if defined(COLS)
// A workgroup covers a band of 8 column packs (64 columns: each row's 128 bytes read by 8 neighbouring
// invocations) and a slice of slice_rows rows, 32 rows at a time. Columns have up to 131072 rows (W
// [C, d] in d_h = G W), too many for one workgroup, so two dispatches (spec constant PASS): 0 reduces
// each column's bits over the slice in shared memory and combines the slices with atomicMax into word
// max_off + batch * cols + col of binding 5 (zeroed by the host before); 1 converts with the combined
// maxima, the first slice writing the inverse factors to word scale_off + batch * cols + col.
// Workgroups are numbered x, then y (grids over 65535), band fastest, then slice, then batch.
layout(constant_id = 0) const uint PASS = 0;
layout(std430, binding = 5) buffer S_ { uint words[]; };
layout(push_constant) uniform PC { uint rows, cols, scale_off, max_off, slice_rows, bands, slices, batches; } pc;

shared uint red[32 * 64];

void main() {
  const uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (wg >= pc.bands * pc.slices * pc.batches) return;  // the whole workgroup: before any barrier
  const uint lid = gl_LocalInvocationID.x, p = lid & 7u, rl = lid >> 3u;
  const uint band = wg % pc.bands, slice = (wg / pc.bands) % pc.slices, batch = wg / (pc.bands * pc.slices);
  const uint cp = pc.cols / 8u, pack = band * 8u + p;
  const uint r0 = slice * pc.slice_rows, r1 = min(r0 + pc.slice_rows, pc.rows);
  const uint base = batch * pc.rows * cp + pack;  // uvec4 index of the pack in row 0 of the batch
  const uint col0 = batch * pc.cols + pack * 8u;  // the pack's first column, for its words
  if (PASS == 0u) {
    // Word k of a pack holds columns 2k (low half) and 2k + 1 (high half).
    uvec4 lo = uvec4(0u), hi = uvec4(0u);
    if (pack < cp)
      for (uint r = r0 + rl; r < r1; r += 32u) {
        const uvec4 v = x[base + r * cp];
        lo = max(lo, v & 0x7fffu);
        hi = max(hi, (v >> 16) & 0x7fffu);
      }
    [[unroll]] for (uint k = 0; k < 4u; ++k) {
      red[rl * 64u + p * 8u + 2u * k] = lo[k];
      red[rl * 64u + p * 8u + 2u * k + 1u] = hi[k];
    }
    barrier();
    if (lid < 64u) {
      uint m = 0u;
      [[unroll]] for (uint i = 0; i < 32u; ++i) m = max(m, red[i * 64u + lid]);
      const uint c = band * 64u + lid;
      if (c < pc.cols && m != 0u) atomicMax(words[pc.max_off + batch * pc.cols + c], m);
    }
    return;
  }
  if (pack >= cp) return;
  float sc[8];
  [[unroll]] for (uint j = 0; j < 8u; ++j) sc[j] = pow2_scale(words[pc.max_off + col0 + j]);
  if (slice == 0u && rl == 0u)
    [[unroll]] for (uint j = 0; j < 8u; ++j) words[pc.scale_off + col0 + j] = floatBitsToUint(1.0 / sc[j]);
  for (uint r = r0 + rl; r < r1; r += 32u) {
    const uvec4 v = x[base + r * cp];
    uvec4 h;
    [[unroll]] for (uint k = 0; k < 4u; ++k)
      h[k] = packHalf2x16(vec2(uintBitsToFloat(v[k] << 16), uintBitsToFloat(v[k] & 0xffff0000u)) *
                          vec2(sc[2u * k], sc[2u * k + 1u]));
    y[base + r * cp] = h;
  }
}
#else
layout(std430, binding = 5) writeonly buffer S_ { float inv[]; };
layout(push_constant) uniform PC { uint rows, K, scale_off; } pc;

shared uint red[256];

void main() {
  const uint lid = gl_LocalInvocationID.x, lane = lid & 63u, r = lid >> 6u;
  const uint row = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 4u + r;
  const uint kp = pc.K / 8u;
  uint m = 0u;
  if (row < pc.rows)
    for (uint i = lane; i < kp; i += 64u) {
      const uvec4 v = x[row * kp + i];
      const uvec4 a = max(v & 0x7fffu, (v >> 16) & 0x7fffu);
      m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
    }
  red[lid] = m;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (lane < s) red[lid] = max(red[lid], red[lid + s]);
    barrier();
  }
  if (row >= pc.rows) return;
  const float sc = pow2_scale(red[r * 64u]);
  if (lane == 0u) inv[pc.scale_off + row] = 1.0 / sc;
  for (uint i = lane; i < kp; i += 64u) {
    const uvec4 v = x[row * kp + i];
    uvec4 h;
    [[unroll]] for (uint k = 0; k < 4u; ++k)
      h[k] = packHalf2x16(vec2(uintBitsToFloat(v[k] << 16), uintBitsToFloat(v[k] & 0xffff0000u)) * sc);
    y[row * kp + i] = h;
  }
}
#endif
