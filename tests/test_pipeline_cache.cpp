// The Vulkan pipeline cache on disk (ContextOptions::pipeline_cache_dir, KF_CACHE_DIR; docs/architecture.md):
// a truncated or corrupted file is ignored and written again whole; two processes, and several contexts of
// one process, closing at once over the same folder leave one valid file and no temporary ones. Each
// context runs add_relu and checks its result, so that a cache that fed the driver bad pipelines would fail.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common.hpp"

namespace kf::test {
namespace {

namespace fs = std::filesystem;

// A fresh folder under the system's temporary one.
fs::path fresh_dir(const char* what) {
  std::string t = (fs::temp_directory_path() / (std::string("kf-") + what + "-XXXXXX")).string();
  if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
  return t;
}

// Opens a Vulkan context caching pipelines in `dir`, runs add_relu and compares it with the host's; false
// (with the reason in *why) on a wrong result, or when there is no Vulkan device (*skipped set).
bool run_once(const fs::path& dir, std::string* why, bool* skipped = nullptr) {
  ContextOptions o;
  o.backend = "vulkan";
  o.pipeline_cache_dir = dir.string();
  o.validation = true;
  std::optional<Context> ctx;
  try {
    ctx.emplace(Context::create(o));
  } catch (const Error& e) {
    if (skipped) *skipped = true;
    *why = e.what();
    return false;
  }
  const std::vector<double> a = {-2, -0.5, 0, 0.25, 1, 3, -7, 5}, b = {1, 1, 1, 1, -1, -1, 2, 2};
  const Tensor ta = ctx->from_host({8}, DType::f32, a), tb = ctx->from_host({8}, DType::f32, b);
  const std::vector<double> got = ctx->call("add_relu", {ta, tb})[0].to_double();
  for (size_t i = 0; i < a.size(); ++i)
    if (got[i] != std::max(0.0, a[i] + b[i])) {
      *why = "add_relu element " + std::to_string(i) + " is " + std::to_string(got[i]);
      return false;
    }
  return true;
}

// The cache files of a folder (the device's .bin) and the temporary files a writer left.
std::vector<fs::path> files(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) v.push_back(e.path());
  return v;
}

// First in this file: the fork happens before this process has opened Vulkan (devices() would).
TEST(PipelineCache, TwoProcessesShareTheFolder) {
  const fs::path dir = fresh_dir("cache-procs");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  bool ok = true, skipped = false;
  std::string why;
  for (int round = 0; round < 4 && ok; ++round) ok = run_once(dir, &why, &skipped);
  if (child == 0) _exit(ok ? 0 : skipped ? 2 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (skipped) GTEST_SKIP() << why;
  EXPECT_TRUE(ok) << why;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child process failed";
  EXPECT_EQ(files(dir, ".bin").size(), 1u);
  EXPECT_TRUE(files(dir, ".tmp").empty());
  EXPECT_TRUE(run_once(dir, &why)) << why;
  fs::remove_all(dir);
}

TEST(PipelineCache, ContextsOfOneProcessCloseAtOnce) {
  const fs::path dir = fresh_dir("cache-threads");
  std::string why;
  bool skipped = false;
  if (!run_once(dir, &why, &skipped) && skipped) GTEST_SKIP() << why;
  std::vector<std::thread> threads;
  std::vector<std::string> failures(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        if (!run_once(dir, &failures[t])) return;
    });
  for (auto& t : threads) t.join();
  for (const auto& f : failures) EXPECT_TRUE(f.empty()) << f;
  EXPECT_EQ(files(dir, ".bin").size(), 1u);
  EXPECT_TRUE(files(dir, ".tmp").empty());
  fs::remove_all(dir);
}

TEST(PipelineCache, TruncatedOrCorruptFileIsRebuilt) {
  const fs::path dir = fresh_dir("cache-bad");
  std::string why;
  bool skipped = false;
  if (!run_once(dir, &why, &skipped) && skipped) GTEST_SKIP() << why;
  ASSERT_EQ(files(dir, ".bin").size(), 1u);
  const fs::path cache = files(dir, ".bin")[0];
  const auto full = fs::file_size(cache);
  ASSERT_GT(full, 0u);
  // Truncated to half (a writer killed mid-file, were it not for the rename), then overwritten with bytes
  // that are no cache at all, header included: each time the context runs right and writes the file whole.
  fs::resize_file(cache, full / 2);
  EXPECT_TRUE(run_once(dir, &why)) << "truncated: " << why;
  EXPECT_EQ(fs::file_size(cache), full);
  {
    std::ofstream f(cache, std::ios::binary | std::ios::trunc);
    for (uintmax_t i = 0; i < full; ++i) f.put(static_cast<char>((i * 131 + 7) & 0xff));
  }
  EXPECT_TRUE(run_once(dir, &why)) << "corrupt: " << why;
  EXPECT_EQ(fs::file_size(cache), full);
  std::ifstream f(cache, std::ios::binary);
  std::vector<char> head(16);
  f.read(head.data(), 16);
  EXPECT_NE(head[0], static_cast<char>(7)) << "the corrupt bytes were kept";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kf::test
