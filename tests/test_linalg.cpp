// docs/ops.md section 4 beyond the registry cases: the argument checks of linear_dropout, ffn, ffn_swiglu
// (and, as they land, embedding and the convolutions), the composed ops' paths and variants, and
// determinism.
#include <functional>
#include <iostream>

#include "common.hpp"
#include "hal/vulkan/runtime_shader.hpp"
#include "hal/vulkan/spirv_table.hpp"
#include "ops/reference_math.hpp"

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

// Attrs::out_dtype: the output (and the residual) in the output dtype, the bias in the inputs'; other ops
// reject the attribute; nothing is written and the context stays usable. Context::call allocates the
// output in it, and the call runs (CUDA: a product in f32 then the output's dtype; Unsupported only where
// cuBLASLt has no f32-output product for the inputs).
TEST_P(Linalg, OutputDtypeErrors) {
  if (std::string why; !ctx_->supports("linear", DType::f16, &why)) GTEST_SKIP() << why;
  Tensor x = t({3, 8}, DType::f16), W = t({5, 8}, DType::f16), b = t({5}, DType::f16);
  Attrs a;
  a.out_dtype = DType::f32;
  Tensor y16 = poisoned({3, 5}, DType::f16), y = poisoned({3, 5});
  expect_error([&] { ctx_->run("linear", {x, W, b}, {y16}, a); }, ErrorCode::DType,
               {"linear", "output 'y'", "f16", "expected f32 (out_dtype)"}, y16);
  expect_error([&] { ctx_->run("linear", {x, W, b, t({3, 5}, DType::f16)}, {y}, a); }, ErrorCode::DType,
               {"linear", "'residual'", "f16", "must be f32"}, y);
  expect_error([&] { ctx_->run("linear", {x, W, t({5})}, {y}, a); }, ErrorCode::DType, {"linear", "'bias'", "f32"}, y);
  expect_error([&] { ctx_->run("matmul", {x, t({8, 5}, DType::f16), Tensor(), t({3, 5}, DType::bf16)}, {y}, a); },
               ErrorCode::DType, {"matmul", "'residual'", "bf16"}, y);
  Tensor z = poisoned({3, 8}, DType::f16);
  expect_error([&] { ctx_->run("add_relu", {x, x}, {z}, a); }, ErrorCode::InvalidArgument, {"add_relu", "'out_dtype'"}, z);
  Attrs bad;
  bad.out_dtype = DType::i32;
  Tensor yi = poisoned({3, 5}, DType::i32);
  expect_error([&] { ctx_->run("linear", {x, W}, {yi}, bad); }, ErrorCode::DType, {"linear", "'out_dtype'", "i32"}, yi);
  // The context is still usable: the same call, well formed.
  std::vector<Tensor> out;
  try {
    out = ctx_->call("linear", {x, W, b, t({3, 5})}, a);
  } catch (const Error& e) {
    ASSERT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
    if (std::string(e.what()).find("no shader compiler") != std::string::npos) GTEST_SKIP() << e.what();
    EXPECT_TRUE(ctx_->backend() == "cuda" || ctx_->backend() == "hip") << e.what();
    EXPECT_NE(std::string(e.what()).find("f32-output product"), std::string::npos) << e.what();
    return;
  }
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype(), DType::f32);
  EXPECT_NE(ctx_->last_variant().find(ctx_->backend() == "cpu" ? "cpu" : ",out-f32"), std::string::npos)
      << ctx_->last_variant();
}

INSTANTIATE_TEST_SUITE_P(Devices, Linalg, ::testing::ValuesIn(devices()),
                         [](const ::testing::TestParamInfo<DeviceRef>& i) { return sanitize(i.param.tag); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Linalg);

// Each Vulkan device with each matrix path forced (KF_TUNE): portable tiled, few rows, few rows with
// split-K, tensor cores (which refuse where the device has none).
void for_each_matrix_path(const std::function<void(Context&, const std::string&)>& body) {
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    for (const std::string tune : {"mm_path=1", "mm_path=3", "mm_path=3,mm_splitk=3", "mm_path=2"}) {
      ContextOptions o = options_for(d);
      o.tuning = tune;
      Context ctx = Context::create(o);
      body(ctx, tune);
    }
  }
}

