#version 450
// Losses (docs/ops.md section 6): cross_entropy (the mean loss), cross_entropy_backward (the mean loss and
// d logits from the same pass over the logits) and mse. Variants: OP_<name>, DT_<dtype>, SUBGROUP.
// Passes (the host records them in order, each reading what the previous wrote to the workspace):
//   PASS 0: one workgroup counts the targets not ignored (the mean's denominator, needed by the gradient).
//   PASS 1: TPR invocations per row (rows that fit in their registers): max, sum of exp, sum of the
//           logits (label smoothing); the row's loss to the workspace; with GRAD, the gradient row.
//   PASS 2, 3: rows longer than a workgroup's registers, in chunks of CHUNK logits: PASS 2 writes each
//           chunk's (max, sum of exp about it, sum); PASS 3 combines the chunks of the row in order
//           (the chunk-0 workgroup writes the row's loss) and, with GRAD, writes its chunk's gradient.
//   PASS 5: cross_entropy's statistics over long rows of whole packs, streamed (instead of PASS 2);
//   PASS 6: cross_entropy_backward's gradient after it, streamed (instead of PASS 3).
//   PASS 7: cross_entropy_backward over rows that fit one workgroup's registers as raw packs: read once.
//   PASS 4: one workgroup sums the per-row losses in row order and divides by the count (NaN when every
//           target is ignored, as torch).
//   mse: PASS 1 sums (a - b)^2 over fixed chunks of the tensor; PASS 4 adds the chunk sums in order / n.
// linear_cross_entropy[_backward] (hal/vulkan/lce.cpp) run PASS 1-3 on one chunk of rows of the
// logits at a time: row_base is the chunk's first row (the targets and the per-row losses are indexed by
// row_base + row, the logits by row), logits may be soft-capped (softcap > 0: c tanh(z / c), taken when
// each value is used, so the registers hold the raw logits) and the z-loss z_loss * lse^2 is added to
// each row's loss; the gradient overwrites the chunk's logits in place (one binding, so no aliasing).
// The target's logit comes out of the same reductions as the statistics (a sum where only the target
// contributes), never from a second read of the logits, so an in-place gradient cannot race with it.
// The probabilities never exist in memory: only the gradient, when asked, is written. A target outside
// [0, C) that is not ignore_index is data on the device: its row's loss is NaN (so is the mean) and its
// gradient row is NaN; the CPU backend raises kf::Error for it instead.
#include "common.glsl"
#include "exp_reduced.glsl"
// The exponentials of the losses: f32 through exp_reduced (common.glsl: its error does not grow with
// the argument on any driver); the 16-bit dtypes keep the driver's exp, far inside their tolerance.
#if defined(DT_F32)
#define EXPF(d) exp_reduced(d)
#else
#define EXPF(d) exp(d)
#endif

#if defined(DT_F64)
#define ACC double
#else
#define ACC float
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 256;
layout(constant_id = 2) const bool WIDE = true;
layout(constant_id = 3) const uint CACHE_VALUES = 32;
layout(constant_id = 4) const uint PASS = 1;
#define NT (CACHE_VALUES / VW)

#include "row_reduce.glsl"

#if defined(OP_cross_entropy_backward) || defined(OP_linear_cross_entropy_backward)
#define GRAD 1
#endif
#if defined(OP_linear_cross_entropy) || defined(OP_linear_cross_entropy_backward)
#define LCE 1
#endif
#if defined(OP_cross_entropy) || defined(OP_cross_entropy_backward) || defined(LCE)
#define XENT 1
#endif

// Bindings: 0 logits (a for mse), 1 target (b for mse), 2 the loss, 3 d logits, 4 the workspace:
// word 0 the count, then one loss per row, then three values per chunk (cross entropy); mse: one sum
// per chunk.
#if defined(LCE) && defined(GRAD)
DECLARE_BUFFER(0, x, )  // the gradient is written over the logits: d x is x
#define dx_v x_v
#define dx_w x_w
#else
DECLARE_BUFFER(0, x, readonly)
#endif
#if defined(XENT)
layout(std430, binding = 1) readonly buffer T { int target[]; };
#else
DECLARE_BUFFER(1, bb, readonly)
#endif
DECLARE_BUFFER(2, loss, )
#if !(defined(LCE) && defined(GRAD))
DECLARE_BUFFER(3, dx, writeonly)
#endif
layout(std430, binding = 4) buffer WS { ACC ws[]; };
layout(std430, binding = 4) buffer WSU { uint wsu[]; };

