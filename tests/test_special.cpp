// Special values, determinism and the host dtype conversions.
#include <cstring>
#include <limits>

#include "common.hpp"

namespace kf::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Runs `op` on fixed inputs (with NaN / infinities) on every device and dtype it supports and compares
// with its reference: NaN must stay NaN and infinities must be the same infinities.
void check_special(const std::string& name, const std::vector<Shape>& shapes,
                   const std::vector<std::vector<double>>& values, const Attrs& attrs = {}) {
  const OpDef& op = get_op(name);
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    ValidationCheck vc(ctx);
    for (DType t : op.dtypes) {
      std::string why;
      if (!ctx.supports(name, t, &why)) continue;
      EXPECT_EQ(run_and_compare(ctx, op, t, shapes, values, attrs), "")
          << name << " " << to_string(t) << " on " << d.name << " (variant " << ctx.last_variant() << ")";
    }
  }
}

TEST(Special, ReluKeepsNaN) {
  // relu(NaN) = NaN, relu(+inf) = +inf, relu(-inf) = 0; NaN + anything = NaN; inf + -inf = NaN.
  check_special("add_relu", {{2, 5}, {2, 5}},
                {{kNaN, kInf, -kInf, 1, -1, kInf, 0.5, kNaN, -2, 3}, {0, 0, 0, kNaN, 1, -kInf, -kInf, 1, kInf, -1}});
  check_special("bias_relu", {{2, 3}, {3}}, {{kNaN, kInf, -kInf, -1, 2, 0}, {1, 1, 1}});
}

TEST(Special, SigmoidAndTanhLimits) {
  // sigmoid(+inf) = 1, sigmoid(-inf) = 0, sigmoid(NaN) = NaN; tanh(+-inf) = +-1.
  check_special("add_sigmoid", {{6}, {6}}, {{kInf, -kInf, kNaN, 800, -800, 0}, {0, 0, 0, 0, 0, 0}});
  check_special("mul_tanh", {{4}, {4}}, {{kInf, -kInf, kNaN, 1e30}, {1, 1, 1, 1}});
}

// Softmax rows: one with +inf (inf - inf = NaN: the reference gives a NaN row), one with a NaN (a NaN
// row), one all -inf (zeros, docs/ops.md), one with some -inf (those are 0), and a finite one.
const std::vector<double> kSoftmaxRows = {1, kInf, 2, 3,  1,    kNaN, 2, 3,     -kInf, -kInf, -kInf, -kInf,
                                          1, -kInf, 2, -kInf, 0.5, -1, 2, 0.25};

TEST(Special, SoftmaxRows) {
  check_special("softmax", {{5, 4}}, {kSoftmaxRows});
  Attrs a;
  a.scale = 0.5;
  check_special("softmax", {{5, 4}}, {kSoftmaxRows}, a);
}

// Rows longer than a workgroup's registers (the streamed part keeps a running max and sum): each of the
// kSoftmaxRows patterns placed at the end of a long row whose other entries are -inf, so the running
// max starts at -inf and grows late; one row all -inf. 40000 (16-byte packs) and 40001 (element by
// element).
TEST(Special, SoftmaxLongRows) {
  for (int64_t F : {40000, 40001}) {
    std::vector<double> v;
    for (int r = 0; r < 5; ++r) {
      for (int64_t i = 0; i < F - 4; ++i) v.push_back(r == 4 && i % 3 == 0 ? -1.0 - double(i % 7) : -kInf);
      for (int k = 0; k < 4; ++k) v.push_back(kSoftmaxRows[r * 4 + k]);
    }
    check_special("softmax", {{5, F}}, {v});
    check_special("log_softmax", {{5, F}}, {v});
  }
}

TEST(Special, LogSoftmaxRows) {
  // The all -inf row gives NaN in the reference (-inf - (-inf)); some -inf entries give -inf.
  check_special("log_softmax", {{5, 4}}, {kSoftmaxRows});
}

TEST(Special, ReductionsPropagate) {
  check_special("sum_squared", {{3, 3}}, {{kNaN, 1, 2, kInf, 1, 2, -kInf, 0, 0}});
  check_special("mean_abs", {{3, 3}}, {{kNaN, 1, 2, kInf, 1, 2, -kInf, 0, 0}});
}

