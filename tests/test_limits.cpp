// Device limits that a call may exceed and that the backends work around (docs/backends.md, "Limits"):
// grids wider than the device's maxComputeWorkGroupCount run as several dispatches, and tensors larger
// than its largest storage binding run in parts over rows or elements (src/core/split.cpp). KF_TUNE
// max_groups and max_binding lower the limits, so that small cases take those paths on lavapipe and the
// CPU backend in CI (and on every other device: CUDA splits under the knob too); the LimitsGpu tests run
// 5 GiB tensors on GPUs that have the memory.
#include <algorithm>
#include <cmath>
#include <random>

#include "common.hpp"

namespace kf::test {
namespace {

// One context per Vulkan device with the per-dimension limit lowered to `groups` workgroups.
Context& limited_context(const DeviceRef& d, uint32_t groups) {
  auto& cache = context_cache();
  const std::string key = d.tag + "/max_groups=" + std::to_string(groups);
  auto it = cache.find(key);
  if (it == cache.end()) {
    ContextOptions o = options_for(d);
    o.tuning = "max_groups=" + std::to_string(groups);
    it = cache.emplace(key, Context::create(o)).first;
  }
  return it->second;
}

const TestCase& find_case(const OpDef& op, const std::string& label) {
  for (const auto& tc : op.tests)
    if (tc.label == label) return tc;
  throw Error(ErrorCode::InvalidArgument, op.name + " has no test case " + label);
}

// Attention's query and key tiles, one dispatch per tile (max_groups=1): causal GQA, packed sequences,
// the scores' key tiles and the backward's dK / dV and dQ passes, in f32 (and f16 for the first), against
// the reference. A kernel that ignored its
// first tile's offset would leave the other tiles unwritten (poisoned) and fail.
TEST(Limits, AttentionGridSplits) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"attention", "gqa_h6_kv2_sq17_sk33_d64"},
      {"attention", "s65_d64_causal_window16"},
      {"attention", "varlen_3seq_d64_causal"},
      {"attention_scores", "b2_h3_sq17_sk33_d64"},
      {"attention_backward", "gqa_h4_kv2_s33_d64_mix"},
      {"attention_backward", "varlen_3seq_d64"},
  };
  bool any = false;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    for (uint32_t groups : {1u}) {
      Context& ctx = limited_context(d, groups);
      ValidationCheck vc(ctx);
      for (const auto& [name, label] : cases) {
        const OpDef& op = get_op(name);
        for (DType t : {DType::f32, DType::f16}) {
          if (!ctx.supports(name, t) || (t == DType::f16 && label != cases[0].second)) continue;
          check::CaseOptions o;
          o.check_validation = false;
          const check::CaseResult r = check::run_case(ctx, op, t, find_case(op, label), 5, o);
          EXPECT_FALSE(r.unsupported) << name << " " << label << " refused with max_groups=" << groups << ": " << r.message;
          EXPECT_TRUE(r.pass || r.unsupported) << name << " " << label << " " << to_string(t) << " with max_groups="
                                               << groups << " on " << d.name << " (variant " << r.variant << "):\n"
                                               << r.message;
          any = true;
        }
      }
    }
  }
  if (!any) GTEST_SKIP() << "no Vulkan device";
}

// One context per device with the largest binding lowered to `bytes` (KF_TUNE max_binding).
Context& binding_context(const DeviceRef& d, uint32_t bytes) {
  auto& cache = context_cache();
  const std::string key = d.tag + "/max_binding=" + std::to_string(bytes);
  auto it = cache.find(key);
  if (it == cache.end()) {
    ContextOptions o = options_for(d);
    o.tuning = "max_binding=" + std::to_string(bytes);
    it = cache.emplace(key, Context::create(o)).first;
  }
  return it->second;
}

constexpr uint32_t kBinding = 4096;  // bytes: every case below exceeds it in f32 and in f16

