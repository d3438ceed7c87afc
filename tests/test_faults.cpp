// Faults (docs/architecture.md, "Errors"): a kernel that does not finish within the context's time-out
// ends the wait in Timeout; the context then refuses every call that needs the device with DeviceLost
// naming the time-out, still answers its queries, and closes cleanly, as does the process. The long kernel
// is the backends' test hook (detail::record_long_kernel): it ends by itself after a few seconds, so that
// the time-out (0.2 s) is what cuts the wait short. The CPU backend runs kernels inline (no wait to
// bound) and skips.
//
// Its own main: `test_faults --timed-out-child` is the process that times out and must exit cleanly.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/internal.hpp"
#include "kf/kf.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kTimeout_s = 0.2;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The device the test runs on: KF_BACKEND's (the CPU backend's is left out: it has no such kernel).
kf::ContextOptions options(double timeout_s) {
  kf::ContextOptions o;
  o.timeout_s = timeout_s;
  const char* b = std::getenv("KF_BACKEND");
  o.validation = !b || std::string(b) == "vulkan";
  return o;
}

// Iterations of the long kernel that take about `seconds` on this device, timed with a small count first
// (on a context with the default time-out). 0 when the backend has no long kernel.
uint64_t iterations_for(double seconds) {
  static uint64_t per_second = [] {
    kf::Context ctx = kf::Context::create(options(120));
    // Once untimed first: creating the pipeline (compiling it, without a cache on disk) is no part of it.
    if (!kf::detail::record_long_kernel(ctx, 1)) return uint64_t(0);
    ctx.synchronize();
    uint64_t n = uint64_t(1) << 20;
    for (;;) {
      const auto t = Clock::now();
      if (!kf::detail::record_long_kernel(ctx, n)) return uint64_t(0);
      ctx.synchronize();
      const double s = seconds_since(t);
      if (s > 0.05 || n >= (uint64_t(1) << 40)) return static_cast<uint64_t>(static_cast<double>(n) / s);
      n *= 8;
    }
  }();
  return static_cast<uint64_t>(per_second * seconds);
}

// What the timed-out context does, checked with gtest's macros in the test and returned as text (empty:
// all as documented) in the child process.
std::string timed_out_context(double* waited_s) {
  const uint64_t n = iterations_for(3);
  kf::Context ctx = kf::Context::create(options(kTimeout_s));
  kf::Tensor a = ctx.from_host({4, 8}, kf::DType::f32, std::vector<double>(32, 1.0));
  kf::Tensor out = ctx.empty({4, 8}, kf::DType::f32);
  if (!kf::detail::record_long_kernel(ctx, n)) return "no long kernel";
  const kf::MemoryUsage before = ctx.memory_usage();
  const auto t = Clock::now();
  try {
    ctx.synchronize();
    return "synchronize returned for a kernel of about 3 s, with a time-out of 0.2 s";
  } catch (const kf::Error& e) {
    if (e.code() != kf::ErrorCode::Timeout) return std::string("the wait raised ") + e.what() + ", not Timeout";
  }
  *waited_s = seconds_since(t);
  // Every call that needs the device is refused, naming the time-out.
  const auto refused = [](const char* what, const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const kf::Error& e) {
      const std::string m = e.what();
      if (e.code() != kf::ErrorCode::DeviceLost) return std::string(what) + " raised " + m + ", not DeviceLost";
      if (m.find(what) == std::string::npos || m.find("time-out") == std::string::npos)
        return std::string(what) + "'s message does not name the call and the time-out: " + m;
      return {};
    }
    return std::string(what) + " was not refused";
  };
  for (const std::string& failure :
       {refused("add_relu", [&] { ctx.run("add_relu", {a, a}, {out}); }),
        refused("Context::synchronize", [&] { ctx.synchronize(); }),
        refused("Tensor::download", [&] { (void)out.to_double(); }),
        refused("Tensor::upload", [&] { a.upload_from(std::vector<double>(32, 2.0)); }),
        refused("Context::empty", [&] { (void)ctx.empty({4}, kf::DType::f32); }),
        refused("Context::timestamp", [&] { (void)ctx.timestamp(); })})
    if (!failure.empty()) return failure;
  // Its queries still answer.
  if (!ctx.supports("add_relu", kf::DType::f32)) return "supports(add_relu, f32) no longer answers true";
  if (ctx.device().name.empty()) return "device() lost its name";
  if (ctx.memory_usage().current != before.current) return "memory_usage() changed";
  if (ctx.validation_messages() != 0) return "validation messages: " + ctx.validation_log().front();
  return {};
}

