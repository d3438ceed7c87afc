#version 450
// The in-register ceiling of the tensor-core path (kf-bench's matrix roofline): each subgroup keeps
// 8 independent 16x16 f32 accumulators and multiplies fragments that never leave registers, ITERS
// times, so nothing but the cooperative-matrix multiply-add is timed. The sums are stored at the end
// so that the compiler cannot drop the work.
//
// PEAK_LOAD != 0 builds variants that add what mm_coopmat.comp adds to that (KF_TUNE mm_peak=N), to
// measure what each costs:
// every 8 multiply-adds also load 4 A and 2 B fragments from a shared-memory slice shaped as
// mm_coopmat.comp's c1 (128 rows x 32 halves), from a different half of the slice each iteration so
// that the loads cannot be hoisted.
//   1: uvec4 array, rows padded to 5 packs, A row-major and B column-major (exactly c1's loads)
//   2: the same bytes declared as a float16_t array (stride in halves)
//   3: uvec4 array without padding (4 packs per row: bank conflicts)
//   4: as 1 with B row-major too
//   5: as 1 plus a workgroup barrier every iteration (c1 has two per 32-deep slice)
// and variants with fragments built element by element instead of coopMatLoadNV (the timing only: the
// elements go where the accumulators' quad layout puts them, coopmat_layout.comp, whether or not that
// is where the driver keeps an f16 fragment):
//   6: A and B from 32-bit shared-memory words, 4 per fragment (B as if staged [K, N])
//   7: A as 6, B by coopMatLoadNV as 1
//   8: A and B from one 16-byte word per invocation per fragment (a pre-swizzled staging layout)
#extension GL_NV_cooperative_matrix : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_EXT_control_flow_attributes : enable

#ifndef PEAK_LOAD
#define PEAK_LOAD 0
#endif

layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Out { float o[]; } out_;
layout(push_constant) uniform PC { uint iters; } pc;

#if PEAK_LOAD != 0
#if PEAK_LOAD == 3
const uint ROW = 4u;
#else
const uint ROW = 5u;
#endif
#if PEAK_LOAD == 2
shared float16_t As[128u * ROW * 8u];
shared float16_t Bs[128u * ROW * 8u];
#else
shared uvec4 As[128u * ROW];
shared uvec4 Bs[128u * ROW];
#endif
#endif

#if PEAK_LOAD >= 6
// Element 2q, 2q + 1 of a 16 x 16 f16 fragment from word q of w (the quad layout's order on NVIDIA 580).
#define SET_FRAG(f, w) [[unroll]] for (int q_ = 0; q_ < 4; ++q_) { \
    const f16vec2 h_ = unpackFloat2x16((w)[q_]); f[2 * q_] = h_.x; f[2 * q_ + 1] = h_.y; }
#endif