// Element-wise and row-wise ops over tensors larger than the binding, in f32 and f16, against the
// reference with poisoned outputs (a part left unwritten, or written at the wrong offset, fails): flat
// parts (add_relu, a [1] operand), row parts with a broadcast [F] operand (rows of 33 values: parts of a
// multiple of 4 or 8 rows, at 16-byte offsets), swiglu's packed rows (x and y rows of different
// lengths), softmax and log_softmax (a row never straddles two parts), the norms with their [F] weights,
// add_rms_norm's two outputs, and the reductions' one value per row.
TEST(Limits, BindingSplits) {
  struct Case {
    const char* op;
    std::vector<Shape> shapes;
  };
  const std::vector<Case> cases = {
      {"add_relu", {{64, 33}, {64, 33}}},
      {"add_relu", {{5003}, {5003}}},
      {"mul_tanh", {{3, 7, 129}, {3, 7, 129}}},
      {"bias_gelu", {{64, 33}, {33}}},
      {"add_relu", {{70, 33}, {33}}},
      {"mish_scale", {{64, 33}, {1}}},
      {"prelu_bias", {{60, 40}, {40}, {40}}},
      {"swiglu", {{64, 66}, {}}},
      {"relu", {{4099}}},
      {"softmax", {{64, 100}}},
      {"softmax", {{41, 3, 33}}},
      {"log_softmax", {{64, 100}}},
      {"layer_norm", {{64, 100}, {100}, {100}}},
      {"layer_norm", {{37, 129}, {129}, {129}}},
      {"rms_norm", {{64, 100}, {100}}},
      {"add_rms_norm", {{64, 100}, {64, 100}, {100}}},
      {"sum_squared", {{64, 100}}},
      {"mean_abs", {{5, 13, 77}}},
  };
  bool any = false;
  for (const auto& d : devices()) {
    Context& ctx = binding_context(d, kBinding);
    ASSERT_EQ(ctx.device().caps.max_storage_range, kBinding);
    ValidationCheck vc(ctx);
    for (const auto& c : cases) {
      const OpDef& op = get_op(c.op);
      for (DType t : {DType::f32, DType::f16}) {
        if (!ctx.supports(c.op, t)) continue;
        check::CaseOptions o;
        o.check_validation = false;
        TestCase tc{"split", c.shapes, {}, 2};
        const check::CaseResult r = check::run_case(ctx, op, t, tc, fresh_seed(), o);
        EXPECT_TRUE(r.pass) << c.op << " " << to_string(c.shapes[0]) << " " << to_string(t) << " on " << d.name
                            << " with max_binding=" << kBinding << " (variant " << r.variant << "):\n" << r.message;
        EXPECT_NE(r.variant.find(" parts: "), std::string::npos) << c.op << " did not run in parts: " << r.variant;
        any = true;
      }
    }
  }
  if (!any) GTEST_SKIP() << "no device";
}

// What cannot run in parts is refused before anything is written: an op whose rows are not independent
// (a matrix product; dropout, whose mask follows the element's index in the whole tensor), a row longer
// than a binding, and a broadcast operand larger than a binding. The message names the op, the tensor,
// its size and the limit.
TEST(Limits, BindingRefusals) {
  struct Case {
    const char* op;
    std::vector<Shape> shapes;
    Shape out;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"matmul", {{64, 100}, {100, 8}}, {64, 8}, {"matmul", "input 'a' [64, 100] f32 of 25600 bytes", "4096 bytes", "does not run in parts"}},
      {"dropout", {{64, 100}}, {64, 100}, {"dropout", "input 'x'", "25600 bytes", "4096 bytes", "does not run in parts"}},
      {"softmax", {{2, 2000}}, {2, 2000}, {"softmax", "input 'x' [2, 2000] f32 of 16000 bytes", "4096 bytes", "whole rows (8000 bytes each)"}},
      {"add_relu", {{3, 1023}, {1023}}, {3, 1023}, {"add_relu", "whole rows (4092 bytes each, 4 at a time", "4096 bytes"}},
      {"bias_relu", {{4, 2000}, {2000}}, {4, 2000}, {"bias_relu", "input 'bias' [2000] f32 of 8000 bytes", "goes whole"}},
  };
  bool any = false;
  for (const auto& d : devices()) {
    Context& ctx = binding_context(d, kBinding);
    for (const auto& c : cases) {
      const OpDef& op = get_op(c.op);
      if (!ctx.supports(c.op, DType::f32)) continue;
      std::vector<Tensor> in;
      for (const Shape& s : c.shapes) {
        in.push_back(ctx.empty(s, DType::f32));
        in.back().fill(0.5);
      }
      std::vector<Tensor> out = {ctx.empty(c.out, DType::f32)};
      out[0].fill_bytes(kPoison);
      Attrs a;
      if (op.random) a.p = 0.5;
      expect_rejected(ctx, [&] { ctx.run(c.op, in, out, a); }, ErrorCode::Unsupported, c.says, out);
      any = true;
    }
  }
  if (!any) GTEST_SKIP() << "no device";
}

