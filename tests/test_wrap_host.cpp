// Context::wrap_host: tensors over caller-owned host memory on the CPU backend (what the Python package
// hands NumPy arrays and torch tensors through without copies), and its refusals; Context::wrap_device's
// refusals (device memory of the CUDA and HIP backends, for torch CUDA tensors).
#include <memory>
#include <vector>

#include "common.hpp"

namespace kf::test {
namespace {

Context cpu_context() {
  ContextOptions o;
  o.backend = "cpu";
  return Context::create(o);
}

TEST(WrapHost, OpsReadAndWriteTheCallersMemory) {
  Context ctx = cpu_context();
  std::vector<float> x = {-2, -1, 0, 1, 2, 3}, b = {1, 1, 1}, y(6, 99);
  Tensor tx = ctx.wrap_host(x.data(), {2, 3}, DType::f32);
  Tensor tb = ctx.wrap_host(b.data(), {3}, DType::f32);
  Tensor ty = ctx.wrap_host(y.data(), {2, 3}, DType::f32);
  EXPECT_EQ(tx.host_data(), x.data());
  ctx.run("add_relu", {tx, tb}, {ty});
  EXPECT_EQ(y, (std::vector<float>{0, 0, 1, 2, 3, 4}));
  EXPECT_EQ(x, (std::vector<float>{-2, -1, 0, 1, 2, 3}));  // inputs untouched
  // A tensor the context allocated is host memory too, readable in place.
  Tensor r = ctx.call("relu", {tx})[0];
  ASSERT_NE(r.host_data(), nullptr);
  EXPECT_EQ(static_cast<const float*>(r.host_data())[5], 3.0f);
}

TEST(WrapHost, KeepAliveLivesAsLongAsTheTensor) {
  Context ctx = cpu_context();
  auto memory = std::make_shared<std::vector<double>>(4, 1.5);
  std::weak_ptr<std::vector<double>> watch = memory;
  Tensor t = ctx.wrap_host(memory->data(), {4}, DType::f64, memory);
  memory.reset();
  ASSERT_FALSE(watch.expired());
  EXPECT_EQ(t.to_double(), (std::vector<double>{1.5, 1.5, 1.5, 1.5}));
  t = Tensor();
  EXPECT_TRUE(watch.expired());
}

TEST(WrapHost, Refusals) {
  Context ctx = cpu_context();
  float x[4] = {};
  const auto code_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Context::wrap_host"), std::string::npos) << e.what();
      return e.code();
    }
    ADD_FAILURE() << "no kf::Error";
    return ErrorCode::Internal;
  };
  EXPECT_EQ(code_of([&] { ctx.wrap_host(x, {2, -2}, DType::f32); }), ErrorCode::Shape);
  EXPECT_EQ(code_of([&] { ctx.wrap_host(nullptr, {4}, DType::f32); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { ctx.wrap_host(x, Shape(9, 1), DType::f32); }), ErrorCode::Shape);
  for (const auto& d : devices()) {
    Context& other = context_for(d);
    if (other.backend() == "cpu") continue;
    EXPECT_EQ(code_of([&] { other.wrap_host(x, {4}, DType::f32); }), ErrorCode::Unsupported) << d.name;
    EXPECT_EQ(other.call("relu", {other.from_host({4}, DType::f32, {-1, 0, 1, 2})})[0].host_data(), nullptr);
  }
}

// The same memory wrapped twice is one tensor to the checks: an output over an input's memory is refused
// (outputs never alias inputs), except the optimizers' declared in-place pairs over exactly the same memory.
TEST(WrapHost, AliasesSeenThroughTwoWraps) {
  Context ctx = cpu_context();
  std::vector<float> x = {-1, 2, -3, 4, 5, 6};
  Tensor in = ctx.wrap_host(x.data(), {6}, DType::f32);
  Tensor out = ctx.wrap_host(x.data(), {6}, DType::f32);
  try {
    ctx.run("relu", {in}, {out});
    ADD_FAILURE() << "no kf::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("output 'y' shares memory with input 'x'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(x, (std::vector<float>{-1, 2, -3, 4, 5, 6}));
  std::vector<float> p = {1, 2, 3}, g = {1, 1, 1}, m = {0, 0, 0}, v = {0, 0, 0};
  Tensor tp = ctx.wrap_host(p.data(), {3}, DType::f32), tg = ctx.wrap_host(g.data(), {3}, DType::f32);
  Tensor tm = ctx.wrap_host(m.data(), {3}, DType::f32), tv = ctx.wrap_host(v.data(), {3}, DType::f32);
  Attrs a;
  a.lr = 0.1;
  ctx.run("adamw_step", {tp, tg, tm, tv},
          {ctx.wrap_host(p.data(), {3}, DType::f32), ctx.wrap_host(m.data(), {3}, DType::f32),
           ctx.wrap_host(v.data(), {3}, DType::f32)}, a);
  EXPECT_NEAR(p[0], 0.9, 1e-6);  // the first Adam step moves each weight by lr
  std::vector<float> q = {1, 2, 3, 4};
  Tensor q3 = ctx.wrap_host(q.data(), {3}, DType::f32), q3b = ctx.wrap_host(q.data() + 1, {3}, DType::f32);
  EXPECT_THROW(ctx.run("adamw_step", {q3, tg, tm, tv}, {q3b, tm, tv}, a), Error);  // a partial overlap
}

// Context::wrap_device (CUDA / HIP device memory in place) is refused, before anything else is touched,
// for bad shapes, null or unaligned addresses, and by backends without device addresses; a caller's stream
// is for the CUDA and HIP backends only. Running it on device memory is python/tests/test_cuda.py's.
TEST(WrapDevice, Refusals) {
  alignas(256) static float x[64] = {};
  const auto code_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    ADD_FAILURE() << "no kf::Error";
    return ErrorCode::Internal;
  };
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    EXPECT_EQ(code_of([&] { ctx.wrap_device(x, {2, -2}, DType::f32); }), ErrorCode::Shape);
    EXPECT_EQ(code_of([&] { ctx.wrap_device(nullptr, {4}, DType::f32); }), ErrorCode::InvalidArgument);
    EXPECT_EQ(code_of([&] { ctx.wrap_device(x + 1, {4}, DType::f32); }), ErrorCode::InvalidArgument) << d.name;
    if (ctx.backend() == "cuda" || ctx.backend() == "hip") {
      EXPECT_EQ(code_of([&] { ctx.wrap_device(x, {4}, DType::f32); }), ErrorCode::Device) << "host memory";
      EXPECT_NE(ctx.empty({4}, DType::f32).device_data(), nullptr);
    } else {
      EXPECT_EQ(code_of([&] { ctx.wrap_device(x, {4}, DType::f32); }), ErrorCode::Unsupported) << d.name;
      EXPECT_EQ(ctx.empty({4}, DType::f32).device_data(), nullptr);
    }
  }
  ContextOptions o;
  o.backend = "cpu";
  o.stream = reinterpret_cast<void*>(0x1000);
  EXPECT_EQ(code_of([&] { Context::create(o); }), ErrorCode::InvalidArgument);
}

}  // namespace
}  // namespace kf::test
