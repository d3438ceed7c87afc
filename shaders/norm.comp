#version 450
// Row normalizations (docs/ops.md section 3): layer_norm, rms_norm, their activation fusions, the
// residual-add forms (s = x + r and norm(s) in one pass) and group_norm (a layer norm over rows of
// C/G * HW elements, with a per-channel affine). Variants: OP_<name>, DT_<dtype>, SUBGROUP.
//
// Three regimes, chosen by the host (hal/vulkan/norm.cpp) from the row length:
//   PASS 0: TPR invocations per row (a subgroup for short rows, up to the whole workgroup), each
//           keeping its share of the row in registers: the row is read once, the statistics are two
//           passes over the registers (mean, then squared deviations), the output one more.
//   PASS 1 and 2: rows longer than one workgroup's registers are cut into chunks of CHUNK elements,
//           one workgroup per chunk. PASS 1 writes each chunk's statistics (its mean, the residual of
//           that mean and the squared deviations about it, or the sum of squares) to a workspace;
//           PASS 2 combines the chunks of its row in chunk order (Chan's parallel variance) and
//           normalizes its chunk.
//   PASS 3 (KF_TUNE rows_coop; the default on GPUs): the same long rows in one pass. P workgroups share
//           a row, each holding its part (a contiguous range of about chunk elements) in registers;
//           they exchange only their parts' statistics through a workspace, then each normalizes its
//           part from its registers: the row is read once and written once. See coop_row below.
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
// PASS 3, 16-bit dtypes, WIDE, not the add forms: the items are cached as the 16-byte packs loaded
// (CACHE_VALUES = 64 halves in the registers of 32 floats) and converted at each use.
layout(constant_id = 8) const bool RAW = false;
#define NT (CACHE_VALUES / VW)  // items an invocation caches

#include "row_reduce.glsl"

FT xc[NT][VW];  // this invocation's items of the segment (private: registers once unrolled)
uvec4 xr[NT];   // the same as raw packs (RAW)

// Cached item t.
void cache_get(uint t, out FT v[VW]) {
  if (RAW) unpack(xr[t], v);
  else [[unroll]] for (uint k = 0; k < VW; ++k) v[k] = xc[t][k];
}

#if defined(OP_add_layer_norm) || defined(OP_add_rms_norm)
#define ADD 1
#endif
#if defined(OP_rms_norm) || defined(OP_rms_norm_gelu) || defined(OP_rms_norm_silu) || defined(OP_add_rms_norm)
#define RMS 1
#endif

// Bindings: 0 x, 1 r (the residual of the add forms), 2 w, 3 b; 4 the output this pass writes (y; s in
// PASS 1); 5 s in PASS 0 and 3, the workspace in PASS 1 and 2 (three values per chunk); 6 PASS 3's
// workspace: words [0, 1 + rows) are zeroed by the host before the dispatch (0: the ticket counter,
// 1 + row: the mask of the row's parts published), then three statistics per part from stats_base().
DECLARE_BUFFER(0, x, readonly)
DECLARE_BUFFER(1, r, readonly)
DECLARE_BUFFER(2, w, readonly)
DECLARE_BUFFER(3, b, readonly)
DECLARE_BUFFER(4, out4, )
DECLARE_BUFFER(5, out5, )
layout(std430, binding = 5) buffer WS { ACC ws[]; };
layout(std430, binding = 6) coherent buffer CoopFlags { uint flags[]; };

