// KERNELS.md section 4 beyond the registry cases: the argument checks of linear_dropout, ffn, ffn_swiglu
// (and, as they land, embedding and the convolutions), the composed ops' paths and variants, and
// determinism.
#include <functional>

#include "common.hpp"

namespace kf::test {
namespace {


class Linalg : public ::testing::TestWithParam<DeviceRef> {
 protected:
  void SetUp() override { ctx_ = &context_for(GetParam()); }

  Tensor t(const Shape& s, DType dt = DType::f32) {
    std::vector<double> v(static_cast<size_t>(numel(s)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(i % 7) / 7 - 0.4;
    return ctx_->from_host(s, dt, v);
  }
  Tensor poisoned(const Shape& s, DType dt = DType::f32) {
    Tensor y = ctx_->empty(s, dt);
    y.fill_bytes(kPoison);
    return y;
  }
  // `call` must raise kf::Error `code` naming every substring, and leave `out` poisoned.
  void expect_error(const std::function<void()>& call, ErrorCode code, const std::vector<std::string>& substrings,
                    const Tensor& out) {
    expect_rejected(*ctx_, call, code, substrings, {out});
  }

  Context* ctx_ = nullptr;
};

TEST_P(Linalg, FfnArgumentErrors) {
  Tensor x = t({3, 8}), W1 = t({12, 8}), b1 = t({12}), W2 = t({8, 12}), b2 = t({8});
  Tensor y = poisoned({3, 8});
  Attrs a;
  a.act = kActGelu;
  expect_error([&] { ctx_->run("ffn", {x, W1, t({11}), W2, b2}, {y}, a); }, ErrorCode::Shape, {"ffn", "'b1'", "[11]"}, y);
  expect_error([&] { ctx_->run("ffn", {x, W1, b1, t({8, 11}), b2}, {y}, a); }, ErrorCode::Shape, {"ffn", "'W2'"}, y);
  expect_error([&] { ctx_->run("ffn", {x, W1, b1, W2, t({7})}, {y}, a); }, ErrorCode::Shape, {"ffn", "'b2'"}, y);
  expect_error([&] { ctx_->run("ffn", {x, t({12, 9}), b1, W2, b2}, {y}, a); }, ErrorCode::Shape, {"ffn", "'W1'"}, y);
  Attrs bad_p = a;
  bad_p.p = 1.0;
  expect_error([&] { ctx_->run("ffn", {x, W1, b1, W2, b2}, {y}, bad_p); }, ErrorCode::InvalidArgument, {"ffn", "'p'"}, y);
  Attrs bad_act = a;
  bad_act.act = 9;
  expect_error([&] { ctx_->run("ffn", {x, W1, b1, W2, b2}, {y}, bad_act); }, ErrorCode::InvalidArgument,
               {"ffn", "'act'"}, y);
  expect_error([&] { ctx_->run("ffn", {x, W1, b1, W2, b2}, {poisoned({3, 12})}, a); }, ErrorCode::Shape,
               {"ffn", "output 'y'"}, y);
  expect_error([&] { ctx_->run("ffn", {x, W1, b1, W2, b2}, {x}, a); }, ErrorCode::InvalidArgument, {"same tensor"}, y);
  expect_error([&] { ctx_->run("ffn_swiglu", {x, t({13, 8}), t({8, 6})}, {y}); }, ErrorCode::Shape,
               {"ffn_swiglu", "'W_gate_up'", "even"}, y);
  expect_error([&] { ctx_->run("ffn_swiglu", {x, t({12, 8}), t({8, 12})}, {y}); }, ErrorCode::Shape,
               {"ffn_swiglu", "'W_down'"}, y);
  Attrs drop;
  drop.p = -0.1;
  expect_error([&] { ctx_->run("linear_dropout", {x, W1}, {poisoned({3, 12})}, drop); }, ErrorCode::InvalidArgument,
               {"linear_dropout", "'p'"}, Tensor());
}

// embedding: ids outside [0, V) (negative too) are an InvalidArgument naming the id and where it is,
// checked before anything runs; pos needs at least L rows of d; tokens must be i32.
TEST_P(Linalg, EmbeddingArgumentErrors) {
  if (std::string why; !ctx_->supports("embedding", DType::f32, &why)) GTEST_SKIP() << why;
  Tensor table = t({10, 6}), pos = t({4, 6});
  Tensor y = poisoned({2, 4, 6});
  const auto ids = [&](std::vector<double> v) { return ctx_->from_host({2, 4}, DType::i32, v); };
  expect_error([&] { ctx_->run("embedding", {ids({0, 1, 2, 3, 4, 5, 10, 9}), table, pos}, {y}); },
               ErrorCode::InvalidArgument, {"embedding", "'tokens'", "id 10", "index 6", "[0, 10)"}, y);
  expect_error([&] { ctx_->run("embedding", {ids({0, -1, 2, 3, 4, 5, 6, 9}), table}, {y}); },
               ErrorCode::InvalidArgument, {"embedding", "id -1", "index 1"}, y);
  expect_error([&] { ctx_->run("embedding", {ids({0, 1, 2, 3, 4, 5, 6, 9}), table, t({3, 6})}, {y}); },
               ErrorCode::Shape, {"embedding", "'pos'", "P >= 4"}, y);
  expect_error([&] { ctx_->run("embedding", {ids({0, 1, 2, 3, 4, 5, 6, 9}), table, t({4, 5})}, {y}); },
               ErrorCode::Shape, {"embedding", "'pos'"}, y);
  expect_error([&] { ctx_->run("embedding", {t({2, 4}), table}, {y}); }, ErrorCode::DType,
               {"embedding", "'tokens'", "i32"}, y);
  expect_error([&] { ctx_->run("embedding", {ids({0, 1, 2, 3, 4, 5, 6, 9}), table}, {poisoned({2, 4, 6}, DType::f16)}); },
               ErrorCode::DType, {"embedding", "output 'y'"}, y);
  // The valid call, then: the output is the table's rows plus the positions.
  ValidationCheck vc(*ctx_);
  ctx_->run("embedding", {ids({9, 0, 3, 3, 1, 2, 5, 8}), table, pos}, {y});
  const auto out = y.to_double(), tv = table.to_double(), pv = pos.to_double();
  const int tok[8] = {9, 0, 3, 3, 1, 2, 5, 8};
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 6; ++c)
      EXPECT_NEAR(out[r * 6 + c], tv[tok[r] * 6 + c] + pv[(r % 4) * 6 + c], 1e-6) << r << "," << c;
}

// Convolution attributes and shapes: each a kf::Error naming the argument, nothing written.
TEST_P(Linalg, ConvArgumentErrors) {
  Tensor x = t({1, 4, 6, 6}), W = t({6, 4, 3, 3});
  Tensor y = poisoned({1, 6, 4, 4});
  const auto attrs = [](std::array<int64_t, 2> s, std::array<int64_t, 2> p, std::array<int64_t, 2> d, int64_t g) {
    Attrs a;
    a.stride = s;
    a.padding = p;
    a.dilation = d;
    a.groups = g;
    return a;
  };
  expect_error([&] { ctx_->run("conv2d", {x, W}, {y}, attrs({0, 1}, {0, 0}, {1, 1}, 1)); }, ErrorCode::InvalidArgument,
               {"conv2d", "'stride'", "{0, 1}"}, y);
  expect_error([&] { ctx_->run("conv2d", {x, W}, {y}, attrs({1, 1}, {-1, 0}, {1, 1}, 1)); }, ErrorCode::InvalidArgument,
               {"conv2d", "'padding'"}, y);
  expect_error([&] { ctx_->run("conv2d", {x, W}, {y}, attrs({1, 1}, {0, 0}, {1, 0}, 1)); }, ErrorCode::InvalidArgument,
               {"conv2d", "'dilation'"}, y);
  expect_error([&] { ctx_->run("conv2d", {x, W}, {y}, attrs({1, 1}, {0, 0}, {1, 1}, 3)); }, ErrorCode::InvalidArgument,
               {"conv2d", "'groups'"}, y);
  expect_error([&] { ctx_->run("conv2d", {x, W}, {y}, attrs({1, 1}, {0, 0}, {4, 4}, 1)); }, ErrorCode::Shape,
               {"conv2d", "dilated kernel"}, y);
  expect_error([&] { ctx_->run("conv2d", {x, t({6, 2, 3, 3})}, {y}); }, ErrorCode::Shape, {"conv2d", "'W'"}, y);
  expect_error([&] { ctx_->run("conv2d", {x, W, t({5})}, {y}); }, ErrorCode::Shape, {"conv2d", "'bias'"}, y);
  expect_error([&] { ctx_->run("conv2d", {t({4, 6, 6}), W}, {y}); }, ErrorCode::Shape, {"conv2d", "'x'", "NCHW"}, y);
  expect_error([&] { ctx_->run("conv2d", {x, W}, {poisoned({1, 6, 5, 5})}); }, ErrorCode::Shape, {"output 'y'"}, y);
  Tensor c = t({6});
  Attrs eps;
  eps.eps = -1;
  expect_error([&] { ctx_->run("conv2d_bn_relu", {x, W, c, c, c, c}, {y}, eps); }, ErrorCode::InvalidArgument,
               {"conv2d_bn_relu", "'eps'"}, y);
  expect_error([&] { ctx_->run("conv2d_bn_relu", {x, W, c, c, t({5}), c}, {y}); }, ErrorCode::Shape,
               {"conv2d_bn_relu", "'bn_mean'"}, y);
  Attrs p;
  p.p = 1.5;
  expect_error([&] { ctx_->run("conv2d_gelu_dropout", {x, W}, {y}, p); }, ErrorCode::InvalidArgument,
               {"conv2d_gelu_dropout", "'p'"}, y);
  expect_error([&] { ctx_->run("depthwise_pointwise", {x, t({4, 2, 3, 3}), t({6, 4, 1, 1})}, {y}); }, ErrorCode::Shape,
               {"depthwise_pointwise", "'W_dw'"}, y);
  expect_error([&] { ctx_->run("depthwise_pointwise", {x, t({4, 1, 3, 3}), t({6, 4, 3, 3})}, {y}); }, ErrorCode::Shape,
               {"depthwise_pointwise", "'W_pw'"}, y);
}

// A composed op runs on a device where all its parts run; otherwise it is Unsupported, naming the part,
// and writes nothing.
TEST_P(Linalg, ComposedOpsReportTheirParts) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    std::string why, part_why;
    const bool parts = ctx_->supports("linear_dropout", dt, &part_why) && ctx_->supports("linear", dt, &part_why);
    EXPECT_EQ(ctx_->supports("ffn", dt, &why), parts) << to_string(dt) << ": " << why;
    if (parts) continue;
    EXPECT_NE(why.find("runs as"), std::string::npos) << why;
    Tensor x = t({2, 4}, dt), W1 = t({6, 4}, dt), b1 = t({6}, dt), W2 = t({4, 6}, dt), b2 = t({4}, dt);
    Tensor y = poisoned({2, 4}, dt);
    expect_error([&] { ctx_->run("ffn", {x, W1, b1, W2, b2}, {y}); }, ErrorCode::Unsupported, {"ffn", "runs as"}, y);
  }
}

// The variant of a composed op names its parts' variants; the same inputs give the same bits twice.
TEST_P(Linalg, FfnVariantAndDeterminism) {
  if (std::string why; !ctx_->supports("linear_dropout", DType::f32, &why)) GTEST_SKIP() << why;
  ValidationCheck vc(*ctx_);
  const OpDef& op = get_op("ffn");
  TestCase tc{"det", {{9, 20}, {36, 20}, {36}, {20, 36}, {20}}, {}, 1};
  tc.attrs.p = 0.4;
  tc.attrs.seed = 99;
  tc.attrs.act = kActSilu;
  check::CaseOptions o;
  o.repeat = true;
  o.check_validation = false;
  const auto r = check::run_case(*ctx_, op, DType::f32, tc, fresh_seed(), o);
  EXPECT_TRUE(r.pass) << r.message;
  EXPECT_NE(r.variant.find("composed(linear_dropout: "), std::string::npos) << r.variant;
  EXPECT_NE(r.variant.find("; linear: "), std::string::npos) << r.variant;
}

INSTANTIATE_TEST_SUITE_P(Devices, Linalg, ::testing::ValuesIn(devices()),
                         [](const ::testing::TestParamInfo<DeviceRef>& i) { return sanitize(i.param.tag); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Linalg);

// ffn and ffn_swiglu with every Vulkan matrix path forced for their parts (portable tiled, few rows /
// split-K, tensor cores where the device has them), dropout on: the masks of every kernel's epilogue
// match the reference's.
TEST(LinalgPaths, FfnOnEachMatrixPath) {
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    for (const std::string tune : {"mm_path=1", "mm_path=3", "mm_path=3,mm_splitk=3", "mm_path=2"}) {
      ContextOptions o = options_for(d);
      o.tuning = tune;
      Context ctx = Context::create(o);
      const bool coopmat = tune == "mm_path=2";  // tensor cores: f16 only, where the device has them
      for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
        if (coopmat && dt != DType::f16) continue;
        TestCase f{"ffn", {{2, 9, 24}, {40, 24}, {40}, {24, 40}, {24}}, {}, 1};
        f.attrs.p = 0.3;
        f.attrs.seed = 5;
        f.attrs.offset = 12;
        f.attrs.act = kActGelu;
        TestCase s{"swiglu", {{17, 24}, {64, 24}, {24, 32}}, {}, 1};
        for (const auto& [name, tc] : {std::pair<std::string, TestCase>{"ffn", f}, {"ffn_swiglu", s}}) {
          const auto r = check::run_case(ctx, get_op(name), dt, tc, fresh_seed());
          if (coopmat && r.message.find("cooperative-matrix path was forced") != std::string::npos) break;  // no tensor cores
          EXPECT_TRUE(r.pass) << name << " " << tune << " " << to_string(dt) << ": " << r.message << " seed " << r.seed;
          EXPECT_NE(r.variant.find(tune == "mm_path=1" ? "portable" : coopmat ? "coopmat" : "gemv"), std::string::npos)
              << r.variant;
        }
      }
    }
  }
}