// ffn and ffn_swiglu with every Vulkan matrix path forced for their parts (portable tiled, few rows /
// split-K, tensor cores where the device has them), dropout on: the masks of every kernel's epilogue
// match the reference's.
TEST(LinalgPaths, FfnOnEachMatrixPath) {
  for_each_matrix_path([](Context& ctx, const std::string& tune) {
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
  });
}

// Attrs::out_dtype on each Vulkan matrix path (tiled, few rows, split-K, tensor cores where the device
// has them) for every pair of different input and output dtypes, within the output dtype's tolerance: an
// f32 output of 16-bit inputs must hold f32's precision (a store rounded to f16 first fails it), bias and
// residual included. The registry's out_* cases cover the automatic choice.
TEST(LinalgPaths, OutputDtypeOnEachMatrixPath) {
  const std::vector<DType> dts = {DType::f32, DType::f16, DType::bf16};
  for_each_matrix_path([&](Context& ctx, const std::string& tune) {
    const bool coopmat = tune == "mm_path=2", gemv = tune.rfind("mm_path=3", 0) == 0;
    bool no_tensor_cores = false;
    for (DType in : dts) {
      for (DType out : dts) {
        if (in == out || (coopmat && in == DType::f32) || no_tensor_cores) continue;
        TestCase lin{"linear", {{5, 64}, {48, 64}, {48}, {5, 48}}, {}, 1};
        lin.attrs.act = kActGelu;
        lin.attrs.out_dtype = out;
        TestCase mm{"matmul", {{2, 16, 32}, {2, 32, 24}, {24}, {2, 16, 24}}, {}, 1};
        mm.attrs.act = kActSilu;
        mm.attrs.out_dtype = out;
        for (const auto& [name, tc] : {std::pair<std::string, TestCase>{"linear", lin}, {"matmul", mm}}) {
          if (gemv && name == "matmul") continue;  // the few-rows kernel serves linear's layout only
          const auto r = check::run_case(ctx, get_op(name), in, tc, fresh_seed());
          if (coopmat && r.message.find("cooperative-matrix path was forced") != std::string::npos) {
            no_tensor_cores = true;
            break;
          }
          const std::string what = name + " " + tune + " " + to_string(in) + " -> " + to_string(out);
          if (r.unsupported && r.message.find("no shader compiler") != std::string::npos)
            GTEST_SKIP() << "a build without shaderc has no run-time variants: " << r.message;
          EXPECT_TRUE(r.pass) << what << ": " << r.message << " seed " << r.seed;
          EXPECT_NE(r.variant.find(coopmat ? "coopmat" : gemv ? "gemv" : "portable"), std::string::npos) << what << ": " << r.variant;
          EXPECT_NE(r.variant.find(",out-" + std::string(to_string(out))), std::string::npos) << what << ": " << r.variant;
        }
      }
    }
  });
}