// Reductions add in a fixed order (docs/architecture.md principle 8): the same input gives the same bits.
TEST(Special, DeterministicRepeats) {
  const uint64_t seed = fresh_seed();
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    ValidationCheck vc(ctx);
    for (const char* op : {"softmax", "sum_squared", "log_softmax", "mean_abs"})
      for (Shape s : {Shape{16, 65536}, Shape{3, 1000003}, Shape{4097, 33}})
        for (DType t : {DType::f32, DType::f16}) {
          if (!ctx.supports(op, t)) continue;
          std::mt19937_64 rng(seed);
          Tensor x = ctx.from_host(s, t, uniform(numel(s), 4, rng));
          const auto first = raw_bytes(ctx.call(op, {x})[0]);
          const auto second = raw_bytes(ctx.call(op, {x})[0]);
          EXPECT_TRUE(first == second) << op << " " << to_string(t) << " " << to_string(s) << " on " << d.name
                                       << " differs between two runs (variant " << ctx.last_variant() << ")";
        }
  }
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Conversions, HalfKnownValues) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);   // the largest half
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);   // below the midpoint to 65536: rounds down
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);   // the midpoint rounds to even: infinity
  EXPECT_EQ(float_to_half(1e-8f), 0x0000);      // below half the smallest subnormal
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001);   // the smallest subnormal
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);   // a tie between 0 and 2^-24: to even (0)
  EXPECT_EQ(float_to_half(0x1.8p-24f), 0x0002); // a tie between 1 and 2 subnormal units: to even (2)
  EXPECT_EQ(float_to_half(0x1p-14f), 0x0400);   // the smallest normal
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00);        // tie: to even (down)
  EXPECT_EQ(float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);    // tie: to even (up)
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // above the tie: up
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);
  const uint16_t nan = float_to_half(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0) << "NaN became infinity";
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(half_to_float(0x3555), 0x1.554p-2f);
  EXPECT_EQ(bits(half_to_float(0x8000)), 0x80000000u);
}

TEST(Conversions, Bf16KnownValues) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);        // tie: to even (down)
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);    // tie: to even (up)
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to infinity
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  const uint16_t nan = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
  // A signalling NaN whose payload lives only in the low 16 bits must not become infinity.
  uint32_t snan = 0x7f800001u;
  float f;
  std::memcpy(&f, &snan, 4);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
}

// Every 16-bit pattern converts to float and back to itself (NaN to some NaN).
TEST(Conversions, RoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << std::hex << h;
      EXPECT_TRUE((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) << std::hex << h;
    } else {
      ASSERT_EQ(float_to_half(f), h) << std::hex << h;
    }
    const float g = bf16_to_float(uint16_t(h));
    if (std::isnan(g)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(g)))) << std::hex << h;
    } else {
      ASSERT_EQ(float_to_bf16(g), h) << std::hex << h;
    }
  }
}

// Rounding to nearest matches a brute-force search over the half values: for random floats in range,
// the chosen half is the nearest (ties to the even pattern).
TEST(Conversions, HalfRoundsToNearest) {
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  for (int k = 0; k < 20000; ++k) {
    const float f = k % 2 ? dist(rng) : dist(rng) * 1e-4f;
    const uint16_t h = float_to_half(f);
    const double got = half_to_float(h), err = std::fabs(got - double(f));
    if (std::isinf(got)) {
      EXPECT_GE(std::fabs(f), 65520.0f) << f;
      continue;
    }
    // Neighbours one unit away are not closer (and at equal distance, h is even).
    for (int step : {-1, 1}) {
      const uint16_t n = uint16_t(h + step);
      if ((n & 0x7c00) == 0x7c00 || ((h & 0x7fff) == 0 && step == -1)) continue;
      const double other = std::fabs(double(half_to_float(n)) - double(f));
      EXPECT_TRUE(err < other || (err == other && (h & 1) == 0)) << f << " -> " << std::hex << h;
    }
  }
}

// The dtype's element storage is what the tensors use: upload then to_double gives the rounded values.
TEST(Conversions, TensorsRoundOnUpload) {
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    Tensor h = ctx.from_host({3}, DType::f16, {1.0 + 0x1p-11, 65520, 1e-8});
    EXPECT_EQ(h.to_double(), (std::vector<double>{1.0, kInf, 0.0})) << d.name;
    Tensor b = ctx.from_host({2}, DType::bf16, {1.0 + 3 * 0x1p-8, -0.0});
    EXPECT_EQ(b.to_double(), (std::vector<double>{1.0 + 2 * 0x1p-7, 0.0})) << d.name;
  }
}

}  // namespace
}  // namespace kf::test
