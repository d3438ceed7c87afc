// Row reductions shared by the row kernels of norm.comp, norm_bwd.comp and loss.comp (the same scheme as
// rows.comp): TPR invocations (a power of two) reduce one value each; the result reaches every one of
// them. With SUBGROUP, a subgroup operation and then the subgroups' partials in subgroup order through
// shared memory; without, a shared-memory tree. The order is fixed, so the same row gives the same
// bits on every run. Every invocation of the workgroup must call it (it has barriers). Needs ACC (the
// accumulator type) and TPR defined first.
#if defined(SUBGROUP)
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#endif

shared ACC red[gl_WorkGroupSize.x];

#if defined(SUBGROUP)
#define ROW_REDUCE_BODY(SG_OP, COMBINE)                                        \
  v = SG_OP(v);                                                                \
  if (TPR == gl_SubgroupSize) return v;                                        \
  if (gl_SubgroupInvocationID == 0u) red[gl_SubgroupID] = v;                   \
  barrier();                                                                   \
  const uint nsg = TPR / gl_SubgroupSize, first = slot * nsg;                  \
  ACC r = red[first];                                                          \
  for (uint k = 1u; k < nsg; ++k) r = COMBINE(r, red[first + k]);              \
  barrier();                                                                   \
  return r;
#else
#define ROW_REDUCE_BODY(SG_OP, COMBINE)                                        \
  red[gl_LocalInvocationID.x] = v;                                             \
  barrier();                                                                   \
  for (uint s = TPR / 2u; s > 0u; s >>= 1) {                                   \
    if (lane < s) red[gl_LocalInvocationID.x] = COMBINE(red[gl_LocalInvocationID.x], red[gl_LocalInvocationID.x + s]); \
    barrier();                                                                 \
  }                                                                            \
  ACC r = red[slot * TPR];                                                     \
  barrier();                                                                   \
  return r;
#endif

ACC add_(ACC a, ACC b) { return a + b; }
ACC max_(ACC a, ACC b) { return max(a, b); }
ACC row_sum(ACC v, uint lane, uint slot) { ROW_REDUCE_BODY(subgroupAdd, add_) }
ACC row_max(ACC v, uint lane, uint slot) { ROW_REDUCE_BODY(subgroupMax, max_) }

// 1 / sqrt(v): inversesqrt in float; in double a division, since Vulkan lets double inversesqrt be as
// coarse as float's.
#if defined(DT_F64)
ACC rsqrt_(ACC v) { return ACC(1) / sqrt(v); }
#else
ACC rsqrt_(ACC v) { return inversesqrt(v); }
#endif

// x - (hi + lo) for a mean carried as two values (the corrected two-pass algorithm of the norms),
// precise so that the compiler does not reassociate it into x - (hi + lo) and lose lo.
ACC centered(ACC x, ACC hi, ACC lo) {
  precise ACC d = (x - hi) - lo;
  return d;
}
