// The thread contract (docs/architecture.md, "Threads"): several threads calling ops on one context get
// every result right (calls are serialized per context), and separate contexts run side by side. Small
// shapes, so that the suite runs in seconds on the CPU backend and on lavapipe, and under ThreadSanitizer
// (KF_TSAN=ON).
#include <atomic>
#include <thread>

#include "common.hpp"

namespace kf::test {
namespace {

constexpr int kThreads = 4;
constexpr int kOpsPerThread = 12;

// A few ops of several families, each with its first registry case (the small ones).
const std::vector<std::string>& op_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const char* n : {"add_relu", "bias_gelu", "softmax", "layer_norm", "rms_norm", "matmul", "cross_entropy",
                          "embedding", "sgd_step", "mse", "attention"})
      if (const OpDef* op = find_op(n); op && !op->tests.empty()) v.push_back(n);
    return v;
  }();
  return names;
}

// Runs ops op_names()[first + k] for k < count on ctx, each checked against the float64 reference; the
// failures' messages are appended to `failures` (guarded by `mu`).
void run_ops(Context& ctx, int first, int count, std::mutex& mu, std::vector<std::string>& failures,
             std::atomic<int>& done) {
  const auto& names = op_names();
  for (int k = 0; k < count; ++k) {
    const OpDef& op = get_op(names[(first + k) % names.size()]);
    check::CaseOptions opt;
    opt.check_validation = false;  // counted once per test below: a message of any thread fails it there
    const check::CaseResult r = check::run_case(ctx, op, DType::f32, op.tests.front(), fresh_seed(), opt);
    if (r.unsupported) continue;
    if (!r.pass) {
      std::lock_guard<std::mutex> lock(mu);
      failures.push_back(op.name + ": " + r.message);
    }
    ++done;
  }
}

class Threads : public ::testing::TestWithParam<DeviceRef> {};

TEST_P(Threads, OneContextManyThreads) {
  Context& ctx = context_for(GetParam());
  ValidationCheck vc(ctx);
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<int> done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { run_ops(ctx, t * 3, kOpsPerThread, mu, failures, done); });
  // Queries and synchronize from a thread of their own, interleaved with the ops.
  std::thread queries([&] {
    while (!stop) {
      ctx.synchronize();
      (void)ctx.memory_usage();
      (void)ctx.last_variant();
      (void)ctx.validation_messages();
      std::this_thread::yield();
    }
  });
  for (auto& th : threads) th.join();
  stop = true;
  queries.join();
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_GT(done.load(), 0) << "no op ran";
  std::printf("%d threads x %d ops on one context: %d results checked, %zu failures\n", kThreads, kOpsPerThread,
              done.load(), failures.size());
}

// Tensors of one context written by several threads through Tensor's own methods, and destroyed on
// threads other than the one that made them.
TEST_P(Threads, TensorTransfersAndLifetimes) {
  Context& ctx = context_for(GetParam());
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  std::vector<Tensor> handed(kThreads);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 20; ++k) {
        Tensor a = ctx.empty({7, 5}, DType::f32);
        a.fill(t + k);
        std::vector<double> v = a.to_double();
        for (double x : v) bad += x != t + k;
        a.fill_bytes(0);
        for (double x : a.to_double()) bad += x != 0;
        handed[t] = a;  // the last one is released on the main thread
      }
    });
  for (auto& th : threads) th.join();
  handed.clear();
  EXPECT_EQ(bad.load(), 0);
}

TEST_P(Threads, SeparateContextsRunConcurrently) {
  const DeviceRef d = GetParam();
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      try {
        Context ctx = Context::create(options_for(d));  // created, used and closed on this thread
        run_ops(ctx, t * 4, kOpsPerThread / 2, mu, failures, done);
        if (ctx.validation_messages()) {
          std::lock_guard<std::mutex> lock(mu);
          for (const auto& m : ctx.validation_log()) failures.push_back("validation: " + m);
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(e.what());
      }
    });
  for (auto& th : threads) th.join();
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_GT(done.load(), 0) << "no op ran";
}

// A rejected call on one thread leaves the context usable for the others.
TEST_P(Threads, ErrorsOnOneThreadLeaveOthersWorking) {
  Context& ctx = context_for(GetParam());
  std::atomic<int> errors{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 10; ++k) {
        Tensor a = ctx.from_host({4}, DType::f32, {1, -2, 3, -4});
        if ((t + k) % 2) {
          try {
            ctx.call("add_relu", {a, ctx.empty({5}, DType::f32)});
          } catch (const Error&) {
            ++errors;
          }
        } else {
          const auto out = ctx.call("add_relu", {a, a});
          const auto v = out[0].to_double();
          bad += v != std::vector<double>{2, 0, 6, 0};
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), kThreads * 5);
  EXPECT_EQ(bad.load(), 0);
}

std::vector<DeviceRef> thread_devices() {
  std::vector<DeviceRef> v;
  for (const auto& d : devices())
    if (d.backend == "cpu" || d.backend == "vulkan" || d.backend == "cuda" || d.backend == "hip") v.push_back(d);
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, Threads, ::testing::ValuesIn(thread_devices()),
                         [](const auto& info) { return info.param.tag; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Threads);

}  // namespace
}  // namespace kf::test
