#version 450
// Row backward passes (docs/ops.md section 3, training): softmax_backward, layer_norm_backward and
// rms_norm_backward. Variants: OP_<name>, DT_<dtype>, SUBGROUP.
//   PASS 0 (rows): TPR invocations per row, each caching up to CACHE_VALUES values of dy and of x (y for
//     softmax); items past the cache (rows longer than TPR * CACHE_VALUES) are read again from memory in
//     each pass over the row. It writes dx and, for the norms, the row's (mean, rstd) to the workspace
//     (the mean as hi + lo: the corrected two-pass algorithm, as norm.comp).
//       softmax:    dx = s * y * (dy - sum(dy * y))
//       layer norm: g = dy * w, xhat = (x - mean) * rstd, dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//       rms norm:   g = dy * w, xhat = x * rstd,          dx = rstd * (g - xhat * mean(g * xhat))
//   PASS 1 (columns): the weight and bias gradients are sums over rows. Each workgroup takes 256 packs of
//     columns and one chunk of `rchunk` rows and writes the chunk's partial sums of dy * xhat and dy
//     (compensated) to the workspace with their low parts (each rounded to one float, 17 chunks of f32
//     db over 1000 rows came out 2.5e-7 of its norm off, 1e-7 with them).
//     With FUSED_COLS (rows that fit the registers, the usual case), PASS 0 does this instead: each
//     invocation keeps the sums of dy * xhat and dy of its cached columns over the rows its workgroup
//     handles (rows wg, wg + G, ... of its slot) and writes them as one partial per (workgroup, slot);
//     PASS 1 is not run. dy and x are then read once, not twice (the separate column pass read them
//     again: 4 of the 6 tensor-sized transfers of the kernel instead of 4 of 4).
//   PASS 2 (combine): each invocation adds one column pack's partial sums in chunk order: dw, db.
//   PASS 3 (fused rows, the norms; rows of whole 16-byte packs, as hal/cuda/norm.cu's norm_bwd_fused):
//     the workgroup (TPR = its size, NT packs an invocation: 4, 2 in 16-bit)
//     takes one row at a time, workgroups striding over the rows (at most 64 rows each). Invocation t
//     loads its packs t + u TPR of dy and x (and once, of w) raw into registers before any use; the
//     row's sums in one multi-value workgroup reduction: rms sum x^2, sum g x; layer sum e, sum e^2,
//     sum g, sum g e about a shift, e = x - x_0 (see fused_rows); dx written once; dy xhat and dy added
//     to the workgroup's column sums, [Q][VW][npk], in the registers of the invocation that owns the
//     columns (its packs: no barrier, no atomics, no shared memory). At the end one partial per
//     workgroup to the workspace (same layout). dy and x are read once; the partials (G x Q x L values) are written and read once.
//   PASS 4 (combine of PASS 3): slot i of [Q][VW][npk], 32 slots a workgroup, 8 ways each adding every
//     8th partial (Kahan), then the ways in order: dw, db.
// Every sum has a fixed order, so the results are the same bits every run.
#include "common.glsl"

#if defined(DT_F64)
#define ACC double
#else
#define ACC float
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 256;
layout(constant_id = 2) const bool WIDE = true;
layout(constant_id = 3) const uint CACHE_VALUES = 32;
layout(constant_id = 4) const uint PASS = 0;
layout(constant_id = 5) const bool HAS_W = false;
layout(constant_id = 6) const bool FUSED_COLS = false;  // PASS 0 also sums the columns (see above)
layout(constant_id = 7) const uint SMEM_VALUES = 1;     // PASS 4: 2 x workgroup (shared combine values)
#define NT (CACHE_VALUES / VW)

#include "row_reduce.glsl"

#if defined(OP_layer_norm_backward)
#define LAYER 1
#endif
#if defined(OP_layer_norm_backward) || defined(OP_rms_norm_backward)
#define NORM 1
#endif

// Bindings: 0 dy, 1 x (y for softmax), 2 w; 3 dx (PASS 0) or dw (PASS 2); 4 the workspace (three
// statistics per row, then the column partial sums); 5 db (PASS 2).
DECLARE_BUFFER(0, dy, readonly)
DECLARE_BUFFER(1, xv, readonly)
DECLARE_BUFFER(2, w, readonly)
DECLARE_BUFFER(3, out3, )
layout(std430, binding = 4) buffer WS { ACC ws[]; };
DECLARE_BUFFER(5, out5, )