layout(push_constant) uniform PC {
  uint rows;
  uint classes;     // row length (mse: elements)
  uint chunk;       // logits per chunk (PASS 2, 3); mse: packs per chunk
  uint nchunks;
  int ignore_index;
  float smoothing;  // label_smoothing
  uint row_base;    // the first row of this chunk of rows (linear_cross_entropy; 0 otherwise)
  uint total_rows;  // rows of the whole batch: the per-row losses in the workspace
  float softcap;    // linear_cross_entropy: logit soft-capping (0: off)
  float z_loss;     // linear_cross_entropy: z-loss coefficient (0: off)
} pc;

#define NAN_F uintBitsToFloat(0x7fc00000u)
#define NEG_INF uintBitsToFloat(0xff800000u)
#define LOSS_AT 1u                          // first per-row loss in the workspace
#define CHUNKS_AT (1u + pc.total_rows)      // first chunk statistic (4 per chunk)

#if defined(XENT) && defined(DT_BF16)
// bf16 logits are cached as their raw 16-byte packs (4 words per 8 logits) and converted (a shift or a
// mask) where they are used: the registers of 32 floats then hold 64 logits, so the host caches 64 per
// invocation and a bf16 row has as many bytes in flight as an f32 one. H100: forward 0.65 -> 0.71 of
// copy, backward 0.47-0.54 -> 0.60. Not f16: converting a half takes the GPU's conversion unit, and
// converting each cached logit twice (max, then exp) made f16 slower (0.65 -> 0.40): f16 keeps floats.
// Padding is the dtype's -inf.
#define RAW16 1
uvec4 xr[NT];
const uint NEG_INF16 = 0xff80u;
uint raw16(uint i) { return (x_w.w[i >> 1] >> (16u * (i & 1u))) & 0xffffu; }
float item(uint t, uint k) { return (k & 1u) == 0u ? bf16_lo(xr[t][k >> 1]) : bf16_hi(xr[t][k >> 1]); }
#else
FT xc[NT][VW];
FT item(uint t, uint k) { return xc[t][k]; }
#endif

#if defined(XENT)
// Item j of the segment [e0, e0 + len) into the cache's slot t (item(t, k) reads it); padding (past
// len) is -inf for the max and sum of exp, and masked for the sum of the logits.
void load_item(uint e0, uint len, uint j, uint t) {
#if defined(RAW16)
  if (WIDE) {
    xr[t] = x_v.v[e0 / VW + j];
  } else {
    uint w[4];
    [[unroll]] for (uint k = 0; k < 4u; ++k) {
      const uint o = j * VW + 2u * k;
      const uint lo = o < len ? raw16(e0 + o) : NEG_INF16;
      const uint hi = o + 1u < len ? raw16(e0 + o + 1u) : NEG_INF16;
      w[k] = lo | (hi << 16);
    }
    xr[t] = uvec4(w[0], w[1], w[2], w[3]);
  }
#else
  if (WIDE) {
    unpack(x_v.v[e0 / VW + j], xc[t]);
  } else {
    [[unroll]] for (uint k = 0; k < VW; ++k) {
      const uint o = j * VW + k;
      xc[t][k] = o < len ? LOAD_ELEM(x, e0 + o) : NEG_INF;
    }
  }
#endif
}

bool in_seg(uint j, uint k, uint len) { return WIDE || j * VW + k < len; }

// The logit the loss sees: soft-capped when asked (linear_cross_entropy).
float capped(float z) {
#if defined(LCE)
  if (pc.softcap > 0.0) return pc.softcap * tanh(z / pc.softcap);
#endif
  return z;
}