// Grids capped at a few workgroups (KF_TUNE max_groups): the convolution loops over its pixel tiles and
// embedding over its packs; results still match the reference, and twice the same bits.
TEST(LinalgPaths, GridCapLoops) {
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    ContextOptions o = options_for(d);
    o.tuning = "max_groups=2";
    Context ctx = Context::create(o);
    Attrs a;
    a.padding = {1, 1};
    a.act = kActRelu;
    const std::vector<std::pair<std::string, TestCase>> cases = {
        {"conv2d", {"cap", {{2, 5, 13, 11}, {9, 5, 3, 3}, {9}}, a, 1}},
        {"conv2d_bn_relu", {"cap", {{1, 3, 17, 17}, {4, 3, 3, 3}, {4}, {4}, {4}, {4}}, a, 1}},
        {"embedding", {"cap", {{3, 70}, {40, 24}, {70, 24}}, {}, 1}}};
    for (DType dt : {DType::f32, DType::f16}) {
      for (const auto& [name, tc] : cases) {
        check::CaseOptions co;
        co.repeat = true;
        const auto r = check::run_case(ctx, get_op(name), dt, tc, fresh_seed(), co);
        EXPECT_TRUE(r.pass) << name << " " << to_string(dt) << ": " << r.message << " seed " << r.seed;
      }
    }
  }
}