layout(push_constant) uniform PC {
  uint rows;
  uint feat;
  uint rchunk;    // rows per chunk of the column pass
  uint nrchunks;
  float eps;      // the norms' eps; softmax: its scale
  uint eps_lo, eps_hi;
} pc;

#if defined(DT_F64)
#define EPS packDouble2x32(uvec2(pc.eps_lo, pc.eps_hi))
#else
#define EPS pc.eps
#endif
#define PARTIALS_AT (3u * pc.rows)  // the column partials follow the row statistics
#define FPAD (((pc.feat + VW - 1u) / VW) * VW)

FT uc[NT][VW], vc[NT][VW];  // cached dy and x (y)
#if defined(OP_layer_norm_backward) || defined(OP_rms_norm_backward)
ACC col_a[NT][VW], col_b[NT][VW];  // FUSED_COLS: this invocation's column sums of dy * xhat and dy
#endif

// Item j of the row starting at element e0: dy into u, x (y) into v; padding past `len` is zero.
void load_item(uint e0, uint len, uint j, out FT u[VW], out FT v[VW]) {
  if (WIDE) {
    unpack(dy_v.v[e0 / VW + j], u);
    unpack(xv_v.v[e0 / VW + j], v);
  } else {
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      const uint o = j * VW + k;
      u[k] = o < len ? LOAD_ELEM(dy, e0 + o) : FT(0);
      v[k] = o < len ? LOAD_ELEM(xv, e0 + o) : FT(0);
    }
  }
}

bool in_row(uint j, uint k) { return WIDE || j * VW + k < pc.feat; }

void load_w(uint j, out FT wv[VW]) {
  [[unroll]] for (uint k = 0; k < VW; ++k) wv[k] = FT(1);
  if (!HAS_W) return;
  if (WIDE) {
    unpack(w_v.v[j], wv);
  } else {
    [[unroll]] for (uint k = 0; k < VW; ++k) wv[k] = LOAD_ELEM(w, min(j * VW + k, pc.feat - 1u));
  }
}

// The per-item steps of the passes over one row.
ACC first_sum(FT u[VW], FT v[VW], uint j) {  // softmax: dy * y; layer: x; rms: x^2
  ACC a = ACC(0);
  [[unroll]] for (uint k = 0; k < VW; ++k) {
#if defined(OP_softmax_backward)
    a += ACC(u[k]) * ACC(v[k]);
#elif defined(LAYER)
    a += ACC(v[k]);
#else
    a += ACC(v[k]) * ACC(v[k]);
#endif
  }
  return a;
}
void deviations(FT v[VW], uint j, ACC hi, inout ACC c, inout ACC m2) {
  [[unroll]] for (uint k = 0; k < VW; ++k) {
    const ACC d = ACC(v[k]) - hi;
    if (in_row(j, k)) c += d, m2 += d * d;
  }
}
// The mean is hi + lo (the corrected two-pass algorithm, as norm.comp).
ACC xhat_of(FT v, ACC hi, ACC lo, ACC rstd) { return centered(ACC(v), hi, lo) * rstd; }
void grad_sums(FT u[VW], FT v[VW], uint j, ACC hi, ACC lo, ACC rstd, inout ACC sg, inout ACC sgx) {
  PACK_T(wv);
  load_w(j, wv);
  [[unroll]] for (uint k = 0; k < VW; ++k) {
    const ACC g = ACC(u[k]) * ACC(wv[k]);  // zero on the padding (dy is)
    sg += g;
    sgx += g * xhat_of(v[k], hi, lo, rstd);
  }
}
void store_dx(uint e0, uint j, FT y[VW]) {
  if (WIDE) {
    out3_v.v[e0 / VW + j] = pack(y);
  } else {
    [[unroll]] for (uint k = 0; k < VW; ++k)
      if (j * VW + k < pc.feat) STORE_ELEM(out3, e0 + j * VW + k, y[k])
  }
}
void dx_item(FT u[VW], FT v[VW], uint e0, uint j, ACC a, ACC b, ACC hi, ACC lo, ACC rstd) {
  PACK_T(y);
#if defined(OP_softmax_backward)
  [[unroll]] for (uint k = 0; k < VW; ++k) y[k] = FT(ACC(EPS) * ACC(v[k]) * (ACC(u[k]) - a));
#else
  PACK_T(wv);
  load_w(j, wv);
  const ACC inv_l = ACC(1) / ACC(pc.feat);
  [[unroll]] for (uint k = 0; k < VW; ++k) {
    const ACC g = ACC(u[k]) * ACC(wv[k]), xhat = xhat_of(v[k], hi, lo, rstd);
    // `precise`: fused into g - a / L, the product u w would keep digits that a (the sum of the
    // rounded products) lacks; on an H100 that left 3.5e-5 where a one-element row's gradient is 0.
    precise const ACC t = g - a * inv_l - xhat * b * inv_l;
    y[k] = FT(rstd * t);
  }
#endif
  store_dx(e0, j, y);
}