// 5 GiB on a GPU: add_relu in f32 (1.34e9 elements) and softmax in f16 over rows of 4096 (2.7e9
// elements, past 2^31). Vulkan runs them in parts (its largest binding is 4 GiB); CUDA in one dispatch,
// indexing in 64 bits. Sampled rows and elements are checked against the float64 reference: the first,
// the last, some in the middle and those around the 4 GiB byte and 2^31 element boundaries and the end
// of the first part.
constexpr uint64_t kGiB = uint64_t(1) << 30;

std::vector<DeviceRef> big_gpus(std::string* why) {
  std::vector<DeviceRef> v;
  for (const auto& d : devices()) {
    if (d.backend == "cpu") continue;
    const DeviceInfo info = context_for(d).device();
    uint64_t local = 0;
    for (const auto& h : info.caps.heaps) local += h.device_local ? h.size : 0;
    if (info.type == "cpu") *why += " " + d.name + ": a CPU device;";
    else if (local < 16 * kGiB) *why += " " + d.name + ": " + std::to_string(local >> 20) + " MiB of device memory;";
    else v.push_back(d);
  }
  return v;
}

// Uniform in [-r, r) from an element's index (a hash: no generator state, any order).
inline float value_at(uint64_t i, uint64_t salt, float r) {
  uint64_t z = (i + salt) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>((static_cast<double>(z >> 11) / 9007199254740992.0 * 2 - 1) * r);
}

// The element indices (of `n`, `elem_bytes` each) where a part or a 32-bit index would go wrong: the
// 4 GiB byte boundary, element 2^31, the end of the first binding-sized part; those below n.
std::vector<int64_t> boundaries(const Context& ctx, int64_t n, int64_t elem_bytes) {
  std::vector<int64_t> b;
  const uint64_t limit = ctx.device().caps.max_storage_range;
  for (uint64_t at : {uint64_t(4) * kGiB / elem_bytes, uint64_t(1) << 31, limit ? limit / elem_bytes : 0})
    if (at > 0 && at < static_cast<uint64_t>(n)) b.push_back(static_cast<int64_t>(at));
  return b;
}

// add_relu over n f32 elements: sampled elements against the float64 reference. Returns what ran.
std::string check_add_relu(Context& ctx, const std::string& device, int64_t n) {
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) a[i] = value_at(i, 1, 1), b[i] = value_at(i, 2, 1);
  std::vector<int64_t> idx;  // the first and last 4096, 4096 either side of each boundary and mid-point
  const auto span = [&](int64_t from, int64_t to) {
    for (int64_t i = std::max<int64_t>(0, from); i < std::min(n, to); ++i) idx.push_back(i);
  };
  span(0, 4096);
  span(n - 4096, n);
  std::vector<int64_t> at = boundaries(ctx, n, 4);
  at.push_back(n / 2), at.push_back(n / 3);
  for (int64_t x : at) span(x - 4096, x + 4096);
  std::mt19937_64 rng(7);
  for (int k = 0; k < 1000000; ++k) idx.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(n)));
  Tensor ta = ctx.empty({n}, DType::f32), tb = ctx.empty({n}, DType::f32), ty = ctx.empty({n}, DType::f32);
  ta.upload(a.data(), ta.nbytes());
  tb.upload(b.data(), tb.nbytes());
  ty.fill_bytes(0xFF);  // NaN: an element never written fails
  ctx.run("add_relu", {ta, tb}, {ty});
  const std::string variant = ctx.last_variant();
  ty.download(y.data(), ty.nbytes());
  std::vector<double> out, ref;
  for (int64_t i : idx) {
    out.push_back(y[i]);
    ref.push_back(std::max(0.0, double(a[i]) + double(b[i])));
  }
  EXPECT_EQ(compare(out, ref, DType::f32, 1), "") << device << " (" << variant << ")";
  std::printf("[ limits ] %s: add_relu over %lld f32 (%.3f GiB): %s; %zu elements checked\n", device.c_str(),
              static_cast<long long>(n), double(ty.nbytes()) / kGiB, variant.c_str(), idx.size());
  return variant;
}

