// Memory shared between backends of one GPU (Context::empty_exportable, export_memory, import_memory,
// share; docs/python.md "Vulkan and CUDA"): Vulkan tensors in exportable memory work as any other, their
// memory leaves as an opaque fd where the device has VK_KHR_external_memory_fd, and everything else is
// refused with a kf::Error naming what was wrong. Where a CUDA device sees the same GPU, a Vulkan result
// is read and written through CUDA in place, and a Timeline orders the two queues.
#include <fcntl.h>
#include <unistd.h>

#include <functional>
#include <vector>

#include "common.hpp"

namespace kf::test {
namespace {

ErrorCode code_of(const std::function<void()>& f, const std::string& names = "") {
  try {
    f();
  } catch (const Error& e) {
    if (!names.empty()) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
    return e.code();
  }
  ADD_FAILURE() << "no kf::Error";
  return ErrorCode::Internal;
}

bool fd_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

// Every device: an exportable tensor is an ordinary tensor where the device exports, Unsupported (saying
// why) where it does not; export_memory refuses tensors of other contexts and ordinary ones.
TEST(Interop, ExportWhereTheDeviceCan) {
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    ValidationCheck vc(ctx);
    std::string why;
    const bool can = ctx.can_export(&why);
    if (!can) {
      EXPECT_FALSE(why.empty()) << d.name;
      EXPECT_EQ(code_of([&] { ctx.empty_exportable({4}, DType::f32); }, "Context::empty_exportable"),
                ErrorCode::Unsupported) << d.name;
      continue;
    }
    ASSERT_EQ(ctx.backend(), "vulkan");
    EXPECT_EQ(code_of([&] { ctx.empty_exportable({2, -1}, DType::f32); }, "Context::empty_exportable"), ErrorCode::Shape);
    Tensor x = ctx.empty_exportable({2, 3}, DType::f32), b = ctx.empty_exportable({3}, DType::f32);
    Tensor y = ctx.empty_exportable({2, 3}, DType::f32);
    x.upload_from(std::vector<double>{-2, -1, 0, 1, 2, 3});
    b.upload_from(std::vector<double>{1, 1, 1});
    ctx.run("add_relu", {x, b}, {y});
    EXPECT_EQ(y.to_double(), (std::vector<double>{0, 0, 1, 2, 3, 4})) << d.name;
    const ExportedMemory m = ctx.export_memory(y);
    EXPECT_GE(m.fd, 0);
    EXPECT_GE(m.size, y.nbytes());
    EXPECT_EQ(m.offset, 0u);
    EXPECT_EQ(m.device_uuid, ctx.device().uuid);
    // Each export is a new descriptor the caller owns.
    const ExportedMemory again = ctx.export_memory(y);
    EXPECT_NE(again.fd, m.fd);
    EXPECT_EQ(close(m.fd), 0);
    EXPECT_EQ(close(again.fd), 0);
    EXPECT_EQ(code_of([&] { ctx.export_memory(ctx.empty({4}, DType::f32)); }, "empty_exportable"),
              ErrorCode::InvalidArgument);
    EXPECT_EQ(code_of([&] { ctx.export_memory(Tensor()); }, "Context::export_memory"), ErrorCode::InvalidArgument);
    EXPECT_EQ(code_of([&] { ctx.share(y); }, "already belongs to this context"), ErrorCode::InvalidArgument);
    ContextOptions o;
    o.backend = "cpu";
    Context cpu = Context::create(o);
    EXPECT_EQ(code_of([&] { cpu.share(y); }, "imports no memory"), ErrorCode::Unsupported);
    // The tensor stays usable after its memory was exported.
    ctx.run("add_relu", {y, b}, {x});
    EXPECT_EQ(x.to_double(), (std::vector<double>{1, 1, 2, 3, 4, 5})) << d.name;
  }
}

// Importing is the CUDA backend's: other backends refuse (and close the descriptor); so does a CUDA
// context for memory of another GPU, a shape larger than the memory and a missing descriptor.
TEST(Interop, ImportRefusals) {
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    ExportedMemory m;
    m.size = 1024;
    m.fd = open("/dev/null", O_RDONLY);
    ASSERT_GE(m.fd, 0);
    m.device_uuid = ctx.device().uuid;
    if (ctx.backend() != "cuda") {
      EXPECT_EQ(code_of([&] { ctx.import_memory(m, {4}, DType::f32); }, "Context::import_memory"), ErrorCode::Unsupported)
          << d.name;
      EXPECT_FALSE(fd_open(m.fd)) << "the descriptor is consumed";
      continue;
    }
    m.device_uuid[0] ^= 0xff;
    EXPECT_EQ(code_of([&] { ctx.import_memory(m, {4}, DType::f32); }, "another GPU"), ErrorCode::Device);
    EXPECT_FALSE(fd_open(m.fd));
    m.fd = open("/dev/null", O_RDONLY);
    m.device_uuid = ctx.device().uuid;
    EXPECT_EQ(code_of([&] { ctx.import_memory(m, {1024}, DType::f32); }, "needs 4096 bytes"), ErrorCode::InvalidArgument);
    EXPECT_FALSE(fd_open(m.fd));
    m.fd = -1;
    EXPECT_EQ(code_of([&] { ctx.import_memory(m, {4}, DType::f32); }, "no file descriptor"), ErrorCode::InvalidArgument);
  }
}

