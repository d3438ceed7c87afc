// Argument errors (docs/ops.md, "Conventions"; docs/architecture.md principle 6): each raises kf::Error with the
// right code and a message naming the op and the argument; nothing is written to the output; and the
// context still works afterwards.
#include <functional>
#include <limits>

#include "common.hpp"

namespace kf::test {
namespace {


class Errors : public ::testing::TestWithParam<DeviceRef> {
 protected:
  void SetUp() override { ctx_ = &context_for(GetParam()); }

  Tensor f32(const Shape& s, DType t = DType::f32) {
    std::vector<double> v(static_cast<size_t>(numel(s)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(i % 7) - 3;
    return ctx_->from_host(s, t, v);
  }
  Tensor poisoned(const Shape& s, DType t = DType::f32, Context* c = nullptr) {
    Tensor y = (c ? c : ctx_)->empty(s, t);
    y.fill_bytes(kPoison);
    return y;
  }

  // Runs `call`, which must raise kf::Error `code` whose message contains every substring; then checks
  // that `out` still holds the poison and that a valid op on the same context gives the right answer.
  void expect_error(const std::function<void()>& call, ErrorCode code, const std::vector<std::string>& substrings,
                    const Tensor& out) {
    expect_rejected(*ctx_, call, code, substrings, {out});
    still_usable();
  }

  void still_usable() {
    Tensor a = ctx_->from_host({2, 3}, DType::f32, {-1, 2, -3, 4, -5, 6});
    Tensor b = ctx_->from_host({3}, DType::f32, {0.5, 0.5, 0.5});
    Tensor y = poisoned({2, 3});
    ctx_->run("add_relu", {a, b}, {y});
    EXPECT_EQ(y.to_double(), (std::vector<double>{0, 2.5, 0, 4.5, 0, 6.5})) << "the context is unusable after the error";
  }

  Context* ctx_ = nullptr;
};

TEST_P(Errors, ShapeMismatch) {
  Tensor a = f32({3, 4}), b = f32({3, 5}), y = poisoned({3, 4});
  expect_error([&] { ctx_->run("add_relu", {a, b}, {y}); }, ErrorCode::Shape, {"add_relu", "'b'", "[3, 5]", "[3, 4]"}, y);
  // The typed entry point goes through the same checks.
  expect_error([&] { add_relu(a, b); }, ErrorCode::Shape, {"add_relu", "'b'"}, y);
}

TEST_P(Errors, DTypeMismatch) {
  Tensor a = f32({3, 4}), b = f32({3, 4}, DType::f16), y = poisoned({3, 4});
  expect_error([&] { ctx_->run("add_relu", {a, b}, {y}); }, ErrorCode::DType, {"add_relu", "'b'", "f16", "f32"}, y);
}

TEST_P(Errors, TensorOfAnotherContext) {
  // Another CPU context (for a CPU device: a second one of the same device) owns `other`.
  Context other_ctx = Context::create(ContextOptions{.backend = "cpu"});
  Tensor a = f32({3, 4}), y = poisoned({3, 4});
  Tensor other = other_ctx.from_host({3, 4}, DType::f32, std::vector<double>(12, 1.0));
  expect_error([&] { ctx_->run("add_relu", {a, other}, {y}); }, ErrorCode::Device, {"add_relu", "'b'", "another"}, y);
  Tensor other_out = poisoned({3, 4}, DType::f32, &other_ctx);
  expect_error([&] { ctx_->run("add_relu", {a, a}, {other_out}); }, ErrorCode::Device, {"add_relu", "output 'y'"},
               other_out);
}

// An empty tensor is an input like any other (docs/ops.md, "Empty tensors"): its output must be empty too.
TEST_P(Errors, EmptyTensorWithAWrongOutput) {
  Tensor a = ctx_->empty({0, 4}, DType::f32), b = f32({4}), y = poisoned({3, 4});
  expect_error([&] { ctx_->run("add_relu", {a, b}, {y}); }, ErrorCode::Shape,
               {"add_relu", "output 'y'", "[3, 4]", "[0, 4]"}, y);
}

TEST_P(Errors, UndefinedRequiredInput) {
  Tensor a = f32({3, 4}), y = poisoned({3, 4});
  expect_error([&] { ctx_->run("add_relu", {a, Tensor()}, {y}); }, ErrorCode::Shape, {"add_relu", "'b'", "required"}, y);
}

TEST_P(Errors, ProbabilityOutOfRange) {
  Tensor x = f32({5, 7}), y = poisoned({5, 7});
  for (double p : {1.0, -0.1, std::numeric_limits<double>::quiet_NaN(), 1.5}) {
    SCOPED_TRACE(::testing::Message() << "p = " << p);
    Attrs a;
    a.p = p;
    a.seed = 1;
    expect_error([&] { ctx_->run("dropout", {x}, {y}, a); }, ErrorCode::InvalidArgument, {"dropout", "'p'", "[0, 1)"}, y);
    Tensor r = f32({5, 7});
    expect_error([&] { ctx_->run("add_dropout_residual", {x, r}, {y}, a); }, ErrorCode::InvalidArgument,
                 {"add_dropout_residual", "'p'"}, y);
  }
}

TEST_P(Errors, WrongOutput) {
  Tensor a = f32({3, 4}), b = f32({4});
  Tensor bad_shape = poisoned({4, 3});
  expect_error([&] { ctx_->run("add_relu", {a, b}, {bad_shape}); }, ErrorCode::Shape,
               {"add_relu", "output 'y'", "[4, 3]", "[3, 4]"}, bad_shape);
  Tensor bad_dtype = poisoned({3, 4}, DType::f16);
  expect_error([&] { ctx_->run("add_relu", {a, b}, {bad_dtype}); }, ErrorCode::DType, {"add_relu", "output 'y'", "f16"},
               bad_dtype);
  Tensor y = poisoned({3, 4});
  expect_error([&] { ctx_->run("add_relu", {a, b}, {y, y}); }, ErrorCode::InvalidArgument, {"add_relu", "outputs"}, y);
  expect_error([&] { ctx_->run("add_relu", {a, b}, {}); }, ErrorCode::InvalidArgument, {"add_relu", "outputs"}, Tensor());
  // In place (output = input) is rejected rather than silently racing.
  Tensor a2 = f32({3, 4});
  expect_error([&] { ctx_->run("add_relu", {a2, b}, {a2}); }, ErrorCode::InvalidArgument, {"add_relu", "in-place"}, Tensor());
}

TEST_P(Errors, UnknownOp) {
  Tensor a = f32({3, 4}), y = poisoned({3, 4});
  expect_error([&] { ctx_->run("no_such_op", {a}, {y}); }, ErrorCode::InvalidArgument, {"no_such_op"}, y);
  std::string why;
  EXPECT_THROW(ctx_->supports("no_such_op", DType::f32, &why), Error);
}

TEST_P(Errors, PackedSwigluOddLastDim) {
  Tensor x = f32({3, 5}), y = poisoned({3, 2});
  expect_error([&] { ctx_->run("swiglu", {x}, {y}); }, ErrorCode::Shape, {"swiglu", "'x'", "[3, 5]", "even"}, y);
  expect_error([&] { ctx_->run("geglu", {x, Tensor()}, {y}); }, ErrorCode::Shape, {"geglu", "'x'"}, y);
}

TEST_P(Errors, SoftmaxScaleNotFinite) {
  Tensor x = f32({3, 8}), y = poisoned({3, 8});
  for (double s : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    Attrs a;
    a.scale = s;
    expect_error([&] { ctx_->run("softmax", {x}, {y}, a); }, ErrorCode::InvalidArgument, {"softmax", "'scale'"}, y);
    expect_error([&] { ctx_->run("log_softmax", {x}, {y}, a); }, ErrorCode::InvalidArgument, {"log_softmax", "'scale'"}, y);
  }
}

// An op the device lacks (on Vulkan: an f64 transcendental op, where GLSL has no float64 exp/erf) raises
// Unsupported naming the reason; with allow_cpu_fallback it runs on the CPU and says so.
TEST_P(Errors, UnsupportedAndCpuFallback) {
  const OpDef* missing = nullptr;
  std::string why;
  for (const auto& op : registry())
    if (std::find(op.dtypes.begin(), op.dtypes.end(), DType::f64) != op.dtypes.end() && !ctx_->supports(op.name, DType::f64, &why)) {
      missing = &op;
      break;
    }
  if (!missing) GTEST_SKIP() << GetParam().name << " runs every op in f64: nothing to reject";
  const TestCase& tc = missing->tests.front();
  std::vector<Tensor> in;
  for (const auto& s : tc.inputs) in.push_back(s.empty() ? Tensor() : f32(s, DType::f64));
  std::vector<Shape> shapes = tc.inputs;
  shapes.resize(missing->inputs.size());
  const Shape out_shape = missing->infer(*missing, shapes, tc.attrs)[0];
  Tensor y = poisoned(out_shape, DType::f64);
  expect_error([&] { ctx_->run(missing->name, in, {y}, tc.attrs); }, ErrorCode::Unsupported, {missing->name, why}, y);

  ContextOptions o = options_for(GetParam());
  o.allow_cpu_fallback = true;
  Context fb = Context::create(o);
  ValidationCheck vc(fb);
  std::mt19937_64 rng(fresh_seed());
  std::vector<std::vector<double>> values;
  for (const auto& s : tc.inputs) values.push_back(s.empty() ? std::vector<double>{} : uniform(numel(s), tc.range, rng));
  EXPECT_EQ(run_and_compare(fb, *missing, DType::f64, tc.inputs, values, tc.attrs), "");
  EXPECT_NE(fb.last_variant().find("cpu-fallback"), std::string::npos) << fb.last_variant();
}

INSTANTIATE_TEST_SUITE_P(Devices, Errors, ::testing::ValuesIn(devices()),
                         [](const ::testing::TestParamInfo<DeviceRef>& i) { return i.param.tag; });

// Errors outside a context: unknown backends and devices, bad dtype names.
TEST(ErrorsNoContext, BadOptions) {
  try {
    Context::create(ContextOptions{.backend = "no_such_backend"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Device);
    EXPECT_NE(std::string(e.what()).find("no_such_backend"), std::string::npos) << e.what();
  }
  try {
    Context::create(ContextOptions{.device = "no such device name"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Device);
    EXPECT_NE(std::string(e.what()).find("no such device name"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dtype_from_string("f8"), Error);
}

// Listing devices while a Vulkan context with validation is open, then using and closing that context:
// the listing once reloaded volk's instance functions for a temporary instance, and the context's
// teardown then called a null vkDestroyDebugUtilsMessengerEXT.
TEST(ErrorsNoContext, ListingWhileAContextIsOpen) {
  bool have_vulkan = false;
  for (const auto& e : device_entries()) have_vulkan |= e.usable && e.info.backend == "vulkan";
  if (!have_vulkan) GTEST_SKIP() << "no Vulkan device";
  {
    Context ctx = Context::create(ContextOptions{.backend = "vulkan", .validation = true});
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(Context::list_devices().empty());
    Tensor a = ctx.from_host({3}, DType::f32, {1, -2, 3});
    Tensor y = ctx.empty({3}, DType::f32);
    ctx.run("relu", {a}, {y});
    EXPECT_EQ(y.to_double(), (std::vector<double>{1, 0, 3}));
    EXPECT_EQ(ctx.validation_messages(), 0u);
  }
  EXPECT_FALSE(Context::list_devices().empty());
}

}  // namespace
}  // namespace kf::test
