#version 450
// Workgroup-scope product, variants: PF (prefetch the next k step's matrices from global memory
// before this step's multiply-add) and SM (A and W tiles staged in shared memory by the shader,
// two stages, then loaded as workgroup-scope matrices from there). STRIDE pads shared rows.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
layout(local_size_x = WG) in;
layout(binding = 0) readonly buffer A_ { float16_t a[]; };
layout(binding = 1) readonly buffer B_ { float16_t b[]; };
layout(binding = 0) readonly buffer A4_ { uvec4 a4[]; };
layout(binding = 1) readonly buffer B4_ { uvec4 b4[]; };
layout(binding = 2) writeonly buffer C_ { float16_t c[]; };
layout(push_constant) uniform P { uint M, N, K; } p;
#define MA fcoopmatNV<16, gl_ScopeWorkgroup, BM, BK>
#define MB fcoopmatNV<16, gl_ScopeWorkgroup, BK, BN>
#ifdef SM
shared uvec4 sA[2][BM * STRIDE / 8];
shared uvec4 sB[2][BN * STRIDE / 8];
#endif
void main() {
  uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  fcoopmatNV<32, gl_ScopeWorkgroup, BM, BN> acc = fcoopmatNV<32, gl_ScopeWorkgroup, BM, BN>(0.0);
#ifdef PF
  MA ma; MB mb;
  coopMatLoadNV(ma, a, row0 * p.K, p.K, false);
  coopMatLoadNV(mb, b, col0 * p.K, p.K, true);
  for (uint k = BK; k < p.K; k += BK) {
    MA na; MB nb;
    coopMatLoadNV(na, a, row0 * p.K + k, p.K, false);
    coopMatLoadNV(nb, b, col0 * p.K + k, p.K, true);
    acc = coopMatMulAddNV(ma, mb, acc);
    ma = na; mb = nb;
  }
  acc = coopMatMulAddNV(ma, mb, acc);
#endif
#ifdef SM
  const uint CA = BM * BK / 8 / WG, CB = BN * BK / 8 / WG;  // uvec4 copies per invocation
  uvec4 ra[CA], rb[CB];
  uint K8 = p.K / 8;
  #define LOADG(k) \
    for (uint i = 0; i < CA; ++i) { uint e = gl_LocalInvocationID.x + i * WG, r = e / (BK / 8), q = e % (BK / 8); \
      ra[i] = a4[(row0 + r) * K8 + (k) / 8 + q]; } \
    for (uint i = 0; i < CB; ++i) { uint e = gl_LocalInvocationID.x + i * WG, r = e / (BK / 8), q = e % (BK / 8); \
      rb[i] = b4[(col0 + r) * K8 + (k) / 8 + q]; }
  #define STORES(s) \
    for (uint i = 0; i < CA; ++i) { uint e = gl_LocalInvocationID.x + i * WG, r = e / (BK / 8), q = e % (BK / 8); \
      sA[s][r * (STRIDE / 8) + q] = ra[i]; } \
    for (uint i = 0; i < CB; ++i) { uint e = gl_LocalInvocationID.x + i * WG, r = e / (BK / 8), q = e % (BK / 8); \
      sB[s][r * (STRIDE / 8) + q] = rb[i]; }
  LOADG(0u)
  STORES(0)
  barrier();
  uint nk = p.K / BK;
  for (uint kt = 0; kt < nk; ++kt) {
    uint cur = kt & 1;
    if (kt + 1 < nk) { LOADG((kt + 1) * BK) }
    MA ma; MB mb;
    coopMatLoadNV(ma, sA[cur], 0, STRIDE / 8, false);
    coopMatLoadNV(mb, sB[cur], 0, STRIDE / 8, true);
    acc = coopMatMulAddNV(ma, mb, acc);
    if (kt + 1 < nk) { STORES(cur ^ 1) }
    barrier();
  }
#endif
  fcoopmatNV<16, gl_ScopeWorkgroup, BM, BN> o = fcoopmatNV<16, gl_ScopeWorkgroup, BM, BN>(acc);
  coopMatStoreNV(o, c, row0 * p.N + col0, p.N, false);
}
