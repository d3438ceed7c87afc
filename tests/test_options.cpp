// The options table (src/core/options.hpp): each knob's values at and past its bounds, the errors of a
// bad KF_TUNE / ContextOptions::tuning (the same message on every backend), a knob of another backend
// accepted and ignored, a knob changing what the Vulkan backend runs, and the environment's switches.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "check/conformance.hpp"
#include "core/options.hpp"
#include "kf/kf.hpp"
#include "ops/registry.hpp"

namespace kf {
namespace {

// parse_tuning's message for `text`, "" when it accepts it; any error must be InvalidArgument.
std::string parse_error(const std::string& text) {
  try {
    parse_tuning(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << text << ": " << e.what();
    return e.what();
  }
  return "";
}

TEST(OptionsTable, DefaultsAreTheTables) {
  const Tuning t;
  for (const auto& k : knobs()) {
    EXPECT_EQ(t.*(k.field), k.def) << k.name;
    EXPECT_TRUE(parse_error(std::string(k.name) + "=" + knob_default(k)).empty()) << k.name << ": the default is refused";
  }
}

// One knob per Tuning field, one field per knob, every name once, every knob documented.
TEST(OptionsTable, OneKnobPerField) {
  EXPECT_EQ(sizeof(Tuning), knobs().size() * sizeof(uint32_t));
  std::set<std::string> names;
  for (size_t i = 0; i < knobs().size(); ++i) {
    const Knob& k = knobs()[i];
    EXPECT_TRUE(names.insert(k.name).second) << k.name << " twice";
    EXPECT_GT(std::string(k.doc).size(), 10u) << k.name;
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(knobs()[j].field == k.field) << k.name << " and " << knobs()[j].name;
  }
}

// Each knob: its bounds (or each of its values / words) accepted and stored in its field; the values just
// past them, and values of the wrong form, refused with a message naming the knob, the value and what
// it takes.
TEST(OptionsTable, EveryKnobsBounds) {
  for (const auto& k : knobs()) {
    const std::string name = k.name;
    const auto accepted = [&](const std::string& value, uint32_t stored) {
      try {
        const Tuning t = parse_tuning(name + "=" + value);
        EXPECT_EQ(t.*(k.field), stored) << name << "=" << value;
      } catch (const Error& e) {
        ADD_FAILURE() << name << "=" << value << " refused: " << e.what();
      }
    };
    const auto refused = [&](const std::string& value) {
      const std::string msg = parse_error(name + "=" + value);
      EXPECT_NE(msg.find("'" + name + "=" + value + "'"), std::string::npos) << name << "=" << value << ": " << msg;
      EXPECT_NE(msg.find(name + " takes " + knob_values(k)), std::string::npos) << msg;
    };
    if (!k.words.empty()) {
      for (size_t i = 0; i < k.words.size(); ++i) accepted(k.words[i], static_cast<uint32_t>(i));
      refused(k.words[0] + "x");
      refused("1");
      refused("");
    } else if (!k.values.empty()) {
      uint32_t top = 0;
      for (uint32_t v : k.values) accepted(std::to_string(v), v), top = std::max(top, v);
      refused(std::to_string(top + 1));
      for (uint32_t v = 1; v < top; ++v)  // the first value inside the span that is not one of them
        if (std::find(k.values.begin(), k.values.end(), v) == k.values.end()) {
          refused(std::to_string(v));
          break;
        }
      refused("16x");
    } else {
      accepted(std::to_string(k.min), k.min);
      accepted(std::to_string(k.max), k.max);
      refused(std::to_string(uint64_t(k.max) + 1));
      refused(k.min > 0 ? std::to_string(k.min - 1) : "-1");
      refused(std::to_string(k.min) + "x");
      refused("+" + std::to_string(k.max));
      refused("auto");
      refused("");
    }
  }
}

TEST(OptionsTable, Forms) {
  // Accepted: nothing, empty items, blanks around keys and values; the last of a repeated key kept.
  EXPECT_EQ(parse_error(""), "");
  EXPECT_EQ(parse_error(",,"), "");
  const Tuning t = parse_tuning(" mm_path = 2 ,, attn_wmma=mma,mm_path=1,");
  EXPECT_EQ(t.mm_path, 1u);
  EXPECT_EQ(t.attn_wmma, 3u);
  // Explicit 0 where the table makes 0 automatic: the same as leaving the knob out.
  EXPECT_EQ(parse_tuning("rows_values=0,attn_rows=0,lce_rows=0").rows_values, 0u);

  std::string msg = parse_error("mm_path=1,no_such_knob=1");
  EXPECT_NE(msg.find("KF_TUNE: unknown knob 'no_such_knob'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mm_path, mm_cfg"), std::string::npos) << msg;  // lists the knobs
  msg = parse_error("mm_path");
  EXPECT_NE(msg.find("'mm_path' needs a value: mm_path takes 0..3"), std::string::npos) << msg;
  msg = parse_error("mm_path=99999999999");
  EXPECT_NE(msg.find("'mm_path=99999999999': mm_path takes 0..3"), std::string::npos) << msg;
  msg = parse_error("attn_wmma=wgmmma");
  EXPECT_NE(msg.find("'attn_wmma=wgmmma': attn_wmma takes auto, regs, smem, mma or wgmma"), std::string::npos) << msg;
  EXPECT_NE(parse_error("gemv_rows=5").find("gemv_rows takes 0, 4, 8 or 16"), std::string::npos);
  EXPECT_FALSE(parse_error("MM_PATH=1").empty());
}

// The environment's developer switches and library paths, read by the core into DeviceOptions.
TEST(OptionsTable, DeviceOptionsFromTheEnvironment) {
  const char* names[] = {"KF_PIPELINE_STATS", "KF_COOPMAT_LAYOUT", "KF_VK_CUDA_CONTEXT", "KF_CUBLASLT", "CUDA_HOME"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* n : names)
    if (const char* v = std::getenv(n)) saved.emplace_back(n, v);
  for (const char* n : names) unsetenv(n);
  ContextOptions o;
  o.timeout_s = 7;
  o.validation = true;
  o.tuning = "mm_path=2";
  DeviceOptions d = device_options(o);
  EXPECT_EQ(d.timeout_s, 7);
  EXPECT_TRUE(d.validation);
  EXPECT_EQ(d.tuning.mm_path, 2u);
  EXPECT_FALSE(d.pipeline_stats);
  EXPECT_TRUE(d.coopmat_layout.empty());
  EXPECT_TRUE(d.vk_cuda_context);
  EXPECT_TRUE(d.cublaslt.empty());
  setenv("KF_PIPELINE_STATS", "1", 1);
  setenv("KF_COOPMAT_LAYOUT", "1", 1);
  setenv("KF_VK_CUDA_CONTEXT", "0", 1);
  setenv("KF_CUBLASLT", "/opt/lib/libcublasLt.so.13", 1);
  setenv("CUDA_HOME", "/opt/cuda", 1);
  d = device_options(o);
  EXPECT_TRUE(d.pipeline_stats);
  EXPECT_EQ(d.coopmat_layout, "1");
  EXPECT_FALSE(d.vk_cuda_context);
  EXPECT_EQ(d.cublaslt, "/opt/lib/libcublasLt.so.13");
  ASSERT_FALSE(d.cuda_roots.empty());
  EXPECT_EQ(d.cuda_roots[0], "/opt/cuda");
  setenv("KF_PIPELINE_STATS", "0", 1);
  EXPECT_FALSE(device_options(o).pipeline_stats);
  o.tuning = "mm_path=4";
  EXPECT_THROW(device_options(o), Error);
  for (const char* n : names) unsetenv(n);
  for (const auto& [n, v] : saved) setenv(n.c_str(), v.c_str(), 1);
}

// ---- Through Context::create, on the backends of this build.

// KF_BACKEND, when set, narrows the backends tested here; it and KF_DEVICE are then unset, so that each
// context opens the backend its options name (as tests/common.hpp's devices() does).
const std::string& wanted_backend() {
  static const std::string b = [] {
    const char* v = std::getenv("KF_BACKEND");
    std::string s = v ? v : "";
    unsetenv("KF_BACKEND");
    unsetenv("KF_DEVICE");
    return s;
  }();
  return b;
}

// The first usable device of `backend` (one is enough here), none where KF_BACKEND names another.
std::vector<DeviceEntry> usable(const std::string& backend) {
  if (!wanted_backend().empty() && wanted_backend() != backend) return {};
  for (const auto& e : Context::list_devices())
    if (e.usable && e.info.backend == backend) return {e};
  return {};
}

ContextOptions options_for(const std::string& backend, const std::string& tuning) {
  ContextOptions o;
  o.backend = backend;
  o.device = backend == "cpu" ? "" : std::to_string(usable(backend).at(0).info.index);  // (an index names a GPU)
  o.validation = backend == "vulkan";
  o.tuning = tuning;
  return o;
}

// Context::create's message for the knobs, "" when it opens.
std::string create_error(const std::string& backend, const std::string& tuning) {
  try {
    Context::create(options_for(backend, tuning));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << backend << " " << tuning << ": " << e.what();
    return e.what();
  }
  return "";
}

std::vector<std::string> backends_here() {
  std::vector<std::string> v;
  for (const char* b : {"cpu", "vulkan", "cuda", "hip"})
    if (!usable(b).empty()) v.push_back(b);
  return v;
}

// An unknown key and a bad value: the same InvalidArgument, word for word, on each backend (cpu
// included, which reads no knob), as parse_tuning gives it.
TEST(OptionsContext, SameErrorOnEveryBackend) {
  const auto backends = backends_here();
  if (backends.size() < 2) std::printf("(one backend here: nothing to compare its message with but parse_tuning's)\n");
  for (const std::string tuning : {"no_such_knob=1", "mm_path=9", "attn_wmma=wgmmma", "rows_values=8", "mm_path=1x",
                                   "eltwise_items=0", "attn_decode"}) {
    const std::string want = parse_error(tuning);
    ASSERT_FALSE(want.empty()) << tuning;
    for (const auto& b : backends) EXPECT_EQ(create_error(b, tuning), want) << b << " " << tuning;
  }
}

// A knob of another backend is valid everywhere and ignored where it does not apply: the context opens
// and runs an op.
TEST(OptionsContext, OtherBackendsKnobsIgnored) {
  for (const auto& b : backends_here()) {
    const std::string tuning = b == "vulkan" ? "attn_wmma=mma,mm_epilogue=kernel,optim_items=4,rows_cluster=1"
                                             : "eltwise_items=4,mm_cfg=3,attn_quad=1,rows_coop=1";
    Context ctx = Context::create(options_for(b, tuning));
    const TestCase tc{"small", {{2, 64}, {30, 64}, {30}, {}}, {}, 1};
    const auto r = check::run_case(ctx, get_op("linear"), DType::f32, tc, check::fresh_seed());
    EXPECT_TRUE(r.pass) << b << " " << tuning << ": " << r.message;
  }
}

// Vulkan: a small linear (M = 2) takes the few-rows kernel by itself and with mm_path=0 (0 = automatic),
// and the portable tiled kernel under mm_path=1.
TEST(OptionsContext, VulkanMatrixPathKnob) {
  if (usable("vulkan").empty()) GTEST_SKIP() << "no usable Vulkan device";
  const TestCase tc{"small", {{2, 64}, {30, 64}, {30}, {}}, {}, 1};
  for (const auto& [tuning, want] : std::vector<std::pair<std::string, std::string>>{
           {"", "gemv"}, {"mm_path=0", "gemv"}, {"mm_path=1", "portable"}}) {
    Context ctx = Context::create(options_for("vulkan", tuning));
    const auto r = check::run_case(ctx, get_op("linear"), DType::f32, tc, check::fresh_seed());
    EXPECT_TRUE(r.pass) << tuning << ": " << r.message;
    EXPECT_NE(r.variant.find(want), std::string::npos) << "'" << tuning << "' ran " << r.variant;
    EXPECT_NE(ctx.last_variant().find(want), std::string::npos) << "'" << tuning << "': " << ctx.last_variant();
  }
}

}  // namespace
}  // namespace kf
