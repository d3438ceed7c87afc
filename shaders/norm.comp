#version 450
// Row normalizations (KERNELS.md section 3): layer_norm, rms_norm, their activation fusions, the
// residual-add forms (s = x + r and norm(s) in one pass) and group_norm (a layer norm over rows of
// C/G * HW elements, with a per-channel affine). Variants: OP_<name>, DT_<dtype>, SUBGROUP.
//
// Three regimes, chosen by the host (hal/vulkan/kernels_norm.cpp) from the row length:
//   PASS 0: TPR invocations per row (a subgroup for short rows, up to the whole workgroup), each
//           keeping its share of the row in registers: the row is read once, the statistics are two
//           passes over the registers (mean, then squared deviations), the output one more.
//   PASS 1 and 2: rows longer than one workgroup's registers are cut into chunks of CHUNK elements,
//           one workgroup per chunk. PASS 1 writes each chunk's statistics (its mean, the residual of
//           that mean and the squared deviations about it, or the sum of squares) to a workspace;
//           PASS 2 combines the chunks of its row in chunk order (Chan's parallel variance) and
//           normalizes its chunk.
// The mean is carried as two floats (hi + lo, the corrected two-pass algorithm), so that rows whose
// spread is small next to their mean keep their precision.
// Every sum is in a fixed order, so the same input gives the same bits every run. Accumulation is in
// float (double for f64).
//
// The row is handled in items of VW elements (one 16-byte pack). WIDE: the row (and chunk) starts and
// lengths are multiples of VW, so items are aligned 16-byte loads and stores; otherwise elements are
// moved one at a time (16-bit stores through STORE_ELEM) and the tail item is padded with zeros.
#include "common.glsl"
#include "activations.glsl"

#if defined(DT_F64)
#define ACC double
#else
#define ACC float
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 256;           // invocations per row (PASS 0); the workgroup in 1, 2
layout(constant_id = 2) const bool WIDE = true;
layout(constant_id = 3) const uint CACHE_VALUES = 32;   // row values an invocation keeps in registers
layout(constant_id = 4) const uint PASS = 0;
layout(constant_id = 5) const bool HAS_W = false;
layout(constant_id = 6) const bool HAS_B = false;
// Where the affine parameters of element e live: channel c = (e / inner) % period. 0: per feature
// (inner 1, period = features, WIDE): loaded as packs; 1: one channel per item (inner % VW == 0,
// WIDE); 2: element by element.
layout(constant_id = 7) const uint AFFINE = 0;
#define NT (CACHE_VALUES / VW)  // items an invocation caches

#include "row_reduce.glsl"

FT xc[NT][VW];  // this invocation's items of the segment (private: registers once unrolled)

#if defined(OP_add_layer_norm) || defined(OP_add_rms_norm)
#define ADD 1
#endif
#if defined(OP_rms_norm) || defined(OP_rms_norm_gelu) || defined(OP_rms_norm_silu) || defined(OP_add_rms_norm)
#define RMS 1
#endif

// Bindings: 0 x, 1 r (the residual of the add forms), 2 w, 3 b; 4 the output this pass writes (y; s in
// PASS 1); 5 s in PASS 0, the workspace in PASS 1 and 2 (three values per chunk).
DECLARE_BUFFER(0, x, readonly)
DECLARE_BUFFER(1, r, readonly)
DECLARE_BUFFER(2, w, readonly)
DECLARE_BUFFER(3, b, readonly)
DECLARE_BUFFER(4, out4, )
DECLARE_BUFFER(5, out5, )
layout(std430, binding = 5) buffer WS { ACC ws[]; };

layout(push_constant) uniform PC {
  uint rows;
  uint feat;       // row length
  uint chunk;      // elements per chunk (PASS 1, 2)
  uint nchunks;    // chunks per row
  uint inner;      // affine index: (e / inner) % period
  uint period;
  float eps;
  uint eps_lo, eps_hi;  // eps as a double's bits (f64)
} pc;

#if defined(DT_F64)
#define EPS packDouble2x32(uvec2(pc.eps_lo, pc.eps_hi))
#else
#define EPS pc.eps
#endif

FT act(FT v) {
#if defined(OP_layer_norm_relu)
  return v < FT(0) ? FT(0) : v;  // NaN stays NaN (and FT may be double)
#elif defined(OP_layer_norm_gelu) || defined(OP_rms_norm_gelu)
  return gelu_f(v);
#elif defined(OP_layer_norm_silu) || defined(OP_rms_norm_silu)
  return silu_f(v);
#else
  return v;
#endif
}

bool in_row(uint j, uint k, uint len) { return WIDE || j * VW + k < len; }