// softmax over R rows of F f16 values: sampled rows against the float64 reference. Returns what ran.
std::string check_softmax_f16(Context& ctx, const std::string& device, int64_t R, int64_t F) {
  const int64_t n = R * F;
  std::vector<uint16_t> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[i] = float_to_half(value_at(i, 3, 4));
  std::vector<int64_t> rows = {0, 1, 2, R / 3, R / 2, R - 3, R - 2, R - 1};
  for (int64_t e : boundaries(ctx, n, 2))
    for (int64_t r = e / F - 3; r <= e / F + 3; ++r) rows.push_back(r);
  std::mt19937_64 rng(11);
  for (int k = 0; k < 64; ++k) rows.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(R)));
  rows.erase(std::remove_if(rows.begin(), rows.end(), [&](int64_t r) { return r < 0 || r >= R; }), rows.end());
  Tensor tx = ctx.empty({R, F}, DType::f16), ty = ctx.empty({R, F}, DType::f16);
  tx.upload(x.data(), tx.nbytes());
  ty.fill_bytes(0xFF);
  ctx.run("softmax", {tx}, {ty});
  const std::string variant = ctx.last_variant();
  ty.download(y.data(), ty.nbytes());
  for (int64_t r : rows) {
    std::vector<double> out(static_cast<size_t>(F)), ref(static_cast<size_t>(F));
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < F; ++j) m = std::max(m, double(half_to_float(x[r * F + j])));
    for (int64_t j = 0; j < F; ++j) sum += std::exp(double(half_to_float(x[r * F + j])) - m);
    for (int64_t j = 0; j < F; ++j) {
      ref[j] = std::exp(double(half_to_float(x[r * F + j])) - m) / sum;
      out[j] = half_to_float(y[r * F + j]);
    }
    EXPECT_EQ(compare(out, ref, DType::f16, double(F)), "") << device << " row " << r << " (" << variant << ")";
  }
  std::printf("[ limits ] %s: softmax over %lld x %lld f16 (%.3f GiB, %lld elements): %s; %zu rows checked\n",
              device.c_str(), static_cast<long long>(R), static_cast<long long>(F), double(tx.nbytes()) / kGiB,
              static_cast<long long>(n), variant.c_str(), rows.size());
  return variant;
}

// The same checks at 5 MiB with a binding of 1 MiB, on every device (the CPU backend and lavapipe in CI).
TEST(Limits, BindingSplitsSampled) {
  bool any = false;
  for (const auto& d : devices()) {
    Context& ctx = binding_context(d, 1 << 20);
    ValidationCheck vc(ctx);
    EXPECT_NE(check_add_relu(ctx, d.name, 5 << 18).find("(in 5 parts"), std::string::npos);
    EXPECT_NE(check_softmax_f16(ctx, d.name, 640, 4096).find("(in 5 parts"), std::string::npos);
    any = true;
  }
  if (!any) GTEST_SKIP() << "no device";
}