void row(uint r, bool valid, uint lane, uint slot) {
  const uint L = pc.feat, e0 = r * L, nitems = (L + VW - 1u) / VW;
  // Pass over the row 1: load (and cache) dy and x; the first sum.
  ACC s1 = ACC(0);
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    if (valid && j < nitems) {
      load_item(e0, L, j, uc[t], vc[t]);
      s1 += first_sum(uc[t], vc[t], j);
    }
  }
  for (uint j = lane + NT * TPR; valid && j < nitems; j += TPR) {
    PACK_T(u);
    PACK_T(v);
    load_item(e0, L, j, u, v);
    s1 += first_sum(u, v, j);
  }
  s1 = row_sum(s1, lane, slot);
#if defined(OP_softmax_backward)
  if (!valid) return;
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    if (j < nitems) dx_item(uc[t], vc[t], e0, j, s1, ACC(0), ACC(0), ACC(0), ACC(0));
  }
  for (uint j = lane + NT * TPR; j < nitems; j += TPR) {
    PACK_T(u);
    PACK_T(v);
    load_item(e0, L, j, u, v);
    dx_item(u, v, e0, j, s1, ACC(0), ACC(0), ACC(0), ACC(0));
  }
#else
#if defined(LAYER)
  const ACC hi = s1 / ACC(L);
  ACC c = ACC(0), m2 = ACC(0);
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    if (valid && j < nitems) deviations(vc[t], j, hi, c, m2);
  }
  for (uint j = lane + NT * TPR; valid && j < nitems; j += TPR) {
    PACK_T(u);
    PACK_T(v);
    load_item(e0, L, j, u, v);
    deviations(v, j, hi, c, m2);
  }
  c = row_sum(c, lane, slot);
  m2 = row_sum(m2, lane, slot);
  const ACC lo = c / ACC(L);
  m2 = max(m2 - c * lo, ACC(0));
#else
  const ACC hi = ACC(0), lo = ACC(0), m2 = s1;
#endif
  const ACC rstd = rsqrt_(m2 / ACC(L) + ACC(EPS));
  ACC sg = ACC(0), sgx = ACC(0);
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    if (valid && j < nitems) grad_sums(uc[t], vc[t], j, hi, lo, rstd, sg, sgx);
  }
  for (uint j = lane + NT * TPR; valid && j < nitems; j += TPR) {
    PACK_T(u);
    PACK_T(v);
    load_item(e0, L, j, u, v);
    grad_sums(u, v, j, hi, lo, rstd, sg, sgx);
  }
#if defined(LAYER)
  sg = row_sum(sg, lane, slot);
#else
  sg = ACC(0);  // rms norm has no mean to subtract