layout(push_constant) uniform PC {
  uint rows;
  uint feat;       // row length
  uint chunk;      // elements per chunk (PASS 1, 2)
  uint nchunks;    // chunks per row
  uint inner;      // affine index: (e / inner) % period
  uint period;
  float eps;
  uint eps_lo, eps_hi;  // eps as a double's bits (f64)
  uint spin;            // PASS 3: polls of the rows' masks a workgroup may make over its life (then it
                        //   computes missing parts itself)
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
      PACK_T(xv);
      cache_get(t, xv);
      PACK_T(y);
      [[unroll]] for (uint k = 0; k < VW; ++k) y[k] = act(FT(centered(ACC(xv[k]), hi, lo) * rstd) * wv[k] + bv[k]);
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

// ---- PASS 3: rows shared by P workgroups in one pass ----
//
// Each workgroup takes a ticket (atomicAdd on flags[0]): ticket u is part u % P of row u / P. It loads
// its part into registers (all loads first), reduces the part's statistics (m_k, c_k, M2_k as PASS 1
// writes them; the sum of squares for rms), and one invocation writes them to the workspace, then
// memoryBarrierBuffer(), then sets the part's bit in the row's mask (atomicOr). The same invocation
// polls the mask (bounded, below), memoryBarrierBuffer(), and copies the statistics of the parts whose
// bits it saw to shared memory. Statistics and mask are all accessed through device atomics, so the
// only question is order, and the two barriers give it (release before the bit, acquire after it): a
// bit seen means its statistics are there. The workgroup then combines the P parts in part order and
// normalizes its part from its registers.
//
// Why the waits end on a GPU: tickets are taken by running workgroups, in the order they ask, so the
// taken tickets are always a prefix [0, T). Every row whose tickets all lie in the prefix has all its
// parts on workgroups that are running or done, and each of them publishes before it waits: their
// waits end. Only the row holding ticket T - 1 can wait on a part not yet taken, so at most P - 1
// workgroups wait on absent siblings; with more than P - 1 workgroups resident (a GPU holds hundreds
// of these), some other workgroup finishes its row and takes ticket T (a workgroup loops over tickets;
// a fresh one starts in the freed slot), and so on. Vulkan itself promises no forward progress between
// workgroups, though (lavapipe runs as many at once as it has threads, and a spinning workgroup holds
// one), hence the bound: pc.spin polls over the workgroup's life, not per wait, so that it also bounds
// the loop iterations lavapipe counts (kernels_common.hpp, rows_coop_spin). When it runs out, the
// workgroup computes each missing part's statistics itself, reading that part from memory with the
// same function (part_stats), the same reduction and the same order, the arithmetic marked precise so
// that the compiler can neither contract nor reassociate it in one place and not the other. A recomputed part gives the bits its owner publishes,
// so the result is the same whichever parts were waited for, and whatever the bound: the bound costs
// time, never correctness or determinism.
shared uint coop_ticket, coop_mask;
uint spin_left;  // lane 0's polls left for the workgroup's whole life (pc.spin), over all its parts

// Statistic i (ACC units) of the workspace, written and read through 32-bit atomics on its words: no
// compiler may cache, hoist or sink them across the polls of the mask.
void stat_put(uint i, ACC v) {
#if defined(DT_F64)
  const uvec2 u = unpackDouble2x32(v);
  atomicExchange(flags[2u * i], u.x);
  atomicExchange(flags[2u * i + 1u], u.y);
#else
  atomicExchange(flags[i], floatBitsToUint(v));
#endif
}
ACC stat_get(uint i) {
#if defined(DT_F64)
  return packDouble2x32(uvec2(atomicOr(flags[2u * i], 0u), atomicOr(flags[2u * i + 1u], 0u)));
#else
  return uintBitsToFloat(atomicOr(flags[i], 0u));
#endif
}
shared ACC coop_st[3u * 32u];  // the row's parts' statistics, P <= 32 (the mask's bits)

// Where the statistics start in the workspace, in ACC units: after the 1 + rows words, rounded to 8 bytes.
uint stats_base() {
  const uint words = (pc.rows + 2u) & ~1u;
#if defined(DT_F64)
  return words / 2u;
#else
  return words;
#endif
}

// Item j (the t-th of this invocation) of the part [e0, e0 + len): from the registers, or read from
// memory as coop_load would have cached it.
void part_item(bool cached, uint e0, uint len, uint t, uint j, out FT v[VW]) {
  if (cached) cache_get(t, v);
  else if (RAW) unpack(x_v.v[e0 / VW + j], v);
  else load_item(e0, len, j, v);
}

// The statistics of a part, from the registers (cached: this workgroup's part) or from memory (a
// missing sibling's): m, c, M2 as chunk_stats (layer norm) or the sum of squares (rms). Every
// workgroup invocation calls it (row_sum has barriers).
void part_stats(bool cached, uint e0, uint len, uint lane, out ACC st0, out ACC st1, out ACC st2) {
  const uint nitems = (len + VW - 1u) / VW;
  precise ACC acc = ACC(0);
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    if (j < nitems) {
      PACK_T(v);
      part_item(cached, e0, len, t, j, v);
      [[unroll]] for (uint k = 0; k < VW; ++k) {
#if defined(RMS)
        acc += ACC(v[k]) * ACC(v[k]);
#else
        acc += ACC(v[k]);  // the zero padding adds nothing
#endif
      }
    }
  }
  const ACC s = row_sum(acc, lane, 0u);
#if defined(RMS)
  st0 = s, st1 = ACC(0), st2 = ACC(0);
#else
  const ACC m = s / ACC(len);
  precise ACC sc = ACC(0), s2 = ACC(0);
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    if (j < nitems) {
      PACK_T(v);
      part_item(cached, e0, len, t, j, v);
      [[unroll]] for (uint k = 0; k < VW; ++k) {
        precise ACC d = ACC(v[k]) - m;
        if (in_row(j, k, len)) sc += d, s2 += d * d;
      }
    }
  }
  st0 = m;
  st1 = row_sum(sc, lane, 0u);
  st2 = row_sum(s2, lane, 0u);
#endif
}

