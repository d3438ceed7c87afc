#version 450
// Matrix products with a fused epilogue, the portable path (any Vulkan 1.2 device, lavapipe too):
// C[b] = act(A[b] * op(B[b]) + bias) + residual, A [M, K] with K contiguous, B either [N, K]
// (torch.nn.Linear's weight, B_NK) or [K, N]. A workgroup of 256 invocations computes a 64 x 64 tile
// from 16-deep slices staged in shared memory; each invocation owns a 4 x 4 register block of
// outputs (rows ty + 16 i, columns tx + 16 j, so that shared-memory reads are conflict-free).
// Accumulation is in f32 whatever the storage dtype. DROPOUT (linear_dropout, ffn's hidden layer)
// drops act(..) with the Philox mask of docs/ops.md, element index = the output's linear index. The
// residual and C have the output dtype of out_dtype.glsl (Attrs::out_dtype), A, B and the bias the inputs'.
#include "common.glsl"
#include "out_dtype.glsl"
#include "activations.glsl"
#include "philox.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const bool B_NK = true;
layout(constant_id = 2) const bool HAS_BIAS = false;
layout(constant_id = 3) const bool HAS_RES = false;
layout(constant_id = 4) const uint ACT = 0;  // 0 none, 1 relu, 2 gelu, 3 gelu_tanh, 4 silu
layout(constant_id = 5) const bool DROPOUT = false;
// For linear_cross_entropy's d W = G^T h (hal/vulkan/lce.cpp, record_matmul_at_b): A stored
// [K, M] (M contiguous), and C += the product (C's own values as the residual, read from binding 4).
layout(constant_id = 6) const bool A_KM = false;
layout(constant_id = 7) const bool ACC_OUT = false;

DECLARE_BUFFER(0, A, readonly)
DECLARE_BUFFER(1, B, readonly)
DECLARE_BUFFER(2, BIAS, readonly)
DECLARE_BUFFER(3, RES, readonly)
DECLARE_BUFFER(4, C, )

layout(push_constant) uniform PC {
  uint M, N, K;
  uint stride_a, stride_b, stride_c;  // elements between batches (stride_b = 0: B shared by all)
  uint seed_lo, seed_hi, off_lo, off_hi, thr;  // dropout: Philox key and offset, keep(i) = (word >> 8) >= thr
  float keep_scale;                            // 1 / (1 - p)
} pc;

const uint BM = 64, BN = 64, BK = 16;
shared float As[BK][BM];
shared float Bs[BK][BN];
shared float Cs[BM][BN + 1];

float act(float v) {
  if (ACT == 1u) return relu_f(v);
  if (ACT == 2u) return gelu_f(v);
  if (ACT == 3u) return gelu_tanh_f(v);
  if (ACT == 4u) return silu_f(v);
  return v;
}

void main() {
  const uint lid = gl_LocalInvocationID.x, tx = lid % 16u, ty = lid / 16u;
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN, b = gl_WorkGroupID.z;
  const uint a_base = b * pc.stride_a, b_base = b * pc.stride_b, c_base = b * pc.stride_c;
  float acc[4][4];
  [[unroll]] for (uint i = 0; i < 4u; ++i) [[unroll]] for (uint j = 0; j < 4u; ++j) acc[i][j] = 0.0;

  for (uint k0 = 0; k0 < pc.K; k0 += BK) {
    [[unroll]] for (uint q = 0; q < 4u; ++q) {
      const uint e = lid + 256u * q;
      if (A_KM) {  // A [K, M]: 16 k x 64 rows, m fastest
        const uint k = e / BM, m = e % BM, gm = m0 + m, gk = k0 + k;
        As[k][m] = (gm < pc.M && gk < pc.K) ? float(LOAD_ELEM(A, a_base + gk * pc.M + gm)) : 0.0;
      } else {  // A: 64 rows x 16 k, k fastest
        const uint m = e / BK, k = e % BK, gm = m0 + m, gk = k0 + k;
        As[k][m] = (gm < pc.M && gk < pc.K) ? float(LOAD_ELEM(A, a_base + gm * pc.K + gk)) : 0.0;
      }
      if (B_NK) {  // B [N, K]: 64 rows x 16 k
        const uint n = e / BK, k = e % BK, gn = n0 + n, gk = k0 + k;
        Bs[k][n] = (gn < pc.N && gk < pc.K) ? float(LOAD_ELEM(B, b_base + gn * pc.K + gk)) : 0.0;
      } else {     // B [K, N]: 16 k x 64 columns, n fastest
        const uint k = e / BN, n = e % BN, gn = n0 + n, gk = k0 + k;
        Bs[k][n] = (gn < pc.N && gk < pc.K) ? float(LOAD_ELEM(B, b_base + gk * pc.N + gn)) : 0.0;
      }
    }
    barrier();
    [[unroll]] for (uint k = 0; k < BK; ++k) {
      float a[4], bb[4];
      [[unroll]] for (uint i = 0; i < 4u; ++i) a[i] = As[k][ty + 16u * i];
      [[unroll]] for (uint j = 0; j < 4u; ++j) bb[j] = Bs[k][tx + 16u * j];
      [[unroll]] for (uint i = 0; i < 4u; ++i) [[unroll]] for (uint j = 0; j < 4u; ++j) acc[i][j] += a[i] * bb[j];
    }
    barrier();
  }

  // Epilogue through shared memory, so that stores are coalesced and 16-bit outputs are written as
  // whole words (pairs of columns) when N is even.
  [[unroll]] for (uint i = 0; i < 4u; ++i) [[unroll]] for (uint j = 0; j < 4u; ++j) Cs[ty + 16u * i][tx + 16u * j] = acc[i][j];
  barrier();
  const bool pairs = OUT_HALF && (pc.N % 2u) == 0u;
  for (uint e = lid; e < BM * BN / 2u; e += 256u) {
    const uint m = e / (BN / 2u), n = 2u * (e % (BN / 2u)), gm = m0 + m;
    if (gm >= pc.M) continue;
    float v[2];
    [[unroll]] for (uint h = 0; h < 2u; ++h) {
      const uint gn = n0 + n + h;
      float x = Cs[m][n + h];
      if (gn < pc.N) {
        if (HAS_BIAS) x += float(LOAD_ELEM(BIAS, gn));
        x = act(x);
        if (DROPOUT) {
          const uint i = c_base + gm * pc.N + gn;
          const uvec4 r = philox4x32_10(uvec4(i >> 2, 0u, pc.off_lo, pc.off_hi), uvec2(pc.seed_lo, pc.seed_hi));
          x = (r[i & 3u] >> 8) >= pc.thr ? x * pc.keep_scale : 0.0;
        }
        if (HAS_RES) x += LOAD_OUT(RES, c_base + gm * pc.N + gn);
        if (ACC_OUT) x += LOAD_OUT(C, c_base + gm * pc.N + gn);
      }
      v[h] = x;
    }
    const uint idx = c_base + gm * pc.N + n0 + n;
    if (pairs) {
      if (n0 + n < pc.N) C_w.w[idx >> 1] = OUT_PAIR(v[0], v[1]);
    } else {
      [[unroll]] for (uint h = 0; h < 2u; ++h)
        if (n0 + n + h < pc.N) STORE_OUT(C, idx + h, v[h]);
    }
  }
}