// Loads the segment (classes c0 .. c0 + len of its row) into the registers; returns its max, and its sum
// of exp(x - max) and of x in s and sx (reduced over the lanes), and in xt the logit at class t for lane
// 0 only (0 when t is not in the segment): one load by one lane rather than a class comparison per
// logit (which cost 16-bit rows, with twice the logits per byte, about a third of their speed).
float segment_stats(bool valid, uint e0, uint c0, uint len, int t, uint lane, uint slot, out float s, out float sx,
                    out float xt) {
  const uint nitems = (len + VW - 1u) / VW;
  float m = NEG_INF;
  [[unroll]] for (uint tt = 0; tt < NT; ++tt) {
    const uint j = lane + tt * TPR;
    if (valid && j < nitems) {
      load_item(e0, len, j, tt);
      [[unroll]] for (uint k = 0; k < VW; ++k)
        if (in_seg(j, k, len)) m = max(m, capped(item(tt, k)));
    }
  }
  m = row_max(m, lane, slot);
  float acc = 0.0, accx = 0.0;
  [[unroll]] for (uint tt = 0; tt < NT; ++tt) {
    const uint j = lane + tt * TPR;
    if (valid && j < nitems) {
      [[unroll]] for (uint k = 0; k < VW; ++k) {
        if (!in_seg(j, k, len)) continue;
        const float v = capped(item(tt, k));
        if (m != NEG_INF) acc += EXPF(v - m);
        accx += v;
      }
    }
  }
  s = row_sum(acc, lane, slot);
  sx = row_sum(accx, lane, slot);
  xt = 0.0;
  if (valid && lane == 0u && t >= int(c0) && t < int(c0 + len)) xt = capped(float(LOAD_ELEM(x, e0 + uint(t) - c0)));
  return m;
}

// The row's target: its class, or -1 when ignored, or -2 when out of range.
int target_of(uint row) {
  const int t = target[pc.row_base + row];
  if (t == pc.ignore_index) return -1;
  return (t < 0 || uint(t) >= pc.classes) ? -2 : t;
}

float row_loss(int t, float lse, float sx, float xt) {
  if (t == -1) return 0.0;
  if (t == -2) return NAN_F;
  float l = lse - (1.0 - pc.smoothing) * xt - pc.smoothing / float(pc.classes) * sx;
#if defined(LCE)
  l += pc.z_loss * lse * lse;
#endif
  return l;
}

#if defined(GRAD)
// d logits of the cached segment: (softmax (1 + 2 z_loss lse) - (1 - eps) onehot(t) - eps / C) / count,
// times the cap's derivative sech^2(z / c) (from the raw logit: 1 - tanh^2 would cancel where it
// saturates); 0 for an ignored row.
void store_grad(uint e0, uint c0, uint len, uint lane, int t, float m, float s, float lse) {
  const uint count = wsu[0];
  const float inv = 1.0 / float(max(count, 1u)), inv_s = 1.0 / s;
  const float off = pc.smoothing / float(pc.classes);
#if defined(LCE)
  const float pscale = 1.0 + 2.0 * pc.z_loss * lse;
#else
  const float pscale = 1.0;
#endif
  const uint nitems = (len + VW - 1u) / VW;
  [[unroll]] for (uint tt = 0; tt < NT; ++tt) {
    const uint j = lane + tt * TPR;
    if (j < nitems) {
      PACK_T(g);
      // The target's class as an index into this pack (outside 0 .. VW - 1 for every other pack): one
      // subtraction per pack instead of a class per logit.
      const int kt = t - int(c0 + j * VW);
      [[unroll]] for (uint k = 0; k < VW; ++k) {
        const float z = item(tt, k);
        float v = EXPF(capped(z) - m) * inv_s * pscale - off - (int(k) == kt ? 1.0 - pc.smoothing : 0.0);
#if defined(LCE)
        if (pc.softcap > 0.0) {
          const float ch = cosh(z / pc.softcap);  // +inf far out: the derivative is 0 there
          v /= ch * ch;
        }
#endif
        g[k] = t == -1 ? 0.0 : (t == -2 ? NAN_F : v * inv);
      }
      if (WIDE) {
        dx_v.v[e0 / VW + j] = pack(g);
      } else {
        [[unroll]] for (uint k = 0; k < VW; ++k)
          if (j * VW + k < len) STORE_ELEM(dx, e0 + j * VW + k, g[k])
      }
    }
  }
}
#endif

void whole_row(uint row, bool valid, uint lane, uint slot) {
  const uint C = pc.classes, e0 = row * C;
  const int t = valid ? target_of(row) : -1;
  float s, sx, xt;
  const float m = segment_stats(valid, e0, 0u, C, t, lane, slot, s, sx, xt);
  if (!valid) return;
  const float lse = m + log(s);
  if (lane == 0u) ws[LOSS_AT + pc.row_base + row] = row_loss(t, lse, sx, xt);
#if defined(GRAD)
  store_grad(e0, 0u, C, lane, t, m, s, lse);
#endif
}

