#version 450
// Optimizer steps (docs/ops.md section 6), in place: adamw_step as torch.optim.AdamW, sgd_step as
// torch.optim.SGD. One invocation owns one 16-byte pack of every tensor, reads it and writes it back
// (tensors are padded to 16 bytes, so the last pack may be partial). The host derives the step's
// scalars (bias corrections, decay factor) in double precision. Arithmetic in float (double for f64).
// Variants: OP_<name>, DT_<dtype>.
#include "common.glsl"

layout(local_size_x_id = 0) in;

// Bindings: 0 param, 1 grad, 2 m (the momentum buffer of SGD), 3 v; all but grad read and written.
DECLARE_BUFFER(0, p, )
DECLARE_BUFFER(1, g, readonly)
DECLARE_BUFFER(2, m, )
DECLARE_BUFFER(3, v, )

#if defined(DT_F64)
#define S uvec2                       // a double's bits
#define VAL(x) packDouble2x32(x)
#else
#define S float
#define VAL(x) (x)
#endif

layout(push_constant) uniform PC {
  uint n;
  uint flags;      // sgd: 1 momentum, 2 nesterov, 4 first step
#if defined(OP_adamw_step)
  // p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps) with bc_i = 1 - beta_i^step, written as
  // step_size * m / (sqrt(v) + eps_hat): step_size = lr sqrt(bc2) / bc1, eps_hat = eps sqrt(bc2).
  // 1 - beta comes from the host too: 1 - float(0.999) is 1.3e-5 off 0.001.
  S decay;         // 1 - lr * weight_decay
  S step_size;
  S beta1, one_minus_beta1, beta2, one_minus_beta2;
  S eps_hat;
#else
  S lr, weight_decay, momentum, one_minus_dampening;
#endif
} pc;

void main() {
  const uint npacks = (pc.n + VW - 1u) / VW;
  for (uint q = gl_GlobalInvocationID.x; q < npacks; q += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
    PACK_T(pv);
    PACK_T(gv);
    PACK_T(mv);
    unpack(p_v.v[q], pv);
    unpack(g_v.v[q], gv);
    unpack(m_v.v[q], mv);
#if defined(OP_adamw_step)
    PACK_T(vv);
    unpack(v_v.v[q], vv);
    const FT b1 = FT(VAL(pc.beta1)), c1 = FT(VAL(pc.one_minus_beta1));
    const FT b2 = FT(VAL(pc.beta2)), c2 = FT(VAL(pc.one_minus_beta2));
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      const FT gr = gv[k];
      mv[k] = b1 * mv[k] + c1 * gr;
      vv[k] = b2 * vv[k] + c2 * gr * gr;
      pv[k] = pv[k] * FT(VAL(pc.decay)) - FT(VAL(pc.step_size)) * mv[k] / (sqrt(vv[k]) + FT(VAL(pc.eps_hat)));
    }
    v_v.v[q] = pack(vv);
#else
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      FT gr = gv[k] + FT(VAL(pc.weight_decay)) * pv[k];
      if ((pc.flags & 1u) != 0u) {
        mv[k] = (pc.flags & 4u) != 0u ? gr : FT(VAL(pc.momentum)) * mv[k] + FT(VAL(pc.one_minus_dampening)) * gr;
        gr = (pc.flags & 2u) != 0u ? gr + FT(VAL(pc.momentum)) * mv[k] : mv[k];
      }
      pv[k] = pv[k] - FT(VAL(pc.lr)) * gr;
    }
#endif
    p_v.v[q] = pack(pv);
    m_v.v[q] = pack(mv);
  }
}