// A call in parts inside Context::capture: Vulkan records the parts into the graph (their descriptor sets
// with offsets in the graph's own pool), the CPU backend keeps the call and splits it at each replay.
// New inputs written between replays give new outputs.
TEST(Limits, BindingSplitsCaptured) {
  bool any = false;
  for (const auto& d : devices()) {
    Context& ctx = binding_context(d, kBinding);
    ValidationCheck vc(ctx);
    const Shape s = {64, 100};
    Tensor x = ctx.empty(s, DType::f32), w = ctx.empty({100}, DType::f32), y = ctx.empty(s, DType::f32);
    Tensor a = ctx.empty(s, DType::f32), z = ctx.empty(s, DType::f32);
    w.fill(1.5);
    std::string variant;
    Graph g = ctx.capture([&] {
      ctx.run("rms_norm", {x, w}, {y});
      ctx.run("add_relu", {y, a}, {z});
      variant = ctx.last_variant();
    });
    EXPECT_TRUE(variant == "captured" || variant.find(" parts: ") != std::string::npos) << variant;
    const auto f32 = [](std::vector<double> v) {
      for (double& e : v) e = round_to(DType::f32, e);
      return v;
    };
    const OpDef& norm = get_op("rms_norm");
    const OpDef& add = get_op("add_relu");
    for (int round = 0; round < 2; ++round) {
      std::vector<double> xv(6400), av(6400);
      for (size_t i = 0; i < xv.size(); ++i) xv[i] = value_at(i, 5 + round, 2), av[i] = value_at(i, 9 + round, 1);
      x.upload_from(f32(xv));
      a.upload_from(f32(av));
      z.fill_bytes(0xFF);
      g.replay();
      std::vector<HostTensor> in = {{s, f32(xv)}, {{100}, std::vector<double>(100, 1.5)}};
      std::vector<HostTensor> mid = {{s, std::vector<double>(6400)}};
      norm.reference(in, mid, Attrs{});
      std::vector<HostTensor> in2 = {{s, f32(mid[0].data)}, {s, f32(av)}};
      std::vector<HostTensor> out = {{s, std::vector<double>(6400)}};
      add.reference(in2, out, Attrs{});
      EXPECT_EQ(compare(z.to_double(), out[0].data, DType::f32, 100), "") << d.name << " replay " << round;
    }
    any = true;
  }
  if (!any) GTEST_SKIP() << "no device";
}

// Past the device's own binding range where that is small (lavapipe: 128 MiB), without KF_TUNE: buffers
// larger than the range, bound from offsets over bounded ranges, under the validation layer.
TEST(Limits, DeviceBindingRange) {
  bool any = false;
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    const uint64_t range = ctx.device().caps.max_storage_range;
    if (d.backend != "vulkan" || range == 0 || range > 512ull << 20) continue;
    ValidationCheck vc(ctx);
    const int64_t bytes = static_cast<int64_t>(range / 4 * 5 / 8192 * 8192);  // 1.25 ranges
    EXPECT_NE(check_add_relu(ctx, d.name, bytes / 4).find("(in 2 parts"), std::string::npos);
    EXPECT_NE(check_softmax_f16(ctx, d.name, bytes / 8192, 4096).find("(in 2 parts"), std::string::npos);
    any = true;
  }
  if (!any) GTEST_SKIP() << "no Vulkan device with a binding range of 512 MiB or less";
}

TEST(LimitsGpu, AddRelu5GiBf32) {
  std::string why;
  const auto gpus = big_gpus(&why);
  if (gpus.empty()) GTEST_SKIP() << "no GPU with 16 GiB of device memory (CPU devices excluded):" << why;
  for (const auto& d : gpus) check_add_relu(context_for(d), d.name, static_cast<int64_t>(5 * kGiB / 4));
}

TEST(LimitsGpu, Softmax5GiBf16Rows4096) {
  std::string why;
  const auto gpus = big_gpus(&why);
  if (gpus.empty()) GTEST_SKIP() << "no GPU with 16 GiB of device memory (CPU devices excluded):" << why;
  for (const auto& d : gpus)
    if (context_for(d).supports("softmax", DType::f16))
      check_softmax_f16(context_for(d), d.name, static_cast<int64_t>(5 * kGiB / 2 / 4096), 4096);
}

}  // namespace
}  // namespace kf::test