// The convolutions' tensor-core path (KF_TUNE conv_path=2: im2col, then mm_coopmat.comp with the output
// channel as the row): every registry case it takes (f16, one group, C kh kw a multiple of 8) and cases
// with several 128-channel tiles, strides, dilation, the folded batch norm and the dropout epilogue;
// skipped where the device has no NV cooperative matrices.
TEST(LinalgPaths, ConvTensorCores) {
  int checked = 0;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    ContextOptions o = options_for(d);
    o.tuning = "conv_path=2";
    Context ctx = Context::create(o);
    if (!ctx.device().caps.coopmat_nv) continue;
    ValidationCheck vc(ctx);
    Attrs s2;
    s2.stride = {2, 1};
    s2.padding = {1, 2};
    s2.dilation = {1, 2};
    s2.act = kActSilu;
    Attrs bnp;
    bnp.padding = {1, 1};
    Attrs drop;
    drop.padding = {1, 1};
    drop.p = 0.3;
    drop.seed = 9;
    drop.offset = 100;
    std::vector<std::pair<std::string, TestCase>> cases = {
        {"conv2d", {"c8_k3_s2x1_p1x2_d1x2_silu", {{3, 8, 13, 11}, {20, 8, 3, 3}, {20}}, s2, 1}},
        {"conv2d", {"pointwise_c16_o130", {{2, 16, 9, 7}, {130, 16, 1, 1}, {130}}, {}, 1}},
        {"conv2d", {"pointwise_c16_o40_8x8_direct_relu", {{3, 16, 8, 8}, {40, 16, 1, 1}, {40}}, {.act = kActRelu}, 1}},
        {"conv2d_bn_relu", {"c16_o20_k3_bias", {{2, 16, 10, 10}, {20, 16, 3, 3}, {20}, {20}, {20}, {20}, {20}}, bnp, 1}},
        {"conv2d_gelu_dropout", {"c8_o12_k3_p0.3", {{2, 8, 9, 9}, {12, 8, 3, 3}, {12}}, drop, 1}},
    };
    for (const char* name : {"conv2d", "conv2d_bn_relu", "conv2d_gelu_dropout"})
      for (const TestCase& tc : get_op(name).tests) cases.push_back({name, tc});
    for (const auto& [name, tc] : cases) {
      check::CaseOptions co;
      co.repeat = true;
      const auto r = check::run_case(ctx, get_op(name), DType::f16, tc, fresh_seed(), co);
      if (!r.pass && r.message.find("tensor-core path was forced") != std::string::npos) continue;  // not its case
      ++checked;
      EXPECT_TRUE(r.pass) << name << " " << tc.label << ": " << r.message << " seed " << r.seed;
      EXPECT_NE(r.variant.find("coopmat"), std::string::npos) << name << " " << tc.label << ": " << r.variant;
    }
  }
  if (checked == 0) GTEST_SKIP() << "no Vulkan device with NV cooperative matrices";
}

