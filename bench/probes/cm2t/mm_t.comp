#version 450
// Probe (session 19): workgroup-scope product C = A W^T whose A and W tiles are loaded from global memory with
// SPV_NV_cooperative_matrix2's tensor-addressed loads (nv2tensor.py rewrites the coopMatLoadNV calls below;
// W [N, K] row-major is B column-major). PF: the next k step's tiles are loaded before this step's product.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
layout(local_size_x = WG) in;
layout(binding = 0) readonly buffer A_ { float16_t a[]; };
layout(binding = 1) readonly buffer B_ { float16_t b[]; };
layout(binding = 2) writeonly buffer C_ { float16_t c[]; };
layout(push_constant) uniform P { uint M, N, K; } p;
#define MA fcoopmatNV<16, gl_ScopeWorkgroup, BM, BK>
#define MB fcoopmatNV<16, gl_ScopeWorkgroup, BK, BN>
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
#else
  for (uint k = 0; k < p.K; k += BK) {
    MA ma; MB mb;
    coopMatLoadNV(ma, a, row0 * p.K + k, p.K, false);
    coopMatLoadNV(mb, b, col0 * p.K + k, p.K, true);
    acc = coopMatMulAddNV(ma, mb, acc);
  }
#endif
  fcoopmatNV<16, gl_ScopeWorkgroup, BM, BN> o = fcoopmatNV<16, gl_ScopeWorkgroup, BM, BN>(acc);
  coopMatStoreNV(o, c, row0 * p.N + col0, p.N, false);
}