// Attrs::out_dtype's Vulkan kernels are built at run time (ODT_<dtype> added to a matrix variant's
// definitions): every matrix variant of this build, the tensor-core ones included, compiles with each
// output dtype other than its own, so that a GPU's first such call never meets a shader that lavapipe,
// which has no cooperative matrices, never compiled.
TEST(LinalgPaths, OutputDtypeVariantsCompile) {
  namespace vk = kf::hal::vk;
  int compiled = 0;
  for (size_t k = 0; k < vk::kSpirvTableSize; ++k) {
    const vk::SpirvEntry& e = vk::kSpirvTable[k];
    const std::string src = e.source, defs = e.defines;
    if (src != "mm.comp" && src != "mm_gemv.comp" && src != "mm_coopmat.comp") continue;
    if (src == "mm_coopmat.comp" && std::string(e.name).rfind("mm_coopmat_peak", 0) == 0) continue;
    const vk::Defines base = vk::parse_defines(defs);
    // The variant's own output dtype: its storage dtype (mm_coopmat: f16, or bf16 with OUT_BF16).
    const auto has = [&](const std::string& n) { return ("," + defs + ",").find("," + n + ",") != std::string::npos; };
    // The KHR forms go through their NV form and a rewrite (runtime_shader.hpp): test_spirv_khr checks
    // representative ones (all of them here would take long on CI).
    if (has("KF_COOPMAT_KHR")) continue;
    const std::string own = src == "mm_coopmat.comp" ? (has("OUT_BF16") ? "BF16" : "F16")
                            : has("DT_F16")          ? "F16"
                            : has("DT_BF16")         ? "BF16"
                                                     : "F32";
    for (const std::string odt : {"F32", "F16", "BF16"}) {
      if (odt == own) continue;
      auto all = base;
      all.emplace_back("ODT_" + odt, "");
      try {
        EXPECT_GT(vk::compile_shader(src, all, std::string(e.name) + " with ODT_" + odt).size(), 5u);
        ++compiled;
      } catch (const Error& err) {
        if (err.code() == ErrorCode::Unsupported) GTEST_SKIP() << err.what();  // a build without shaderc
        ADD_FAILURE() << e.name << " with ODT_" << odt << ": " << err.what();
      }
    }
  }
  std::cout << compiled << " matrix variants compiled with another output dtype\n";
  EXPECT_GE(compiled, 12) << "the mm / mm_gemv variants of f32, f16 and bf16, each with two other outputs";
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
// channel as the row): every registry case it takes (f16, and bf16 where the products take it natively;
// one group, C kh kw a multiple of 8) and cases
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
    // bf16 too where the products take it natively (the same kernels on bf16 operands).
    std::vector<DType> dtypes = {DType::f16};
    if (ctx.device().caps.coopmat_bf16 == "native") dtypes.push_back(DType::bf16);
    for (DType t : dtypes)
      for (const auto& [name, tc] : cases) {
        check::CaseOptions co;
        co.repeat = true;
        const auto r = check::run_case(ctx, get_op(name), t, tc, fresh_seed(), co);
        if (!r.pass && r.message.find("tensor-core path was forced") != std::string::npos) continue;  // not its case
        ++checked;
        EXPECT_TRUE(r.pass) << name << " " << tc.label << " " << to_string(t) << ": " << r.message << " seed " << r.seed;
        EXPECT_NE(r.variant.find("coopmat"), std::string::npos) << name << " " << tc.label << ": " << r.variant;
        if (t == DType::bf16) {
          EXPECT_NE(r.variant.find("bf16-native"), std::string::npos) << r.variant;
        }
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

// A call the backend's supports() accepts is dispatched: the Vulkan checks that depend only on the call
// (a path forced by KF_TUNE that does not apply, a kernel's size limits) refuse it before dispatch, with
// the core's "cannot run on" message and nothing written; the forced paths that apply run.
TEST(LinalgPaths, ForcedPathsRefusedBySupportsNotDispatch) {
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    const auto run_or_refuse = [&](const std::string& tuning, const std::string& what,
                                   const std::function<void(Context&, std::vector<Tensor>&)>& call, bool must_run) {
      SCOPED_TRACE(what + " with KF_TUNE " + tuning);
      ContextOptions o = options_for(d);
      o.tuning = tuning;
      Context ctx = Context::create(o);
      std::vector<Tensor> outs;
      try {
        call(ctx, outs);
        ctx.synchronize();
      } catch (const Error& e) {
        EXPECT_FALSE(must_run) << e.what();
        EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
        EXPECT_NE(std::string(e.what()).find("cannot run on"), std::string::npos)
            << "refused by dispatch, not by supports: " << e.what();
        for (const Tensor& t : outs) {
          size_t changed = 0;
          for (auto b : raw_bytes(t)) changed += b != kPoison;
          EXPECT_EQ(changed, 0u) << "the refused call wrote " << changed << " bytes";
        }
      }
    };
    const auto filled = [](Context& ctx, const Shape& s) {
      return ctx.from_host(s, DType::f32, std::vector<double>(numel(s), 0.25));
    };
    const auto poisoned = [](Context& ctx, const Shape& s, std::vector<Tensor>& outs) {
      Tensor y = ctx.empty(s, DType::f32);
      y.fill_bytes(kPoison);
      outs.push_back(y);
      return y;
    };
    // The few-rows kernel serves linear's W [N, K] only: matmul refused, linear run.
    run_or_refuse("mm_path=3", "matmul", [&](Context& ctx, std::vector<Tensor>& outs) {
      ctx.run("matmul", {filled(ctx, {4, 8}), filled(ctx, {8, 16})}, {poisoned(ctx, {4, 16}, outs)});
    }, false);
    run_or_refuse("mm_path=3", "linear", [&](Context& ctx, std::vector<Tensor>& outs) {
      ctx.run("linear", {filled(ctx, {4, 8}), filled(ctx, {16, 8})}, {poisoned(ctx, {4, 16}, outs)});
    }, true);
    // The tensor cores take f16 and bf16 only: an f32 product is refused.
    run_or_refuse("mm_path=2", "linear f32", [&](Context& ctx, std::vector<Tensor>& outs) {
      ctx.run("linear", {filled(ctx, {32, 64}), filled(ctx, {16, 64})}, {poisoned(ctx, {32, 16}, outs)});
    }, false);
    run_or_refuse("conv_path=2", "conv2d f32", [&](Context& ctx, std::vector<Tensor>& outs) {
      ctx.run("conv2d", {filled(ctx, {1, 8, 5, 5}), filled(ctx, {4, 8, 3, 3})}, {poisoned(ctx, {1, 4, 3, 3}, outs)});
    }, false);
    run_or_refuse("conv_path=1", "conv2d f32", [&](Context& ctx, std::vector<Tensor>& outs) {
      ctx.run("conv2d", {filled(ctx, {1, 8, 5, 5}), filled(ctx, {4, 8, 3, 3})}, {poisoned(ctx, {1, 4, 3, 3}, outs)});
    }, true);
    // The decode kernel takes one query row per sequence: Sq = 5 refused; Sq = 1 runs where the device has
    // what it needs (else supports says why).
    run_or_refuse("attn_decode=2", "attention Sq=5", [&](Context& ctx, std::vector<Tensor>& outs) {
      Tensor k = filled(ctx, {1, 2, 7, 16});
      ctx.run("attention", {filled(ctx, {1, 2, 5, 16}), k, k}, {poisoned(ctx, {1, 2, 5, 16}, outs)});
    }, false);
    run_or_refuse("attn_decode=2", "attention Sq=1", [&](Context& ctx, std::vector<Tensor>& outs) {
      Tensor k = filled(ctx, {1, 2, 7, 16});
      ctx.run("attention", {filled(ctx, {1, 2, 1, 16}), k, k}, {poisoned(ctx, {1, 2, 1, 16}, outs)});
    }, false);
    // The attention's tensor-core paths take f16 and bf16 only: forced on f32, the forward and the
    // backward are refused; attn_path=1 (the portable kernels) runs.
    run_or_refuse("attn_path=2", "attention f32", [&](Context& ctx, std::vector<Tensor>& outs) {
      Tensor k = filled(ctx, {1, 2, 7, 16});
      ctx.run("attention", {filled(ctx, {1, 2, 40, 16}), k, k}, {poisoned(ctx, {1, 2, 40, 16}, outs)});
    }, false);
    run_or_refuse("attn_path=1", "attention f32", [&](Context& ctx, std::vector<Tensor>& outs) {
      Tensor k = filled(ctx, {1, 2, 7, 16});
      ctx.run("attention", {filled(ctx, {1, 2, 40, 16}), k, k}, {poisoned(ctx, {1, 2, 40, 16}, outs)});
    }, true);
    for (const char* path : {"attn_path=2", "attn_path=1"})
      run_or_refuse(path, "attention_backward f32", [&](Context& ctx, std::vector<Tensor>& outs) {
        Tensor q = filled(ctx, {1, 2, 3, 16}), kv = filled(ctx, {1, 2, 5, 16});
        Tensor lse = ctx.from_host({1, 2, 3}, DType::f32, std::vector<double>(6, 1.0));
        ctx.run("attention_backward", {q, kv, kv, q, q, lse},
                {poisoned(ctx, {1, 2, 3, 16}, outs), poisoned(ctx, {1, 2, 5, 16}, outs), poisoned(ctx, {1, 2, 5, 16}, outs)});
      }, std::string(path) == "attn_path=1");
    // linear_cross_entropy's backward computes d h as a matmul, which the forced few-rows path cannot take.
    run_or_refuse("mm_path=3", "linear_cross_entropy_backward", [&](Context& ctx, std::vector<Tensor>& outs) {
      Tensor t = ctx.from_host({4}, DType::i32, {0, 1, 2, 3});
      ctx.run("linear_cross_entropy_backward", {filled(ctx, {4, 8}), filled(ctx, {16, 8}), t},
              {poisoned(ctx, {}, outs), poisoned(ctx, {4, 8}, outs), poisoned(ctx, {16, 8}, outs)});
    }, false);
  }
}

// ---- The CUDA backend's convolutions (hal/cuda/conv.cu): each path forced (KF_TUNE conv_path=1 the
// direct kernel, conv_path=2 im2col + cuBLASLt) on every registry case of the convolutions and on awkward
// shapes (odd sizes, several tiles of pixels, channels and k, stride 2, dilation 2, groups 2, depthwise,
// 1 x 1 with stride or padding), in f32, f16 and bf16, against the float64 reference within docs/ops.md's
// tolerances and twice for the same bits; the automatic choice (with several column-matrix chunks); and
// conv2d_gelu_dropout's mask element by element against the generator and the CPU backend. Skipped,
// saying why, where the build or the machine has no usable CUDA device.

Context tuned_context(const DeviceRef& d, const std::string& tuning) {
  ContextOptions o = options_for(d);
  o.tuning = tuning;
  return Context::create(o);
}

Attrs conv_attrs(std::array<int64_t, 2> stride, std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation,
                 int64_t groups, int64_t act = kActNone) {
  Attrs a;
  a.stride = stride, a.padding = padding, a.dilation = dilation, a.groups = groups, a.act = act;
  return a;
}

// The registry's cases of the convolutions (depthwise_pointwise too, unless `plain`) and awkward ones.
std::vector<std::pair<std::string, TestCase>> cuda_conv_cases(bool plain) {
  std::vector<std::pair<std::string, TestCase>> cases;
  for (const char* name : {"conv2d", "conv2d_bn_relu", "conv2d_gelu_dropout", "depthwise_pointwise"}) {
    if (plain && std::string(name) == "depthwise_pointwise") continue;
    for (const TestCase& tc : get_op(name).tests) cases.push_back({name, tc});
  }
  Attrs bn_eps = conv_attrs({1, 1}, {1, 1}, {1, 1}, 1);
  bn_eps.eps = 1e-3;
  Attrs drop = conv_attrs({1, 1}, {1, 1}, {1, 1}, 1);
  drop.p = 0.3, drop.seed = 9, drop.offset = 100;
  Attrs drop_dw = conv_attrs({2, 1}, {1, 0}, {1, 2}, 6);
  drop_dw.p = 0.5, drop_dw.seed = 3, drop_dw.offset = (uint64_t(1) << 32) + 7;
  const std::vector<std::pair<std::string, TestCase>> more = {
      {"conv2d", {"n3_c5_13x11_o7_k3_pad1_relu", {{3, 5, 13, 11}, {7, 5, 3, 3}, {7}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 1, kActRelu), 1}},
      {"conv2d", {"s2_c6_15x17_o70_k3_pad1_gelu_tanh", {{2, 6, 15, 17}, {70, 6, 3, 3}, {70}}, conv_attrs({2, 2}, {1, 1}, {1, 1}, 1, kActGeluTanh), 1}},
      {"conv2d", {"dil2_c4_12x10_o9_k3_pad2_silu", {{1, 4, 12, 10}, {9, 4, 3, 3}, {9}}, conv_attrs({1, 1}, {2, 2}, {2, 2}, 1, kActSilu), 1}},
      {"conv2d", {"g2_c8_9x11_o6_k3_s2x1_pad1", {{2, 8, 9, 11}, {6, 4, 3, 3}, {6}}, conv_attrs({2, 1}, {1, 1}, {1, 1}, 2), 1}},
      {"conv2d", {"g2_c8_9x11_o40_k3_s2_dil2", {{2, 8, 9, 11}, {40, 4, 3, 3}, {}}, conv_attrs({2, 2}, {2, 1}, {2, 2}, 2, kActGelu), 1}},
      {"conv2d", {"depthwise_c32_10x10_k3_pad1_relu", {{2, 32, 10, 10}, {32, 1, 3, 3}, {32}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 32, kActRelu), 1}},
      {"conv2d", {"n2_c3_40x37_o20_k5x3_pad2x1", {{2, 3, 40, 37}, {20, 3, 5, 3}, {20}}, conv_attrs({1, 1}, {2, 1}, {1, 1}, 1), 1}},
      {"conv2d", {"c37_8x8_o40_k3_nobias", {{1, 37, 8, 8}, {40, 37, 3, 3}, {}}, conv_attrs({1, 1}, {0, 0}, {1, 1}, 1), 1}},
      {"conv2d", {"pointwise_c16_9x9_o24_s2", {{2, 16, 9, 9}, {24, 16, 1, 1}, {24}}, conv_attrs({2, 2}, {0, 0}, {1, 1}, 1), 1}},
      {"conv2d", {"pointwise_c8_6x6_o12_pad1", {{1, 8, 6, 6}, {12, 8, 1, 1}, {12}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 1), 1}},
      {"conv2d", {"pointwise_c16_7x5_o130_silu", {{3, 16, 7, 5}, {130, 16, 1, 1}, {130}}, conv_attrs({1, 1}, {0, 0}, {1, 1}, 1, kActSilu), 1}},
      {"conv2d_bn_relu", {"g2_c8_11x9_o10_s2_bias", {{2, 8, 11, 9}, {10, 4, 3, 3}, {10}, {10}, {10}, {10}, {10}}, conv_attrs({2, 2}, {1, 1}, {1, 1}, 2), 1}},
      {"conv2d_bn_relu", {"c16_10x10_o40_k3_bias_eps1e-3", {{2, 16, 10, 10}, {40, 16, 3, 3}, {40}, {40}, {40}, {40}, {40}}, bn_eps, 1}},
      {"conv2d_gelu_dropout", {"c8_9x9_o70_k3_p0.3", {{2, 8, 9, 9}, {70, 8, 3, 3}, {70}}, drop, 1}},
      {"conv2d_gelu_dropout", {"depthwise_c6_9x8_p0.5_offset_hi", {{1, 6, 9, 8}, {6, 1, 3, 2}, {6}}, drop_dw, 1}},
  };
  cases.insert(cases.end(), more.begin(), more.end());
  return cases;
}

// The groups of a case as the convolution kernels see them (depthwise_pointwise: its depthwise part).
int64_t case_groups(const std::string& name, const TestCase& tc) {
  return name == "depthwise_pointwise" ? tc.inputs[0][1] : tc.attrs.groups;
}

TEST(ConvCuda, DirectKernelOnEveryCase) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  for (const auto& d : devs) {
    Context ctx = tuned_context(d, "conv_path=1");
    for (DType t : {DType::f32, DType::f16, DType::bf16})
      for (const auto& [name, tc] : cuda_conv_cases(false)) {
        check::CaseOptions co;
        co.repeat = true;
        const auto r = check::run_case(ctx, get_op(name), t, tc, fresh_seed(), co);
        EXPECT_TRUE(r.pass) << name << " " << tc.label << " " << to_string(t) << " (" << r.variant << "): " << r.message
                            << " seed " << r.seed;
        EXPECT_NE(r.variant.find("conv/direct,tile="), std::string::npos) << name << " " << tc.label << ": " << r.variant;
        EXPECT_EQ(r.variant.find("cublaslt"), std::string::npos) << name << " " << tc.label << ": " << r.variant;
      }
  }
}

