// Input values beyond a small uniform range (docs/ops.md, "Special values"): the distributions of
// kf-conformance --values on the registry's cases, and the accuracy of the row kernels on large logits,
// whose exponentials a driver's exp / exp2 may compute with an error that grows with the argument.
#include <limits>

#include "common.hpp"

namespace kf::test {
namespace {

// Relative L2 error of `op` (f32) on rows of uniform logits in [-range, range] against the reference.
double row_error(Context& ctx, const std::string& name, const Shape& shape, double range, uint64_t seed,
                 std::string* message) {
  const OpDef& op = get_op(name);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<double>> values = {uniform(static_cast<size_t>(numel(shape)), range, rng)};
  std::vector<Shape> shapes = {shape};
  if (name == "cross_entropy") {  // the targets: class r % C of row r
    std::vector<double> t(static_cast<size_t>(shape[0]));
    for (size_t r = 0; r < t.size(); ++r) t[r] = static_cast<double>(r % static_cast<size_t>(shape[1]));
    values.push_back(t);
    shapes.push_back({shape[0]});
  }
  check::CaseOptions o;
  o.check_validation = false;
  const check::CaseResult r = check::run_case(ctx, op, DType::f32, shapes, values, {}, o);
  *message = r.message;
  return r.err;
}

// softmax and log_softmax in f32 on logits of +-30000 stay within the f32 tolerance of docs/ops.md
// (relative L2 error 1e-6): the kernels subtract the row's maximum before scaling, so the exponentials'
// arguments are exact, and exp2 sees only its reduced argument (shaders/common.glsl exp2_reduced).
// Rows of 1000 (cached), 1001 (element by element) and 40000 (streamed).
TEST(Values, SoftmaxLargeLogits) {
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    ValidationCheck vc(ctx);
    for (const char* name : {"softmax", "log_softmax", "cross_entropy"}) {
      if (!ctx.supports(name, DType::f32)) continue;
      for (const Shape& shape : {Shape{64, 1000}, Shape{16, 1001}, Shape{4, 40000}}) {
        for (double range : {1.0, 100.0, 30000.0}) {
          std::string msg;
          const double err = row_error(ctx, name, shape, range, 7, &msg);
          EXPECT_EQ(msg, "") << name << " on " << d.name << ", logits in +-" << range;
          EXPECT_LE(err, 1e-6) << name << " on " << d.name << ", logits in +-" << range;
          std::printf("  %s %s [%lld, %lld] logits +-%g: relative L2 error %.3g\n", d.tag.c_str(), name,
                      static_cast<long long>(shape[0]), static_cast<long long>(shape[1]), range, err);
        }
      }
    }
  }
}

// Every op's first registry case under each distribution, in f32 and f16, on the default device: the
// result matches the reference (special values included: NaN for NaN, the same infinities), or the
// distribution is skipped with its reason.
TEST(Values, Distributions) {
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    ValidationCheck vc(ctx);
    check::CaseOptions o;
    o.check_validation = false;
    for (const OpDef& op : registry()) {
      if (op.tests.empty() || op.random) continue;
      for (DType t : {DType::f32, DType::f16}) {
        if (!ctx.supports(op.name, t)) continue;
        for (check::Values v : check::all_values()) {
          if (v == check::Values::uniform) continue;
          o.values = v;
          const check::CaseResult r = check::run_case(ctx, op, t, op.tests[0], 11, o);
          if (r.unsupported) {
            EXPECT_FALSE(check::values_skip(op, t, v).empty()) << op.name << ": " << r.message;
            continue;
          }
          EXPECT_TRUE(r.pass) << op.name << " " << to_string(t) << " values=" << check::to_string(v) << " on "
                              << d.name << " (" << op.tests[0].label << ", variant " << r.variant << "):\n"
                              << r.message;
        }
      }
    }
  }
}

// What the distributions skip says why, and an unknown distribution is an InvalidArgument error.
TEST(Values, SkipsSayWhy) {
  const std::string m = check::values_skip(get_op("matmul"), DType::f32, check::Values::special);
  EXPECT_NE(m.find("not defined"), std::string::npos) << m;
  EXPECT_NE(check::values_skip(get_op("embedding"), DType::f32, check::Values::scale), "");
  EXPECT_NE(check::values_skip(get_op("layer_norm"), DType::f32, check::Values::large), "");
  EXPECT_EQ(check::values_skip(get_op("layer_norm"), DType::f16, check::Values::large), "");
  EXPECT_EQ(check::values_skip(get_op("softmax"), DType::f32, check::Values::special), "");
  try {
    check::parse_values("gaussian");
    ADD_FAILURE() << "no kf::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("gaussian"), std::string::npos) << e.what();
  }
}

// The comparison takes a finite reference beyond the dtype's range as the infinity it rounds to.
TEST(Values, OverflowComparesAsInfinity) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(check::compare({inf, 1.0}, {1e6, 1.0}, DType::f16, 1).pass);
  EXPECT_FALSE(check::compare({-inf, 1.0}, {1e6, 1.0}, DType::f16, 1).pass);
  EXPECT_FALSE(check::compare({inf, 1.0}, {1e6, 1.0}, DType::f32, 1).pass);
}

}  // namespace
}  // namespace kf::test