// A Vulkan device and a CUDA device of one GPU (matched by UUID): a Vulkan result read through CUDA in
// place, and CUDA's writes seen by the next Vulkan op (each side synchronized before the other reads).
TEST(Interop, VulkanMemoryInCuda) {
  const auto cudas = cuda_devices();
  if (cudas.empty()) GTEST_SKIP() << no_cuda_reason();
  int pairs = 0;
  for (const auto& v : devices()) {
    if (v.backend != "vulkan") continue;
    Context& vk = context_for(v);
    if (!vk.can_export()) continue;
    for (const auto& c : cudas) {
      Context& cu = context_for(c);
      if (cu.backend() != "cuda" || cu.device().uuid != vk.device().uuid) continue;
      ++pairs;
      const int64_t n = 1 << 20;
      std::vector<double> xs(n), bs(1024);
      for (int64_t i = 0; i < n; ++i) xs[i] = double(i % 7) - 3;
      for (int64_t i = 0; i < 1024; ++i) bs[i] = 0.5;
      Tensor x = vk.from_host({n / 1024, 1024}, DType::f32, xs), b = vk.from_host({1024}, DType::f32, bs);
      Tensor y = vk.empty_exportable({n / 1024, 1024}, DType::f32);
      vk.run("add_relu", {x, b}, {y});
      vk.synchronize();
      Tensor yc = cu.share(y);
      ASSERT_NE(yc.device_data(), nullptr);
      const std::vector<double> got = yc.to_double();  // read through CUDA
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], std::max(0.0, xs[i] + 0.5)) << i;
      Tensor z = cu.call("relu", {cu.from_host({n / 1024, 1024}, DType::f32, std::vector<double>(n, -1.0))})[0];
      cu.run("add_relu", {z, cu.from_host({1024}, DType::f32, bs)}, {yc});  // CUDA writes 0.5 into y's memory
      cu.synchronize();
      EXPECT_EQ(y.to_double(), std::vector<double>(n, 0.5));  // read through Vulkan
    }
  }
  if (pairs == 0) GTEST_SKIP() << "no Vulkan device that exports memory shares a GPU with a CUDA device";
}

// Timeline: refused (Unsupported, saying why) unless a Vulkan context that exports timeline semaphores
// meets a CUDA context of its GPU.
TEST(Interop, TimelineRefusals) {
  ContextOptions o;
  o.backend = "cpu";
  Context cpu = Context::create(o);
  std::string why;
  EXPECT_FALSE(Timeline::supported(cpu, cpu, &why));
  EXPECT_NE(why.find("exports no semaphores"), std::string::npos) << why;
  EXPECT_EQ(code_of([&] { Timeline::create(cpu, cpu); }, "Timeline::create"), ErrorCode::Unsupported);
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    if (ctx.backend() != "vulkan") continue;
    EXPECT_FALSE(Timeline::supported(ctx, cpu, &why)) << d.name;
    EXPECT_FALSE(why.empty());
    EXPECT_EQ(code_of([&] { Timeline::create(ctx, cpu); }, "Timeline::create"), ErrorCode::Unsupported) << d.name;
  }
}

// On a GPU with both backends: a chain that alternates between them, ordered by the timeline alone (no
// synchronize between the steps), gives the values of the chain run in order.
TEST(Interop, TimelineOrdersTheQueues) {
  const auto cudas = cuda_devices();
  if (cudas.empty()) GTEST_SKIP() << no_cuda_reason();
  int pairs = 0;
  for (const auto& v : devices()) {
    if (v.backend != "vulkan") continue;
    Context& vk = context_for(v);
    for (const auto& c : cudas) {
      Context& cu = context_for(c);
      if (!vk.can_export() || !Timeline::supported(vk, cu)) continue;
      ++pairs;
      Timeline tl = Timeline::create(vk, cu);
      const int64_t n = 16 << 20;  // large enough that an unordered read would see a stale value
      const Shape s{n / 1024, 1024};
      Tensor a = vk.empty_exportable(s, DType::f32), b = vk.empty_exportable(s, DType::f32);
      Tensor ac = cu.share(a), bc = cu.share(b);
      const std::vector<double> ones(1024, 1.0);
      Tensor one_cu = cu.from_host({1024}, DType::f32, ones), one_vk = vk.from_host({1024}, DType::f32, ones);
      vk.run("relu", {vk.from_host(s, DType::f32, std::vector<double>(n, 1.0))}, {a});  // a = 1
      for (int step = 0; step < 8; ++step) {
        tl.cuda_after_vulkan();
        cu.run("add_relu", {ac, one_cu}, {bc});  // b = a + 1 on CUDA
        tl.vulkan_after_cuda();
        vk.run("add_relu", {b, one_vk}, {a});  // a = b + 1 on Vulkan
      }
      vk.synchronize();
      EXPECT_EQ(a.to_double(), std::vector<double>(n, 17.0)) << v.name << " / " << c.name;
    }
  }
  if (pairs == 0) GTEST_SKIP() << "no Vulkan device whose timeline semaphores a CUDA device of its GPU imports";
}

}  // namespace
}  // namespace kf::test
