// The matrix products' choice of tensor-core kernels on Vulkan (KF_TUNE coopmat, coopmat_shape;
// docs/backends.md): a device without cooperative matrices (lavapipe in CI) takes the portable kernels and
// says why, in Caps::coopmat_products and in last_variant(); forcing nv or khr where the device cannot run
// them fails at Context::create, naming why; where a device lists KHR shapes, each shape kf has kernels
// for is forced in turn and the products are checked against the float64 reference, and attention and its
// backward on the KHR kernels too. bf16 products (KF_TUNE bf16_coopmat): native bf16 cooperative matrices
// where the device and the build have them, else scaled f16, saying why; native forced where it cannot
// run fails at Context::create; where it runs, the products and ffn against the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <random>

#include "check/conformance.hpp"
#include "core/context_impl.hpp"
#include "hal/vulkan/coopmat.hpp"
#include "hal/vulkan/device.hpp"
#include "hal/vulkan/runtime_shader.hpp"
#include "hal/vulkan/spirv_table.hpp"
#include "kf/kf.hpp"
#include "ops/registry.hpp"
#include "product_cases.hpp"

namespace kf {
namespace {

using test::ProductCase;

using test::vulkan_devices;

// Debian 12's validation layer (1.3.239) predates VK_KHR_cooperative_matrix: it reports the extension's
// structures and SPIR-V as errors, so contexts that may take the KHR path open without it.
Context open(const DeviceEntry& d, const std::string& tuning, bool validation = true) {
  ContextOptions o;
  o.backend = "vulkan";
  o.device = std::to_string(d.info.index);
  o.validation = validation;
  o.tuning = tuning;
  return Context::create(o);
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::vector<ProductCase>& kCases = test::kProductCases;

check::CaseResult run(Context& ctx, const ProductCase& c, DType t) {
  TestCase tc{"coopmat", c.shapes, {}, 1};
  tc.attrs.act = c.act;
  return check::run_case(ctx, get_op(c.op), t, tc, check::fresh_seed());
}

// A KF_TUNE value the options table refuses: InvalidArgument naming the knob, before any device opens.
void expect_refused(const char* tuning, const char* knob) {
  try {
    Context::create(ContextOptions{.backend = "cpu", .tuning = tuning});
    ADD_FAILURE() << tuning << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_TRUE(has(e.what(), knob)) << e.what();
  }
}

// Without cooperative matrices: the portable kernels, and the reason where a tensor-core kernel would
// have served (f16, bf16); none for f32, which no tensor-core kernel takes.
TEST(Coopmat, NoneSaysWhy) {
  if (vulkan_devices().empty()) GTEST_SKIP() << "no Vulkan device";
  int checked = 0;
  for (const auto& d : vulkan_devices()) {
    Context ctx = open(d, "");
    const Caps& c = ctx.device().caps;
    EXPECT_FALSE(c.coopmat_products.empty()) << d.info.name;
    if (!c.coopmat_khr) {
      EXPECT_TRUE(c.coopmat_khr_shapes.empty()) << d.info.name;
    }
    if (c.coopmat_nv || c.coopmat_khr) continue;
    ++checked;
    EXPECT_EQ(c.coopmat_products, "none: NV: the device lacks VK_NV_cooperative_matrix; KHR: the device lacks "
                                  "VK_KHR_cooperative_matrix");
    for (DType t : {DType::f16, DType::bf16, DType::f32}) {
      const auto r = run(ctx, kCases[0], t);
      EXPECT_TRUE(r.pass) << d.info.name << " " << to_string(t) << ": " << r.message;
      EXPECT_TRUE(has(r.variant, "portable-tiled")) << r.variant;
      EXPECT_EQ(has(r.variant, "(no tensor cores: NV: the device lacks VK_NV_cooperative_matrix"), t != DType::f32)
          << r.variant;
    }
  }
  if (!checked) GTEST_SKIP() << "every Vulkan device has cooperative matrices";
}

// coopmat=portable: never the tensor cores, saying so; a bad value is refused before any device opens.
TEST(Coopmat, PortableForced) {
  for (const auto& d : vulkan_devices()) {
    Context ctx = open(d, "coopmat=portable");
    EXPECT_EQ(ctx.device().caps.coopmat_products, "none: KF_TUNE coopmat=portable");
    for (DType t : {DType::f16, DType::bf16}) {
      const auto r = run(ctx, kCases[4], t);
      EXPECT_TRUE(r.pass) << d.info.name << " " << to_string(t) << ": " << r.message;
      EXPECT_TRUE(has(r.variant, "portable-tiled-64x64 (no tensor cores: KF_TUNE coopmat=portable)")) << r.variant;
    }
  }
  for (const char* bad : {"coopmat=amd", "coopmat_shape=8x8x16", "coopmat="}) expect_refused(bad, "coopmat");
}

// nv or khr forced: the device runs that path for its products, or Context::create raises Unsupported
// naming the knob, the device and why (a device without cooperative matrices: always).
TEST(Coopmat, ForcedMissingFailsAtCreate) {
  if (vulkan_devices().empty()) GTEST_SKIP() << "no Vulkan device";
  for (const auto& d : vulkan_devices()) {
    const bool none = open(d, "").device().caps.coopmat_products.rfind("none: ", 0) == 0;
    for (const std::string path : {"nv", "khr"}) {
      try {
        Context ctx = open(d, "coopmat=" + path, path == "nv");
        EXPECT_FALSE(none) << d.info.name << ": coopmat=" << path << " opened on a device without tensor cores";
        EXPECT_EQ(ctx.device().caps.coopmat_products.substr(0, path.size()), path);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
        EXPECT_TRUE(has(e.what(), "KF_TUNE coopmat=" + path + ": " + d.info.name)) << e.what();
        EXPECT_TRUE(has(e.what(), path == "nv" ? "NV: " : "KHR: ")) << e.what();
        if (none) {
          EXPECT_TRUE(has(e.what(), path == "nv" ? "VK_NV_cooperative_matrix" : "VK_KHR_cooperative_matrix")) << e.what();
        }
      }
    }
  }
}

// Every KHR shape kf has kernels for, forced one at a time where the device lists it (an H100: 16x16x16,
// 16x8x16, 16x8x8; Intel: 8x16x16): linear and matmul in f16 and bf16 against the float64 reference.
TEST(Coopmat, KhrShapesAgainstReference) {
  int checked = 0;
  for (const auto& d : vulkan_devices()) {
    for (const std::string shape : {"16x16x16", "16x8x16", "16x8x8", "8x16x16"}) {
      std::unique_ptr<Context> ctx;
      try {
        // bf16 scaled, so that it runs at this shape (the native kernels are 16x16x16: Bf16NativeOrScaled).
        ctx = std::make_unique<Context>(open(d, "mm_path=2,coopmat=khr,bf16_coopmat=scaled,coopmat_shape=" + shape, false));
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
        continue;
      }
      ++checked;
      // (8x16x16 adds the subgroup size it runs on)
      EXPECT_EQ(ctx->device().caps.coopmat_products.substr(0, 4 + shape.size()), "khr " + shape);
      for (DType t : {DType::f16, DType::bf16})
        for (const auto& c : kCases) {
          const auto r = run(*ctx, c, t);
          EXPECT_TRUE(r.pass) << d.info.name << " khr " << shape << " " << c.op << " " << to_string(c.shapes[0])
                              << " (" << to_string(t) << "): " << r.message << " seed " << r.seed;
          EXPECT_TRUE(has(r.variant, "coopmat-khr-" + shape)) << r.variant;
        }
      // Another output dtype: the build's variants of the default tiles at 16x16x16, the others compiled at
      // run time through an NV form and rewritten (hal/vulkan/spirv_khr.cpp).
      for (DType t : {DType::f16, DType::bf16})
        for (DType odt : {DType::f32, t == DType::f16 ? DType::bf16 : DType::f16}) {
          TestCase tc{"coopmat_out", {{130, 64}, {70, 64}, {70}, {}}, {}, 1};
          tc.attrs.act = kActGelu;
          tc.attrs.out_dtype = odt;
          const auto r = check::run_case(*ctx, get_op("linear"), t, tc, check::fresh_seed());
          EXPECT_TRUE(r.pass) << d.info.name << " khr " << shape << " " << to_string(t) << " -> " << to_string(odt)
                              << ": " << r.message << " (" << r.variant << ")";
          EXPECT_TRUE(has(r.variant, "coopmat-khr-" + shape)) << r.variant;
        }
    }
  }
  if (!checked) GTEST_SKIP() << "no Vulkan device lists a KHR cooperative-matrix shape kf has kernels for";
}

// The convolutions and linear_cross_entropy (whose products are mm_coopmat.comp's) on the KHR kernels where
// a device offers them: every registry case passes, automatically and with the convolutions' tensor-core
// path forced (conv_path=2: KHR, or refused saying why); some run on KHR.
TEST(Coopmat, KhrConvolutionsAndLinearCrossEntropy) {
  int checked = 0;
  for (const auto& d : vulkan_devices()) {
    std::unique_ptr<Context> automatic, forced;
    try {
      automatic = std::make_unique<Context>(open(d, "coopmat=khr", false));
      forced = std::make_unique<Context>(open(d, "coopmat=khr,conv_path=2", false));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
      continue;
    }
    int on_khr = 0;
    for (const char* name : {"conv2d", "conv2d_bn_relu", "conv2d_gelu_dropout", "linear_cross_entropy",
                             "linear_cross_entropy_backward"})
      for (DType t : {DType::f16, DType::bf16})
        for (const TestCase& tc : get_op(name).tests)
          for (Context* ctx : {automatic.get(), forced.get()}) {
            if (ctx == forced.get() && std::string(name).rfind("conv", 0) != 0) continue;
            const auto r = check::run_case(*ctx, get_op(name), t, tc, check::fresh_seed());
            if (ctx == forced.get() && !r.pass && has(r.message, "the tensor-core path was forced")) continue;
            ++checked;
            EXPECT_TRUE(r.pass) << d.info.name << " " << name << " " << tc.label << " (" << to_string(t)
                                << ", variant " << r.variant << "): " << r.message << " seed " << r.seed;
            EXPECT_FALSE(has(r.variant, "coopmat-nv")) << r.variant;
            if (has(r.variant, "coopmat-khr-")) ++on_khr;
          }
    EXPECT_GT(on_khr, 0) << d.info.name;
  }
  if (!checked) GTEST_SKIP() << "no Vulkan device runs the products on KHR cooperative matrices";
}

// Attention and its backward on the KHR kernels where a device offers them (attn_coopmat=khr): every
// registry case passes, automatically (KHR where it applies, in the QUAD form where the device's layouts
// allow it, else the portable kernels), forced (attn_path=2: KHR, or refused saying why) and forced in
// the generic form (attn_quad=1); some run on KHR.
TEST(Coopmat, KhrAttentionAgainstReference) {
  int checked = 0;
  for (const auto& d : vulkan_devices()) {
    std::unique_ptr<Context> automatic, forced, generic;
    try {
      automatic = std::make_unique<Context>(open(d, "attn_coopmat=khr", false));
      forced = std::make_unique<Context>(open(d, "attn_coopmat=khr,attn_path=2", false));
      generic = std::make_unique<Context>(open(d, "attn_coopmat=khr,attn_path=2,attn_quad=1", false));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
      continue;
    }
    EXPECT_EQ(automatic->device().caps.coopmat_attention, "khr 16x16x16");
    int on_khr = 0, score_mod_on_khr = 0;
    for (const char* name : {"attention", "attention_backward"})
      for (DType t : {DType::f16, DType::bf16})
        for (const TestCase& tc : get_op(name).tests)
          for (Context* ctx : {automatic.get(), forced.get(), generic.get()}) {
            const auto r = check::run_case(*ctx, get_op(name), t, tc, check::fresh_seed());
            if (ctx != automatic.get() && !r.pass && has(r.message, "the cooperative-matrix path was forced")) continue;
            ++checked;
            EXPECT_TRUE(r.pass) << d.info.name << " " << name << " " << tc.label << " (" << to_string(t)
                                << ", variant " << r.variant << "): " << r.message << " seed " << r.seed;
            EXPECT_FALSE(has(r.variant, "coopmat-nv")) << r.variant;
            if (ctx != automatic.get()) {
              EXPECT_TRUE(has(r.variant, "coopmat-khr-16x16x16")) << r.variant;
            }
            if (ctx == generic.get()) {
              EXPECT_FALSE(has(r.variant, "-quad")) << r.variant;
            }
            if (has(r.variant, "coopmat-khr-16x16x16")) ++on_khr, score_mod_on_khr += !tc.attrs.score_mod.empty();
          }
    EXPECT_GT(on_khr, 0) << d.info.name;
    // (compiled at run time through an NV form and rewritten: hal/vulkan/spirv_khr.cpp)
    EXPECT_GT(score_mod_on_khr, 0) << d.info.name << ": no custom score function ran on KHR";
  }
  if (!checked) GTEST_SKIP() << "no Vulkan device runs attention on KHR cooperative matrices";
}

// Which attention form a measured layout allows (quad_layout_code, hal/vulkan/coopmat.cpp): NVIDIA's
// driver-580 layouts (as coopmat_layout.comp reads them on an H200) give the QUAD forms on NV and KHR; an A
// operand that holds the same elements in another order keeps KHR on the generic forms (its elements are
// copied by index) but not NV (which converts itself); an accumulator outside the quad form, or a subgroup
// of another size, keeps both on the generic forms.
TEST(Coopmat, QuadLayoutFromMeasurement) {
  using hal::vk::quad_layout_code;
  // Element i of invocation l: row l / 4 + 8 (i / 4), column 2 (l % 4) + i % 2 + 8 ((i / 2) % 2).
  const auto nvidia = [](uint32_t l, uint32_t i) { return std::pair<float, float>(float(l / 4 + 8 * (i / 4)), float(2 * (l % 4) + i % 2 + 8 * ((i / 2) % 2))); };
  const auto measured = [](auto acc, auto a, float count = 8.0f) {
    std::vector<float> v(2 * 32 * 33, -1.0f);
    for (uint32_t half = 0; half < 2; ++half)
      for (uint32_t l = 0; l < 32; ++l) {
        float* e = &v[(half * 32 + l) * 33];
        e[0] = count;
        for (uint32_t i = 0; i < 8; ++i) {
          const auto [r, c] = half ? a(l, i) : acc(l, i);
          e[1 + i] = r;
          e[17 + i] = c;
        }
      }
    return v;
  };
  // Both paths: the QLAYOUT code the shaders default to (the layout of NVIDIA's driver 580).
  const std::vector<float> same = measured(nvidia, nvidia);
  EXPECT_EQ(quad_layout_code(same, false), 0xf59d10);
  EXPECT_EQ(quad_layout_code(same, true), 0xf59d10);
  // A operand's elements 0 and 1 swapped: NV unaffected, KHR generic.
  const auto swapped = [&](uint32_t l, uint32_t i) { return nvidia(l, i < 2 ? 1 - i : i); };
  const std::vector<float> a_differs = measured(nvidia, swapped);
  EXPECT_EQ(quad_layout_code(a_differs, false), 0xf59d10);
  EXPECT_EQ(quad_layout_code(a_differs, true), -1);
  // Another quad order (elements 2 and 4 swapped in both): a code of its own, on both.
  const auto other = [&](uint32_t l, uint32_t i) { return nvidia(l, i == 2 ? 4 : i == 4 ? 2 : i); };
  const int64_t other_code = quad_layout_code(measured(other, other), true);
  EXPECT_GE(other_code, 0);
  EXPECT_NE(other_code, 0xf59d10);
  // Rows spread otherwise (an accumulator whose invocation holds a column), or 16 elements an invocation
  // (a subgroup of 16), or nothing measured: the generic forms.
  const auto columns = [](uint32_t l, uint32_t i) { return std::pair<float, float>(float(i + 8 * (l / 16)), float(l % 16)); };
  EXPECT_EQ(quad_layout_code(measured(columns, columns), false), -1);
  EXPECT_EQ(quad_layout_code(measured(nvidia, nvidia, 16.0f), true), -1);
  EXPECT_EQ(quad_layout_code({}, false), -1);
}

// The products' KHR shape and subgroup size (hal/vulkan/coopmat.cpp), on made-up devices: Intel's 8x16x16
// runs on subgroups of 8 or 16, the first a pipeline may require (subgroup size control with full
// subgroups, the size within the device's range, the largest workgroup in at most maxComputeWorkgroupSubgroups
// subgroups), else the portable kernels and why; the shapes of 16 rows on 32 stay preferred; NVIDIA-like
// and wave64 devices choose as before.
TEST(Coopmat, KhrShapeAndSubgroupChoice) {
  using namespace hal::vk;
  const CoopmatShape f16_8x16x16{8, 16, 16, "f16", "f16", "f32", "f32", false, "subgroup"};
  const CoopmatShape f16acc_8x16x16{8, 16, 16, "f16", "f16", "f16", "f16", false, "subgroup"};
  const CoopmatShape f16_16x16x16{16, 16, 16, "f16", "f16", "f32", "f32", false, "subgroup"};
  const CoopmatShape f16_16x8x16{16, 8, 16, "f16", "f16", "f32", "f32", false, "subgroup"};
  Caps intel;
  intel.coopmat_khr = true;
  intel.subgroup_size = 32;  // what Intel's drivers report; their compute runs 8, 16 or 32 wide
  intel.coopmat_khr_shapes = {f16acc_8x16x16, f16_8x16x16};
  intel.max_shared_bytes = 65536;
  // The variants of a build with the KHR shaders (shaders/variants.cmake), products and attention.
  const auto has = [](const std::string& v) {
    for (const char* tile : {"c1", "c13", "c14"})
      for (const char* dt : {"f16", "bf16"}) {
        const std::string base = std::string("mm_coopmat_khr_") + dt + "_" + tile;
        for (const char* sfx : {"", "_16x8x16", "_16x8x8", "_8x16x16_sg8", "_8x16x16_sg16"})
          if (v == base + sfx) return true;
      }
    return v == "attn_cm_khr_f16_d64";
  };
  const auto no_8x16x16 = [&](const std::string& v) { return has(v) && v.find("8x16x16") == std::string::npos; };
  const auto offer = [&](const Caps& c, const SubgroupSizes& sz, const std::function<bool(const std::string&)>& h,
                         const char* needs = "mm_coopmat_khr_f16_c1") {
    return coopmat_offer(c, false, true, sz, "mm_coopmat_f16_c1", needs, h);
  };
  bool missing = true;
  const auto choose = [&](const CoopmatOffer& o, uint32_t path = 0, uint32_t shape = 0) {
    return choose_coopmat(o, path, "coopmat", shape, true, &missing);
  };
  const SubgroupSizes xe_hpg{true, 8, 32, 64}, xe2{true, 16, 32, 64}, none{};

  // Xe-HPG (subgroups 8..32): 8x16x16 on 8, its variants named so, its pipelines requiring 8.
  CoopmatChoice c = choose(offer(intel, xe_hpg, has));
  EXPECT_FALSE(missing);
  EXPECT_EQ(c.describe(), "khr 8x16x16 on subgroups of 8");
  EXPECT_EQ(c.label(), "coopmat-khr-8x16x16-sg8");
  EXPECT_EQ(c.variant("mm_coopmat_f16_c13"), "mm_coopmat_khr_f16_c13_8x16x16_sg8");
  EXPECT_EQ(c.variant("mm_coopmat_bf16_c14"), "mm_coopmat_khr_bf16_c14_8x16x16_sg8");
  EXPECT_EQ(khr_variant_subgroup(c.variant("mm_coopmat_f16_c1")), 8u);
  // Xe2 (16..32): on 16.
  c = choose(offer(intel, xe2, has));
  EXPECT_EQ(c.describe(), "khr 8x16x16 on subgroups of 16");
  EXPECT_EQ(c.variant("mm_coopmat_f16_c1"), "mm_coopmat_khr_f16_c1_8x16x16_sg16");
  EXPECT_EQ(khr_variant_subgroup(c.variant("mm_coopmat_f16_c1") + "#out_dtype:f32"), 16u);
  // 8 within the range but c13's 52 KiB of shared memory over the device's 48 KiB: 16.
  Caps small = intel;
  small.max_shared_bytes = 49152;
  EXPECT_EQ(choose(offer(small, xe_hpg, has)).describe(), "khr 8x16x16 on subgroups of 16");
  // 8 within the range but its 64 subgroups of c13 over the device's 32: 16.
  EXPECT_EQ(choose(offer(intel, {true, 8, 32, 32}, has)).describe(), "khr 8x16x16 on subgroups of 16");
  // Forced: the same shape, or refused before the device exists.
  EXPECT_EQ(choose(offer(intel, xe2, has), 2, 4).describe(), "khr 8x16x16 on subgroups of 16");
  EXPECT_FALSE(missing);
  // No subgroup size control: the portable kernels, saying why.
  const std::string no_control = "NV: the device lacks VK_NV_cooperative_matrix; KHR: it lists 8x16x16, whose "
                                 "kernels run on subgroups of 8 (with 53248 bytes of shared memory) or 16 that a "
                                 "pipeline must require (its sizes: ";
  c = choose(offer(intel, none, has));
  EXPECT_EQ(c.path, CoopmatPath::portable);
  EXPECT_EQ(c.why, no_control + "no subgroup size control with full subgroups for compute; 65536 bytes)");
  EXPECT_FALSE(missing);
  choose(offer(intel, none, has), 2);  // khr forced
  EXPECT_TRUE(missing);
  // Neither 8 nor 16 within the range.
  EXPECT_EQ(choose(offer(intel, {true, 32, 64, 32}, has)).why,
            no_control + "32..64, at most 32 subgroups per workgroup; 65536 bytes)");
  // A build without the 8x16x16 variants, and a family without them (attention): no kernels for the shape.
  const std::string no_kernels = "NV: the device lacks VK_NV_cooperative_matrix; KHR: it lists no f16 x f16 -> f32 "
                                 "subgroup shape kf has kernels for";
  EXPECT_EQ(choose(offer(intel, xe2, no_8x16x16)).why, no_kernels);
  EXPECT_EQ(choose(offer(intel, xe2, has, "attn_cm_khr_f16_d64")).why, no_kernels);

  // A device listing 16x16x16 and 8x16x16, by default on 32: 16x16x16 on 32, as before; 8x16x16 forced.
  Caps both = intel;
  both.coopmat_khr_shapes.push_back(f16_16x16x16);
  c = choose(offer(both, xe_hpg, has));
  EXPECT_EQ(c.describe(), "khr 16x16x16");
  EXPECT_EQ(c.variant("mm_coopmat_f16_c1"), "mm_coopmat_khr_f16_c1");
  EXPECT_EQ(khr_variant_subgroup(c.variant("mm_coopmat_f16_c1")), 32u);
  EXPECT_EQ(choose(offer(both, xe_hpg, has), 2, 4).describe(), "khr 8x16x16 on subgroups of 8");
  // coopmat_shape=8x16x16 where the device does not list it.
  Caps nvidia;
  nvidia.coopmat_khr = true;
  nvidia.subgroup_size = 32;
  nvidia.coopmat_khr_shapes = {f16_16x16x16, f16_16x8x16};
  c = choose(offer(nvidia, none, has), 2, 4);
  EXPECT_TRUE(missing);
  EXPECT_EQ(c.why, "KHR: KF_TUNE coopmat_shape=8x16x16 is not among the device's f16 shapes");
  // NVIDIA-like (32, no size control): 16x16x16 on 32, whose pipelines require nothing.
  c = choose(offer(nvidia, none, has));
  EXPECT_EQ(c.describe(), "khr 16x16x16");
  EXPECT_EQ(c.label(), "coopmat-khr-16x16x16");
  EXPECT_EQ(choose(offer(nvidia, none, has), 2, 2).variant("mm_coopmat_f16_c13"), "mm_coopmat_khr_f16_c13_16x8x16");
  // wave64 (AMD): 32 required where the device allows it, else why.
  Caps wave64 = nvidia;
  wave64.subgroup_size = 64;
  EXPECT_EQ(choose(offer(wave64, {true, 32, 64, 32}, has)).describe(), "khr 16x16x16");
  EXPECT_EQ(choose(offer(wave64, none, has)).why,
            "NV: the device lacks VK_NV_cooperative_matrix; KHR: subgroups of 64 (the kernels are written for 32), "
            "and it cannot require 32 (subgroup size control with full subgroups)");

  // Which pipelines require a size: KHR kernels only, "_sg<N>" or 32.
  EXPECT_EQ(khr_variant_subgroup("mm_coopmat_f16_c1"), 0u);
  EXPECT_EQ(khr_variant_subgroup("rows_softmax_f16_sg"), 0u);
  EXPECT_EQ(khr_variant_subgroup("attn_cm_khr_f16_d64"), 32u);
  EXPECT_EQ(khr_variant_subgroup("mm_coopmat_khr_bf16n_c1_of32"), 32u);
  EXPECT_EQ(khr_variant_subgroup("mm_coopmat_khr_bf16_c14_8x16x16_sg8"), 8u);
}

// The build's 8x16x16 variants (the default tiles, both dtypes, subgroups of 8 and 16), where it has the
// KHR ones at all: the names CoopmatChoice::variant gives.
TEST(Coopmat, Khr8x16x16VariantsBuilt) {
  using namespace hal::vk;
  const auto built = [](const std::string& name) {
    for (size_t k = 0; k < kSpirvTableSize; ++k)
      if (name == kSpirvTable[k].name) return true;
    return false;
  };
  if (!built("mm_coopmat_khr_f16_c1")) GTEST_SKIP() << "no KHR variants in this build (no glslang 13 at build time)";
  CoopmatChoice c;
  c.path = CoopmatPath::khr;
  c.shape = "8x16x16";
  for (uint32_t sg : {8u, 16u}) {
    c.subgroup = sg;
    for (const char* tile : {"c1", "c13", "c14"})
      for (const char* dt : {"f16", "bf16"}) {
        const std::string v = c.variant(std::string("mm_coopmat_") + dt + "_" + tile);
        EXPECT_TRUE(built(v)) << v;
      }
  }
}

// The products' KHR variants with their cooperative matrices emulated (shaders/coopmat.glsl
// KF_COOPMAT_EMU, compiled at run time), on every Vulkan device (lavapipe in CI, which has none): each
// shape and subgroup size's tiles, loads and epilogue (its runs of 8 columns looped over the lanes or
// leaving lanes idle) against the float64 reference: f16 inputs and output, B as [N, K] and [K, N], a bias
// and relu, partial tiles, a K that ends mid-slice and an N that is no multiple of 8 (the epilogue's
// element-wise stores); A as [K, M] with C accumulated on one of them. The emulation checks the kernel's indexing, not a driver's matrices. lavapipe
// compiles each emulated kernel in about 15 s of one core.
TEST(Coopmat, EmulatedKhrVariantsAgainstReference) {
  struct Variant {
    const char* name;
    uint32_t bm, bn;
  };
  const Variant variants[] = {
      {"mm_coopmat_khr_f16_c1_8x16x16_sg8", 128, 128},   {"mm_coopmat_khr_f16_c13_8x16x16_sg8", 128, 256},
      {"mm_coopmat_khr_f16_c14_8x16x16_sg8", 64, 256},   {"mm_coopmat_khr_f16_c1_8x16x16_sg16", 128, 128},
      {"mm_coopmat_khr_f16_c13_8x16x16_sg16", 128, 256}, {"mm_coopmat_khr_f16_c14_8x16x16_sg16", 64, 256},
      // 16x16x16 and 16x8x16 on 32 too: the kernels an H200 ran, so that the emulation is checked as well
      {"mm_coopmat_khr_f16_c1", 128, 128},               {"mm_coopmat_khr_f16_c14_16x8x16", 64, 256},
  };
  struct Push {  // mm_coopmat.comp's push constants
    uint32_t M, N, K, stride_a, stride_b, stride_c, seed_lo, seed_hi, off_lo, off_hi, thr;
    float keep_scale;
    uint32_t scale_b, scale_stride_b;
  };
  struct Case {
    uint32_t M, N, K;
    bool b_nk;
    bool a_km = false;  // A stored [K, M] and C += the product (linear_cross_entropy's d W), first variant only
  };
  const Case cases[] = {{130, 200, 72, true}, {70, 37, 40, true}, {130, 200, 72, false}, {136, 200, 72, false, true}};
  int checked = 0;
  for (const auto& d : vulkan_devices()) {
    Context ctx = open(d, "");
    auto* dev = dynamic_cast<hal::vk::VulkanDevice*>(ctx.impl()->device.get());
    ASSERT_NE(dev, nullptr);
    for (const Variant& v : variants) {
      if (!dev->has_variant(v.name)) {
        std::cout << v.name << " is not in this build (no glslang 13 at build time): skipped\n";
        continue;
      }
      // (the selection's own rule: a device with less shared memory never runs it; an H200 lost the device)
      if (std::string(v.name).find("c13_8x16x16_sg8") != std::string::npos &&
          ctx.device().caps.max_shared_bytes < hal::vk::kKhrSg8SharedBytes) {
        std::cout << v.name << " needs " << hal::vk::kKhrSg8SharedBytes << " bytes of shared memory, the device has "
                  << ctx.device().caps.max_shared_bytes << ": skipped\n";
        continue;
      }
      std::string name;
      try {
        name = dev->runtime_variant(v.name, "emulated", std::string("emulated ") + v.name,
                                    [] { return hal::vk::Defines{{"KF_COOPMAT_EMU", ""}}; });
      } catch (const Error& e) {
        if (e.code() == ErrorCode::Unsupported) GTEST_SKIP() << e.what();  // a build without shaderc
        throw;
      }
      for (const Case& c : cases) {
        if (c.a_km && &v != variants) continue;
        std::mt19937_64 rng(c.M * 131 + c.N * 7 + c.K);
        std::uniform_real_distribution<double> u(-1, 1);
        std::vector<double> a(size_t(c.M) * c.K), b(size_t(c.N) * c.K), bias(c.N), c0(size_t(c.M) * c.N);
        for (auto* x : {&a, &b, &bias, &c0})
          for (double& e : *x) e = u(rng);
        const Tensor at = c.a_km ? ctx.from_host({c.K, c.M}, DType::f16, a) : ctx.from_host({c.M, c.K}, DType::f16, a);
        const Tensor bt = c.b_nk ? ctx.from_host({c.N, c.K}, DType::f16, b) : ctx.from_host({c.K, c.N}, DType::f16, b);
        const Tensor biast = ctx.from_host({c.N}, DType::f16, bias);
        Tensor ct = c.a_km ? ctx.from_host({c.M, c.N}, DType::f16, c0) : ctx.empty({c.M, c.N}, DType::f16);
        if (!c.a_km) ct.fill_bytes(0xff);
        const std::vector<double> ar = at.to_double(), br = bt.to_double(), biasr = biast.to_double(),
                                  c0r = ct.to_double();
        Push pc{c.M, c.N, c.K, c.M * c.K, 0, c.M * c.N, 0, 0, 0, 0, 0, 1.0f, 0, 0};
        hal::vk::Launch l;
        l.variant = name;
        // bias and relu, or A_KM and ACC_OUT
        l.spec = {256u, c.b_nk ? 1u : 0u, c.a_km ? 0u : 1u, 0u, c.a_km ? 0u : 1u, 0u, c.a_km, c.a_km};
        l.bindings[0] = at.buffer_ref();
        l.bindings[1] = bt.buffer_ref();
        l.bindings[2] = biast.buffer_ref();
        l.bindings[4] = ct.buffer_ref();
        l.push = &pc;
        l.push_bytes = sizeof(pc);
        l.groups = (c.N + v.bn - 1) / v.bn;
        l.groups_y = (c.M + v.bm - 1) / v.bm;
        dev->record(l);
        dev->synchronize();
        const std::vector<double> y = ct.to_double();
        double worst = 0;
        for (uint32_t m = 0; m < c.M; ++m)
          for (uint32_t n = 0; n < c.N; ++n) {
            double ref = c.a_km ? 0.0 : biasr[n];
            for (uint32_t k = 0; k < c.K; ++k)
              ref += (c.a_km ? ar[size_t(k) * c.M + m] : ar[size_t(m) * c.K + k]) *
                     (c.b_nk ? br[size_t(n) * c.K + k] : br[size_t(k) * c.N + n]);
            ref = c.a_km ? ref + c0r[size_t(m) * c.N + n] : std::max(ref, 0.0);
            const double err = std::abs(y[size_t(m) * c.N + n] - ref) / (1e-2 + std::abs(ref));
            worst = std::max(worst, std::isnan(err) ? 1e9 : err);
          }
        EXPECT_LT(worst, 2e-3) << d.info.name << " " << v.name << " M " << c.M << " N " << c.N << " K " << c.K
                               << (c.b_nk ? " B [N, K]" : " B [K, N]") << (c.a_km ? ", A [K, M], C +=" : "");
      }
      ++checked;
    }
  }
  if (!checked) GTEST_SKIP() << "no Vulkan device, or no KHR variants in this build";
}

// The bf16 choice itself (hal/vulkan/coopmat.cpp), on made-up devices: native only with the products on
// KHR, VK_KHR_shader_bfloat16 with both features, the bf16 x bf16 -> f32 16x16x16 subgroup shape listed
// and the build's variants; otherwise the first reason, and native forced is reported missing.
TEST(Coopmat, Bf16ChoiceReasons) {
  using namespace hal::vk;
  // The native variant of an f16 product tile (the products and the convolutions name it so).
  EXPECT_EQ(Bf16Choice::variant("mm_coopmat_f16_c13"), "mm_coopmat_khr_bf16n_c13");
  Caps caps;
  caps.coopmat_khr = true;
  caps.bfloat16 = true;
  caps.coopmat_khr_shapes = {{16, 16, 16, "f16", "f16", "f32", "f32", false, "subgroup"},
                             {16, 16, 16, "bf16", "bf16", "f32", "f32", false, "subgroup"}};
  CoopmatChoice khr;
  khr.path = CoopmatPath::khr;
  khr.shape = "16x16x16";
  CoopmatChoice none;
  none.why = "NV: x; KHR: y";
  bool built = true;
  const auto has = [&](const std::string& v) { return built && v == "mm_coopmat_khr_bf16n_c1"; };
  bool missing = true;
  EXPECT_EQ(choose_coopmat_bf16(caps, khr, true, 0, has, &missing).describe(), "native");  // auto
  EXPECT_FALSE(missing);
  EXPECT_EQ(choose_coopmat_bf16(caps, khr, false, 0, has, &missing).describe(),
            "scaled: its shaderBFloat16Type or shaderBFloat16CooperativeMatrix feature is off");
  EXPECT_FALSE(missing);  // auto falls back without complaint
  EXPECT_EQ(choose_coopmat_bf16(caps, khr, true, 1, has, &missing).describe(), "native");
  EXPECT_FALSE(missing);
  EXPECT_EQ(choose_coopmat_bf16(caps, khr, true, 2, has, &missing).describe(), "scaled: KF_TUNE bf16_coopmat=scaled");
  EXPECT_FALSE(missing);
  EXPECT_EQ(choose_coopmat_bf16(caps, none, true, 1, has, &missing).describe(),
            "scaled: the products do not run on KHR cooperative matrices (none: NV: x; KHR: y)");
  EXPECT_TRUE(missing);
  EXPECT_EQ(choose_coopmat_bf16(caps, khr, false, 1, has, &missing).describe(),
            "scaled: its shaderBFloat16Type or shaderBFloat16CooperativeMatrix feature is off");
  EXPECT_TRUE(missing);
  built = false;
  EXPECT_EQ(choose_coopmat_bf16(caps, khr, true, 1, has, &missing).describe(),
            "scaled: this build has no bf16-native variants (no slang at build time: tools/install-deps.sh)");
  built = true;
  caps.coopmat_khr_shapes.pop_back();
  caps.coopmat_khr_shapes.push_back({16, 8, 16, "bf16", "bf16", "f32", "f32", false, "subgroup"});  // not 16x16x16
  EXPECT_EQ(choose_coopmat_bf16(caps, khr, true, 1, has, &missing).describe(),
            "scaled: it lists no bf16 x bf16 -> f32 16x16x16 subgroup shape");
  caps.bfloat16 = false;
  EXPECT_EQ(choose_coopmat_bf16(caps, khr, true, 1, has, &missing).describe(),
            "scaled: the device lacks VK_KHR_shader_bfloat16");
  EXPECT_TRUE(missing);
}

// On each device: Caps::coopmat_bf16 says what bf16 products take (auto: native where it runs); scaled
// forced says so; native forced opens only where it runs, else Context::create raises Unsupported naming the knob, the device and why
// (lavapipe: no KHR products); a bad value is refused before any device opens. Where native runs, the
// products (every product case, another output dtype) and ffn pass against the reference on it.
TEST(Coopmat, Bf16NativeOrScaled) {
  for (const char* bad : {"bf16_coopmat=bf16", "bf16_coopmat="}) expect_refused(bad, "bf16_coopmat");
  if (vulkan_devices().empty()) GTEST_SKIP() << "no Vulkan device";
  int native = 0;
  for (const auto& d : vulkan_devices()) {
    const Caps c = open(d, "", false).device().caps;  // auto: native where forcing it opens, else scaled and why
    EXPECT_EQ(open(d, "bf16_coopmat=scaled", false).device().caps.coopmat_bf16, "scaled: KF_TUNE bf16_coopmat=scaled");
    std::unique_ptr<Context> ctx;
    try {
      ctx = std::make_unique<Context>(open(d, "bf16_coopmat=native,mm_path=2", false));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
      EXPECT_TRUE(has(e.what(), "KF_TUNE bf16_coopmat=native: " + d.info.name + " cannot run those kernels (")) << e.what();
      ASSERT_EQ(c.coopmat_bf16.rfind("scaled: ", 0), 0u) << c.coopmat_bf16;
      EXPECT_TRUE(has(e.what(), c.coopmat_bf16.substr(8))) << e.what() << " / auto: " << c.coopmat_bf16;
      if (c.coopmat_products.rfind("khr", 0) != 0) {
        EXPECT_TRUE(has(e.what(), "the products do not run on KHR cooperative matrices (" + c.coopmat_products + ")"))
            << e.what();
      }
      continue;
    }
    ++native;
    EXPECT_EQ(ctx->device().caps.coopmat_bf16, "native");
    EXPECT_EQ(c.coopmat_bf16, "native");
    for (const auto& pc : kCases) {
      const auto r = run(*ctx, pc, DType::bf16);
      EXPECT_TRUE(r.pass) << d.info.name << " native " << pc.op << " " << to_string(pc.shapes[0]) << ": " << r.message
                          << " seed " << r.seed;
      EXPECT_TRUE(has(r.variant, "coopmat-khr-16x16x16") && has(r.variant, ",bf16-native")) << r.variant;
    }
    for (DType odt : {DType::f32, DType::f16}) {
      TestCase tc{"coopmat_out", {{130, 64}, {70, 64}, {70}, {}}, {}, 1};
      tc.attrs.act = kActGelu;
      tc.attrs.out_dtype = odt;
      const auto r = check::run_case(*ctx, get_op("linear"), DType::bf16, tc, check::fresh_seed());
      EXPECT_TRUE(r.pass) << d.info.name << " native bf16 -> " << to_string(odt) << ": " << r.message;
      EXPECT_TRUE(has(r.variant, ",bf16-native")) << r.variant;
    }
    for (const char* name : {"ffn", "linear_dropout"})
      for (const TestCase& tc : get_op(name).tests) {
        const auto r = check::run_case(*ctx, get_op(name), DType::bf16, tc, check::fresh_seed());
        // Cases the forced tensor-core path does not take (K or N not a multiple of 8) are refused, and say so.
        if (r.unsupported && has(r.message, "the cooperative-matrix path was forced")) continue;
        EXPECT_TRUE(r.pass) << d.info.name << " native " << name << " " << tc.label << ": " << r.message;
      }
  }
  if (!native) GTEST_SKIP() << "no Vulkan device runs bf16 products natively (checked the fallback and its reason)";
}

// bf16 products on rows with a wide dynamic range: each row of x has one entry (at a column of its own)
// 2^s above the rest, s 10, 20, 30 and 40, and the odd outputs' weights are 0 in those columns, so that
// they depend on the small entries alone. Native bf16 reads the operands as stored; the scaled path's f16
// copy of a row (scaled so that its largest entry fits f16) keeps the small entries only while 2^s stays
// within f16's range below it (2^-24 after 2^15). Prints the worst relative L2 error of an odd output row
// for both (f32 output, K 256, against the float64 product of the same bf16 values); native must stay
// within f32 accumulation's rounding.
TEST(Coopmat, Bf16WideRowsAccuracy) {
  if (vulkan_devices().empty()) GTEST_SKIP() << "no Vulkan device";
  const int64_t M = 64, N = 64, K = 256;
  const auto at = [](int64_t r, int64_t c, int64_t cols) { return static_cast<size_t>(r * cols + c); };
  int checked = 0;
  for (const auto& d : vulkan_devices()) {
    std::unique_ptr<Context> native, scaled;
    try {
      native = std::make_unique<Context>(open(d, "bf16_coopmat=native,mm_path=2", false));
      scaled = std::make_unique<Context>(open(d, "bf16_coopmat=scaled,mm_path=2", false));
    } catch (const Error&) {
      continue;  // no native bf16 products here (Bf16NativeOrScaled checks the reason)
    }
    ++checked;
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> w(static_cast<size_t>(N * K));
    for (auto& v : w) v = u(rng);
    for (int64_t n = 1; n < N; n += 2)
      for (int64_t i = 0; i < M; ++i) w[at(n, i, K)] = 0;  // row i's large entry sits in column i
    for (int s : {10, 20, 30, 40}) {
      std::vector<double> x(static_cast<size_t>(M * K));
      for (auto& v : x) v = u(rng);
      for (int64_t i = 0; i < M; ++i) x[at(i, i, K)] = std::ldexp(1.0, s);
      double worst[2] = {0, 0};
      int which = 0;
      for (Context* ctx : {native.get(), scaled.get()}) {
        const Tensor xt = ctx->from_host({M, K}, DType::bf16, x), wt = ctx->from_host({N, K}, DType::bf16, w);
        const std::vector<double> xr = xt.to_double(), wr = wt.to_double();
        const std::vector<double> y = linear(xt, wt, {}, {}, {.out_dtype = DType::f32}).to_double();
        for (int64_t i = 0; i < M; ++i) {
          double e2 = 0, r2 = 0;
          for (int64_t n = 1; n < N; n += 2) {
            double ref = 0;
            for (int64_t k = 0; k < K; ++k) ref += xr[at(i, k, K)] * wr[at(n, k, K)];
            e2 += (y[at(i, n, N)] - ref) * (y[at(i, n, N)] - ref);
            r2 += ref * ref;
          }
          worst[which] = std::max(worst[which], std::sqrt(e2 / r2));
        }
        ++which;
      }
      std::cout << d.info.name << ": bf16 rows spanning 2^" << s
                << ", worst relative L2 error of a row of the outputs without the large entry: native " << worst[0]
                << ", scaled " << worst[1] << "\n";
      EXPECT_LT(worst[0], 1e-5) << "native, 2^" << s;
    }
  }
  if (!checked) GTEST_SKIP() << "no Vulkan device runs bf16 products natively";
}
}  // namespace
}  // namespace kf