#endif
  sgx = row_sum(sgx, lane, slot);
  if (!valid) return;
  if (lane == 0u) {
    ws[3u * r] = hi;
    ws[3u * r + 1u] = lo;
    ws[3u * r + 2u] = rstd;
  }
  if (FUSED_COLS) {  // the whole row is cached (the host enables it only then)
    [[unroll]] for (uint t = 0; t < NT; ++t) {
      const uint j = lane + t * TPR;
      if (j < nitems) {
        [[unroll]] for (uint k = 0; k < VW; ++k) {
          col_a[t][k] += ACC(uc[t][k]) * xhat_of(vc[t][k], hi, lo, rstd);
          col_b[t][k] += ACC(uc[t][k]);
        }
      }
    }
  }
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    if (j < nitems) dx_item(uc[t], vc[t], e0, j, sg, sgx, hi, lo, rstd);
  }
  for (uint j = lane + NT * TPR; j < nitems; j += TPR) {
    PACK_T(u);
    PACK_T(v);
    load_item(e0, L, j, u, v);
    dx_item(u, v, e0, j, sg, sgx, hi, lo, rstd);
  }
#endif
}

#if defined(NORM)
// Compensated (Kahan) addition of v to the sum s with compensation c: the column sums run over many
// rows in sequence, where plain float addition would lose digits. `precise` keeps a compiler from
// reassociating it away, and so does g_one, a 1 the compiler cannot see (lavapipe ignored `precise`
// here: its sums came out bit for bit those of plain addition, and f32 db over 1000 rows off by 1e-6 of
// its norm).
ACC g_one;
void kahan_add(inout ACC s, inout ACC c, ACC v) {
  precise ACC y = v - c;
  precise ACC t = s + y;
  c = (t * g_one - s) - y;
  s = t;
}

// PASS 1: column pack p (VW columns) over the rows of chunk c: partial sums of dy * xhat and dy.
void column_partials(uint p, uint c) {
  ACC a[VW], b[VW], ca[VW], cb[VW];
  [[unroll]] for (uint k = 0; k < VW; ++k) a[k] = ACC(0), b[k] = ACC(0), ca[k] = ACC(0), cb[k] = ACC(0);
  const uint r1 = min(pc.rows, (c + 1u) * pc.rchunk);
  for (uint r = c * pc.rchunk; r < r1; ++r) {
    PACK_T(u);
    PACK_T(v);
    load_item(r * pc.feat, pc.feat, p, u, v);
    const ACC hi = ws[3u * r], lo = ws[3u * r + 1u], rstd = ws[3u * r + 2u];
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      kahan_add(a[k], ca[k], ACC(u[k]) * xhat_of(v[k], hi, lo, rstd));
      kahan_add(b[k], cb[k], ACC(u[k]));
    }
  }
  const uint at = PARTIALS_AT + 4u * c * FPAD + p * VW;
  [[unroll]] for (uint k = 0; k < VW; ++k) {
    ws[at + k] = a[k];
    ws[at + FPAD + k] = b[k];
    ws[at + 2u * FPAD + k] = -ca[k];  // the sums' low parts (a chunk's sum is s - c), not rounded away
    ws[at + 3u * FPAD + k] = -cb[k];
  }
}

// PASS 2: column pack p: the chunks' partial sums in chunk order, stored to dw (and db).
void column_combine(uint p) {
  PACK_T(dw);
  PACK_T(db);
  [[unroll]] for (uint k = 0; k < VW; ++k) {
    ACC a = ACC(0), b = ACC(0), ca = ACC(0), cb = ACC(0);
    for (uint c = 0; c < pc.nrchunks; ++c) {
      const uint at = PARTIALS_AT + 4u * c * FPAD + p * VW + k;
      kahan_add(a, ca, ws[at]);
      kahan_add(a, ca, ws[at + 2u * FPAD]);
      kahan_add(b, cb, ws[at + FPAD]);
      kahan_add(b, cb, ws[at + 3u * FPAD]);
    }
    dw[k] = FT(a);
    db[k] = FT(b);
  }
  if (WIDE) {
    out3_v.v[p] = pack(dw);
#if defined(LAYER)
    out5_v.v[p] = pack(db);
#endif
  } else {
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      if (p * VW + k < pc.feat) {
        STORE_ELEM(out3, p * VW + k, dw[k])
#if defined(LAYER)
        STORE_ELEM(out5, p * VW + k, db[k])
#endif
      }
    }
  }
}

// ---- PASS 3 / PASS 4 (see the header).
shared ACC colsum[SMEM_VALUES];
#if defined(LAYER)
#define FQ 2u
#else
#define FQ 1u
#endif

