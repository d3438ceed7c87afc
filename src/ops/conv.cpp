// docs/ops.md section 4, convolutions (NCHW, as torch.nn.Conv2d: stride, zero padding, dilation and groups
// from Attrs, each {height, width}):
//   conv2d(x [N, C, H, W], W [O, C/groups, KH, KW], bias? [O]) = act(conv(x) + bias)   (act: Attrs::act)
//   conv2d_bn_relu(x, W, bn_w, bn_b, bn_mean, bn_var, conv_bias?) = relu(batch_norm(conv(x) + conv_bias)),
//     batch norm in inference form, eps = Attrs::eps (default 1e-5). The optional conv_bias comes last
//     (the registry's optional inputs follow the required ones). The norm is folded into a per-channel
//     scale w / sqrt(var + eps) and shift (conv_bias - mean) scale + b by a preparation pass, then applied
//     to the accumulator in the epilogue (the same as scaling W's rows, without rewriting W).
//   conv2d_gelu_dropout(x, W, bias?) = dropout(gelu(conv(x) + bias)), Philox mask of docs/ops.md with the
//     element index the output's linear (NCHW) index; p, seed, offset from Attrs.
//   depthwise_pointwise(x, W_dw [C, 1, KH, KW], W_pw [O, C, 1, 1], b_dw? [C], b_pw? [O])
//     = act(conv1x1(act(conv_dw(x) + b_dw), W_pw) + b_pw): the MobileNet block with its batch norms folded
//     into the biases; the depthwise conv takes stride / padding / dilation (groups = C, Attrs::groups is
//     not read), the pointwise one is 1x1 with stride 1; act (Attrs::act, default none) after each. A
//     composed op: conv2d twice.
// Output size: floor((H + 2 pad - dilation (KH - 1) - 1) / stride) + 1, as torch; it must be >= 1.
#include <cmath>

#include "kf/error.hpp"
#include "ops/compose.hpp"
#include "ops/op_checks.hpp"
#include "ops/parallel.hpp"
#include "ops/reference_math.hpp"
#include "ops/registry.hpp"

namespace kf {
namespace {

[[noreturn]] void shape_error(const OpDef& d, const std::string& arg, const Shape& got, const std::string& want) {
  throw Error(ErrorCode::Shape, d.name + ": argument '" + arg + "' has shape " + to_string(got) + "; expected " + want);
}

[[noreturn]] void attr_error(const OpDef& d, const std::string& arg, const std::string& got, const std::string& want) {
  throw Error(ErrorCode::InvalidArgument, d.name + ": argument '" + arg + "' is " + got + "; expected " + want);
}

std::string pair_str(const std::array<int64_t, 2>& v) {
  return "{" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + "}";
}

double activate(double v, int64_t act) {
  switch (act) {
    case kActRelu: return ref::relu(v);
    case kActGelu: return ref::gelu(v);
    case kActGeluTanh: return ref::gelu_tanh(v);
    case kActSilu: return ref::silu(v);
    default: return v;
  }
}

// Checks x [N, C, H, W], W [O, C / groups, KH, KW] and the attributes; returns [N, O, OH, OW].
// The kernels keep kernel sizes, strides, paddings and dilations in 16 bits.
Shape conv_shape(const OpDef& d, const Shape& x, const Shape& w, const Attrs& a, int64_t groups,
                 const std::string& wname = "W") {
  if (x.size() != 4) shape_error(d, "x", x, "[N, C, H, W] (4 dimensions, NCHW)");
  if (w.size() != 4) shape_error(d, wname, w, "[O, C / groups, KH, KW] (4 dimensions)");
  for (int i = 0; i < 2; ++i) {
    if (a.stride[i] < 1 || a.stride[i] > 65535) attr_error(d, "stride", pair_str(a.stride), "values in [1, 65535]");
    if (a.dilation[i] < 1 || a.dilation[i] > 65535)
      attr_error(d, "dilation", pair_str(a.dilation), "values in [1, 65535]");
    if (a.padding[i] < 0 || a.padding[i] > 65535)
      attr_error(d, "padding", pair_str(a.padding), "values in [0, 65535]");
  }
  const int64_t C = x[1];
  if (groups < 1 || C % groups != 0 || w[0] % groups != 0)
    attr_error(d, "groups", std::to_string(groups),
               "a positive divisor of the input channels (" + std::to_string(C) + ") and of the output channels (" +
                   std::to_string(w[0]) + ")");
  if (w[1] != C / groups)
    shape_error(d, wname, w, "[O, " + std::to_string(C / groups) + ", KH, KW] (C / groups input channels per group)");
  if (w[2] > 65535 || w[3] > 65535) shape_error(d, wname, w, "kernel sizes up to 65535");
  Shape y = {x[0], w[0], 0, 0};
  for (int i = 0; i < 2; ++i) {
    const int64_t span = a.dilation[i] * (w[2 + i] - 1) + 1;
    const int64_t in = x[2 + i] + 2 * a.padding[i];
    if (in < span)
      shape_error(d, "x", x, "an image at least as large as the dilated kernel (" + std::to_string(span) +
                                 ") after padding; the output would be empty");
    y[2 + i] = (in - span) / a.stride[i] + 1;
  }
  return y;
}

// y = conv(x, w) (no epilogue), float64, NCHW.
void conv_ref(const HostTensor& x, const HostTensor& w, const Attrs& a, int64_t groups, const Shape& ys,
              std::vector<double>& y) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t O = w.shape[0], KH = w.shape[2], KW = w.shape[3], OH = ys[2], OW = ys[3];
  const int64_t Cg = C / groups, Og = O / groups;
  y.assign(static_cast<size_t>(N * O * OH * OW), 0.0);
  parallel_for(N * O, [&](int64_t begin, int64_t end) {
    for (int64_t no = begin; no < end; ++no) {
      const int64_t n = no / O, o = no % O, g = o / Og;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = 0;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh) {
              const int64_t ih = oh * a.stride[0] - a.padding[0] + kh * a.dilation[0];
              if (ih < 0 || ih >= H) continue;
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t iw = ow * a.stride[1] - a.padding[1] + kw * a.dilation[1];
                if (iw < 0 || iw >= W) continue;
                s += x.data[((n * C + g * Cg + c) * H + ih) * W + iw] * w.data[((o * Cg + c) * KH + kh) * KW + kw];
              }
            }
          y[(no * OH + oh) * OW + ow] = s;
        }
    }
  }, 1);
}

