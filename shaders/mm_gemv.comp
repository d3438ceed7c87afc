#version 450
// Matrix products of few rows (decode: M = 1..16 with large N and K), linear's layout only:
// C = act(A W^T + bias) [dropout] + residual with A [M, K] and W [N, K]. The weight is streamed once:
// a workgroup of 256 invocations covers ROWS rows of W (ROWS outputs n: 4, 8 or 16), 256 / ROWS
// invocations per row, each loading 16-byte packs of W (and the matching packs of the up to MT rows of
// A, which stay in cache) and accumulating MT dot products in f32. The partial sums of each output are
// added by a fixed tree in shared memory (the same order every run).
// Split-K: when N / 4 workgroups alone cannot fill the device, gl_WorkGroupID.z splits K into
// `splits` slices of `kslice` elements; PASS 0 then writes f32 partial sums P[split][m][n] and PASS 1
// adds them in split order (0, 1, 2, ...) and applies the epilogue: deterministic, no atomics.
// Rows of A beyond MT are covered by gl_WorkGroupID.y (W is then streamed once per MT rows).
#include "common.glsl"
#include "out_dtype.glsl"  // the residual and C: Attrs::out_dtype
#include "activations.glsl"
#include "philox.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint MT = 16;          // rows of A per workgroup, 1..16
layout(constant_id = 2) const bool HAS_BIAS = false;
layout(constant_id = 3) const bool HAS_RES = false;
layout(constant_id = 4) const uint ACT = 0;          // 0 none, 1 relu, 2 gelu, 3 gelu_tanh, 4 silu
layout(constant_id = 5) const bool WIDE = true;      // K % VW == 0: 16-byte loads, else element loads
layout(constant_id = 6) const uint PASS = 0;         // 0: products, 1: the split-K combine
layout(constant_id = 7) const bool PARTIAL = false;  // PASS 0 writes partial sums (splits > 1)
layout(constant_id = 8) const bool DROPOUT = false;  // the epilogue drops act(..) (ffn's hidden layer)
layout(constant_id = 9) const uint ROWS = 4;         // rows of W per workgroup
const uint LANES = 256u / ROWS;                      // invocations per row

DECLARE_BUFFER(0, A, readonly)
DECLARE_BUFFER(1, B, readonly)
DECLARE_BUFFER(2, BIAS, readonly)
DECLARE_BUFFER(3, RES, readonly)
DECLARE_BUFFER(4, C, )
layout(std430, binding = 5) buffer P_ { float p[]; } P;

layout(push_constant) uniform PC {
  uint M, N, K;
  uint splits, kslice;  // K slices (gl_WorkGroupID.z) and their length, a multiple of VW
  uint seed_lo, seed_hi, off_lo, off_hi, thr;  // dropout (DROPOUT): Philox key, offset, threshold
  float keep_scale;                            // 1 / (1 - p)
} pc;

float act(float v) {
  if (ACT == 1u) return relu_f(v);
  if (ACT == 2u) return gelu_f(v);
  if (ACT == 3u) return gelu_tanh_f(v);
  if (ACT == 4u) return silu_f(v);
  return v;
}

// The epilogue of output (m, n); its element index (Philox's i) is m N + n, the linear index.
void store_out(uint m, uint n, float v) {
  if (HAS_BIAS) v += float(LOAD_ELEM(BIAS, n));
  v = act(v);
  const uint i = m * pc.N + n;
  if (DROPOUT) {
    const uvec4 r = philox4x32_10(uvec4(i >> 2, 0u, pc.off_lo, pc.off_hi), uvec2(pc.seed_lo, pc.seed_hi));
    v = (r[i & 3u] >> 8) >= pc.thr ? v * pc.keep_scale : 0.0;
  }
  if (HAS_RES) v += LOAD_OUT(RES, i);
  STORE_OUT(C, i, v);
}

shared float red[16 * 256];  // [row][m][lane]: ROWS x 16 x LANES

void products() {
  const uint lid = gl_LocalInvocationID.x, lane = lid % LANES, r = lid / LANES;
  const uint n = gl_WorkGroupID.x * ROWS + r;
  const uint m0 = gl_WorkGroupID.y * MT;
  const uint split = gl_WorkGroupID.z;
  const uint k_begin = split * pc.kslice, k_end = min(pc.K, k_begin + pc.kslice);
  const uint mcount = min(MT, pc.M - m0);
  float acc[16];
  [[unroll]] for (uint i = 0; i < 16u; ++i) acc[i] = 0.0;
  if (n < pc.N) {
    if (WIDE) {
      // Two packs of W in flight per invocation before the arithmetic.
      const uint step = LANES * VW;
      for (uint k = k_begin + lane * VW; k < k_end; k += 2u * step) {
        const bool second = k + step < k_end;
        const uvec4 w0v = B_v.v[(n * pc.K + k) / VW];
        const uvec4 w1v = second ? B_v.v[(n * pc.K + k + step) / VW] : uvec4(0u);
        FT w0[VW], w1[VW];
        unpack(w0v, w0);
        unpack(w1v, w1);
        [[unroll]] for (uint i = 0; i < 16u; ++i) {
          if (i < MT && i < mcount) {
            FT x0[VW];
            unpack(A_v.v[((m0 + i) * pc.K + k) / VW], x0);
            float s = acc[i];
            [[unroll]] for (uint e = 0; e < VW; ++e) s += float(x0[e]) * float(w0[e]);
            if (second) {
              FT x1[VW];
              unpack(A_v.v[((m0 + i) * pc.K + k + step) / VW], x1);
              [[unroll]] for (uint e = 0; e < VW; ++e) s += float(x1[e]) * float(w1[e]);
            }
            acc[i] = s;
          }
        }
      }
    } else {
      for (uint k = k_begin + lane; k < k_end; k += LANES) {
        const float w = float(LOAD_ELEM(B, n * pc.K + k));
        [[unroll]] for (uint i = 0; i < 16u; ++i)
          if (i < MT && i < mcount) acc[i] += float(LOAD_ELEM(A, (m0 + i) * pc.K + k)) * w;
      }
    }
  }
  [[unroll]] for (uint i = 0; i < 16u; ++i)
    if (i < MT) red[(r * 16u + i) * LANES + lane] = acc[i];
  barrier();
  // Fixed tree: lane j adds lane j + s, s = LANES / 2, ..., 1.
  for (uint s = LANES / 2u; s > 0u; s >>= 1) {
    if (lane < s) {
      [[unroll]] for (uint i = 0; i < 16u; ++i)
        if (i < MT) red[(r * 16u + i) * LANES + lane] += red[(r * 16u + i) * LANES + lane + s];
    }
    barrier();
  }
  if (n < pc.N && lane < mcount) {
    const float v = red[(r * 16u + lane) * LANES];
    const uint m = m0 + lane;
    if (PARTIAL) P.p[(split * pc.M + m) * pc.N + n] = v;
    else store_out(m, n, v);
  }
}

// PASS 1: one invocation per output; x covers n, y covers m.
void combine() {
  const uint n = gl_GlobalInvocationID.x, m = gl_WorkGroupID.y;
  if (n >= pc.N || m >= pc.M) return;
  float v = 0.0;
  for (uint s = 0; s < pc.splits; ++s) v += P.p[(s * pc.M + m) * pc.N + n];
  store_out(m, n, v);
}

void main() {
  if (PASS == 0u) products();
  else combine();
}