// N values summed over the workgroup (TPR = workgroup size) with one pair of barriers; the same order
// (subgroups, then the subgroups' sums in index order) in every invocation and every run.
#if defined(SUBGROUP)
#define WG_SUMS(N)                                                                  \
  void wg_sums##N(inout ACC v[N]) {                                                 \
    [[unroll]] for (uint i = 0; i < N; ++i) v[i] = subgroupAdd(v[i]);               \
    if (TPR == gl_SubgroupSize) return;                                             \
    const uint nsg = TPR / gl_SubgroupSize;                                         \
    if (gl_SubgroupInvocationID == 0u)                                              \
      [[unroll]] for (uint i = 0; i < N; ++i) red[i * nsg + gl_SubgroupID] = v[i];  \
    barrier();                                                                      \
    [[unroll]] for (uint i = 0; i < N; ++i) {                                       \
      ACC r = red[i * nsg];                                                         \
      for (uint k = 1u; k < nsg; ++k) r += red[i * nsg + k];                        \
      v[i] = r;                                                                     \
    }                                                                               \
    barrier();                                                                      \
  }
#else
#define WG_SUMS(N)                                                                  \
  void wg_sums##N(inout ACC v[N]) {                                                 \
    [[unroll]] for (uint i = 0; i < N; ++i) v[i] = row_sum(v[i], gl_LocalInvocationID.x, 0u); \
  }
#endif
WG_SUMS(2)
WG_SUMS(4)

void fused_grad(uvec4 dp, uvec4 wp, out FT d[VW], out ACC g[VW]) {
  unpack(dp, d);
  PACK_T(wv);
  [[unroll]] for (uint k = 0; k < VW; ++k) wv[k] = FT(1);
  if (HAS_W) unpack(wp, wv);
  [[unroll]] for (uint k = 0; k < VW; ++k) {
    precise ACC gk = ACC(d[k]) * ACC(wv[k]);  // rounded: the same value in every use
    g[k] = gk;
  }
}