// Item j of the segment [e0, e0 + len): x (+ r for the add forms).
void load_item(uint e0, uint len, uint j, out FT v[VW]) {
  if (WIDE) {
    unpack(x_v.v[e0 / VW + j], v);
#if defined(ADD)
    PACK_T(t);
    unpack(r_v.v[e0 / VW + j], t);
    [[unroll]] for (uint k = 0; k < VW; ++k) v[k] += t[k];
#endif
  } else {
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      const uint o = j * VW + k;
      v[k] = FT(0);
      if (o < len) {
        v[k] = LOAD_ELEM(x, e0 + o);
#if defined(ADD)
        v[k] += LOAD_ELEM(r, e0 + o);
#endif
      }
    }
  }
}

// Stores item j to binding 4 (out5 = false) or 5.
void store_item(bool to5, uint e0, uint len, uint j, FT v[VW]) {
  if (WIDE) {
    if (to5) out5_v.v[e0 / VW + j] = pack(v);
    else out4_v.v[e0 / VW + j] = pack(v);
  } else {
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      const uint o = j * VW + k;
      if (o < len) {
        if (to5) STORE_ELEM(out5, e0 + o, v[k])
        else STORE_ELEM(out4, e0 + o, v[k])
      }
    }
  }
}

// The affine parameters of item j of the segment starting at element e0.
void load_affine(uint e0, uint j, out FT wv[VW], out FT bv[VW]) {
  const uint e = e0 + j * VW;
  [[unroll]] for (uint k = 0; k < VW; ++k) wv[k] = FT(1), bv[k] = FT(0);
  if (AFFINE == 0u && WIDE) {
    const uint p = (e % pc.period) / VW;
    if (HAS_W) unpack(w_v.v[p], wv);
    if (HAS_B) unpack(b_v.v[p], bv);
  } else if (AFFINE == 1u && WIDE) {
    const uint c = (e / pc.inner) % pc.period;
    const FT wc = HAS_W ? LOAD_ELEM(w, c) : FT(1), bc = HAS_B ? LOAD_ELEM(b, c) : FT(0);
    [[unroll]] for (uint k = 0; k < VW; ++k) wv[k] = wc, bv[k] = bc;
  } else {
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      const uint c = ((e + k) / pc.inner) % pc.period;  // past the row end: any channel, never stored
      if (HAS_W) wv[k] = LOAD_ELEM(w, c);
      if (HAS_B) bv[k] = LOAD_ELEM(b, c);
    }
  }
}

// Normalizes the cached items of one segment and stores them to binding 4. The mean is hi + lo (see
// whole_row): x - mean is computed as (x - hi) - lo, exact where x is close to the mean.
void normalize_store(uint e0, uint len, uint lane, ACC hi, ACC lo, ACC rstd) {
  const uint nitems = (len + VW - 1u) / VW;
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    if (j < nitems) {
      PACK_T(wv);
      PACK_T(bv);
      load_affine(e0, j, wv, bv);
      PACK_T(y);
      [[unroll]] for (uint k = 0; k < VW; ++k) y[k] = act(FT(centered(ACC(xc[t][k]), hi, lo) * rstd) * wv[k] + bv[k]);
      store_item(false, e0, len, j, y);
    }
  }
}

// Loads one segment into xc (storing s to binding `s_to5 ? 5 : 4` for the add forms when
// `store_s`) and returns its sum (layer norm) or sum of squares (rms norm), reduced over the TPR lanes.
ACC load_segment(bool valid, uint e0, uint len, uint lane, uint slot, bool store_s, bool s_to5) {
  const uint nitems = (len + VW - 1u) / VW;
  ACC acc = ACC(0);
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    [[unroll]] for (uint k = 0; k < VW; ++k) xc[t][k] = FT(0);
    if (valid && j < nitems) {
      load_item(e0, len, j, xc[t]);
#if defined(ADD)
      if (store_s) store_item(s_to5, e0, len, j, xc[t]);
#endif
      [[unroll]] for (uint k = 0; k < VW; ++k) {
#if defined(RMS)
        acc += ACC(xc[t][k]) * ACC(xc[t][k]);
#else
        acc += ACC(xc[t][k]);  // the zero padding adds nothing
#endif
      }
    }
  }
  return row_sum(acc, lane, slot);
}

// The deviations of the cached segment about m, reduced over the TPR lanes: their sum c (the residual
// of m's rounding) and the sum of their squares m2.
void deviations(bool valid, uint len, uint lane, uint slot, ACC m, out ACC c, out ACC m2) {
  const uint nitems = (len + VW - 1u) / VW;
  ACC sc = ACC(0), s2 = ACC(0);
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    if (valid && j < nitems) {
      [[unroll]] for (uint k = 0; k < VW; ++k) {
        const ACC d = ACC(xc[t][k]) - m;
        if (in_row(j, k, len)) sc += d, s2 += d * d;
      }
    }
  }
  c = row_sum(sc, lane, slot);
  m2 = row_sum(s2, lane, slot);
}

