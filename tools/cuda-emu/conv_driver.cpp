// Part of tools/cuda-emu (see run.sh). Runs hal/cuda/conv.cu's kernels (and train.cu's epilogue kernel)
// under the host emulation on the registry's convolution cases and awkward ones, and compares them with
// the float64 reference (the op's own, on the inputs rounded to the dtype): the direct kernel with each
// of its three tiles, and the im2col path with the product done on the host in float (standing in for
// cuBLASLt, rounded to the dtype as cuBLASLt's output is) followed by the epilogue kernel. The parameters
// are built as CudaDevice::dispatch_conv builds them (hal/cuda/kernels.cpp; keep the two in step).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "hal/cuda/gpu_compat.hpp"
#include <string>
#include "hal/cuda/kernels.hpp"
#include "kf/kf.hpp"
#include "ops/registry.hpp"
#include "ops/reference_math.hpp"
#include "check/conformance.hpp"

using namespace kf;
namespace hc = kf::hal::emucuda;

static double round_to_dt(double x, DType t) {
  if (t == DType::f32) return double(float(x));
  if (t == DType::f16) return kf_half_to_float(kf_float_to_half(float(x)));
  float f = float(x);  // bf16, round to nearest even
  unsigned u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}
static std::vector<unsigned char> to_dev(const std::vector<double>& v, DType t) {
  std::vector<unsigned char> b(v.size() * dtype_size(t) + 16, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::f32) { float f = float(v[i]); std::memcpy(&b[i * 4], &f, 4); }
    else if (t == DType::f16) { unsigned short h = kf_float_to_half(float(v[i])); std::memcpy(&b[i * 2], &h, 2); }
    else { float f = float(v[i]); unsigned u; std::memcpy(&u, &f, 4); unsigned short h = u >> 16; std::memcpy(&b[i * 2], &h, 2); }
  }
  return b;
}
static double from_dev(const std::vector<unsigned char>& b, size_t i, DType t) {
  if (t == DType::f32) { float f; std::memcpy(&f, &b[i * 4], 4); return f; }
  unsigned short h; std::memcpy(&h, &b[i * 2], 2);
  if (t == DType::f16) return kf_half_to_float(h);
  unsigned u = unsigned(h) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
static hc::Dt dt_of(DType t) { return t == DType::f32 ? hc::Dt::f32 : t == DType::f16 ? hc::Dt::f16 : hc::Dt::bf16; }

int fails = 0, runs = 0;

// The depthwise kernel's plans (path 2): 0 as dispatch_conv plans it (48 KiB, 256 pieces a block);
// 1 few pieces a block (one-row tiles, several row tiles a plane); 2 many (several planes a block);
// 3 2 KiB of shared memory (halved tiles: columns split into several tiles where one row does not fit);
// 4 as 0 with x and y one element off 16-byte alignment (element loads and stores).
constexpr int kDwModes = 5;

// path: 0 direct with `tile`, 1 im2col + host product + epilogue kernel, 2 the depthwise kernel (plan dw_mode),
// 3 the tensor-core implicit GEMM (conv_mma; f16 / bf16 where dispatch_conv would take it; dw_mode 1: y
// one element off 16-byte alignment, the element-by-element output).
void run(const std::string& name, const TestCase& tc, DType dt, int path, hc::ConvTile tile, int dw_mode = 0) {
  const OpDef& op = get_op(name);
  std::vector<Shape> shapes = tc.inputs;
  shapes.resize(op.inputs.size());
  auto v = check::random_inputs(shapes, tc.range, 4321);
  if (op.prepare_inputs) op.prepare_inputs(shapes, tc.attrs, v);
  std::vector<HostTensor> hin(shapes.size());
  std::vector<std::vector<unsigned char>> dev(shapes.size());
  for (size_t k = 0; k < shapes.size(); ++k) {
    if (shapes[k].empty()) continue;
    hin[k].shape = shapes[k];
    for (double x : v[k]) hin[k].data.push_back(round_to_dt(x, dt));
    dev[k] = to_dev(hin[k].data, dt);
  }
  const Shape ys = op.infer(op, shapes, tc.attrs).at(0);
  std::vector<HostTensor> hout(1);
  hout[0].shape = ys;
  hout[0].data.assign(size_t(numel(ys)), 0.0);
  op.reference(hin, hout, tc.attrs);
  const std::vector<double>& ro = hout[0].data;

  // The parameters, as CudaDevice::dispatch_conv.
  const Attrs& a = tc.attrs;
  const bool bn = name == "conv2d_bn_relu", gelu_drop = name == "conv2d_gelu_dropout";
  auto in = [&](size_t k) -> const void* { return k < shapes.size() && !shapes[k].empty() ? dev[k].data() : nullptr; };
  const size_t es = dtype_size(dt);
  std::vector<unsigned char> y(ro.size() * es + 16, 0xff);  // poisoned (NaN)
  hc::ConvParams p;
  p.x = in(0), p.w = in(1), p.y = y.data();
  p.N = shapes[0][0], p.C = shapes[0][1], p.H = shapes[0][2], p.W = shapes[0][3];
  p.O = shapes[1][0], p.KH = shapes[1][2], p.KW = shapes[1][3], p.groups = a.groups;
  p.OH = ys[2], p.OW = ys[3];
  p.sh = a.stride[0], p.sw = a.stride[1], p.ph = a.padding[0], p.pw = a.padding[1], p.dh = a.dilation[0], p.dw = a.dilation[1];
  const int64_t P = p.OH * p.OW, K = (p.C / p.groups) * p.KH * p.KW;
  hc::EpilogueParams& ep = p.ep;
  ep.y = p.y, ep.total = int64_t(ro.size()), ep.n = p.O, ep.inner = P;
  ep.bias = in(bn ? 6 : 2);
  if (bn) ep.bn_w = in(2), ep.bn_b = in(3), ep.bn_mean = in(4), ep.bn_var = in(5), ep.eps = op.eps_of(a);
  ep.act = bn ? int(kActRelu) : gelu_drop ? int(kActGelu) : int(a.act);
  if (gelu_drop && a.p > 0) {
    ep.seed_lo = uint32_t(a.seed), ep.seed_hi = uint32_t(a.seed >> 32);
    ep.off_lo = uint32_t(a.offset), ep.off_hi = uint32_t(a.offset >> 32);
    ep.thr = ref::dropout_threshold(a.p);
    ep.keep_scale = 1.0 / (1.0 - a.p);
  }
  std::string tag;
  std::vector<unsigned char> xs_buf, ys_buf;  // dw_mode 4: x and y one element off alignment
  if (path == 2) {
    if (p.groups != p.C) return;
    if (dw_mode == 4) {
      xs_buf.assign(dev[0].size() + 32, 0);
      const size_t off = 16 - (reinterpret_cast<uintptr_t>(xs_buf.data()) % 16) + es;
      std::memcpy(xs_buf.data() + off, dev[0].data(), dev[0].size());
      p.x = xs_buf.data() + off;
      ys_buf.assign(y.size() + 32, 0xff);
      p.y = ep.y = ys_buf.data() + 16 - (reinterpret_cast<uintptr_t>(ys_buf.data()) % 16) + es;
    }
    const int64_t limit = dw_mode == 3 ? 2048 : 48 * 1024;
    const int items = dw_mode == 1 ? 3 : dw_mode == 2 ? 4096 : 256;
    const hc::DwPlan d = hc::plan_conv_depthwise(dt_of(dt), p, limit, items);
    if (!d.ok) {
      if (dw_mode != 3) std::printf("FAIL %s %s: no depthwise plan (mode %d)\n", name.c_str(), tc.label.c_str(), dw_mode), ++fails;
      return;
    }
    if (dw_mode == 4 && (d.vec_load || d.vec_store)) std::printf("FAIL %s: misaligned buffers took packs\n", tc.label.c_str()), ++fails;
    hc::launch_conv_depthwise(dt_of(dt), p, d, uint32_t(std::min<int64_t>(d.tiles, 3)), nullptr);
    if (dw_mode == 4) std::memcpy(y.data(), p.y, y.size() - 16);
    tag = "dw" + std::to_string(dw_mode) + " " + std::to_string(d.tow) + "x" + std::to_string(d.toh) + "x" +
          std::to_string(d.pb) + (d.kwt ? "k" + std::to_string(d.kwt) : "") + (d.vec_load ? "L" : "") + (d.vec_store ? "S" : "");
  } else if (path == 3) {
    const bool one_by_one = p.KH == 1 && p.KW == 1 && p.sh == 1 && p.sw == 1 && p.ph == 0 && p.pw == 0;
    if (dt == DType::f32 || p.groups != 1 || one_by_one || K % 8 != 0) return;
    if (dw_mode == 1) {
      ys_buf.assign(y.size() + 32, 0xff);
      p.y = ep.y = ys_buf.data() + 16 - (reinterpret_cast<uintptr_t>(ys_buf.data()) % 16) + es;
    }
    const int64_t tiles = ((p.N * P + 127) / 128) * ((p.O + 63) / 64);
    // Fewer blocks than tiles (3 at most) so that the blocks' loops are exercised too.
    if (hc::launch_conv_mma(dt_of(dt), p, uint32_t(std::min<int64_t>(tiles, 3)), nullptr) != 0)
      std::printf("FAIL %s %s: conv_mma launch\n", name.c_str(), tc.label.c_str()), ++fails;
    if (dw_mode == 1) std::memcpy(y.data(), p.y, y.size() - 16);
    const bool vec = P % 8 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
    tag = std::string("mma") + (vec ? " 16B" : " elem") + " t" + std::to_string(tiles);
  } else if (path == 0) {
    const int64_t bm = tile == hc::ConvTile::t64x64 ? 64 : tile == hc::ConvTile::t128x16 ? 128 : 256;
    const int64_t bn_ = tile == hc::ConvTile::t64x64 ? 64 : tile == hc::ConvTile::t128x16 ? 16 : 4;
    const int64_t Og = p.O / p.groups;
    const int64_t mtiles = (p.N * P + bm - 1) / bm, ytiles = p.groups * ((Og + bn_ - 1) / bn_);
    // A grid smaller than the tiles (2 x 2 at most) so that the blocks' loops are exercised too.
    hc::launch_conv_direct(dt_of(dt), p, tile, uint32_t(std::min<int64_t>(mtiles, 2)), uint32_t(std::min<int64_t>(ytiles, 2)), nullptr);
    tag = "direct " + std::to_string(bm) + "x" + std::to_string(bn_);
  } else {
    if (p.groups != 1) return;
    // Chunks of 2 images (the host's chunking, small), im2col, the product on the host, then the epilogue.
    const bool one_by_one = p.KH == 1 && p.KW == 1 && p.sh == 1 && p.sw == 1 && p.ph == 0 && p.pw == 0;
    const int64_t chunk = 2;
    std::vector<unsigned char> col(size_t(chunk * K * P) * es + 16, 0xcd);
    std::vector<double> wv = hin[1].data;
    for (int64_t n0 = 0; n0 < p.N; n0 += chunk) {
      const int64_t images = std::min(chunk, p.N - n0);
      const std::vector<unsigned char>* src = &col;
      if (one_by_one) src = &dev[0];
      else hc::launch_im2col(dt_of(dt), p, n0, images, col.data(), uint32_t(std::min<int64_t>(images * K, 3)), nullptr);
      for (int64_t i = 0; i < images; ++i) {
        const int64_t base = one_by_one ? (n0 + i) * K * P : i * K * P;
        for (int64_t o = 0; o < p.O; ++o)
          for (int64_t q = 0; q < P; ++q) {
            float s = 0;
            for (int64_t k = 0; k < K; ++k) s += float(wv[size_t(o * K + k)]) * float(from_dev(*src, size_t(base + k * P + q), dt));
            const double r = round_to_dt(s, dt);
            const size_t yi = size_t(((n0 + i) * p.O + o) * P + q);
            const std::vector<double> one = {r};
            const auto b = to_dev(one, dt);
            std::memcpy(&y[yi * es], b.data(), es);
          }
      }
    }
    if (ep.bias || ep.bn_w || ep.act != 0 || ep.thr != 0u) hc::launch_epilogue(dt_of(dt), ep, 3, nullptr);
    tag = one_by_one ? "1x1-no-im2col" : "im2col";
  }
  double num = 0, den = 0, worst = 0;
  size_t wi = 0;
  bool nan = false;
  int64_t mask_bad = 0;
  const uint32_t thr = ref::dropout_threshold(a.p);
  for (size_t i = 0; i < ro.size(); ++i) {
    const double x = from_dev(y, i, dt);
    if (std::isnan(x)) { nan = true; wi = i; continue; }
    num += (x - ro[i]) * (x - ro[i]);
    den += ro[i] * ro[i];
    if (std::fabs(x - ro[i]) > worst) worst = std::fabs(x - ro[i]), wi = i;
    if (gelu_drop && a.p > 0 && !ref::dropout_keep(i, a.seed, a.offset, thr) && x != 0) ++mask_bad;
  }
  const double e = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const double lim = dt == DType::f32 ? 1e-6 : dt == DType::f16 ? 1e-3 : 8e-3;
  const bool ok = !nan && e <= lim && mask_bad == 0;
  ++runs;
  if (!ok) ++fails;
  if (!ok || std::getenv("EMU_VERBOSE"))
    std::printf("%s %-20s %-40s %-5s %-14s err %.3g (limit %.1g) worst %.3g at %zu (got %g want %g)%s mask_bad %lld\n",
                ok ? "ok  " : "FAIL", name.c_str(), tc.label.c_str(), to_string(dt), tag.c_str(), e, lim, worst, wi,
                from_dev(y, wi, dt), ro[wi], nan ? " NaN (an element never written?)" : "", (long long)mask_bad);
}

static Attrs ca(std::array<int64_t, 2> stride, std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation,
                int64_t groups, int64_t act = kActNone) {
  Attrs a;
  a.stride = stride, a.padding = padding, a.dilation = dilation, a.groups = groups, a.act = act;
  return a;
}

int main() {
  std::vector<std::pair<std::string, TestCase>> cases;
  for (const char* name : {"conv2d", "conv2d_bn_relu", "conv2d_gelu_dropout"})
    for (const TestCase& tc : get_op(name).tests) cases.push_back({name, tc});
  Attrs bn_eps = ca({1, 1}, {1, 1}, {1, 1}, 1);
  bn_eps.eps = 1e-3;
  Attrs drop = ca({1, 1}, {1, 1}, {1, 1}, 1);
  drop.p = 0.3, drop.seed = 9, drop.offset = 100;
  Attrs drop_dw = ca({2, 1}, {1, 0}, {1, 2}, 6);
  drop_dw.p = 0.5, drop_dw.seed = 0x9e3779b97f4a7c15ull, drop_dw.offset = (uint64_t(1) << 32) + 7;
  const std::vector<std::pair<std::string, TestCase>> more = {
      {"conv2d", {"n3_c5_13x11_o7_k3_pad1_relu", {{3, 5, 13, 11}, {7, 5, 3, 3}, {7}}, ca({1, 1}, {1, 1}, {1, 1}, 1, kActRelu), 1}},
      {"conv2d", {"s2_c6_15x17_o70_k3_pad1_gelu_tanh", {{2, 6, 15, 17}, {70, 6, 3, 3}, {70}}, ca({2, 2}, {1, 1}, {1, 1}, 1, kActGeluTanh), 1}},
      {"conv2d", {"dil2_c4_12x10_o9_k3_pad2_silu", {{1, 4, 12, 10}, {9, 4, 3, 3}, {9}}, ca({1, 1}, {2, 2}, {2, 2}, 1, kActSilu), 1}},
      {"conv2d", {"g2_c8_9x11_o6_k3_s2x1_pad1", {{2, 8, 9, 11}, {6, 4, 3, 3}, {6}}, ca({2, 1}, {1, 1}, {1, 1}, 2), 1}},
      {"conv2d", {"g2_c8_9x11_o40_k3_s2_dil2", {{2, 8, 9, 11}, {40, 4, 3, 3}, {}}, ca({2, 2}, {2, 1}, {2, 2}, 2, kActGelu), 1}},
      {"conv2d", {"depthwise_c32_10x10_k3_pad1_relu", {{2, 32, 10, 10}, {32, 1, 3, 3}, {32}}, ca({1, 1}, {1, 1}, {1, 1}, 32, kActRelu), 1}},
      {"conv2d", {"n2_c3_40x37_o20_k5x3_pad2x1", {{2, 3, 40, 37}, {20, 3, 5, 3}, {20}}, ca({1, 1}, {2, 1}, {1, 1}, 1), 1}},
      {"conv2d", {"c37_8x8_o40_k3_nobias", {{1, 37, 8, 8}, {40, 37, 3, 3}, {}}, ca({1, 1}, {0, 0}, {1, 1}, 1), 1}},
      {"conv2d", {"pointwise_c16_9x9_o24_s2", {{2, 16, 9, 9}, {24, 16, 1, 1}, {24}}, ca({2, 2}, {0, 0}, {1, 1}, 1), 1}},
      {"conv2d", {"pointwise_c8_6x6_o12_pad1", {{1, 8, 6, 6}, {12, 8, 1, 1}, {12}}, ca({1, 1}, {1, 1}, {1, 1}, 1), 1}},
      {"conv2d", {"pointwise_c16_7x5_o130_silu", {{3, 16, 7, 5}, {130, 16, 1, 1}, {130}}, ca({1, 1}, {0, 0}, {1, 1}, 1, kActSilu), 1}},
      {"conv2d_bn_relu", {"g2_c8_11x9_o10_s2_bias", {{2, 8, 11, 9}, {10, 4, 3, 3}, {10}, {10}, {10}, {10}, {10}}, ca({2, 2}, {1, 1}, {1, 1}, 2), 1}},
      {"conv2d_bn_relu", {"c16_10x10_o40_k3_bias_eps1e-3", {{2, 16, 10, 10}, {40, 16, 3, 3}, {40}, {40}, {40}, {40}, {40}}, bn_eps, 1}},
      {"conv2d_gelu_dropout", {"c8_9x9_o70_k3_p0.3", {{2, 8, 9, 9}, {70, 8, 3, 3}, {70}}, drop, 1}},
      {"conv2d_gelu_dropout", {"depthwise_c6_9x8_p0.5_offset_hi", {{1, 6, 9, 8}, {6, 1, 3, 2}, {6}}, drop_dw, 1}},
  };
  cases.insert(cases.end(), more.begin(), more.end());
  // The tensor-core implicit GEMM: several pixel tiles (a partial last one), several channel tiles, several
  // k slices (a partial last one), OH OW a multiple of 8 (16-byte output packs) or not, stride, dilation,
  // dropout at the packs' Philox blocks, a 5 x 3 kernel.
  Attrs drop_mma = ca({1, 1}, {1, 1}, {1, 1}, 1);
  drop_mma.p = 0.3, drop_mma.seed = 0x1234567890abull, drop_mma.offset = (uint64_t(1) << 32) + 5;
  Attrs bn_mma = ca({1, 1}, {1, 1}, {1, 1}, 1);
  bn_mma.eps = 1e-3;
  const std::vector<std::pair<std::string, TestCase>> mma = {
      {"conv2d_gelu_dropout", {"mma_c16_8x16_o72_k3_pad1_p0.3", {{2, 16, 8, 16}, {72, 16, 3, 3}, {72}}, drop_mma, 1}},
      {"conv2d_bn_relu", {"mma_c8_12x12_o40_k3_pad1_bias", {{3, 8, 12, 12}, {40, 8, 3, 3}, {40}, {40}, {40}, {40}, {40}}, bn_mma, 1}},
      {"conv2d", {"mma_c24_9x7_o130_k3_s2_dil2_gelu", {{2, 24, 9, 7}, {130, 24, 3, 3}, {130}}, ca({2, 2}, {2, 1}, {2, 2}, 1, kActGelu), 1}},
      {"conv2d", {"mma_c8_11x16_o20_k5x3_pad2x1_silu", {{2, 8, 11, 16}, {20, 8, 5, 3}, {20}}, ca({1, 1}, {2, 1}, {1, 1}, 1, kActSilu), 1}},
      {"conv2d", {"mma_c64_8x8_o64_k3_pad1_relu", {{2, 64, 8, 8}, {64, 64, 3, 3}, {64}}, ca({1, 1}, {1, 1}, {1, 1}, 1, kActRelu), 1}},
  };
  cases.insert(cases.end(), mma.begin(), mma.end());
  // The depthwise kernel on awkward shapes beyond the registry's (whose depthwise cases are in `cases`).
  Attrs bn_dw = ca({2, 2}, {1, 1}, {1, 1}, 5);
  bn_dw.eps = 1e-3;
  Attrs drop_dw2 = ca({1, 1}, {1, 1}, {1, 1}, 16);
  drop_dw2.p = 0.3, drop_dw2.seed = 77, drop_dw2.offset = 3;
  const std::vector<std::pair<std::string, TestCase>> dw = {
      {"conv2d", {"dw_c3_6x600_k3_pad1_wide_f16_tiles", {{1, 3, 6, 600}, {3, 1, 3, 3}, {3}}, ca({1, 1}, {1, 1}, {1, 1}, 3, kActRelu), 1}},
      {"conv2d", {"dw_c4_7x7_k7_pad3_s2", {{2, 4, 7, 7}, {4, 1, 7, 7}, {4}}, ca({2, 2}, {3, 3}, {1, 1}, 4), 1}},
      {"conv2d", {"dw_c3_20x33_k3_dil3_pad3_s3x2", {{1, 3, 20, 33}, {3, 1, 3, 3}, {}}, ca({3, 2}, {3, 3}, {3, 3}, 3, kActSilu), 1}},
      {"conv2d", {"dw_c1_g1_10x8_k3", {{2, 1, 10, 8}, {1, 1, 3, 3}, {1}}, ca({1, 1}, {0, 0}, {1, 1}, 1), 1}},
      {"conv2d_bn_relu", {"dw_c5_13x11_s2_bias_eps1e-3", {{2, 5, 13, 11}, {5, 1, 3, 3}, {5}, {5}, {5}, {5}, {5}}, bn_dw, 1}},
      {"conv2d_gelu_dropout", {"dw_c16_8x16_k3_p0.3", {{2, 16, 8, 16}, {16, 1, 3, 3}, {16}}, drop_dw2, 1}},
  };
  // EMU_CONV_ONLY=depthwise: the depthwise kernel alone (its cases), for a quick check; =mma the
  // tensor-core implicit GEMM alone (every case it takes).
  const char* only = std::getenv("EMU_CONV_ONLY");
  const bool dw_only = only && std::string(only) == "depthwise", mma_only = only && std::string(only) == "mma";
  if (!dw_only) cases.insert(cases.end(), dw.begin(), dw.end());
  else {
    std::vector<std::pair<std::string, TestCase>> keep;
    for (const auto& c : cases)
      if (c.second.attrs.groups == c.second.inputs[0][1]) keep.push_back(c);
    keep.insert(keep.end(), dw.begin(), dw.end());
    cases = keep;
  }
  for (const auto& [name, tc] : cases)
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      if (mma_only) {
        for (int m = 0; m < 2; ++m) run(name, tc, dt, 3, hc::ConvTile::t64x64, m);
        continue;
      }
      if (!dw_only) {
        for (hc::ConvTile t : {hc::ConvTile::t64x64, hc::ConvTile::t128x16, hc::ConvTile::t256x4}) run(name, tc, dt, 0, t);
        run(name, tc, dt, 1, hc::ConvTile::t64x64);
      }
      for (int m = 0; m < kDwModes; ++m) run(name, tc, dt, 2, hc::ConvTile::t64x64, m);
      if (!dw_only)
        for (int m = 0; m < 2; ++m) run(name, tc, dt, 3, hc::ConvTile::t64x64, m);
    }
  if (mma_only) {
    std::printf("conv (implicit-mma only): %d runs, fails: %d\n", runs, fails);
    return fails != 0;
  }
  if (dw_only) {
    std::printf("conv (depthwise only): %d runs, fails: %d\n", runs, fails);
    return fails != 0;
  }
  // The products' epilogue by packs (train.cu epilogue_packs: inner 1, whole packs, aligned) against the
  // elementwise form (the same launch with y one element off alignment), on rows x n outputs with a
  // bias, a residual, each activation and dropout (its Philox blocks at pack boundaries and offsets).
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int act = 0; act <= 4; ++act)
      for (int drop_on = 0; drop_on < 2; ++drop_on) {
        const int64_t rows = 7, n = 72, total = rows * n, es = int64_t(dtype_size(dt));
        std::vector<double> yv(total), bv(n), rv(total);
        for (int64_t i = 0; i < total; ++i) yv[i] = std::sin(0.37 * double(i)) * 3, rv[i] = std::cos(0.11 * double(i));
        for (int64_t i = 0; i < n; ++i) bv[i] = 0.25 * std::sin(double(i));
        std::vector<unsigned char> ya = to_dev(yv, dt), bb = to_dev(bv, dt), rb = to_dev(rv, dt);
        std::vector<unsigned char> yb(ya.size() + 16, 0);
        std::memcpy(yb.data() + es, ya.data(), size_t(total * es));
        // 16-byte aligned copies (std::vector's storage is, for these sizes, on glibc; checked).
        if ((reinterpret_cast<uintptr_t>(ya.data()) & 15u) || (reinterpret_cast<uintptr_t>(bb.data()) & 15u) ||
            (reinterpret_cast<uintptr_t>(rb.data()) & 15u)) {
          std::printf("epilogue packs: host buffers not 16-byte aligned, skipped\n");
          continue;
        }
        hc::EpilogueParams ep;
        ep.bias = bb.data(), ep.res = rb.data(), ep.total = total, ep.n = n, ep.inner = 1, ep.act = act;
        if (drop_on) ep.seed_lo = 0x12345u, ep.seed_hi = 7u, ep.off_lo = 5u, ep.off_hi = 1u, ep.thr = 1u << 22, ep.keep_scale = 1.0 / 0.75;
        ep.y = ya.data();
        hc::launch_epilogue(dt_of(dt), ep, 3, nullptr);
        ep.y = yb.data() + es;
        hc::launch_epilogue(dt_of(dt), ep, 3, nullptr);
        int bad = 0;
        for (int64_t i = 0; i < total; ++i) {
          const double a = from_dev(ya, size_t(i), dt);
          double b;
          std::vector<unsigned char> one(yb.begin() + es * (i + 1), yb.begin() + es * (i + 2));
          b = from_dev(one, 0, dt);
          if (!(a == b || std::fabs(a - b) <= 1e-6 * std::fabs(b))) ++bad;
        }
        ++runs;
        if (bad) ++fails, std::printf("FAIL epilogue packs %s act %d drop %d: %d of %lld differ\n", to_string(dt), act, drop_on, bad, (long long)total);
      }
  std::printf("conv: %d runs, fails: %d\n", runs, fails);
  return fails != 0;
}