void fused_rows() {
  const uint t = gl_LocalInvocationID.x, B = gl_WorkGroupSize.x, L = pc.feat, npk = L / VW;
  const ACC inv_l = ACC(1) / ACC(L);
  uvec4 cw[NT], cd[NT], cx[NT];
  // The column sums of this invocation's packs, in registers: slot (u, i) is column t + u B's value i of
  // [dy xhat (VW values) | dy (VW, layer only)]. They were in shared memory, one read-modify-write per
  // value and row (16 per 16-byte pack in 16-bit layer norm), which held it at 0.45 of copy on an H100.
  ACC cs[NT * FQ * VW];
  [[unroll]] for (uint i = 0; i < NT * FQ * VW; ++i) cs[i] = ACC(0);
  [[unroll]] for (uint u = 0; u < NT; ++u) {
    const uint j = t + u * B;
    cw[u] = uvec4(0u);
    if (j < npk) {
      if (HAS_W) cw[u] = w_v.v[j];

    }
  }
  for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
    const uint base = r * npk;
    [[unroll]] for (uint u = 0; u < NT; ++u) {
      const uint j = t + u * B;
      cd[u] = uvec4(0u);  // zeros: add nothing to the sums
      cx[u] = uvec4(0u);
      if (j < npk) cd[u] = dy_v.v[base + j], cx[u] = xv_v.v[base + j];
    }
    ACC hi = ACC(0), lo = ACC(0), rs, mg = ACC(0), mgx;
#if defined(LAYER)
    // One workgroup reduction for the row, about a shift K, the row's first value (every invocation
    // reads it): sum e, sum e^2, sum g, sum g e with e = x - K. The mean is K + sum e / L (hi = K, lo the
    // rest, as centered() takes them) and the centered sums follow from these four; K is a value of the
    // row, so |mean - K| is a few standard deviations at most and sum e^2 - (sum e)^2 / L keeps its
    // precision, as the two-pass form's did (test_norm BackwardRowsFarFromZero fails without the shift).
    // Two reductions per row (the first for the mean alone) held the 16-bit rows at 0.36 of copy on an
    // H100: each one's barriers leave no loads in flight.
    const ACC K = ACC(LOAD_ELEM(xv, r * L));
    ACC s4[4] = {ACC(0), ACC(0), ACC(0), ACC(0)};  // sum e, sum e^2, sum g, sum g e
    [[unroll]] for (uint u = 0; u < NT; ++u) {
      if (t + u * B >= npk) continue;
      PACK_T(x);
      PACK_T(d);
      ACC g[VW];
      unpack(cx[u], x);
      fused_grad(cd[u], cw[u], d, g);
      [[unroll]] for (uint k = 0; k < VW; ++k) {
        const ACC e = ACC(x[k]) - K;
        s4[0] += e, s4[1] += e * e, s4[2] += g[k], s4[3] += g[k] * e;
      }
    }
    wg_sums4(s4);
    hi = K;
    lo = s4[0] * inv_l;
    const ACC m2 = max(s4[1] - s4[0] * lo, ACC(0));
    rs = rsqrt_(m2 * inv_l + ACC(EPS));
    mg = s4[2] * inv_l;
    mgx = rs * (s4[3] - lo * s4[2]) * inv_l;
#else
    ACC s1[2] = {ACC(0), ACC(0)};  // sum x^2, sum g x
    [[unroll]] for (uint u = 0; u < NT; ++u) {
      PACK_T(x);
      PACK_T(d);
      ACC g[VW];
      unpack(cx[u], x);
      fused_grad(cd[u], cw[u], d, g);
      [[unroll]] for (uint k = 0; k < VW; ++k) s1[0] += ACC(x[k]) * ACC(x[k]), s1[1] += g[k] * ACC(x[k]);
    }
    wg_sums2(s1);
    rs = rsqrt_(s1[0] * inv_l + ACC(EPS));
    mgx = rs * s1[1] * inv_l;
#endif
    // dx = rstd (g - mean(g) - xhat mean(g xhat)); this workgroup's column sums of dy xhat and dy.
    [[unroll]] for (uint u = 0; u < NT; ++u) {
      const uint j = t + u * B;
      if (j >= npk) continue;
      PACK_T(x);
      PACK_T(d);
      PACK_T(o);
      ACC g[VW];
      unpack(cx[u], x);
      fused_grad(cd[u], cw[u], d, g);
      [[unroll]] for (uint k = 0; k < VW; ++k) {
        const ACC xhat = centered(ACC(x[k]), hi, lo) * rs;
        precise const ACC tt = g[k] - mg - xhat * mgx;
        o[k] = FT(rs * tt);
        cs[(u * FQ) * VW + k] += ACC(d[k]) * xhat;
#if defined(LAYER)
        cs[(u * FQ + 1u) * VW + k] += ACC(d[k]);
#endif
      }
      out3_v.v[base + j] = pack(o);
    }
  }
  // This workgroup's partial (invocation-owned slots: no barrier).
  const uint part = gl_WorkGroupID.x * FQ * L;
  [[unroll]] for (uint u = 0; u < NT; ++u) {
    const uint j = t + u * B;
    if (j < npk)
      [[unroll]] for (uint i = 0; i < FQ * VW; ++i) ws[part + i * npk + j] = cs[u * FQ * VW + i];
  }
}