TEST(Faults, TimeoutThenTheContextRefusesWork) {
  if (iterations_for(1) == 0) GTEST_SKIP() << "this backend runs kernels inline: there is no wait to bound";
  double waited = 0;
  const auto t = Clock::now();
  {
    const std::string failure = timed_out_context(&waited);
    EXPECT_EQ(failure, "");
    // The wait ends at the time-out (with room for a loaded machine), not when the kernel does.
    EXPECT_LT(waited, kTimeout_s + 1.5);
  }  // the context closes here: it waits (bounded) for the long kernel, then frees everything
  EXPECT_LT(seconds_since(t), 15.0) << "closing the timed-out context took too long";
}

TEST(Faults, AFreshContextWorksAfterOneTimedOut) {
  if (iterations_for(1) == 0) GTEST_SKIP() << "this backend runs kernels inline: there is no wait to bound";
  {
    kf::Context ctx = kf::Context::create(options(kTimeout_s));
    ASSERT_TRUE(kf::detail::record_long_kernel(ctx, iterations_for(2)));
    EXPECT_THROW(ctx.synchronize(), kf::Error);
  }
  kf::Context ctx = kf::Context::create(options(kTimeout_s));
  kf::Tensor a = ctx.from_host({3, 5}, kf::DType::f32, std::vector<double>(15, -1.5));
  kf::Tensor b = ctx.from_host({3, 5}, kf::DType::f32, std::vector<double>(15, 4.0));
  auto y = ctx.call("add_relu", {a, b})[0].to_double();
  for (double v : y) EXPECT_EQ(v, 2.5);
  EXPECT_EQ(ctx.validation_messages(), 0u);
}

// Bad input on a timed-out context is still refused first for what it is: the argument checks need no
// device, and a rejected call writes nothing.
TEST(Faults, TheFirstTimeoutIsWhatLaterErrorsName) {
  if (iterations_for(1) == 0) GTEST_SKIP() << "this backend runs kernels inline: there is no wait to bound";
  kf::Context ctx = kf::Context::create(options(kTimeout_s));
  kf::Tensor a = ctx.from_host({2, 2}, kf::DType::f32, {1, 2, 3, 4});
  ASSERT_TRUE(kf::detail::record_long_kernel(ctx, iterations_for(2)));
  std::string first;
  try {
    ctx.synchronize();
  } catch (const kf::Error& e) {
    first = e.what();
  }
  ASSERT_EQ(first.rfind("time-out", 0), 0u) << first;
  try {
    ctx.synchronize();
    ADD_FAILURE() << "the second synchronize was not refused";
  } catch (const kf::Error& e) {
    EXPECT_EQ(e.code(), kf::ErrorCode::DeviceLost);
    EXPECT_NE(std::string(e.what()).find(first), std::string::npos) << e.what();
  }
}

// The process that timed out exits by itself, cleanly (status 0, static destructors and all), soon after
// the long kernel ends.
TEST(Faults, TheProcessExitsCleanly) {
  if (iterations_for(1) == 0) GTEST_SKIP() << "this backend runs kernels inline: there is no wait to bound";
  const auto t = Clock::now();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    execl("/proc/self/exe", "test_faults", "--timed-out-child", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(child, &status, WNOHANG)) == 0 && seconds_since(t) < 60)
    usleep(20000);
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the timed-out process did not exit within 60 s";
  }
  ASSERT_TRUE(WIFEXITED(status)) << "the timed-out process ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the timed-out process failed (its output says why)";
  EXPECT_LT(seconds_since(t), 30.0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--timed-out-child") == 0) {
    double waited = 0;
    const std::string failure = timed_out_context(&waited);
    if (!failure.empty()) std::fprintf(stderr, "timed-out child: %s\n", failure.c_str());
    return failure.empty() ? 0 : 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
