#version 450
// Matrix products on NVIDIA tensor cores through GL_NV_cooperative_matrix (f16 inputs, f32
// accumulation), with the same epilogue as mm.comp. Chosen at run time when the device reports a
// 16x16x16 f16 x f16 -> f32 subgroup shape; requires K % 8 == 0 (and N % 8 == 0 when B is [K, N]) so
// that every 16-byte load is whole. A workgroup of 8 subgroups computes a 128 x 128 tile (each
// subgroup 64 x 32 = 4 x 2 matrices of 16 x 16) from 32-deep slices staged in shared memory; the next
// slice is loaded into registers while the current one is multiplied.
#extension GL_NV_cooperative_matrix : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable
#define DT_F16
#include "common.glsl"
#include "activations.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const bool B_NK = true;
layout(constant_id = 2) const bool HAS_BIAS = false;
layout(constant_id = 3) const bool HAS_RES = false;
layout(constant_id = 4) const uint ACT = 0;

DECLARE_BUFFER(0, A, readonly)
DECLARE_BUFFER(1, B, readonly)
DECLARE_BUFFER(2, BIAS, readonly)
DECLARE_BUFFER(3, RES, readonly)
DECLARE_BUFFER(4, C, )

layout(push_constant) uniform PC {
  uint M, N, K;
  uint stride_a, stride_b, stride_c;
} pc;

const uint BM = 128, BN = 128, BK = 32;
const uint AROW = BK / 8u + 1u;   // uvec4 per staged row of A (and of B when [N, K]), padded
const uint BROW = BN / 8u + 1u;   // uvec4 per staged row of B when [K, N], padded
shared uvec4 As[BM * AROW];
shared uvec4 Bs[(BN * AROW > BK * BROW) ? BN * AROW : BK * BROW];
shared uvec4 Cst[8u * 64u];       // per subgroup, one 16 x 16 f32 tile

float act(float v) {
  if (ACT == 1u) return relu_f(v);
  if (ACT == 2u) return gelu_f(v);
  if (ACT == 3u) return gelu_tanh_f(v);
  if (ACT == 4u) return silu_f(v);
  return v;
}

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN, bz = gl_WorkGroupID.z;
  const uint sm = (sg / 4u) * 64u, sn = (sg % 4u) * 32u;  // this subgroup's 64 x 32 block
  const uint a_base = bz * pc.stride_a / 8u, b_base = bz * pc.stride_b / 8u;  // in uvec4 (8 halves)
  const uint K8 = pc.K / 8u, N8 = pc.N / 8u;

  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[4][2];
  [[unroll]] for (uint i = 0; i < 4u; ++i) [[unroll]] for (uint j = 0; j < 2u; ++j)
    acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);

  // Each invocation moves 2 uvec4 of A and 2 of B per slice.
  uvec4 ra[2], rb[2];
  const uvec4 Z = uvec4(0);
#define LOAD_SLICE(k0)                                                                          \
  [[unroll]] for (uint q = 0; q < 2u; ++q) {                                                    \
    const uint e = lid + 256u * q;                                                              \
    const uint r = e / 4u, c = e % 4u, gk8 = (k0) / 8u + c;                                    \
    ra[q] = (m0 + r < pc.M && gk8 < K8) ? A_v.v[a_base + (m0 + r) * K8 + gk8] : Z;             \
    if (B_NK) {                                                                                 \
      rb[q] = (n0 + r < pc.N && gk8 < K8) ? B_v.v[b_base + (n0 + r) * K8 + gk8] : Z;           \
    } else {                                                                                    \
      const uint kr = e / 16u, nc = e % 16u, gk = (k0) + kr, gn8 = n0 / 8u + nc;               \
      rb[q] = (gk < pc.K && gn8 < N8) ? B_v.v[b_base + gk * N8 + gn8] : Z;                    \
    }                                                                                           \
  }

  LOAD_SLICE(0u)
  for (uint k0 = 0; k0 < pc.K; k0 += BK) {
    [[unroll]] for (uint q = 0; q < 2u; ++q) {
      const uint e = lid + 256u * q;
      As[(e / 4u) * AROW + e % 4u] = ra[q];
      if (B_NK) Bs[(e / 4u) * AROW + e % 4u] = rb[q];
      else Bs[(e / 16u) * BROW + e % 16u] = rb[q];
    }
    barrier();
    if (k0 + BK < pc.K) LOAD_SLICE(k0 + BK)
    [[unroll]] for (uint kk = 0; kk < BK; kk += 16u) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fa[4], fb[2];
      [[unroll]] for (uint i = 0; i < 4u; ++i)
        coopMatLoadNV(fa[i], As, (sm + 16u * i) * AROW + kk / 8u, AROW, false);
      [[unroll]] for (uint j = 0; j < 2u; ++j) {
        if (B_NK) coopMatLoadNV(fb[j], Bs, (sn + 16u * j) * AROW + kk / 8u, AROW, true);
        else coopMatLoadNV(fb[j], Bs, kk * BROW + (sn + 16u * j) / 8u, BROW, false);
      }
      [[unroll]] for (uint i = 0; i < 4u; ++i) [[unroll]] for (uint j = 0; j < 2u; ++j)
        acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
    }
    barrier();
  }

  // Epilogue: each 16 x 16 accumulator goes through this subgroup's staging tile; lane l handles
  // row l / 2, columns 8 (l % 2) .. + 7, written as pairs of halves when N is even.
  const uint cbase = bz * pc.stride_c;
  const bool pairs = (pc.N % 2u) == 0u;
  [[unroll]] for (uint i = 0; i < 4u; ++i) [[unroll]] for (uint j = 0; j < 2u; ++j) {
    coopMatStoreNV(acc[i][j], Cst, sg * 64u, 4u, false);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    const uint r = lane / 2u, c0 = (lane % 2u) * 8u;
    const uint gm = m0 + sm + 16u * i + r, gn0 = n0 + sn + 16u * j + c0;
    float v[8];
    [[unroll]] for (uint h = 0; h < 8u; ++h) {
      const uint c = c0 + h;
      float x = uintBitsToFloat(Cst[sg * 64u + r * 4u + c / 4u][c % 4u]);
      const uint gn = gn0 + h;
      if (gm < pc.M && gn < pc.N) {
        if (HAS_BIAS) x += LOAD_ELEM(BIAS, gn);
        x = act(x);
        if (HAS_RES) x += LOAD_ELEM(RES, cbase + gm * pc.N + gn);
      }
      v[h] = x;
    }
    subgroupBarrier();  // the staging tile is reused by the next accumulator
    if (gm < pc.M) {
      [[unroll]] for (uint h = 0; h < 8u; h += 2u) {
        const uint gn = gn0 + h, idx = cbase + gm * pc.N + gn;
        if (pairs && gn + 1u < pc.N + 1u && gn < pc.N) {
          C_w.w[idx >> 1] = packHalf2x16(vec2(v[h], v[h + 1u]));
        } else if (!pairs) {
          if (gn < pc.N) STORE_ELEM(C, idx, v[h]);
          if (gn + 1u < pc.N) STORE_ELEM(C, idx + 1u, v[h + 1u]);
        }
      }
    }
  }
}