void chunk_stats(uint row, uint c, uint lane) {
  const uint c0 = c * pc.chunk, e0 = row * pc.classes + c0, len = min(pc.chunk, pc.classes - c0);
  float s, sx, xt;
  const float m = segment_stats(true, e0, c0, len, target_of(row), lane, 0u, s, sx, xt);
  if (lane == 0u) {
    const uint at = CHUNKS_AT + 4u * (row * pc.nchunks + c);
    ws[at] = m;
    ws[at + 1u] = s;
    ws[at + 2u] = sx;
    ws[at + 3u] = xt;
  }
}

// The row's statistics from its chunks' (in chunk order): returns the max, and the sums in s, sx, xt.
float combine_chunks(uint row, out float s, out float sx, out float xt) {
  const uint base = CHUNKS_AT + 4u * row * pc.nchunks;
  float m = NEG_INF;
  for (uint k = 0; k < pc.nchunks; ++k) m = max(m, ws[base + 4u * k]);
  s = 0.0, sx = 0.0, xt = 0.0;
  for (uint k = 0; k < pc.nchunks; ++k) {
    const float mk = ws[base + 4u * k];
    if (mk != NEG_INF) s += ws[base + 4u * k + 1u] * EXPF(mk - m);
    sx += ws[base + 4u * k + 2u];
    xt += ws[base + 4u * k + 3u];
  }
  return m;
}

void chunk_combine(uint row, uint c, uint lane) {
  float s, sx, xt;
  const float m = combine_chunks(row, s, sx, xt);
  const int t = target_of(row);
  const float lse = m + log(s);
  if (c == 0u && lane == 0u) ws[LOSS_AT + pc.row_base + row] = row_loss(t, lse, sx, xt);
#if defined(GRAD)
  const uint c0 = c * pc.chunk, e0 = row * pc.classes + c0, len = min(pc.chunk, pc.classes - c0);
  const uint nitems = (len + VW - 1u) / VW;
  [[unroll]] for (uint tt = 0; tt < NT; ++tt) {
    const uint j = lane + tt * TPR;
    if (j < nitems) load_item(e0, len, j, tt);
  }
  store_grad(e0, c0, len, lane, t, m, s, lse);
#endif
}

#if (defined(OP_cross_entropy) || defined(OP_cross_entropy_backward)) && !defined(DT_F64)
#define XSTREAM 1
// PASS 5, the statistics over long rows whose classes are whole packs (the host's choice for rows that PASS 1
// cannot hold): one workgroup per chunk of the row, as PASS 2, but streamed instead of cached: each
// invocation loads ST_U packs (all before any is used), then keeps a running max and sum of exp over
// batches of ST_G packs (16 logits: one rescaling exp per batch), and the workgroup reduces the three
// statistics once per chunk. PASS 2 caches 4 packs an invocation and reduces twice per 256 x 4 packs,
// so its chunks are short and each pays its barriers; here a chunk is up to 6144 packs (the CUDA
// backend's layout, which reads 16-bit logits at the copy bandwidth on the same GPU). 16-bit logits take
// exp2((x - m) log2 e) (the hardware exp2 on an exact difference; x log2 e - m log2 e, as the CUDA
// backend's, rounded both products to the logits' magnitude: 3e-3 relative error at f16's 65504); f32
// keeps e^(x - m) (EXPF).
// Writes the chunk's statistics as PASS 2 does; PASS 3 combines them.
#if defined(DT_F16) || defined(DT_BF16)
#define ST_U 8u
#define ST_G 2u
#define ST_FAST 1
#if defined(DT_F16)
const uvec4 NINF_PACK = uvec4(0xfc00fc00u);
#else
const uvec4 NINF_PACK = uvec4(0xff80ff80u);
#endif
#else
#define ST_U 4u
#define ST_G 4u
const uvec4 NINF_PACK = uvec4(0xff800000u);
#endif
const float L2E = 1.44269504088896341;