void expect_channels(const OpDef& d, const std::vector<Shape>& in, size_t k, int64_t O) {
  if (k < in.size() && !in[k].empty() && in[k] != Shape{O}) shape_error(d, d.inputs[k], in[k], "[" + std::to_string(O) + "]");
}

void check_act(const OpDef& d, const Attrs& a) {
  if (a.act < kActNone || a.act > kActSilu)
    attr_error(d, "act", std::to_string(a.act), "0 (none), 1 (relu), 2 (gelu), 3 (gelu_tanh) or 4 (silu)");
}

Attrs conv_attrs(std::array<int64_t, 2> stride, std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation,
                 int64_t groups, int64_t act = kActNone) {
  Attrs a;
  a.stride = stride;
  a.padding = padding;
  a.dilation = dilation;
  a.groups = groups;
  a.act = act;
  return a;
}

}  // namespace

void register_conv_ops(std::vector<OpDef>& ops) {
  const std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16};  // no f64 conv kernel (f32 tiles)
  {
    OpDef op;
    op.name = "conv2d";
    op.family = Family::Matmul;
    op.inputs = {"x", "W", "bias"};
    op.required_inputs = 2;
    op.outputs = {"y"};
    op.dtypes = dtypes;
    op.transcendental = true;
    op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
      check_act(d, a);
      const Shape y = conv_shape(d, in[0], in[1], a, a.groups);
      expect_channels(d, in, 2, y[1]);
      return std::vector<Shape>{y};
    };
    op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
      conv_ref(in[0], in[1], a, a.groups, out[0].shape, out[0].data);
      const int64_t O = out[0].shape[1], P = out[0].shape[2] * out[0].shape[3];
      for (size_t i = 0; i < out[0].data.size(); ++i) {
        double v = out[0].data[i];
        if (in.size() > 2 && in[2].present()) v += in[2].data[(static_cast<int64_t>(i) / P) % O];
        out[0].data[i] = activate(v, a.act);
      }
    };
    op.terms = [](const std::vector<Shape>& in) { return double(in[1][1] * in[1][2] * in[1][3]); };
    // The cost model sees shapes only: flops as for stride 1 without padding (a 3x3 conv with padding 1
    // is counted on (H-2)(W-2) pixels, about 7% short at 56x56).
    op.flops = [](const std::vector<Shape>& in, const Attrs&) {
      return 2.0 * double(in[0][0] * in[1][0]) * double(in[1][1] * in[1][2] * in[1][3]) *
             double(std::max<int64_t>(1, (in[0][2] - in[1][2] + 1) * (in[0][3] - in[1][3] + 1)));
    };
    op.tests = {{"n1_c1_1x1", {{1, 1, 1, 1}, {1, 1, 1, 1}, {}}},
                {"n2_c3_7x9_o5_k3_pad1_relu", {{2, 3, 7, 9}, {5, 3, 3, 3}, {5}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 1, kActRelu)},
                {"g2_stride2x3_pad1x0_dil2x1_gelu", {{1, 4, 10, 11}, {6, 2, 3, 2}, {6}}, conv_attrs({2, 3}, {1, 0}, {2, 1}, 2, kActGelu)},
                {"depthwise_c6_5x5_pad1_silu", {{1, 6, 5, 5}, {6, 1, 3, 3}, {}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 6, kActSilu)},
                {"pointwise_c8_9x9_o70", {{2, 8, 9, 9}, {70, 8, 1, 1}, {70}}, conv_attrs({1, 1}, {0, 0}, {1, 1}, 1)},
                {"c3_20x20_o4_k5_s2_p2_tanh", {{1, 3, 20, 20}, {4, 3, 5, 5}, {4}}, conv_attrs({2, 2}, {2, 2}, {1, 1}, 1, kActGeluTanh)},
                {"c17_6x6_o3_k2", {{3, 17, 6, 6}, {3, 17, 2, 2}, {}}, conv_attrs({1, 1}, {0, 0}, {1, 1}, 1)},
                // C KH KW a multiple of 8 (the CUDA backend's 16-bit implicit GEMM on tensor cores): tails
                // of the 128-pixel and 64-channel tiles, stride and dilation.
                {"c8_11x13_o20_k3_pad1_relu", {{2, 8, 11, 13}, {20, 8, 3, 3}, {20}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 1, kActRelu)},
                {"c16_10x9_o70_k3_s2_dil2", {{1, 16, 10, 9}, {70, 16, 3, 3}, {}}, conv_attrs({2, 2}, {1, 1}, {2, 2}, 1)},
                // Depthwise (groups == C: the backends' depthwise kernels): odd sizes, channels not a
                // multiple of the 16-byte pack, stride 2, dilation 2, multiplier 2, 1x1 images, 5x5,
                // rows wider than one tile, rows that are whole packs (16-byte loads and stores).
                {"dw_c5_17x13_k3_pad1_relu", {{2, 5, 17, 13}, {5, 1, 3, 3}, {5}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 5, kActRelu)},
                {"dw_c12_16x16_k3_s2_pad1", {{2, 12, 16, 16}, {12, 1, 3, 3}, {12}}, conv_attrs({2, 2}, {1, 1}, {1, 1}, 12)},
                {"dw_c3_15x19_k3_dil2_pad2_gelu", {{2, 3, 15, 19}, {3, 1, 3, 3}, {3}}, conv_attrs({1, 1}, {2, 2}, {2, 2}, 3, kActGelu)},
                {"dw_mult2_c4_9x8_k5x3_pad2x1_silu", {{1, 4, 9, 8}, {8, 1, 5, 3}, {8}}, conv_attrs({1, 1}, {2, 1}, {1, 1}, 4, kActSilu)},
                {"dw_mult3_c2_11x10_k3_s2x1_dil1x2", {{2, 2, 11, 10}, {6, 1, 3, 3}, {}}, conv_attrs({2, 1}, {1, 2}, {1, 2}, 2, kActGeluTanh)},
                {"dw_c7_1x1_k3_pad1", {{3, 7, 1, 1}, {7, 1, 3, 3}, {7}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 7)},
                {"dw_c9_1x1_k1", {{2, 9, 1, 1}, {9, 1, 1, 1}, {}}, conv_attrs({1, 1}, {0, 0}, {1, 1}, 9)},
                {"dw_c6_12x24_k5_pad2", {{2, 6, 12, 24}, {6, 1, 5, 5}, {6}}, conv_attrs({1, 1}, {2, 2}, {1, 1}, 6, kActRelu)},
                {"dw_c2_9x300_k3_pad1_wide", {{1, 2, 9, 300}, {2, 1, 3, 3}, {2}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 2)},
                {"dw_c16_56x56_k3_pad1", {{1, 16, 56, 56}, {16, 1, 3, 3}, {16}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 16, kActRelu)}};
    op.bench = {{"resnet50_1x1_256to64_56", {{32, 256, 56, 56}, {64, 256, 1, 1}, {64}}, conv_attrs({1, 1}, {0, 0}, {1, 1}, 1, kActRelu)},
                // depthwise_pointwise's depthwise part alone (kf-bench --all-cases or --cases mobilenet).
                {"mobilenet_dw_c128_56_k3", {{32, 128, 56, 56}, {128, 1, 3, 3}, {128}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 128, kActRelu)}};
    ops.push_back(op);
  }
  {
    OpDef op;
    op.name = "conv2d_bn_relu";
    op.family = Family::Matmul;
    op.inputs = {"x", "W", "bn_w", "bn_b", "bn_mean", "bn_var", "conv_bias"};
    op.required_inputs = 6;
    op.outputs = {"y"};
    op.dtypes = dtypes;
    op.default_eps = 1e-5;
    op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
      opcheck::check_eps(d, a);
      const Shape y = conv_shape(d, in[0], in[1], a, a.groups);
      for (size_t k = 2; k < in.size(); ++k) expect_channels(d, in, k, y[1]);
      return std::vector<Shape>{y};
    };
    op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
      conv_ref(in[0], in[1], a, a.groups, out[0].shape, out[0].data);
      const double eps = a.eps == 0 ? 1e-5 : a.eps;
      const int64_t O = out[0].shape[1], P = out[0].shape[2] * out[0].shape[3];
      for (size_t i = 0; i < out[0].data.size(); ++i) {
        const int64_t o = (static_cast<int64_t>(i) / P) % O;
        double v = out[0].data[i] + (in.size() > 6 && in[6].present() ? in[6].data[o] : 0.0);
        v = (v - in[4].data[o]) / std::sqrt(in[5].data[o] + eps) * in[2].data[o] + in[3].data[o];
        out[0].data[i] = ref::relu(v);
      }
    };
    // Variances positive (|v| + 0.5), away from 0 where 1 / sqrt(var + eps) would magnify rounding.
    op.prepare_inputs = [](const std::vector<Shape>&, const Attrs&, std::vector<std::vector<double>>& v) {
      for (auto& x : v[5]) x = std::abs(x) + 0.5;
    };
    op.terms = [](const std::vector<Shape>& in) { return double(in[1][1] * in[1][2] * in[1][3]); };
    op.flops = [](const std::vector<Shape>& in, const Attrs&) {
      return 2.0 * double(in[0][0] * in[1][0]) * double(in[1][1] * in[1][2] * in[1][3]) *
             double(std::max<int64_t>(1, (in[0][2] - in[1][2] + 1) * (in[0][3] - in[1][3] + 1)));
    };
    op.tests = {{"n2_c3_7x9_o5_k3_pad1_bias", {{2, 3, 7, 9}, {5, 3, 3, 3}, {5}, {5}, {5}, {5}, {5}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 1)},
                {"g3_s2_p1_nobias", {{1, 6, 9, 8}, {9, 2, 3, 3}, {9}, {9}, {9}, {9}}, conv_attrs({2, 2}, {1, 1}, {1, 1}, 3)},
                {"c8_7x9_o12_k3_pad1_bias", {{2, 8, 7, 9}, {12, 8, 3, 3}, {12}, {12}, {12}, {12}, {12}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 1)},
                {"pointwise_c20_o65_dil", {{2, 20, 5, 7}, {65, 20, 1, 1}, {65}, {65}, {65}, {65}, {65}}, conv_attrs({1, 1}, {0, 0}, {1, 1}, 1)},
                {"k3_dil2_eps1e-3", {{1, 4, 11, 13}, {7, 4, 3, 3}, {7}, {7}, {7}, {7}}, [] {
                   Attrs a = conv_attrs({1, 1}, {2, 2}, {2, 2}, 1);
                   a.eps = 1e-3;
                   return a;
                 }()},
                {"dw_c6_9x16_k3_pad1_bias", {{2, 6, 9, 16}, {6, 1, 3, 3}, {6}, {6}, {6}, {6}, {6}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 6)}};
    op.bench = {{"resnet50_1x1_256to64_56", {{32, 256, 56, 56}, {64, 256, 1, 1}, {64}, {64}, {64}, {64}, {64}},
                 conv_attrs({1, 1}, {0, 0}, {1, 1}, 1)},
                {"resnet50_3x3_64to64_56_pad1", {{32, 64, 56, 56}, {64, 64, 3, 3}, {64}, {64}, {64}, {64}},
                 conv_attrs({1, 1}, {1, 1}, {1, 1}, 1)}};
    ops.push_back(op);
  }
  {
    OpDef op;
    op.name = "conv2d_gelu_dropout";
    op.family = Family::Matmul;
    op.inputs = {"x", "W", "bias"};
    op.required_inputs = 2;
    op.outputs = {"y"};
    op.dtypes = dtypes;
    op.transcendental = true;
    op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
      if (!(a.p >= 0.0 && a.p < 1.0)) attr_error(d, "p", std::to_string(a.p), "a probability in [0, 1)");
      const Shape y = conv_shape(d, in[0], in[1], a, a.groups);
      expect_channels(d, in, 2, y[1]);
      return std::vector<Shape>{y};
    };
    op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
      conv_ref(in[0], in[1], a, a.groups, out[0].shape, out[0].data);
      const int64_t O = out[0].shape[1], P = out[0].shape[2] * out[0].shape[3];
      const uint32_t thr = ref::dropout_threshold(a.p);
      for (size_t i = 0; i < out[0].data.size(); ++i) {
        double v = out[0].data[i];
        if (in.size() > 2 && in[2].present()) v += in[2].data[(static_cast<int64_t>(i) / P) % O];
        v = ref::gelu(v);
        if (a.p > 0) v = ref::dropout_keep(i, a.seed, a.offset, thr) ? v / (1.0 - a.p) : 0.0;
        out[0].data[i] = v;
      }
    };
    op.terms = [](const std::vector<Shape>& in) { return double(in[1][1] * in[1][2] * in[1][3]); };
    op.flops = [](const std::vector<Shape>& in, const Attrs&) {
      return 2.0 * double(in[0][0] * in[1][0]) * double(in[1][1] * in[1][2] * in[1][3]) *
             double(std::max<int64_t>(1, (in[0][2] - in[1][2] + 1) * (in[0][3] - in[1][3] + 1)));
    };
    Attrs a1 = conv_attrs({1, 1}, {1, 1}, {1, 1}, 1);
    a1.p = 0.3;
    a1.seed = 42;
    Attrs a2 = conv_attrs({2, 1}, {0, 1}, {1, 2}, 2);
    a2.p = 0.5;
    a2.seed = 7;
    a2.offset = 5;
    Attrs a3 = conv_attrs({1, 1}, {0, 0}, {1, 1}, 1);
    Attrs a4 = conv_attrs({2, 1}, {1, 0}, {1, 2}, 6);
    a4.p = 0.5;
    a4.seed = 11;
    a4.offset = (uint64_t(1) << 32) + 7;
    op.tests = {{"n2_c3_7x9_o5_k3_p0.3", {{2, 3, 7, 9}, {5, 3, 3, 3}, {5}}, a1},
                {"g2_s2x1_dil1x2_p0.5", {{1, 4, 9, 10}, {6, 2, 2, 3}, {}}, a2},
                {"pointwise_o70_p0", {{1, 8, 5, 5}, {70, 8, 1, 1}, {70}}, a3},
                {"c8_7x9_o12_k3_p0.3", {{1, 8, 7, 9}, {12, 8, 3, 3}, {12}}, a1},
                {"dw_c6_9x8_s2x1_dil1x2_p0.5", {{1, 6, 9, 8}, {6, 1, 3, 2}, {6}}, a4}};
    Attrs b = conv_attrs({1, 1}, {1, 1}, {1, 1}, 1);
    b.p = 0.1;
    b.seed = 1;
    op.bench = {{"resnet50_3x3_64to64_56_pad1", {{32, 64, 56, 56}, {64, 64, 3, 3}, {64}}, b}};
    ops.push_back(op);
  }
  {
    OpDef op;
    op.name = "depthwise_pointwise";
    op.family = Family::Matmul;
    op.inputs = {"x", "W_dw", "W_pw", "b_dw", "b_pw"};
    op.required_inputs = 3;
    op.outputs = {"y"};
    op.dtypes = dtypes;
    op.transcendental = true;
    op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
      check_act(d, a);
      if (in[0].size() != 4) shape_error(d, "x", in[0], "[N, C, H, W] (4 dimensions, NCHW)");
      const int64_t C = in[0][1];
      if (in[1].size() != 4 || in[1][0] != C || in[1][1] != 1)
        shape_error(d, "W_dw", in[1], "[" + std::to_string(C) + ", 1, KH, KW] (one filter per channel)");
      const Shape h = conv_shape(d, in[0], in[1], a, C, "W_dw");
      if (in[2].size() != 4 || in[2][1] != C || in[2][2] != 1 || in[2][3] != 1)
        shape_error(d, "W_pw", in[2], "[O, " + std::to_string(C) + ", 1, 1] (a 1x1 convolution)");
      expect_channels(d, in, 3, C);
      expect_channels(d, in, 4, in[2][0]);
      return std::vector<Shape>{{h[0], in[2][0], h[2], h[3]}};
    };
    op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
      const int64_t C = in[0].shape[1];
      OpDef d;
      d.name = "depthwise_pointwise";
      HostTensor h;
      h.shape = conv_shape(d, in[0].shape, in[1].shape, a, C);
      conv_ref(in[0], in[1], a, C, h.shape, h.data);
      const int64_t P = h.shape[2] * h.shape[3], O = out[0].shape[1];
      for (size_t i = 0; i < h.data.size(); ++i)
        h.data[i] = activate(h.data[i] + (in.size() > 3 && in[3].present() ? in[3].data[(int64_t(i) / P) % C] : 0.0), a.act);
      conv_ref(h, in[2], conv_attrs({1, 1}, {0, 0}, {1, 1}, 1), 1, out[0].shape, out[0].data);
      for (size_t i = 0; i < out[0].data.size(); ++i)
        out[0].data[i] = activate(out[0].data[i] + (in.size() > 4 && in[4].present() ? in[4].data[(int64_t(i) / P) % O] : 0.0), a.act);
    };
    op.terms = [](const std::vector<Shape>& in) { return double(in[1][2] * in[1][3] * in[2][1]); };
    op.flops = [](const std::vector<Shape>& in, const Attrs&) {
      const double P = double(std::max<int64_t>(1, (in[0][2] - in[1][2] + 1) * (in[0][3] - in[1][3] + 1)));
      return 2.0 * double(in[0][0]) * P * double(in[0][1]) * (double(in[1][2] * in[1][3]) + double(in[2][0]));
    };
    op.composed_of = {"conv2d"};
    op.compose = [](Context& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
      const int64_t C = in[0].shape()[1];
      const Shape& ys = out[0].shape();
      Tensor h = unfused_temporary(ctx, {ys[0], C, ys[2], ys[3]}, in[0].dtype(), 0);
      Parts parts{ctx, {}};
      Attrs dw = a;
      dw.groups = C;
      std::vector<Tensor> dw_in = {in[0], in[1]};
      if (in.size() > 3 && in[3].defined()) dw_in.push_back(in[3]);
      parts.run("conv2d", dw_in, {h}, dw);
      std::vector<Tensor> pw_in = {h, in[2]};
      if (in.size() > 4 && in[4].defined()) pw_in.push_back(in[4]);
      parts.run("conv2d", pw_in, {out[0]}, conv_attrs({1, 1}, {0, 0}, {1, 1}, 1, a.act));
    };
    op.tests = {{"c6_7x9_o5_k3_pad1_relu", {{2, 6, 7, 9}, {6, 1, 3, 3}, {5, 6, 1, 1}, {6}, {5}}, conv_attrs({1, 1}, {1, 1}, {1, 1}, 1, kActRelu)},
                {"c3_s2_nobias", {{1, 3, 10, 9}, {3, 1, 3, 3}, {70, 3, 1, 1}}, conv_attrs({2, 2}, {1, 1}, {1, 1}, 1)},
                {"c17_dil2_k5x3_silu", {{1, 17, 12, 8}, {17, 1, 5, 3}, {4, 17, 1, 1}, {17}, {4}}, conv_attrs({1, 2}, {2, 1}, {2, 1}, 1, kActSilu)}};
    op.bench = {{"mobilenet_c128_56_k3", {{32, 128, 56, 56}, {128, 1, 3, 3}, {128, 128, 1, 1}, {128}, {128}},
                 conv_attrs({1, 1}, {1, 1}, {1, 1}, 1, kActRelu)}};
    ops.push_back(op);
  }
}

}  // namespace kf
