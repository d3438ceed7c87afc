// The convolutions of docs/ops.md section 4: conv2d, conv2d_bn_relu, conv2d_gelu_dropout (shaders/conv.comp,
// conv_depthwise.comp, and the tensor-core path through conv.comp IM2COL and mm_coopmat.comp).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "hal/vulkan/kernels_common.hpp"
#include "plan/dropout.hpp"
#include "ops/depthwise_tiles.hpp"

namespace kf::hal::vk {
namespace {

struct ConvPush {
  uint32_t N, C, H, W, O, groups;
  uint32_t khw, strides, pads, dils;  // {height | width << 16}
  uint32_t seed_lo, seed_hi, off_lo, off_hi, thr;
  float keep_scale;
};

// conv_depthwise.comp's push constants: ConvPush, then the tile (src/ops/depthwise_tiles.hpp).
struct DwPush {
  ConvPush c;
  uint32_t tow, toh, pb, iwt, iht;
  uint32_t wtiles, htiles, tiles;
};

constexpr int64_t kDwSmem = 4096;  // conv_depthwise.comp SMEM: floats of the staged window

struct FoldPush {
  uint32_t O;
  float eps;
};

uint32_t hw16(int64_t h, int64_t w) { return static_cast<uint32_t>(h) | (static_cast<uint32_t>(w) << 16); }

// The convolutions' tensor-core path (conv.comp IM2COL + mm_coopmat.comp): whether it takes the call.
struct ConvCoopmat {
  bool fits = false;
  bool bf16_native = false;  // bf16 as bf16 on the tensor cores (mm_coopmat_khr_bf16n_*)
  std::string variant;
  uint32_t bm = 0, bn = 0;
};
ConvCoopmat conv_coopmat(const VulkanDevice& dev, const OpCall& call) {
  const Shape& xs = call.inputs[0].shape;
  const Shape& ws = call.inputs[1].shape;
  const Shape& ys = call.outputs[0].shape;
  const uint64_t O = static_cast<uint64_t>(ws[0]);
  const uint64_t M = static_cast<uint64_t>(ys[0] * ys[2] * ys[3]);
  const uint64_t K = static_cast<uint64_t>(ws[1] * ws[2] * ws[3]);
  const uint64_t P = static_cast<uint64_t>(ys[2] * ys[3]), images = static_cast<uint64_t>(xs[0]);
  const uint64_t col_bytes = M * K * 2;
  const uint64_t range = dev.info().caps.max_storage_range ? dev.info().caps.max_storage_range : (1ull << 30);
  ConvCoopmat c;
  const std::string f16_variant = default_coopmat_variant(O, P, images, &c.bm, &c.bn);
  // bf16 where the products take it natively (VulkanDevice::coopmat_bf16): the same kernels on bf16
  // operands as stored, at 16x16x16 whatever the f16 shape. (Not as rows scaled into f16: the column
  // matrix would need a scaling pass of its own.)
  c.bf16_native = call.dtype == DType::bf16 && dev.coopmat_bf16().native;
  c.variant = c.bf16_native ? Bf16Choice::variant(f16_variant) : dev.coopmat_mm().variant(f16_variant);
  c.fits = dev.coopmat_mm().path != CoopmatPath::portable && (call.dtype == DType::f16 || c.bf16_native) &&
           call.attrs.groups == 1 && K % 8 == 0 && col_bytes <= std::min<uint64_t>(range, 1ull << 30) &&
           dev.has_variant("conv_im2col_" + std::string(to_string(call.dtype))) &&
           dev.has_variant(c.variant) && O <= 0xffffffffull && (P + c.bn - 1) / c.bn <= 65535 &&
           (O + c.bm - 1) / c.bm <= 65535 && images <= 65535;
  return c;
}

}  // namespace

bool supports_conv(const VulkanDevice& dev, const OpCall& call, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (!dev.has_variant("conv_" + std::string(to_string(call.dtype))))
    return no(std::string("this build has no Vulkan kernel for ") + call.name() + " in " + to_string(call.dtype));
  if (call.inputs.empty()) return true;  // the op and dtype alone
  const Shape& ws = call.inputs[1].shape;
  const Shape& ys = call.outputs[0].shape;
  const uint64_t groups = static_cast<uint64_t>(call.attrs.groups);
  const uint64_t Og = static_cast<uint64_t>(ws[0]) / groups;
  const uint64_t M = static_cast<uint64_t>(ys[0] * ys[2] * ys[3]);
  const uint64_t K = static_cast<uint64_t>(ws[1] * ws[2] * ws[3]);
  if (call.outputs[0].numel > 0xffffffffll || call.inputs[0].numel > 0xffffffffll ||
      static_cast<uint64_t>(call.inputs[1].numel) > 0xffffffffull || M * 64 > 0xffffffffull || K > 0xffffffffull)
    return no("tensors of more than 2^32 elements (32-bit indices in conv.comp)");
  if (groups > 65535 || (Og + 63) / 64 > 65535) return no("more than 65535 groups or 4194240 channels per group");
  if (dev.tuning().conv_path == 2 && !conv_coopmat(dev, call).fits)
    return no("the tensor-core path was forced (KF_TUNE conv_path=2) but needs tensor cores (here: " +
              dev.coopmat_mm().describe() + "), f16 (bf16 where the products take it natively: " +
              dev.coopmat_bf16().describe() + "), one group, C * kh * kw a multiple of 8, a column matrix of at most 1 GiB and at most 65535 workgroups "
              "in each dimension of its grid");
  return true;
}

// conv2d, conv2d_bn_relu (a fold pass first: per-channel scale and shift in the workspace),
// conv2d_gelu_dropout: depthwise (groups == C) on conv_depthwise.comp (a workgroup per tile of output
// pixels of one or more planes, looped past 65535), the rest on conv.comp's implicit GEMM: x = pixel
// tiles (looped past 65535), y = channel tiles of a group, z = groups (or its tensor-core path).
Variant dispatch_conv(VulkanDevice& dev, const OpCall& call) {
  const Attrs& a = call.attrs;
  const Shape& xs = call.inputs[0].shape;
  const Shape& ws = call.inputs[1].shape;
  const Shape& ys = call.outputs[0].shape;
  const bool bn = call.id == OpId::conv2d_bn_relu;
  const bool gelu_drop = call.id == OpId::conv2d_gelu_dropout;
  const size_t bias_k = bn ? 6 : 2;
  const bool has_bias = call.inputs.size() > bias_k && call.inputs[bias_k].buffer;
  const uint64_t groups = static_cast<uint64_t>(a.groups);
  const uint64_t O = static_cast<uint64_t>(ws[0]), Og = O / groups;
  const uint64_t M = static_cast<uint64_t>(ys[0] * ys[2] * ys[3]);
  const uint64_t K = static_cast<uint64_t>(ws[1] * ws[2] * ws[3]);
  // 32-bit indices, at most 65535 groups of at most 4194240 channels: supports_conv.

  std::shared_ptr<Buffer> ss;
  if (bn) {
    FoldPush fp{static_cast<uint32_t>(O), static_cast<float>(call.eps)};
    ss = dev.workspace(8 * O);
    Launch f;
    f.variant = "conv_fold_bn_" + std::string(to_string(call.dtype));
    f.spec = {kWorkgroup, has_bias ? 1u : 0u};
    f.bindings[0] = has_bias ? call.inputs[6].buffer : call.inputs[2].buffer;
    for (int k = 1; k <= 4; ++k) f.bindings[k] = call.inputs[1 + k].buffer;  // bn_w, bn_b, bn_mean, bn_var
    f.bindings[5] = ss;
    f.push = &fp;
    f.push_bytes = sizeof(fp);
    f.groups = static_cast<uint32_t>((O + kWorkgroup - 1) / kWorkgroup);
    dev.record(f);
  }
  const bool drop = gelu_drop && a.p > 0;
  ConvPush pc{};
  pc.N = static_cast<uint32_t>(xs[0]);
  pc.C = static_cast<uint32_t>(xs[1]);
  pc.H = static_cast<uint32_t>(xs[2]);
  pc.W = static_cast<uint32_t>(xs[3]);
  pc.O = static_cast<uint32_t>(O);
  pc.groups = static_cast<uint32_t>(groups);
  pc.khw = hw16(ws[2], ws[3]);
  pc.strides = hw16(a.stride[0], a.stride[1]);
  pc.pads = hw16(a.padding[0], a.padding[1]);
  pc.dils = hw16(a.dilation[0], a.dilation[1]);
  set_dropout(pc, a);
  const uint32_t act = bn ? static_cast<uint32_t>(kActRelu) : gelu_drop ? static_cast<uint32_t>(kActGelu)
                                                                        : static_cast<uint32_t>(a.act);

  // Depthwise (groups == C) on conv_depthwise.comp unless a path is forced (KF_TUNE conv_path=1 the
  // implicit GEMM, 2 the tensor cores), where one row of outputs' input window fits its shared memory.
  const std::string dw_variant = "conv_depthwise_" + std::string(to_string(call.dtype));
  if (dev.tuning().conv_path == 0 && a.groups == xs[1] && dev.has_variant(dw_variant)) {
    const int64_t vw = pack_elems(call.dtype);
    const DepthwiseTiles dp = plan_depthwise_tiles(vw, xs[0] * xs[1], ys[2], ys[3], ws[2], ws[3], a.stride[0], a.stride[1],
                                                   a.dilation[0], a.dilation[1], kDwSmem);
    if (dp.ok) {
      DwPush dpc{pc,
                 static_cast<uint32_t>(dp.tow),
                 static_cast<uint32_t>(dp.toh),
                 static_cast<uint32_t>(dp.pb),
                 static_cast<uint32_t>(dp.iwt),
                 static_cast<uint32_t>(dp.iht),
                 static_cast<uint32_t>(dp.wtiles),
                 static_cast<uint32_t>(dp.htiles),
                 static_cast<uint32_t>(dp.tiles)};
      const bool vec_load = xs[3] % vw == 0, vec_store = ys[3] % vw == 0;
      const uint32_t kwt = (a.stride[1] == 1 && a.dilation[1] == 1 && (ws[3] == 3 || ws[3] == 5)) ? static_cast<uint32_t>(ws[3]) : 0u;
      Launch l;
      l.variant = dw_variant;
      l.spec = {kWorkgroup, (!bn && has_bias) ? 1u : 0u, bn ? 1u : 0u, act, drop ? 1u : 0u, vec_load ? 1u : 0u,
                vec_store ? 1u : 0u, kwt};
      l.bindings[0] = call.inputs[0].buffer;
      l.bindings[1] = call.inputs[1].buffer;
      if (!bn && has_bias) l.bindings[2] = call.inputs[2].buffer;
      if (bn) l.bindings[3] = ss;
      l.bindings[4] = call.outputs[0].buffer;
      l.push = &dpc;
      l.push_bytes = sizeof(dpc);
      l.groups = static_cast<uint32_t>(std::clamp<int64_t>(dp.tiles, 1, std::min<int64_t>(65535, dev.tuning().max_groups)));
      dev.record(l);
      return "vulkan:conv/depthwise,tile=" + std::to_string(dp.tow) + "x" + std::to_string(dp.toh) +
             (dp.pb > 1 ? ",planes=" + std::to_string(dp.pb) : "") + ",vpt=" + std::to_string(vw) +
             (kwt ? ",kw=" + std::to_string(kwt) : "") + (vec_load ? ",16B-loads" : "") +
             (vec_store ? ",16B-stores" : "") + (bn ? ",bn-folded" : "");
    }
  }

  // The tensor-core path (f16, or bf16 natively; one group, K % 8 == 0, NV or KHR cooperative matrix): the column matrix
  // col [N * P, K] into a temporary buffer (conv.comp IM2COL), then mm_coopmat.comp per image with the
  // output channel as the row, C = W col^T: the output is NCHW as it stands and the epilogue takes the
  // bias (or the folded batch norm) per row. Up to 1 GiB of column matrix; larger calls and the rest
  // take the implicit GEMM below.
  const uint64_t P = static_cast<uint64_t>(ys[2] * ys[3]), images = static_cast<uint64_t>(xs[0]);
  const uint64_t col_bytes = M * K * 2;
  // A forced tensor-core path (KF_TUNE conv_path=2) that does not fit was refused by supports_conv.
  const ConvCoopmat cm = conv_coopmat(dev, call);
  const std::string& cm_variant = cm.variant;
  const uint32_t cm_bm = cm.bm, cm_bn = cm.bn;
  if (cm.fits && dev.tuning().conv_path != 1) {
    // A 1 x 1 convolution with stride 1 and no padding needs no column matrix: each image [C, P] is B
    // as it stands ([K, N], rows of P: P % 8 == 0 for whole 16-byte loads).
    const bool direct = ws[2] == 1 && ws[3] == 1 && a.stride[0] == 1 && a.stride[1] == 1 && a.padding[0] == 0 &&
                        a.padding[1] == 0 && P % 8 == 0;
    std::shared_ptr<Buffer> col = call.inputs[0].buffer;
    if (!direct) {
      col = dev.workspace(static_cast<size_t>(col_bytes), 1);
      Launch ic;
      ic.variant = "conv_im2col_" + std::string(to_string(call.dtype));
      ic.spec = {kWorkgroup};
      ic.bindings[0] = call.inputs[0].buffer;
      ic.bindings[4] = col;
      ic.push = &pc;
      ic.push_bytes = 10 * sizeof(uint32_t);  // N .. dils
      ic.groups = grid(M * K / 8, kWorkgroup, dev.info().caps, dev.tuning());
      dev.record(ic);
    }
    MatmulPush mp{static_cast<uint32_t>(O), static_cast<uint32_t>(P), static_cast<uint32_t>(K), 0u,
                  static_cast<uint32_t>(P * K), static_cast<uint32_t>(O * P), pc.seed_lo, pc.seed_hi, pc.off_lo,
                  pc.off_hi, pc.thr, pc.keep_scale};
    const uint32_t row_bias = (!bn && has_bias) ? 1u : 0u;
    Launch g;
    g.variant = cm_variant;
    // B_NK (col rows are pixels; direct: B is [K, N]), HAS_BIAS, HAS_RES, ACT, DROPOUT, A_KM, ACC_OUT,
    // BIAS_ROW, ROW_SS.
    g.spec = {256u, direct ? 0u : 1u, row_bias, 0u, act, drop ? 1u : 0u, 0u, 0u, row_bias, bn ? 1u : 0u};
    g.bindings[0] = call.inputs[1].buffer;
    g.bindings[1] = col;
    if (row_bias) g.bindings[2] = call.inputs[2].buffer;
    if (bn) g.bindings[3] = ss;
    g.bindings[4] = call.outputs[0].buffer;
    g.push = &mp;
    g.push_bytes = sizeof(mp);
    g.groups = static_cast<uint32_t>((P + cm_bn - 1) / cm_bn);
    g.groups_y = static_cast<uint32_t>((O + cm_bm - 1) / cm_bm);
    g.groups_z = static_cast<uint32_t>(images);
    dev.record(g);
    return std::string(direct ? "vulkan:conv/1x1-" : "vulkan:conv/im2col+") +
           (cm.bf16_native ? std::string(Bf16Choice::kLabel) + ",bf16-native" : dev.coopmat_mm().label()) +
           (bn ? ",bn-folded" : "");
  }
  Launch l;
  l.variant = "conv_" + std::string(to_string(call.dtype));
  l.spec = {kWorkgroup, (!bn && has_bias) ? 1u : 0u, bn ? 1u : 0u, act, drop ? 1u : 0u};
  l.bindings[0] = call.inputs[0].buffer;
  l.bindings[1] = call.inputs[1].buffer;
  if (!bn && has_bias) l.bindings[2] = call.inputs[2].buffer;
  if (bn) l.bindings[3] = ss;
  l.bindings[4] = call.outputs[0].buffer;
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  l.groups = static_cast<uint32_t>(std::clamp<uint64_t>((M + 63) / 64, 1, std::min<uint64_t>(65535, dev.tuning().max_groups)));
  l.groups_y = static_cast<uint32_t>((Og + 63) / 64);
  l.groups_z = static_cast<uint32_t>(groups);
  dev.record(l);
  return std::string("vulkan:conv/implicit-gemm-64x64") + (bn ? ",bn-folded" : "");
}

}  // namespace kf::hal::vk