// Adds ST_G packs (the first nv real, the rest -inf) to the running (m, s, sx).
void st_batch(inout float am, inout float as, inout float ax, const uvec4 q[ST_G], uint nv) {
  float v[ST_G * VW];
  [[unroll]] for (uint u = 0; u < ST_G; ++u) {
    FT t[VW];
    unpack(q[u], t);
    [[unroll]] for (uint k = 0; k < VW; ++k) v[u * VW + k] = t[k];
  }
  float cm = v[0];
  [[unroll]] for (uint i = 1; i < ST_G * VW; ++i) cm = max(cm, v[i]);
  if (pc.smoothing != 0.0) {
    [[unroll]] for (uint u = 0; u < ST_G; ++u) {
      float ps = 0.0;
      [[unroll]] for (uint k = 0; k < VW; ++k) ps += v[u * VW + k];
      if (u < nv) ax += ps;
    }
  }
  const float M = max(am, cm);
  if (M == NEG_INF) return;
  float acc = 0.0;
#if defined(ST_FAST)
  [[unroll]] for (uint i = 0; i < ST_G * VW; ++i) acc += exp2((v[i] - M) * L2E);
  as = as * exp2((am - M) * L2E) + acc;
#else
  [[unroll]] for (uint i = 0; i < ST_G * VW; ++i) acc += EXPF(v[i] - M);
  as = as * EXPF(am - M) + acc;
#endif
  am = M;
}

// The workgroup's (m, s, sx) from each invocation's running statistics (one reduction each).
float reduce_stats(float am, float as, float ax, uint lane, out float s, out float sx) {
  const float m = row_max(am, lane, 0u);
  s = row_sum(am == NEG_INF ? 0.0 : as * EXPF(am - m), lane, 0u);
  sx = row_sum(ax, lane, 0u);
  return m;
}

void stream_stats(uint row, uint c, uint lane) {
  const uint npk = pc.classes / VW, cpk = pc.chunk / VW, B = gl_WorkGroupSize.x;
  const uint j0 = c * cpk, j1 = min(npk, j0 + cpk), rb = row * npk;
  float am = NEG_INF, as = 0.0, ax = 0.0;
  uint jb = j0;
  for (; jb + ST_U * B <= j1; jb += ST_U * B) {  // whole steps: every pack real
    uvec4 q[ST_U];
    [[unroll]] for (uint u = 0; u < ST_U; ++u) q[u] = x_v.v[rb + jb + u * B + lane];
    [[unroll]] for (uint g = 0; g < ST_U; g += ST_G) {
      uvec4 b[ST_G];
      [[unroll]] for (uint u = 0; u < ST_G; ++u) b[u] = q[g + u];
      st_batch(am, as, ax, b, ST_G);
    }
  }
  for (; jb < j1; jb += ST_G * B) {  // the rest, a batch at a time (the real packs come first in each)
    uvec4 b[ST_G];
    uint nv = 0u;
    [[unroll]] for (uint u = 0; u < ST_G; ++u) {
      const uint j = jb + u * B + lane;
      nv += j < j1 ? 1u : 0u;
      b[u] = j < j1 ? x_v.v[rb + j] : NINF_PACK;
    }
    st_batch(am, as, ax, b, nv);
  }
  float s, sx;
  const float m = reduce_stats(am, as, ax, lane, s, sx);
  if (lane == 0u) {
    const int t = target_of(row);
    const uint c0 = j0 * VW;
    const float xt = t >= int(c0) && t < int(j1 * VW) ? float(LOAD_ELEM(x, row * pc.classes + uint(t))) : 0.0;
    const uint at = CHUNKS_AT + 4u * (row * pc.nchunks + c);
    ws[at] = m;
    ws[at + 1u] = s;
    ws[at + 2u] = sx;
    ws[at + 3u] = xt;
  }
}