// PASS 4: unit i = lane + 32 x workgroup covers PAIR slots of [Q][VW][npk] (16-bit dtypes: the two
// values of one 32-bit word of dw / db, so that the store is a plain one); way w (of 8) adds partials
// w, w + 8, ... (the number of partials is pc.nrchunks; Kahan), then way 0 adds the ways in order.
#if defined(DT_F16) || defined(DT_BF16)
#define PAIR 2u
#else
#define PAIR 1u
#endif
void fused_combine() {
  const uint lane = gl_LocalInvocationID.x % 32u, way = gl_LocalInvocationID.x / 32u, W = gl_WorkGroupSize.x;
  const uint nways = W / 32u, L = pc.feat, npk = L / VW, QL = FQ * L, units = QL / PAIR, LP = L / PAIR;
  for (uint g = gl_WorkGroupID.x; g * 32u < units; g += gl_NumWorkGroups.x) {
    const uint i = g * 32u + lane;
    const uint q = i / LP, e = i % LP, kp = e / npk, j = e % npk;
    const uint slot = q * L + kp * PAIR * npk + j;
    ACC a[PAIR], ca[PAIR];
    [[unroll]] for (uint h = 0; h < PAIR; ++h) {
      a[h] = ACC(0), ca[h] = ACC(0);
      if (i < units)
        for (uint b = way; b < pc.nrchunks; b += nways) kahan_add(a[h], ca[h], ws[b * QL + slot + h * npk]);
      colsum[(2u * h) * W + gl_LocalInvocationID.x] = a[h];
      colsum[(2u * h + 1u) * W + gl_LocalInvocationID.x] = ca[h];
    }
    barrier();
    if (way == 0u && i < units) {
      ACC s[PAIR];
      [[unroll]] for (uint h = 0; h < PAIR; ++h) {
        ACC c = ACC(0);
        s[h] = ACC(0);
        for (uint v = 0; v < nways; ++v) {
          kahan_add(s[h], c, colsum[(2u * h) * W + v * 32u + lane]);
          kahan_add(s[h], c, -colsum[(2u * h + 1u) * W + v * 32u + lane]);
        }
      }
      const uint f = j * VW + kp * PAIR;
#if defined(DT_F16) || defined(DT_BF16)
      uint word;
#if defined(DT_F16)
      word = packHalf2x16(vec2(s[0], s[1]));
#else
      word = pack_bf16x2(s[0], s[1]);
#endif
      if (q == 0u) out3_w.w[f >> 1] = word;
#if defined(LAYER)
      else out5_w.w[f >> 1] = word;
#endif
#else
      if (q == 0u) STORE_ELEM(out3, f, FT(s[0]))
#if defined(LAYER)
      else STORE_ELEM(out5, f, FT(s[0]))
#endif
#endif
    }
    barrier();
  }
}
#endif

void main() {
  const uint lane = gl_LocalInvocationID.x % TPR, slot = gl_LocalInvocationID.x / TPR;
#if defined(NORM)
  g_one = ACC(min(pc.rows, 1u));  // (1: every dispatch has rows)
  if (PASS == 3u) {
    fused_rows();
    return;
  }
  if (PASS == 4u) {
    fused_combine();
    return;
  }
#endif
  if (PASS == 0u) {
    const uint rpw = gl_WorkGroupSize.x / TPR;
    const uint nblocks = (pc.rows + rpw - 1u) / rpw;
#if defined(NORM)
    if (FUSED_COLS) {
      [[unroll]] for (uint t = 0; t < NT; ++t)
        [[unroll]] for (uint k = 0; k < VW; ++k) col_a[t][k] = ACC(0), col_b[t][k] = ACC(0);
    }
#endif
    for (uint blk = gl_WorkGroupID.x; blk < nblocks; blk += gl_NumWorkGroups.x) {
      const uint r = blk * rpw + slot;
      row(r, r < pc.rows, lane, slot);
    }
#if defined(NORM)
    if (FUSED_COLS) {  // partial q = (workgroup, slot), in the layout of PASS 1's chunk partials
      const uint q = gl_WorkGroupID.x * rpw + slot, npk = (pc.feat + VW - 1u) / VW;
      [[unroll]] for (uint t = 0; t < NT; ++t) {
        const uint j = lane + t * TPR;
        if (j < npk) {
          const uint at = PARTIALS_AT + 4u * q * FPAD + j * VW;
          [[unroll]] for (uint k = 0; k < VW; ++k) {
            ws[at + k] = col_a[t][k];
            ws[at + FPAD + k] = col_b[t][k];
            ws[at + 2u * FPAD + k] = ACC(0);  // (no low parts: a few rows a partial)
            ws[at + 3u * FPAD + k] = ACC(0);
          }
        }
      }
    }
#endif
  }
#if defined(NORM)
  else {
    const uint npk = (pc.feat + VW - 1u) / VW;
    const uint colgroups = (npk + gl_WorkGroupSize.x - 1u) / gl_WorkGroupSize.x;
    const uint units = PASS == 1u ? colgroups * pc.nrchunks : colgroups;
    for (uint u = gl_WorkGroupID.x; u < units; u += gl_NumWorkGroups.x) {
      const uint p = (u % colgroups) * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
      if (p >= npk) continue;
      if (PASS == 1u) column_partials(p, u / colgroups);
      else column_combine(p);
    }
  }
#endif
}
