// The planning rules shared by the backends (src/plan/): attention's geometry, when a call takes the decode
// kernel, how a decode block covers the heads and the head dimension, and how keys are split over blocks.
// Pure functions: no device needed.
#include <gtest/gtest.h>

#include "plan/attention.hpp"
#include "plan/dropout.hpp"

namespace kf::plan {
namespace {

std::vector<Shape> qkv(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D) {
  return {{B, Hq, Sq, D}, {B, Hkv, Sk, D}, {B, Hkv, Sk, D}};
}

TEST(PlanAttention, Geometry) {
  const AttnGeometry g = attn_geometry(qkv(2, 8, 2, 5, 700, 64));
  EXPECT_EQ(g.B, 2);
  EXPECT_EQ(g.Hq, 8);
  EXPECT_EQ(g.Hkv, 2);
  EXPECT_EQ(g.SqT, 5);
  EXPECT_EQ(g.SkT, 700);
  EXPECT_EQ(g.D, 64);
  EXPECT_EQ(g.nseq, 2);
  EXPECT_FALSE(g.varlen);
  // Packed: cu_seqlens_q (input 5) of N + 1 entries gives N sequences.
  std::vector<Shape> packed = qkv(1, 4, 4, 30, 40, 32);
  packed.resize(7);
  packed[5] = {4};
  packed[6] = {4};
  const AttnGeometry p = attn_geometry(packed);
  EXPECT_TRUE(p.varlen);
  EXPECT_EQ(p.nseq, 3);
}

TEST(PlanAttention, DecodeEligibility) {
  Attrs a;
  EXPECT_EQ(decode_refusal(attn_geometry(qkv(2, 8, 2, 1, 700, 64)), a, false), "");
  EXPECT_NE(decode_refusal(attn_geometry(qkv(2, 8, 2, 2, 700, 64)), a, false).find("one query row"), std::string::npos);
  EXPECT_NE(decode_refusal(attn_geometry(qkv(2, 8, 2, 1, 700, 64)), a, true).find("block mask"), std::string::npos);
  Attrs rope;  // both decode kernels apply RoPE (half and interleaved)
  rope.rope = 1;
  EXPECT_EQ(decode_refusal(attn_geometry(qkv(1, 1, 1, 1, 9, 64)), rope, false), "");
  rope.rope = 2;
  EXPECT_EQ(decode_refusal(attn_geometry(qkv(1, 1, 1, 1, 9, 64)), rope, false), "");
  Attrs drop;
  drop.p = 0.1;
  EXPECT_NE(decode_refusal(attn_geometry(qkv(1, 1, 1, 1, 9, 64)), drop, false).find("dropout"), std::string::npos);
  std::vector<Shape> packed = qkv(1, 4, 4, 3, 40, 32);
  packed.resize(7);
  packed[5] = {4};
  packed[6] = {4};
  EXPECT_NE(decode_refusal(attn_geometry(packed), a, false).find("packed"), std::string::npos);
  // Causal masks, windows, ALiBi, soft-capping, sinks and key lengths do not disqualify.
  Attrs many;
  many.causal = true;
  many.window = 100;
  many.alibi = true;
  many.softcap = 30;
  EXPECT_EQ(decode_refusal(attn_geometry(qkv(1, 4, 1, 1, 9, 64)), many, false), "");

  EXPECT_EQ(decode_head_dim_refusal(64, 8), "");
  EXPECT_EQ(decode_head_dim_refusal(256, 8), "");
  EXPECT_EQ(decode_head_dim_refusal(12, 4), "");
  EXPECT_NE(decode_head_dim_refusal(12, 8), "");
  EXPECT_NE(decode_head_dim_refusal(264, 8), "");
}

TEST(PlanAttention, DecodeShape) {
  // f16, D 128: 16 packs of 8, 16 lanes of one pack; G 4 in one chunk.
  DecodeShape s = decode_shape(128, 8, 4, 8);
  EXPECT_EQ(s.lanes, 16);
  EXPECT_EQ(s.packs_per_lane, 1);
  EXPECT_EQ(s.nchunk, 1);
  EXPECT_EQ(s.heads, 4);
  // f32, D 256: 64 packs, at most 32 lanes of 2 packs each.
  s = decode_shape(256, 4, 1, 8);
  EXPECT_EQ(s.lanes, 32);
  EXPECT_EQ(s.packs_per_lane, 2);
  // A subgroup of 16 caps the lanes.
  EXPECT_EQ(decode_shape(256, 4, 1, 8, 16).lanes, 16);
  // f16, D 80: 10 packs, 16 lanes (a power of two), one pack each.
  s = decode_shape(80, 8, 12, 8);
  EXPECT_EQ(s.lanes, 16);
  EXPECT_EQ(s.packs_per_lane, 1);
  // G 12 over at most 8 heads a block: 2 chunks of 6; at most 4: 3 chunks of 4.
  EXPECT_EQ(s.nchunk, 2);
  EXPECT_EQ(s.heads, 6);
  s = decode_shape(80, 8, 12, 4);
  EXPECT_EQ(s.nchunk, 3);
  EXPECT_EQ(s.heads, 4);
}

TEST(PlanAttention, DecodeSplit) {
  // 132 multiprocessors x 8 blocks over 8 blocks: 132 splits of 32 k keys would be under 256 keys; 128
  // splits (Sk / 256), each a whole number of 64-key steps.
  KeySplit k = decode_split(32768, 8, 132 * 8, 64, 0);
  EXPECT_EQ(k.n, 128);
  EXPECT_EQ(k.len, 256);
  // Few keys: one split; every key covered.
  k = decode_split(100, 8, 132 * 8, 64, 0);
  EXPECT_EQ(k.n, 1);
  EXPECT_GE(k.n * k.len, 100);
  // One wave: never more blocks than the slots hold.
  k = decode_split(1 << 20, 64, 132 * 4, 32, 0);
  EXPECT_EQ(k.n, 132 * 4 / 64);
  EXPECT_EQ(k.len % 32, 0);
  EXPECT_GE(k.n * k.len, 1 << 20);
  // At most 256 splits.
  EXPECT_EQ(decode_split(1 << 24, 1, 100000, 64, 0).n, 256);
  // Forced: exactly n (within [1, min(256, Sk)]), the length not rounded.
  k = decode_split(1000, 8, 132 * 8, 64, 3);
  EXPECT_EQ(k.n, 3);
  EXPECT_EQ(k.len, 334);
  EXPECT_EQ(decode_split(5, 8, 132 * 8, 64, 100).n, 5);
  EXPECT_EQ(decode_split(100000, 8, 132 * 8, 64, 1000).n, 256);
}

TEST(PlanAttention, FlashSplit) {
  // A full grid: no split.
  EXPECT_EQ(flash_split(100000, 300, 528, 64, 0).n, 1);
  // Under 512 keys: no split.
  EXPECT_EQ(flash_split(511, 1, 528, 64, 0).n, 1);
  // A small grid and many keys: about `target` blocks, at least 256 keys each, at most 64 splits.
  KeySplit k = flash_split(4096, 16, 528, 64, 0);
  EXPECT_EQ(k.n, 16);  // 4096 / 256
  EXPECT_EQ(k.len, 256);
  k = flash_split(1 << 20, 16, 528, 64, 0);
  EXPECT_EQ(k.n, 33);  // ceil(528 / 16)
  EXPECT_EQ(k.len % 64, 0);
  EXPECT_GE(k.n * k.len, 1 << 20);
  EXPECT_EQ(flash_split(1 << 20, 1, 528, 64, 0).n, 64);
  // Vulkan's target of 512 workgroups: a split below 256.
  EXPECT_EQ(flash_split(1 << 20, 255, 512, 16, 0).n, 3);
  EXPECT_EQ(flash_split(1 << 20, 256, 512, 16, 0).n, 1);
  // Forced.
  k = flash_split(1000, 1000, 528, 64, 3);
  EXPECT_EQ(k.n, 3);
  EXPECT_EQ(k.len, 384);  // ceil(1000 / 3) = 334, rounded up to the 64-key tile
}

TEST(PlanAttention, RopePositions) {
  // Queries sit at the end of the keys: i + Sk - Sq.
  RopePositions r = rope_positions(attn_geometry(qkv(1, 1, 1, 3, 10, 8)));
  EXPECT_EQ(r.pmin, 0);
  EXPECT_EQ(r.npos, 10);
  r = rope_positions(attn_geometry(qkv(1, 1, 1, 10, 3, 8)));
  EXPECT_EQ(r.pmin, -7);
  EXPECT_EQ(r.npos, 10);
}

// A kept table serves every call it covers; a call past it gets a table covering both, with headroom, so
// that a cache growing one key a call rebuilds it a logarithmic number of times.
TEST(PlanAttention, RopeTableGrowth) {
  const RopeTable none;
  RopeTable t = rope_table_for(none, {64, 10000, false, 0, 40});
  EXPECT_EQ(t.pmin, 0);
  EXPECT_EQ(t.npos, 40 + 256);  // at least 256 positions of headroom
  EXPECT_EQ(rope_table_for(t, {64, 10000, false, 0, 296}).npos, t.npos);  // covered: kept
  EXPECT_EQ(rope_table_for(t, {64, 10000, false, 0, 7}).npos, t.npos);
  const RopeTable packed = rope_table_for(t, {64, 10000, false, -20, 30});  // a negative start: extended
  EXPECT_EQ(packed.pmin, -20);
  EXPECT_GE(packed.pmin + packed.npos, t.pmin + t.npos);
  // Another head size, base or precision: a table of its own.
  EXPECT_EQ(rope_table_for(t, {128, 10000, false, 0, 40}).D, 128);
  EXPECT_EQ(rope_table_for(t, {64, 500000, false, 0, 40}).base, 500000);
  EXPECT_TRUE(rope_table_for(t, {64, 10000, true, 0, 40}).f64);
  EXPECT_EQ(rope_table_for(t, {64, 10000, true, 0, 40}).npos, 40 + 256);
  // A decoding loop from 4,096 to 65,536 keys, one key a call.
  RopeTable have;
  int builds = 0;
  for (int64_t sk = 4096; sk <= 65536; ++sk) {
    const RopeTable next = rope_table_for(have, {128, 10000, false, 0, sk});
    builds += next.npos != have.npos || next.pmin != have.pmin;
    ASSERT_GE(next.pmin + next.npos, sk);
    have = next;
  }
  EXPECT_LE(builds, 16);
  EXPECT_LE(have.npos, 65536 + 16384);
}

TEST(PlanDropout, Threshold) {
  EXPECT_EQ(dropout_threshold(0), 0u);
  EXPECT_EQ(dropout_threshold(0.5), 1u << 23);
  EXPECT_EQ(dropout_threshold(1e-9), 1u);  // any p > 0 drops something
}

}  // namespace
}  // namespace kf::plan