#if defined(GRAD)
// The gradient of a row's losses as PASS 6 and 7 write it: d z = exp(z - lse) / count - eps / (C count),
// minus (1 - eps) / count at the target; the whole row NaN (bad target) or 0 (ignored) otherwise.
// exp(z - lse) is taken as exp((z - m) - log s), m the row's max: z - m is exact where it matters, while
// lse = m + log s is rounded at the logits' magnitude (5e-4 at 1e4: the probabilities' relative error).
struct GradK {
  float m, ls, inv, gb, gt, fill;
  int t;
};
GradK grad_constants(int t, float m, float s) {
  GradK g;
  g.t = t;
  g.m = m;
  g.ls = log(s);
  g.inv = 1.0 / float(max(wsu[0], 1u));
  g.gb = pc.smoothing / float(pc.classes) * g.inv;
  g.gt = (1.0 - pc.smoothing) * g.inv;
  g.fill = t == -2 ? NAN_F : 0.0;
  return g;
}
// Pack j of the row (logits q) as its gradient.
uvec4 grad_pack(const GradK g, uvec4 q, uint j) {
  FT z[VW];
  unpack(q, z);
  const int kt = g.t - int(j * VW);  // the target's place in this pack (outside 0 .. VW - 1 elsewhere)
  [[unroll]] for (uint k = 0; k < VW; ++k) {
#if defined(ST_FAST)
    const float e = exp2(((z[k] - g.m) - g.ls) * L2E);
#else
    const float e = EXPF((z[k] - g.m) - g.ls);
#endif
    z[k] = g.t >= 0 ? e * g.inv - g.gb - (int(k) == kt ? g.gt : 0.0) : g.fill;
  }
  return pack(z);
}

// PASS 6, cross_entropy_backward's gradient after PASS 5: each workgroup combines its row's chunk
// statistics (chunk 0's also writes the row's loss), then streams its chunk: ST_U packs loaded, then
// each written as grad_pack.
// The logits are read twice (PASS 5, PASS 6): 3 transfers where a copy makes 2.
void stream_grad(uint row, uint c, uint lane) {
  float s, sx, xt;
  const float m = combine_chunks(row, s, sx, xt);
  const int t = target_of(row);
  const float lse = m + log(s);
  if (c == 0u && lane == 0u) ws[LOSS_AT + row] = row_loss(t, lse, sx, xt);
  const GradK g = grad_constants(t, m, s);
  const uint npk = pc.classes / VW, cpk = pc.chunk / VW, B = gl_WorkGroupSize.x;
  const uint j0 = c * cpk, j1 = min(npk, j0 + cpk), rb = row * npk;
  for (uint jb = j0; jb < j1; jb += ST_U * B) {
    uvec4 q[ST_U];
    [[unroll]] for (uint u = 0; u < ST_U; ++u) {
      const uint j = jb + u * B + lane;
      if (j < j1) q[u] = x_v.v[rb + j];
    }
    [[unroll]] for (uint u = 0; u < ST_U; ++u) {
      const uint j = jb + u * B + lane;
      if (j < j1) dx_v.v[rb + j] = grad_pack(g, q[u], j);
    }
  }
}

// PASS 7, cross_entropy_backward over a row that fits the registers of one workgroup as raw packs (NT
// an invocation: 8 for 16-bit, 16 for f32; 32768 16-bit or f32 classes on 512 invocations): the row is
// read once, its statistics taken as PASS 5's, one reduction, the loss, then the gradient from the
// registers as PASS 6's. The CUDA backend's layout (512 threads, 6 packs in registers + 2 in shared
// memory for 32k 16-bit classes), which writes this gradient at 0.99 of copy on an H100.
void regs_row(uint row, uint lane) {
  const uint npk = pc.classes / VW, B = gl_WorkGroupSize.x, rb = row * npk;
  uvec4 q[NT];
  [[unroll]] for (uint u = 0; u < NT; ++u) {
    const uint j = u * B + lane;
    q[u] = j < npk ? x_v.v[rb + j] : NINF_PACK;
  }
  float am = NEG_INF, as = 0.0, ax = 0.0;
  [[unroll]] for (uint g = 0; g < NT; g += ST_G) {
    uvec4 b[ST_G];
    uint nv = 0u;
    [[unroll]] for (uint u = 0; u < ST_G; ++u) {
      b[u] = q[g + u];
      nv += (g + u) * B + lane < npk ? 1u : 0u;
    }
    st_batch(am, as, ax, b, nv);
  }
  float s, sx;
  const float m = reduce_stats(am, as, ax, lane, s, sx);
  const int t = target_of(row);
  const float lse = m + log(s);
  if (lane == 0u) {
    const float xt = t >= 0 ? float(LOAD_ELEM(x, row * pc.classes + uint(t))) : 0.0;
    ws[LOSS_AT + row] = row_loss(t, lse, sx, xt);
  }
  const GradK g = grad_constants(t, m, s);
  [[unroll]] for (uint u = 0; u < NT; ++u) {
    const uint j = u * B + lane;
    if (j < npk) dx_v.v[rb + j] = grad_pack(g, q[u], j);
  }
}
#endif
#endif
#endif  // XENT