// conv_path=2: every one-group case through im2col (or none for 1 x 1 stride-1 unpadded) + cuBLASLt + the
// epilogue kernel; cases with groups are refused (Unsupported naming the knob and the reason).
TEST(ConvCuda, Im2colCublasLtOnEveryOneGroupCase) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  int checked = 0, refused = 0;
  for (const auto& d : devs) {
    Context ctx = tuned_context(d, "conv_path=2");
    if (std::string why; !ctx.supports("linear", DType::f32, &why)) GTEST_SKIP() << d.name << ": " << why;
    for (DType t : {DType::f32, DType::f16, DType::bf16})
      for (const auto& [name, tc] : cuda_conv_cases(true)) {
        check::CaseOptions co;
        co.repeat = true;
        const auto r = check::run_case(ctx, get_op(name), t, tc, fresh_seed(), co);
        if (case_groups(name, tc) != 1) {
          ++refused;
          EXPECT_FALSE(r.pass) << name << " " << tc.label << ": groups " << tc.attrs.groups << " ran on " << r.variant;
          EXPECT_NE(r.message.find("conv_path=2"), std::string::npos) << r.message;
          EXPECT_NE(r.message.find("one group"), std::string::npos) << r.message;
          continue;
        }
        ++checked;
        EXPECT_TRUE(r.pass) << name << " " << tc.label << " " << to_string(t) << " (" << r.variant << "): " << r.message
                            << " seed " << r.seed;
        EXPECT_NE(r.variant.find("conv/im2col-cublaslt"), std::string::npos) << name << " " << tc.label << ": " << r.variant;
        const Shape& ws = tc.inputs[1];
        const Attrs& a = tc.attrs;
        const bool one_by_one = ws[2] == 1 && ws[3] == 1 && a.stride[0] == 1 && a.stride[1] == 1 && a.padding[0] == 0 &&
                                a.padding[1] == 0;
        EXPECT_EQ(r.variant.find("1x1-no-im2col") != std::string::npos, one_by_one) << tc.label << ": " << r.variant;
      }
    // The context goes on working after a refusal.
    const auto r = check::run_case(ctx, get_op("conv2d"), DType::f32, get_op("conv2d").tests[1], fresh_seed());
    EXPECT_TRUE(r.pass) << r.message;
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(refused, 0);
}

