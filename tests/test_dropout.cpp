// The counter-based dropout generator (docs/ops.md, "The counter-based random generator"): Philox
// known answers, the worked mask, and masks that agree bit for bit between every backend.
#include <array>
#include <cstdio>

#include "common.hpp"
#include "ops/reference_math.hpp"

namespace kf::test {
namespace {

using Block = std::array<uint32_t, 4>;

TEST(Philox, KnownAnswers) {
  // The standard Philox4x32-10 vectors (Random123's kat_vectors), as listed in docs/ops.md.
  EXPECT_EQ(ref::philox4x32_10({0, 0, 0, 0}, {0, 0}), (Block{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(ref::philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (Block{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(ref::philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (Block{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

constexpr const char* kWorkedMask = "1000101011111110";  // seed 42, offset 0, p = 0.5

TEST(Philox, WorkedMaskReference) {
  const uint32_t thr = ref::dropout_threshold(0.5);
  std::string mask;
  for (uint64_t i = 0; i < 16; ++i) mask += ref::dropout_keep(i, 42, 0, thr) ? '1' : '0';
  EXPECT_EQ(mask, kWorkedMask);
  const double u0 = (ref::philox_word(0, 42, 0) >> 8) * 0x1p-24;
  EXPECT_NEAR(u0, 0.61295986, 1e-8);  // docs/ops.md gives 8 digits
}

TEST(Philox, CounterLayout) {
  // Element i reads word (i & 3) of block i >> 2; the offset is the counter's upper half; the seed the key.
  const uint64_t seed = 0x0123456789abcdefull, offset = 0xfedcba9876543210ull, i = (5ull << 34) + 4 * 77 + 2;
  const Block b = ref::philox4x32_10({uint32_t(i >> 2), uint32_t(i >> 34), uint32_t(offset), uint32_t(offset >> 32)},
                                     {uint32_t(seed), uint32_t(seed >> 32)});
  EXPECT_EQ(ref::philox_word(i, seed, offset), b[2]);
}

// The op on every backend reproduces the worked mask: dropout of ones keeps 2 (= 1 / (1 - 0.5)) or 0.
TEST(Dropout, WorkedMaskOnEveryBackend) {
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    ValidationCheck vc(ctx);
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      if (!ctx.supports("dropout", t)) continue;
      Tensor x = ctx.from_host({16}, t, std::vector<double>(16, 1.0));
      const auto y = dropout(x, 0.5, 42, 0).to_double();
      std::string mask;
      for (double v : y) {
        EXPECT_TRUE(v == 0.0 || v == 2.0) << d.name << " " << to_string(t) << ": element " << v;
        mask += v == 2.0 ? '1' : '0';
      }
      EXPECT_EQ(mask, kWorkedMask) << d.name << " " << to_string(t);
    }
  }
}

// The keep mask an op applied, read from its output (check::dropout_mask: a kept element is never zero,
// x > 0 and bias > 0 so gelu > 0, and a kept residual sum never equals the residual).
std::vector<uint8_t> mask_from(Context& ctx, const std::string& op, DType t, int64_t n, const Attrs& a,
                               uint64_t data_seed) {
  const OpDef& def = get_op(op);
  const std::vector<Shape> shapes(def.inputs.size(), Shape{n});
  return check::dropout_mask(ctx, def, t, shapes, a, data_seed);
}

std::vector<uint8_t> reference_mask(int64_t n, const Attrs& a) {
  const uint32_t thr = ref::dropout_threshold(a.p);
  std::vector<uint8_t> m(n);
  for (int64_t i = 0; i < n; ++i) m[i] = ref::dropout_keep(uint64_t(i), a.seed, a.offset, thr);
  return m;
}

using check::first_difference;

// Every backend computes the same mask, bit for bit, for an awkward size, a nonzero offset and a seed
// whose upper 32 bits matter; and it is the reference's mask.
TEST(Dropout, MasksAgreeAcrossBackends) {
  const int64_t n = 1000003;
  Attrs a;
  a.p = 0.3;
  a.seed = 0x9e3779b97f4a7c15ull;  // > 2^32
  a.offset = 123457;
  const auto expected = reference_mask(n, a);
  const uint64_t data_seed = fresh_seed();
  for (const char* op : {"dropout", "gelu_dropout", "bias_gelu_dropout", "add_dropout_residual"})
    for (DType t : {DType::f32, DType::f16}) {
      int backends = 0;
      for (const auto& d : devices()) {
        Context& ctx = context_for(d);
        ValidationCheck vc(ctx);
        std::string why;
        if (!ctx.supports(op, t, &why)) {
          ADD_FAILURE() << op << " " << to_string(t) << " unsupported on " << d.name << ": " << why;
          continue;
        }
        const auto mask = mask_from(ctx, op, t, n, a, data_seed);
        const int64_t i = first_difference(mask, expected);
        EXPECT_EQ(i, -1) << op << " " << to_string(t) << " on " << d.name << ": mask differs first at element "
                         << i << " (device keeps " << int(mask[i < 0 ? 0 : i]) << "), data seed " << data_seed;
        ++backends;
      }
      EXPECT_GE(backends, 1) << op << " " << to_string(t);
    }
}

// p = 0 is an exact copy: the output has the input's bits.
TEST(Dropout, ZeroProbabilityCopiesExactly) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 rng(seed);
  const auto values = uniform(4099, 100, rng);
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    ValidationCheck vc(ctx);
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      if (!ctx.supports("dropout", t)) continue;
      Tensor x = ctx.from_host({4099}, t, values);
      EXPECT_EQ(raw_bytes(dropout(x, 0.0, 7, 3)), raw_bytes(x)) << d.name << " " << to_string(t) << ", seed " << seed;
    }
  }
}

// Different offsets (and seeds) give different, uncorrelated masks: about half the elements differ at p = 0.5.
TEST(Dropout, OffsetsAndSeedsChangeTheMask) {
  const int64_t n = 1 << 16;
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    ValidationCheck vc(ctx);
    Attrs a;
    a.p = 0.5;
    a.seed = 42;
    const auto base = mask_from(ctx, "dropout", DType::f32, n, a, 1);
    for (auto [seed, offset] : {std::pair<uint64_t, uint64_t>{42, 1}, {42, 1ull << 32}, {43, 0}, {42 + (1ull << 32), 0}}) {
      a.seed = seed;
      a.offset = offset;
      const auto m = mask_from(ctx, "dropout", DType::f32, n, a, 1);
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) differ += m[i] != base[i];
      EXPECT_NEAR(double(differ) / n, 0.5, 0.02) << d.name << " seed " << seed << " offset " << offset;
    }
  }
}

// The kept fraction is 1 - p within 6 standard deviations on a million elements.
TEST(Dropout, KeepFraction) {
  const int64_t n = 1000000;
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    ValidationCheck vc(ctx);
    for (double p : {0.1, 0.5, 0.9}) {
      Attrs a;
      a.p = p;
      a.seed = fresh_seed();
      a.offset = 5;
      const auto m = mask_from(ctx, "dropout", DType::f32, n, a, 2);
      int64_t kept = 0;
      for (auto k : m) kept += k;
      EXPECT_NEAR(double(kept) / n, 1 - p, 6 * std::sqrt(p * (1 - p) / n)) << d.name << " p " << p << " seed " << a.seed;
    }
  }
}

}  // namespace
}  // namespace kf::test