// One workgroup: `n` values from the workspace at `at`, each lane a strided share in order, then the
// fixed-order reduction.
ACC sum_workspace(uint at, uint n, uint lane) {
  ACC acc = ACC(0);
  for (uint i = lane; i < n; i += gl_WorkGroupSize.x) acc += ws[at + i];
  return row_sum(acc, lane, 0u);
}

void main() {
  const uint lane = gl_LocalInvocationID.x % TPR, slot = gl_LocalInvocationID.x / TPR;
#if defined(XENT)
  if (PASS == 0u) {
    uint n = 0u;
    for (uint r = lane; r < pc.rows; r += gl_WorkGroupSize.x) n += target[r] != pc.ignore_index ? 1u : 0u;
    const float total = row_sum(float(n), lane, 0u);  // exact: fewer than 2^24 rows
    if (lane == 0u) wsu[0] = uint(total);
  } else if (PASS == 1u) {
    const uint rpw = gl_WorkGroupSize.x / TPR;
    const uint nblocks = (pc.rows + rpw - 1u) / rpw;
    for (uint blk = gl_WorkGroupID.x; blk < nblocks; blk += gl_NumWorkGroups.x) {
      const uint row = blk * rpw + slot;
      whole_row(row, row < pc.rows, lane, slot);
    }
#if defined(XSTREAM)
  } else if (PASS == 5u) {
    const uint units = pc.rows * pc.nchunks;
    for (uint u = gl_WorkGroupID.x; u < units; u += gl_NumWorkGroups.x) stream_stats(u / pc.nchunks, u % pc.nchunks, lane);
#if defined(GRAD)
  } else if (PASS == 6u) {
    const uint units = pc.rows * pc.nchunks;
    for (uint u = gl_WorkGroupID.x; u < units; u += gl_NumWorkGroups.x) stream_grad(u / pc.nchunks, u % pc.nchunks, lane);
  } else if (PASS == 7u) {
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) regs_row(r, lane);
#endif
#endif
  } else if (PASS == 2u || PASS == 3u) {
    const uint units = pc.rows * pc.nchunks;
    for (uint u = gl_WorkGroupID.x; u < units; u += gl_NumWorkGroups.x) {
      if (PASS == 2u) chunk_stats(u / pc.nchunks, u % pc.nchunks, lane);
#if defined(GRAD)
      else chunk_combine(u / pc.nchunks, u % pc.nchunks, lane);
#else
      else if (u % pc.nchunks == 0u) chunk_combine(u / pc.nchunks, 0u, lane);
#endif
    }
  } else {
    const float total = sum_workspace(LOSS_AT, pc.rows, lane);
    const uint count = wsu[0];
    if (lane == 0u) STORE_ELEM(loss, 0u, count == 0u ? NAN_F : total / float(count))
  }
#else  // mse: chunks of pc.chunk packs
  if (PASS == 1u) {
    const uint npk = (pc.classes + VW - 1u) / VW;
    for (uint c = gl_WorkGroupID.x; c < pc.nchunks; c += gl_NumWorkGroups.x) {
      ACC acc = ACC(0);
      const uint end = min(npk, (c + 1u) * pc.chunk);
      for (uint p = c * pc.chunk + lane; p < end; p += gl_WorkGroupSize.x) {
        PACK_T(a);
        PACK_T(b);
        unpack(x_v.v[p], a);
        unpack(bb_v.v[p], b);
        [[unroll]] for (uint k = 0; k < VW; ++k) {
          const ACC d = ACC(a[k]) - ACC(b[k]);
          if (p * VW + k < pc.classes) acc += d * d;  // the last pack may hold padding
        }
      }
      acc = row_sum(acc, lane, 0u);
      if (lane == 0u) ws[c] = acc;
    }
  } else {
    const ACC total = sum_workspace(0u, pc.nchunks, lane);
    if (lane == 0u) STORE_ELEM(loss, 0u, FT(total / ACC(pc.classes)))
  }
#endif
}