// The automatic choice: one group takes cuBLASLt where it is loaded, groups the direct kernel, depthwise its
// own kernel (depthwise_pointwise: depthwise, then cuBLASLt); a column matrix over 512 MiB is built in
// chunks of images.
TEST(ConvCuda, AutomaticChoice) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  for (const auto& d : devs) {
    Context& ctx = context_for(d);
    const bool lt = ctx.supports("linear", DType::f32);
    const auto run = [&](const std::string& name, const TestCase& tc, DType t) {
      check::CaseOptions co;
      co.repeat = true;
      const auto r = check::run_case(ctx, get_op(name), t, tc, fresh_seed(), co);
      EXPECT_TRUE(r.pass) << name << " " << tc.label << " " << to_string(t) << " (" << r.variant << "): " << r.message
                          << " seed " << r.seed;
      return r.variant;
    };
    const auto& conv = get_op("conv2d").tests;
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      const std::string one = run("conv2d", conv[1], t), grouped = run("conv2d", conv[2], t);
      EXPECT_NE(one.find(lt ? "conv/im2col-cublaslt,chunk=" : "conv/direct"), std::string::npos) << one;
      EXPECT_NE(grouped.find("conv/direct"), std::string::npos) << grouped;
      const std::string pw = run("conv2d", conv[4], t);  // pointwise_c8_9x9_o70
      EXPECT_NE(pw.find(lt ? "conv/im2col-cublaslt,1x1-no-im2col" : "conv/direct"), std::string::npos) << pw;
      if (t != DType::f32) {  // C KH KW a multiple of 8: the implicit GEMM on tensor cores
        for (const auto& tc : conv)
          if (tc.label.rfind("c8_11x13", 0) == 0 || tc.label.rfind("c16_10x9", 0) == 0) {
            const std::string v = run("conv2d", tc, t);
            EXPECT_NE(v.find("conv/implicit-mma"), std::string::npos) << tc.label << ": " << v;
          }
      }
      const std::string dp = run("depthwise_pointwise", get_op("depthwise_pointwise").tests[0], t);
      EXPECT_NE(dp.find("conv/depthwise,tile="), std::string::npos) << dp;  // its depthwise part
      if (lt) {
        EXPECT_NE(dp.find("conv/im2col-cublaslt"), std::string::npos) << dp;
      }
    }
    if (lt) {
      // f32 column matrices of 576 x 65536 x 4 bytes (151 MB) per image: 3 images a chunk, 2 chunks.
      TestCase big{"n5_c64_256x256_o8_k3_pad1_relu", {{5, 64, 256, 256}, {8, 64, 3, 3}, {8}},
                   conv_attrs({1, 1}, {1, 1}, {1, 1}, 1, kActRelu), 1};
      const std::string v = run("conv2d", big, DType::f32);
      EXPECT_NE(v.find("chunk=3"), std::string::npos) << v;
    }
  }
}