void whole_row(uint row, bool valid, uint lane, uint slot) {
  const uint L = pc.feat, e0 = row * L;
  const ACC s = load_segment(valid, e0, L, lane, slot, true, true);
#if defined(RMS)
  const ACC hi = ACC(0), lo = ACC(0), m2 = s;
#else
  // The corrected two-pass algorithm (Chan, Golub and LeVeque): the mean is hi + lo, with lo the mean
  // deviation about the rounded hi, and the squared deviations corrected for it. Rows whose spread is
  // small next to their mean keep their precision.
  const ACC hi = s / ACC(L);
  ACC c, m2;
  deviations(valid, L, lane, slot, hi, c, m2);
  const ACC lo = c / ACC(L);
  m2 = max(m2 - c * lo, ACC(0));
#endif
  const ACC rstd = rsqrt_(m2 / ACC(L) + ACC(EPS));
  if (valid) normalize_store(e0, L, lane, hi, lo, rstd);
}

// PASS 1: chunk `c` of `row`: its statistics to the workspace (and s for the add forms).
void chunk_stats(uint row, uint c, uint lane) {
  const uint e0 = row * pc.feat + c * pc.chunk, len = min(pc.chunk, pc.feat - c * pc.chunk);
  const ACC s = load_segment(true, e0, len, lane, 0u, true, false);
#if defined(RMS)
  const ACC m = s, cr = ACC(0), m2 = ACC(0);
#else
  const ACC m = s / ACC(len);
  ACC cr, m2;
  deviations(true, len, lane, 0u, m, cr, m2);
#endif
  if (lane == 0u) {
    const uint at = 3u * (row * pc.nchunks + c);
    ws[at] = m;  // rms: the sum of squares
    ws[at + 1u] = cr;
    ws[at + 2u] = m2;
  }
}

// PASS 2: combines the chunks of `row` in chunk order, then normalizes chunk `c`.
void chunk_normalize(uint row, uint c, uint lane) {
  const uint L = pc.feat, base = 3u * row * pc.nchunks;
#if defined(RMS)
  ACC ss = ACC(0);
  for (uint k = 0; k < pc.nchunks; ++k) ss += ws[base + 3u * k];
  const ACC hi = ACC(0), lo = ACC(0), m2 = ss;
#else
  // Chunk k holds n_k values, their rounded mean m_k, the residual c_k = sum(x - m_k) and
  // M2_k = sum((x - m_k)^2). The row's mean is hi + lo; with d_k = m_k - mean, the row's squared
  // deviations are the sum of M2_k + 2 d_k c_k + n_k d_k^2 (Chan's combination, corrected).
  ACC sum = ACC(0);
  for (uint k = 0; k < pc.nchunks; ++k) sum += ACC(min(pc.chunk, L - k * pc.chunk)) * ws[base + 3u * k];
  const ACC hi = sum / ACC(L);
  ACC r = ACC(0);
  for (uint k = 0; k < pc.nchunks; ++k)
    r += ACC(min(pc.chunk, L - k * pc.chunk)) * (ws[base + 3u * k] - hi) + ws[base + 3u * k + 1u];
  const ACC lo = r / ACC(L);
  ACC m2 = ACC(0);
  for (uint k = 0; k < pc.nchunks; ++k) {
    const ACC n = ACC(min(pc.chunk, L - k * pc.chunk)), d = centered(ws[base + 3u * k], hi, lo);
    m2 += ws[base + 3u * k + 2u] + ACC(2) * d * ws[base + 3u * k + 1u] + n * d * d;
  }
  m2 = max(m2, ACC(0));
#endif
  const ACC rstd = rsqrt_(m2 / ACC(L) + ACC(EPS));
  const uint e0 = row * L + c * pc.chunk, len = min(pc.chunk, L - c * pc.chunk);
  const uint nitems = (len + VW - 1u) / VW;
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    if (j < nitems) load_item(e0, len, j, xc[t]);
  }
  normalize_store(e0, len, lane, hi, lo, rstd);
}

void main() {
  const uint lane = gl_LocalInvocationID.x % TPR, slot = gl_LocalInvocationID.x / TPR;
  if (PASS == 0u) {
    const uint rpw = gl_WorkGroupSize.x / TPR;
    const uint nblocks = (pc.rows + rpw - 1u) / rpw;
    // The loop bound is uniform across the workgroup, so every barrier is reached by all invocations.
    for (uint blk = gl_WorkGroupID.x; blk < nblocks; blk += gl_NumWorkGroups.x) {
      const uint row = blk * rpw + slot;
      whole_row(row, row < pc.rows, lane, slot);
    }
  } else {
    const uint units = pc.rows * pc.nchunks;
    for (uint u = gl_WorkGroupID.x; u < units; u += gl_NumWorkGroups.x) {
      if (PASS == 1u) chunk_stats(u / pc.nchunks, u % pc.nchunks, lane);
      else chunk_normalize(u / pc.nchunks, u % pc.nchunks, lane);
    }
  }
}