// Loads this workgroup's part into the registers, every load before any use; the add forms then
// store s (binding 5).
void coop_load(uint e0, uint len, uint lane) {
  const uint nitems = (len + VW - 1u) / VW;
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    if (j < nitems) {
      if (RAW) xr[t] = x_v.v[e0 / VW + j];
      else load_item(e0, len, j, xc[t]);
    }
  }
#if defined(ADD)
  [[unroll]] for (uint t = 0; t < NT; ++t) {
    const uint j = lane + t * TPR;
    if (j < nitems) store_item(true, e0, len, j, xc[t]);
  }
#endif
}

void coop_row(uint row, uint part, uint lane) {
  const uint P = pc.nchunks, L = pc.feat, C = pc.chunk;
  const uint e0 = row * L + part * C, len = min(C, L - part * C);
  coop_load(e0, len, lane);
  ACC a0, a1, a2;
  part_stats(true, e0, len, lane, a0, a1, a2);
  const uint at = stats_base() + 3u * row * P;
  if (lane == 0u) {
    stat_put(at + 3u * part, a0);
    stat_put(at + 3u * part + 1u, a1);
    stat_put(at + 3u * part + 2u, a2);
    memoryBarrierBuffer();  // the statistics before the bit that publishes them
    atomicOr(flags[1u + row], 1u << part);
    const uint all = P == 32u ? ~0u : (1u << P) - 1u;
    uint seen = atomicOr(flags[1u + row], 0u);
    for (; seen != all && spin_left > 0u; --spin_left) seen = atomicOr(flags[1u + row], 0u);
    memoryBarrierBuffer();  // the bits seen before the statistics they publish
    for (uint k = 0u; k < P; ++k) {
      if (k != part && (seen & (1u << k)) != 0u) {
        coop_st[3u * k] = stat_get(at + 3u * k);
        coop_st[3u * k + 1u] = stat_get(at + 3u * k + 1u);
        coop_st[3u * k + 2u] = stat_get(at + 3u * k + 2u);
      }
    }
    coop_st[3u * part] = a0;
    coop_st[3u * part + 1u] = a1;
    coop_st[3u * part + 2u] = a2;
    coop_mask = seen | (1u << part);
  }
  barrier();
  const uint seen = coop_mask;  // uniform: the loop below has barriers
  for (uint k = 0u; k < P; ++k) {
    if ((seen & (1u << k)) == 0u) {  // the fallback: part k's statistics from memory
      ACC b0, b1, b2;
      part_stats(false, row * L + k * C, min(C, L - k * C), lane, b0, b1, b2);
      if (lane == 0u) coop_st[3u * k] = b0, coop_st[3u * k + 1u] = b1, coop_st[3u * k + 2u] = b2;
    }
  }
  barrier();
  // The parts combined in part order, as chunk_normalize combines the chunks.
#if defined(RMS)
  ACC ss = ACC(0);
  for (uint k = 0u; k < P; ++k) ss += coop_st[3u * k];
  const ACC hi = ACC(0), lo = ACC(0), m2 = ss;
#else
  ACC sum = ACC(0);
  for (uint k = 0u; k < P; ++k) sum += ACC(min(C, L - k * C)) * coop_st[3u * k];
  const ACC hi = sum / ACC(L);
  ACC rr = ACC(0);
  for (uint k = 0u; k < P; ++k) rr += ACC(min(C, L - k * C)) * (coop_st[3u * k] - hi) + coop_st[3u * k + 1u];
  const ACC lo = rr / ACC(L);
  ACC m2 = ACC(0);
  for (uint k = 0u; k < P; ++k) {
    const ACC n = ACC(min(C, L - k * C)), d = centered(coop_st[3u * k], hi, lo);
    m2 += coop_st[3u * k + 2u] + ACC(2) * d * coop_st[3u * k + 1u] + n * d * d;
  }
  m2 = max(m2, ACC(0));
#endif
  const ACC rstd = rsqrt_(m2 / ACC(L) + ACC(EPS));
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
  } else if (PASS == 3u) {
    const uint units = pc.rows * pc.nchunks;
    spin_left = pc.spin;
    for (;;) {
      barrier();  // the previous unit is done with coop_ticket and the shared statistics
      if (gl_LocalInvocationID.x == 0u) coop_ticket = atomicAdd(flags[0], 1u);
      barrier();
      const uint u = coop_ticket;  // uniform
      if (u >= units) break;
      coop_row(u / pc.nchunks, u % pc.nchunks, lane);
    }
  } else {
    const uint units = pc.rows * pc.nchunks;
    for (uint u = gl_WorkGroupID.x; u < units; u += gl_NumWorkGroups.x) {
      if (PASS == 1u) chunk_stats(u / pc.nchunks, u % pc.nchunks, lane);
      else chunk_normalize(u / pc.nchunks, u % pc.nchunks, lane);
    }
  }
}