// conv2d_gelu_dropout keeps exactly the elements docs/ops.md's generator keeps at the output's NCHW linear
// index, on both paths, as the CPU backend does: with positive inputs, weights and bias every
// pre-dropout value is positive (gelu > 0), so an output is zero exactly where the mask drops it.
TEST(ConvCuda, DropoutMaskMatchesGeneratorAndCpu) {
  const auto devs = cuda_devices();
  if (devs.empty()) GTEST_SKIP() << no_cuda_reason();
  static Context cpu = Context::create(ContextOptions{.backend = "cpu"});
  struct Geometry {
    Shape x, w;
    Attrs a;
  };
  Attrs g1 = conv_attrs({1, 1}, {1, 1}, {1, 1}, 1);
  Attrs g2 = conv_attrs({2, 1}, {0, 1}, {1, 2}, 2);
  Attrs pw = conv_attrs({1, 1}, {0, 0}, {1, 1}, 1);
  const std::vector<Geometry> geos = {{{2, 3, 7, 9}, {5, 3, 3, 3}, g1},
                                      {{1, 4, 9, 10}, {6, 2, 2, 3}, g2},
                                      {{2, 8, 5, 5}, {70, 8, 1, 1}, pw},
                                      {{3, 16, 12, 11}, {40, 16, 3, 3}, g1}};
  for (const auto& d : devs)
    for (const char* tuning : {"conv_path=1", "conv_path=2"}) {
      Context gpu = tuned_context(d, tuning);
      const bool lt_path = std::string(tuning) == "conv_path=2";
      if (lt_path && !gpu.supports("linear", DType::f32)) continue;  // no cuBLASLt: the direct kernel only
      for (const Geometry& g : geos) {
        if (lt_path && g.a.groups != 1) continue;
        Attrs a = g.a;
        a.p = 0.3;
        a.seed = 0x9e3779b97f4a7c15ull;
        a.offset = 12345;
        const uint32_t thr = ref::dropout_threshold(a.p);
        std::mt19937_64 rng(5);
        std::vector<double> xv = uniform(numel(g.x), 1, rng), wv = uniform(numel(g.w), 1, rng), bv = uniform(g.w[0], 1, rng);
        for (auto* v : {&xv, &wv, &bv})
          for (double& e : *v) e = 0.25 + 0.5 * std::fabs(e);
        std::vector<std::vector<double>> outs;
        for (int which = 0; which < 2; ++which) {
          Context& c = which == 0 ? gpu : cpu;
          Tensor x = c.from_host(g.x, DType::f32, xv), w = c.from_host(g.w, DType::f32, wv);
          Tensor b = c.from_host({g.w[0]}, DType::f32, bv);
          outs.push_back(c.call("conv2d_gelu_dropout", {x, w, b}, a).at(0).to_double());
          if (which == 0) {
            EXPECT_NE(c.last_variant().find(lt_path ? "im2col-cublaslt" : "conv/direct"), std::string::npos) << c.last_variant();
          }
        }
        ASSERT_EQ(outs[0].size(), outs[1].size());
        int64_t zeros = 0, bad = 0;
        for (size_t i = 0; i < outs[0].size(); ++i) {
          const bool keep = ref::dropout_keep(uint64_t(i), a.seed, a.offset, thr);
          zeros += !keep;
          if ((outs[0][i] != 0) != keep || (outs[1][i] != 0) != keep ||
              std::fabs(outs[0][i] - outs[1][i]) > 1e-5 * (1 + std::fabs(outs[1][i]))) {
            if (++bad <= 5)
              ADD_FAILURE() << tuning << " x " << to_string(g.x) << " element " << i << ": keep " << keep << ", cuda "
                            << outs[0][i] << ", cpu " << outs[1][i];
          }
        }
        EXPECT_EQ(bad, 0) << tuning << " x " << to_string(g.x);
        EXPECT_GT(zeros, 0);
        EXPECT_LT(zeros, static_cast<int64_t>(outs[0].size()));
      }
    }
}

}  // namespace
}  // namespace kf::test