void main() {
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[8];
  [[unroll]] for (uint i = 0; i < 8u; ++i) acc[i] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
#if PEAK_LOAD == 0
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a0 = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(float16_t(0.5));
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a1 = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(float16_t(0.25));
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b0 = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(float16_t(0.125));
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b1 = fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>(float16_t(-0.125));
  for (uint it = 0; it < pc.iters; ++it) {
    acc[0] = coopMatMulAddNV(a0, b0, acc[0]);
    acc[1] = coopMatMulAddNV(a0, b1, acc[1]);
    acc[2] = coopMatMulAddNV(a1, b0, acc[2]);
    acc[3] = coopMatMulAddNV(a1, b1, acc[3]);
    acc[4] = coopMatMulAddNV(a0, b0, acc[4]);
    acc[5] = coopMatMulAddNV(a0, b1, acc[5]);
    acc[6] = coopMatMulAddNV(a1, b0, acc[6]);
    acc[7] = coopMatMulAddNV(a1, b1, acc[7]);
  }
#else
  const uint lid = gl_LocalInvocationID.x, sg = gl_SubgroupID;
  for (uint e = lid; e < 128u * ROW; e += 256u) {
#if PEAK_LOAD == 2
    [[unroll]] for (uint h = 0; h < 8u; ++h) {
      As[e * 8u + h] = float16_t(float((e + h) % 7u) * 0.0625);
      Bs[e * 8u + h] = float16_t(float((e + h) % 5u) * -0.0625);
    }
#else
    As[e] = uvec4(0x2c002c00u + e % 3u);
    Bs[e] = uvec4(0xac002c00u + e % 5u);
#endif
  }
  barrier();
  const uint sm = (sg / 4u) * 64u, sn = (sg % 4u) * 32u;
  for (uint it = 0; it < pc.iters; ++it) {
    const uint kk = (it & 1u) * 16u;
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fa[4], fb[2];
#if PEAK_LOAD >= 6
    const uint g = gl_SubgroupInvocationID >> 2, t = gl_SubgroupInvocationID & 3u;
#endif
#if PEAK_LOAD == 6 || PEAK_LOAD == 7
    [[unroll]] for (uint i = 0; i < 4u; ++i) {
      const uint r0 = (sm + 16u * i + g) * ROW + kk / 8u, r1 = r0 + 8u * ROW;
      const uvec4 w = uvec4(As[r0][t], As[r0 + 1u][t], As[r1][t], As[r1 + 1u][t]);
      SET_FRAG(fa[i], w)
    }
#if PEAK_LOAD == 6
    [[unroll]] for (uint j = 0; j < 2u; ++j) {
      const uint r0 = (kk + g) * ROW + ((sn + 16u * j) / 8u) % 4u, r1 = r0 + 8u * ROW;
      const uvec4 w = uvec4(Bs[r0][t], Bs[r0 + 1u][t], Bs[r1][t], Bs[r1 + 1u][t]);
      SET_FRAG(fb[j], w)
    }
#else
    [[unroll]] for (uint j = 0; j < 2u; ++j) coopMatLoadNV(fb[j], Bs, (sn + 16u * j) * ROW + kk / 8u, ROW, true);
#endif
#elif PEAK_LOAD == 8
    [[unroll]] for (uint i = 0; i < 4u; ++i) {
      const uvec4 w = As[((sm / 16u + i) * 2u + kk / 16u) * 32u + gl_SubgroupInvocationID];
      SET_FRAG(fa[i], w)
    }
    [[unroll]] for (uint j = 0; j < 2u; ++j) {
      const uvec4 w = Bs[((sn / 16u + j) * 2u + kk / 16u) * 32u + gl_SubgroupInvocationID];
      SET_FRAG(fb[j], w)
    }
#elif PEAK_LOAD == 2
    [[unroll]] for (uint i = 0; i < 4u; ++i) coopMatLoadNV(fa[i], As, (sm + 16u * i) * ROW * 8u + kk, ROW * 8u, false);
    [[unroll]] for (uint j = 0; j < 2u; ++j) coopMatLoadNV(fb[j], Bs, (sn + 16u * j) * ROW * 8u + kk, ROW * 8u, true);
#else
    [[unroll]] for (uint i = 0; i < 4u; ++i) coopMatLoadNV(fa[i], As, (sm + 16u * i) * ROW + kk / 8u, ROW, false);
    [[unroll]] for (uint j = 0; j < 2u; ++j) coopMatLoadNV(fb[j], Bs, (sn + 16u * j) * ROW + kk / 8u, ROW, PEAK_LOAD != 4);
#endif
    [[unroll]] for (uint i = 0; i < 4u; ++i) [[unroll]] for (uint j = 0; j < 2u; ++j)
      acc[i * 2u + j] = coopMatMulAddNV(fa[i], fb[j], acc[i * 2u + j]);
#if PEAK_LOAD == 5
    barrier();
#endif
  }
#endif
  // (Summing the accumulators with `+` first would be less to store, but crashes Debian 12's glslc -O.)
  const uint base = (gl_WorkGroupID.x * 8u + gl_SubgroupID) * 8u * 256u;
  [[unroll]] for (uint i = 0; i < 8u; ++i) coopMatStoreNV(acc[i], out_.o, base + 256u * i, 16u, false);
}
