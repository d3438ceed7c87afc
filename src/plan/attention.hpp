// Attention planning shared by the backends and the test harnesses (tools/cuda-emu): the geometry of a
// call, when a call with one query row a sequence takes a decode kernel, and how keys are split over
// blocks. What depends on one backend's kernels (tile sizes from its shared memory, its knobs) stays in
// that backend; the rules here are the ones every backend applies the same way.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kf/attrs.hpp"
#include "kf/tensor.hpp"

namespace kf::plan {

// q [B, Hq, SqT, D], k and v [B, Hkv, SkT, D]; nseq sequences: B, or N when packed (cu_seqlens, B = 1).
struct AttnGeometry {
  int64_t B = 0, Hq = 0, Hkv = 0, SqT = 0, SkT = 0, D = 0, nseq = 0;
  bool varlen = false;
};
// From attention's input shapes (q, k, v, then the optional inputs; an absent one an empty Shape).
AttnGeometry attn_geometry(const std::vector<Shape>& inputs);

// Decode kernels take one query row per sequence, without packed sequences, dropout or a block mask.
// Returns why a call does not qualify ("it does not apply dropout"), or "" when it does.
std::string decode_refusal(const AttnGeometry& g, const Attrs& a, bool block_mask);
// Their head dimensions: multiples of `multiple` (a 16-byte pack of the dtype) up to 256; why not, or "".
std::string decode_head_dim_refusal(int64_t D, int64_t multiple);

// A decode block: lanes per key row (a power of two up to min(32, max_lanes), no more than the row's
// 16-byte packs need) and the query heads of one kv head it holds (the G heads in nchunk equal chunks of
// at most max_heads each).
struct DecodeShape {
  int lanes = 1;           // lk
  int packs_per_lane = 1;  // ceil(packs / lk)
  int nchunk = 1;          // chunks of the G heads
  int heads = 1;           // heads a chunk (ceil(G / nchunk))
};
DecodeShape decode_shape(int64_t D, int64_t pack, int64_t G, int64_t max_heads, int64_t max_lanes = 32);

// Key splits: n blocks along the keys, each `len` keys long (the last may be shorter); n == 1, no split.
struct KeySplit {
  int64_t n = 1, len = 0;
};
// The decode kernel's: every block resident at once (one wave: blocks of equal work end together), as many
// as the `slots` a device holds (multiprocessors x resident blocks) over `base` blocks without splits, each
// split at least 256 keys and a whole number of `step` keys; at most 256 splits. forced > 0: exactly that
// many (clamped to [1, min(256, Sk)]), their length not rounded to `step`.
KeySplit decode_split(int64_t Sk, int64_t base, int64_t slots, int64_t step, int64_t forced);
// The flash kernels': where the grid has fewer than half of `target` blocks (about 4 a multiprocessor) and
// there are at least 512 keys, enough splits for about `target` blocks, each at least 256 keys, at most 64;
// the length a whole number of the key tile bk. forced >= 1: exactly that many.
KeySplit flash_split(int64_t Sk, int64_t base, int64_t target, int64_t bk, int64_t forced);

// The rotary table's positions: keys 0 .. Sk - 1, queries i + Sk - Sq (as low as -Sq for packed sequences).
struct RopePositions {
  int64_t pmin = 0, npos = 0;
};
RopePositions rope_positions(const AttnGeometry& g);

// The rotary table a backend keeps between calls: (cos, sin) pairs of head size D and base for positions
// [pmin, pmin + npos), in f32 or f64. Kernels index it by position - pmin (rope_pos0 = -pmin), so a table
// that covers more positions than a call needs serves it unchanged.
struct RopeTable {
  int64_t D = 0;
  double base = 0;
  bool f64 = false;
  int64_t pmin = 0, npos = 0;
};
// The table to use for a call that needs `want`: `have` itself when it covers it (same D, base and
// precision), else a table to build that covers both when their parameters match, with headroom past the
// end (a quarter of it, 256 to 16,384 positions), so that a decoding loop whose cache grows by one key a
// call rebuilds the table a logarithmic number of times rather than on every call.
RopeTable rope_table_for(const RopeTable& have, const RopeTable& want);

}  // namespace kf::plan