// A forced tensor-core path that cannot serve a call (f32 here, on any device) is an Unsupported
// kf::Error naming the op, the knob and the reason; nothing is written and the context goes on working.
TEST(LinalgPaths, ForcedTensorCorePathsRejectCleanly) {
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    ContextOptions o = options_for(d);
    o.tuning = "conv_path=2,attn_path=2";
    Context ctx = Context::create(o);
    const auto filled = [&](const Shape& s) { return ctx.from_host(s, DType::f32, std::vector<double>(numel(s), 0.25)); };
    const auto poisoned = [&](const Shape& s) {
      Tensor y = ctx.empty(s, DType::f32);
      y.fill_bytes(kPoison);
      return y;
    };
    Tensor x = filled({1, 8, 5, 5}), W = filled({4, 8, 3, 3}), y = poisoned({1, 4, 3, 3});
    expect_rejected(ctx, [&] { ctx.run("conv2d", {x, W}, {y}); }, ErrorCode::Unsupported,
                    {"conv2d", "conv_path=2", "f16"}, {y});
    Tensor q = filled({1, 2, 5, 16}), k = filled({1, 2, 7, 16}), o2 = poisoned({1, 2, 5, 16});
    expect_rejected(ctx, [&] { ctx.run("attention", {q, k, k}, {o2}); }, ErrorCode::Unsupported,
                    {"attention", "attn_path=2", "f16 only"}, {o2});
    // The context still runs what the knobs do not force.
    Tensor s = ctx.empty({1, 2, 5, 7}, DType::f32);
    ctx.run("attention_scores", {q, k}, {s});
    const std::vector<float> v = s.to_float();
    EXPECT_NEAR(v[0], 16 * 0.0625 / 4.0, 1e-6);  // 16 products of 0.25^2, scaled by 1/sqrt(16)
  }
}

}  // namespace
}  // namespace kf::test
