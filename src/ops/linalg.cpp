// Section 4 of docs/ops.md: matrix products with fused epilogues (bias, activation, residual, output dtype).
// linear(x [.., K], W [N, K], bias? [N], residual? [.., N]) = act(x W^T + bias) + residual
// matmul(a [.., M, K], b [.., K, N] or [K, N], bias? [N], residual? [.., M, N]), batched.
// Output dtype (docs/ops.md leaves its rules open): Attrs::out_dtype, any of the op's dtypes, makes y (and the
// residual, which the epilogue adds last) that dtype; x, W and the bias keep the inputs'. The product
// accumulates in f32 (f64 for f64 inputs) and y is rounded once, to its dtype; it is held to that dtype's
// tolerance. ffn and ffn_swiglu do not take it (their hidden layer is rounded to the inputs' dtype, which an
// f32 output's tolerance could not absorb).
// linear_dropout(x, W, bias?, residual?) = dropout(act(x W^T + bias)) + residual: linear with the
// Philox dropout of docs/ops.md in its epilogue (element index = the output's linear index); ffn's
// hidden layer.
// ffn(x, W1, b1, W2, b2) = linear(dropout(act(linear(x, W1, b1))), W2, b2), and
// ffn_swiglu(x, W_gate_up, W_down) = linear(swiglu(linear(x, W_gate_up)), W_down) with W_gate_up
// [2H, d] packed as docs/ops.md's packed swiglu: rows 0..H-1 the value ("x") half, rows H..2H-1 the
// gate, so hidden = silu(x W_gate^T) * (x W_value^T). Both are composed ops (OpDef::compose): every
// backend with linear, linear_dropout and swiglu runs them.
#include <cmath>

#include "kf/error.hpp"
#include "ops/compose.hpp"
#include "ops/parallel.hpp"
#include "ops/reference_math.hpp"
#include "ops/registry.hpp"

namespace kf {
namespace {

double activate(double v, int64_t act) {
  switch (act) {
    case kActRelu: return ref::relu(v);
    case kActGelu: return ref::gelu(v);
    case kActGeluTanh: return ref::gelu_tanh(v);
    case kActSilu: return ref::silu(v);
    default: return v;
  }
}

void check_act(const OpDef& d, const Attrs& a) {
  if (a.act < kActNone || a.act > kActSilu)
    throw Error(ErrorCode::InvalidArgument, d.name + ": argument 'act' is " + std::to_string(a.act) +
                                                "; expected 0 (none), 1 (relu), 2 (gelu), 3 (gelu_tanh) or 4 (silu)");
}

[[noreturn]] void shape_error(const OpDef& d, const std::string& arg, const Shape& got, const std::string& want) {
  throw Error(ErrorCode::Shape, d.name + ": argument '" + arg + "' has shape " + to_string(got) + "; expected " + want);
}

// Epilogue checks shared by linear and matmul: bias [N], residual of the output's shape.
void check_epilogue(const OpDef& d, const std::vector<Shape>& in, const Shape& out) {
  const int64_t N = out.back();
  if (!in[2].empty() && in[2] != Shape{N}) shape_error(d, "bias", in[2], "[" + std::to_string(N) + "]");
  if (!in[3].empty() && in[3] != out) shape_error(d, "residual", in[3], to_string(out) + " (the output's shape)");
}

void check_p(const OpDef& d, const Attrs& a) {
  if (!(a.p >= 0.0 && a.p < 1.0))
    throw Error(ErrorCode::InvalidArgument,
                d.name + ": argument 'p' is " + std::to_string(a.p) + "; expected a probability in [0, 1)");
}

// C[b] = dropout(act(A[b] * op(B[b]) + bias)) + residual over `batches` products of M x K by K x N; the
// dropout (when `drop`) keeps element i = the output's linear index with the Philox mask of docs/ops.md.
void reference_product(const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a,
                       int64_t batches, int64_t M, int64_t N, int64_t K, bool b_is_nk, bool b_batched,
                       bool drop = false) {
  const uint32_t thr = ref::dropout_threshold(a.p);
  const double* A = in[0].data.data();
  const double* B = in[1].data.data();
  double* C = out[0].data.data();
  parallel_for(batches * M, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t bi = r / M, m = r % M;
      const double* arow = A + (bi * M + m) * K;
      const double* Bb = B + (b_batched ? bi * N * K : 0);
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += arow[k] * (b_is_nk ? Bb[n * K + k] : Bb[k * N + n]);
        if (in.size() > 2 && in[2].present()) s += in[2].data[n];
        s = activate(s, a.act);
        if (drop && a.p > 0)
          s = ref::dropout_keep(static_cast<uint64_t>(r * N + n), a.seed, a.offset, thr) ? s / (1.0 - a.p) : 0.0;
        if (in.size() > 3 && in[3].present()) s += in[3].data[r * N + n];
        C[r * N + n] = s;
      }
    }
  }, 1);
}

std::vector<TestCase> with_acts(std::vector<TestCase> cases) {
  for (size_t i = 0; i < cases.size(); ++i) cases[i].attrs.act = static_cast<int64_t>(i % 5);
  return cases;
}

// x [.., in] times W [out, in]^T: the output shape [.., out] (shared by linear, linear_dropout, ffn).
Shape linear_shape(const OpDef& d, const Shape& x, const Shape& W, const std::string& wname) {
  if (W.size() != 2) shape_error(d, wname, W, "[out, in] (2 dimensions, as torch.nn.Linear)");
  if (W[1] != x.back())
    shape_error(d, wname, W, "[N, " + std::to_string(x.back()) + "] (in = the last dimension of its input)");
  Shape y = x;
  y.back() = W[0];
  return y;
}

double rows_of(const Shape& x) { return double(numel(x)) / double(x.back()); }

OpDef linear_def(const std::string& name, bool drop) {
  OpDef op;
  op.name = name;
  op.family = Family::Matmul;
  op.inputs = {"x", "W", "bias", "residual"};
  op.required_inputs = 2;
  op.outputs = {"y"};
  op.transcendental = true;  // gelu / silu epilogues
  op.takes_out_dtype = true;  // Attrs::out_dtype: y and the residual
  op.out_dtype_inputs = {3};
  op.infer = [drop](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
    check_act(d, a);
    if (drop) check_p(d, a);
    const Shape y = linear_shape(d, in[0], in[1], "W");
    check_epilogue(d, in, y);
    return std::vector<Shape>{y};
  };
  op.reference = [drop](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
    const int64_t K = in[1].shape[1], N = in[1].shape[0];
    const int64_t M = numel(Shape(in[0].shape.begin(), in[0].shape.end() - 1));  // also when K is 0
    reference_product(in, out, a, 1, M, N, K, true, false, drop);
  };
  op.terms = [](const std::vector<Shape>& in) { return double(in[1][1]); };
  op.flops = [](const std::vector<Shape>& in, const Attrs&) { return 2 * rows_of(in[0]) * double(in[1][0]) * double(in[1][1]); };
  return op;
}

}  // namespace

void register_conv_ops(std::vector<OpDef>& ops);  // src/ops/conv.cpp

void register_linalg_ops(std::vector<OpDef>& ops) {
  {
    OpDef op = linear_def("linear", false);
    op.tests = with_acts({{"m1_n1_k1", {{1, 1}, {1, 1}, {}, {}}},
                          {"m3_n17_k5_bias", {{3, 5}, {17, 5}, {17}, {}}},
                          {"m17_n3_k64_res", {{17, 64}, {3, 64}, {}, {17, 3}}},
                          {"m100_n130_k33_all", {{100, 33}, {130, 33}, {130}, {100, 130}}},
                          {"batched_2x5x70_n65", {{2, 5, 70}, {65, 70}, {65}, {}}},
                          {"m1_n300_k257_decode", {{1, 257}, {300, 257}, {300}, {}}},
                          {"m64_n64_k128", {{64, 128}, {64, 128}, {64}, {64, 64}}},
                          {"m129_n67_k16", {{129, 16}, {67, 16}, {}, {}}},
                          {"m31_n31_k1000", {{31, 1000}, {31, 1000}, {31}, {}}},
                          {"m2_n4096_k64", {{2, 64}, {4096, 64}, {4096}, {}}}});
    // Attrs::out_dtype: the epilogue stores another dtype than the inputs' (each path: tiled, few rows
    // and split-K, and on tensor-core devices the cooperative-matrix kernel for the 64-aligned one).
    op.tests.push_back({"m70_n40_k64_all_out_f32", {{70, 64}, {40, 64}, {40}, {70, 40}}, {.act = kActGelu, .out_dtype = DType::f32}});
    op.tests.push_back({"m33_n17_k9_res_out_f16", {{33, 9}, {17, 9}, {}, {33, 17}}, {.out_dtype = DType::f16}});
    op.tests.push_back({"m128_n64_k64_out_bf16", {{128, 64}, {64, 64}, {64}, {128, 64}}, {.act = kActSilu, .out_dtype = DType::bf16}});
    op.tests.push_back({"m3_n300_k2048_decode_out_f32", {{3, 2048}, {300, 2048}, {300}, {3, 300}}, {.out_dtype = DType::f32}});
    op.tests.push_back({"m1_n33_k7_decode_out_f16", {{1, 7}, {33, 7}, {33}, {}}, {.act = kActRelu, .out_dtype = DType::f16}});
    // Issue 5's shapes; the bare product beside the fused one measures what the epilogue costs. (At
    // kf-bench's --size-mib 128 the f16 rows are as written; the default 256 doubles them.)
    op.bench = {{"4096_gelu", {{4096, 4096}, {4096, 4096}, {4096}, {}}, {.act = kActGelu}},
                {"4096_bare", {{4096, 4096}, {4096, 4096}, {}, {}}},
                {"8192_gelu", {{8192, 8192}, {8192, 8192}, {8192}, {}}, {.act = kActGelu}},
                {"8192_bare", {{8192, 8192}, {8192, 8192}, {}, {}}},
                {"decode_8192", {{1, 8192}, {8192, 8192}, {8192}, {}}},
                // An f32 output of 16-bit inputs (Attrs::out_dtype): what storing f32 costs over 4096_gelu.
                {"4096_gelu_out_f32", {{4096, 4096}, {4096, 4096}, {4096}, {}}, {.act = kActGelu, .out_dtype = DType::f32}}};
    ops.push_back(op);
  }
  {
    OpDef op;
    op.name = "matmul";
    op.family = Family::Matmul;
    op.inputs = {"a", "b", "bias", "residual"};
    op.required_inputs = 2;
    op.outputs = {"y"};
    op.transcendental = true;
    op.takes_out_dtype = true;
    op.out_dtype_inputs = {3};
    op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& at) {
      check_act(d, at);
      const Shape& a = in[0];
      const Shape& b = in[1];
      if (a.size() < 2) shape_error(d, "a", a, "at least 2 dimensions [.., M, K]");
      if (b.size() < 2) shape_error(d, "b", b, "at least 2 dimensions [.., K, N]");
      const int64_t K = a.back();
      if (b[b.size() - 2] != K) shape_error(d, "b", b, "[.., " + std::to_string(K) + ", N] (K = the last dimension of a)");
      const bool batched = b.size() > 2;
      if (batched && Shape(b.begin(), b.end() - 2) != Shape(a.begin(), a.end() - 2))
        shape_error(d, "b", b, "[K, N] or the batch dimensions of a " + to_string(Shape(a.begin(), a.end() - 2)));
      Shape y = a;
      y.back() = b.back();
      check_epilogue(d, in, y);
      return std::vector<Shape>{y};
    };
    op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& at) {
      const Shape& a = in[0].shape;
      const Shape& b = in[1].shape;
      const int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
      const int64_t batches = numel(Shape(a.begin(), a.end() - 2));  // also when M or K is 0
      reference_product(in, out, at, batches, M, N, K, false, b.size() > 2);
    };
    op.terms = [](const std::vector<Shape>& in) { return double(in[0].back()); };
    op.flops = [](const std::vector<Shape>& in, const Attrs&) { return 2 * double(numel(in[0])) * double(in[1].back()); };
    op.tests = with_acts({{"m1_k1_n1", {{1, 1}, {1, 1}, {}, {}}},
                          {"m5_k3_n17", {{5, 3}, {3, 17}, {17}, {}}},
                          {"batched_3x17x40_n9", {{3, 17, 40}, {3, 40, 9}, {9}, {3, 17, 9}}},
                          {"bcast_b_2x33x20_n70", {{2, 33, 20}, {20, 70}, {}, {}}},
                          {"m130_k100_n66", {{130, 100}, {100, 66}, {66}, {130, 66}}},
                          {"m64_k256_n64", {{64, 256}, {256, 64}, {}, {}}},
                          // M, N, K multiples of 8 (not powers of two): the tensor-core path where the
                          // device has it, bf16 included (B's columns scaled: batched, and shared)
                          {"m72_k136_n88_all", {{72, 136}, {136, 88}, {88}, {72, 88}}},
                          {"batched_2x24x40_n56", {{2, 24, 40}, {2, 40, 56}, {}, {}}},
                          {"bcast_b_3x40x24_n104", {{3, 40, 24}, {24, 104}, {104}, {}}}});
    op.tests.push_back({"batched_2x24x40_n56_out_f32", {{2, 24, 40}, {2, 40, 56}, {56}, {2, 24, 56}}, {.act = kActGeluTanh, .out_dtype = DType::f32}});
    op.tests.push_back({"m9_k5_n13_res_out_bf16", {{9, 5}, {5, 13}, {}, {9, 13}}, {.out_dtype = DType::bf16}});
    op.bench = {{"4096", {{4096, 4096}, {4096, 4096}, {}, {}}}};
    ops.push_back(op);
  }
  {
    // ffn's hidden layer: the matrix kernels' epilogue drops act(x W^T + bias) (p = 0 is linear).
    // Not OpDef::random: the mask cannot be read back from the output (kf-conformance's mask check
    // assumes the input passes through); p is checked by infer, and the tests compare with the
    // reference's mask, which is the same Philox mask bit for bit.
    OpDef op = linear_def("linear_dropout", true);
    op.tests = {{"m1_n300_k257_decode", {{1, 257}, {300, 257}, {300}, {}}, {.p = 0.3, .seed = 42, .act = kActGelu}},
                {"m5_n33_k64_res", {{5, 64}, {33, 64}, {}, {5, 33}}, {.p = 0.5, .seed = 7, .offset = 3, .act = kActRelu}},
                {"m70_n65_k40", {{70, 40}, {65, 40}, {65}, {}}, {.p = 0.25, .seed = 1234567890123ull, .act = kActSilu}},
                {"batched_2x9x24_p0", {{2, 9, 24}, {17, 24}, {17}, {}}, {.p = 0, .act = kActGeluTanh}},
                {"m33_n130_k17", {{33, 17}, {130, 17}, {130}, {33, 130}}, {.p = 0.1, .seed = 5, .offset = 1ull << 33}},
                {"m24_n40_k64_res_out_f32", {{24, 64}, {40, 64}, {40}, {24, 40}}, {.p = 0.2, .seed = 9, .act = kActGelu, .out_dtype = DType::f32}},
                {"m2_n70_k33_decode_out_f16", {{2, 33}, {70, 33}, {}, {2, 70}}, {.p = 0.4, .seed = 3, .out_dtype = DType::f16}}};
    op.bench = {{"4096_gelu_p0.1", {{4096, 4096}, {16384, 4096}, {16384}, {}}, {.p = 0.1, .seed = 1, .act = kActGelu}}};
    ops.push_back(op);
  }
  {
    OpDef op;
    op.name = "ffn";
    op.family = Family::Matmul;
    op.inputs = {"x", "W1", "b1", "W2", "b2"};
    op.required_inputs = 5;
    op.outputs = {"y"};
    op.transcendental = true;
    op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
      check_act(d, a);
      check_p(d, a);
      const Shape h = linear_shape(d, in[0], in[1], "W1");
      if (in[2] != Shape{h.back()}) shape_error(d, "b1", in[2], "[" + std::to_string(h.back()) + "] (W1's rows)");
      const Shape y = linear_shape(d, h, in[3], "W2");
      if (in[4] != Shape{y.back()}) shape_error(d, "b2", in[4], "[" + std::to_string(y.back()) + "] (W2's rows)");
      return std::vector<Shape>{y};
    };
    op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
      const int64_t d = in[1].shape[1], H = in[1].shape[0], O = in[3].shape[0];
      const int64_t M = numel(Shape(in[0].shape.begin(), in[0].shape.end() - 1));
      std::vector<HostTensor> first = {in[0], in[1], in[2]}, hidden(1), second(3);
      hidden[0].shape = {M, H};
      hidden[0].data.assign(static_cast<size_t>(M * H), 0.0);
      reference_product(first, hidden, a, 1, M, H, d, true, false, true);
      second = {hidden[0], in[3], in[4]};
      Attrs plain;
      reference_product(second, out, plain, 1, M, O, H, true, false);
    };
    // An output sums H products of hidden values that each sum d products.
    op.terms = [](const std::vector<Shape>& in) { return double(in[1][1]) * double(in[1][0]); };
    op.flops = [](const std::vector<Shape>& in, const Attrs&) {
      return 2 * rows_of(in[0]) * double(in[1][0]) * (double(in[1][1]) + double(in[3][0]));
    };
    op.composed_of = {"linear_dropout", "linear"};
    op.compose = [](Context& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs& a) {
      Shape hs = in[0].shape();
      hs.back() = in[1].shape()[0];
      const DType t = in[0].dtype();
      Tensor h = unfused_temporary(ctx, hs, t, 0);
      Parts parts{ctx, {}};
      Attrs first = a;  // act, p, seed, offset
      parts.run("linear_dropout", {in[0], in[1], in[2]}, {h}, first);
      parts.run("linear", {h, in[3], in[4]}, {out[0]}, Attrs{});
    };
    op.tests = {{"m5_d24_h40_gelu_p0.3", {{5, 24}, {40, 24}, {40}, {24, 40}, {24}}, {.p = 0.3, .seed = 11, .act = kActGelu}},
                {"m1_d64_h96_decode_relu", {{1, 64}, {96, 64}, {96}, {64, 96}, {64}}, {.p = 0.1, .seed = 3, .act = kActRelu}},
                {"batched_2x9x17_h33_o7_p0", {{2, 9, 17}, {33, 17}, {33}, {7, 33}, {7}}, {.act = kActSilu}},
                {"m70_d16_h48_tanh", {{70, 16}, {48, 16}, {48}, {16, 48}, {16}}, {.p = 0.5, .seed = 9, .offset = 77, .act = kActGeluTanh}}};
    op.bench = {{"t4096_d4096_h16384_gelu", {{4096, 4096}, {16384, 4096}, {16384}, {4096, 16384}, {4096}},
                 {.p = 0.1, .seed = 1, .act = kActGelu}},
                {"decode_d4096_h16384", {{1, 4096}, {16384, 4096}, {16384}, {4096, 16384}, {4096}}, {.act = kActGelu}}};
    ops.push_back(op);
  }
  {
    OpDef op;
    op.name = "ffn_swiglu";
    op.family = Family::Matmul;
    op.inputs = {"x", "W_gate_up", "W_down"};
    op.required_inputs = 3;
    op.outputs = {"y"};
    op.transcendental = true;
    op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs&) {
      const Shape g = linear_shape(d, in[0], in[1], "W_gate_up");
      if (g.back() % 2 != 0)
        shape_error(d, "W_gate_up", in[1], "[2H, d]: an even number of rows (value rows, then gate rows)");
      Shape h = g;
      h.back() /= 2;
      return std::vector<Shape>{linear_shape(d, h, in[2], "W_down")};
    };
    op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs&) {
      const int64_t d = in[1].shape[1], H2 = in[1].shape[0], H = H2 / 2, O = in[2].shape[0];
      const int64_t M = numel(Shape(in[0].shape.begin(), in[0].shape.end() - 1));
      std::vector<HostTensor> first = {in[0], in[1]}, g(1), hidden(1);
      g[0].shape = {M, H2};
      g[0].data.assign(static_cast<size_t>(M * H2), 0.0);
      reference_product(first, g, Attrs{}, 1, M, H2, d, true, false);
      hidden[0].shape = {M, H};
      hidden[0].data.resize(static_cast<size_t>(M * H));
      for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < H; ++j)
          hidden[0].data[m * H + j] = ref::silu(g[0].data[m * H2 + H + j]) * g[0].data[m * H2 + j];
      std::vector<HostTensor> second = {hidden[0], in[2]};
      reference_product(second, out, Attrs{}, 1, M, O, H, true, false);
    };
    op.terms = [](const std::vector<Shape>& in) { return double(in[1][1]) * double(in[2][1]); };
    op.flops = [](const std::vector<Shape>& in, const Attrs&) {
      return 2 * rows_of(in[0]) * (double(in[1][0]) * double(in[1][1]) + double(in[2][0]) * double(in[2][1]));
    };
    op.composed_of = {"linear", "swiglu"};
    op.compose = [](Context& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out, const Attrs&) {
      Shape gs = in[0].shape();
      gs.back() = in[1].shape()[0];
      Shape hs = gs;
      hs.back() /= 2;
      const DType t = in[0].dtype();
      Tensor g = unfused_temporary(ctx, gs, t, 0), h = unfused_temporary(ctx, hs, t, 1);
      Parts parts{ctx, {}};
      parts.run("linear", {in[0], in[1]}, {g}, Attrs{});
      parts.run("swiglu", {g}, {h}, Attrs{});  // packed: first half value, second half gate
      parts.run("linear", {h, in[2]}, {out[0]}, Attrs{});
    };
    op.tests = {{"m7_d32_h48", {{7, 32}, {96, 32}, {32, 48}}},
                {"m1_d40_h24_decode", {{1, 40}, {48, 40}, {40, 24}}},
                {"batched_3x5x17_h9_o11", {{3, 5, 17}, {18, 17}, {11, 9}}},
                {"m65_d24_h20", {{65, 24}, {40, 24}, {24, 20}}}};
    op.bench = {{"t4096_d4096_h16384", {{4096, 4096}, {32768, 4096}, {4096, 16384}}},
                {"decode_d4096_h16384", {{1, 4096}, {32768, 4096}, {4096, 16384}}}};
    ops.push_back(op);
  }
  {
    // embedding(tokens i32 [.., L], table [V, d], pos? [P, d]) = y [.., L, d] with
    // y[.., j, :] = table[tokens[.., j]] + pos[j]: pos is indexed by the position j within the last
    // dimension of tokens (as a learned position table used with arange(L)); it may have more rows than
    // L (a table of the longest sequence), not fewer. Ids outside [0, V) are an error, as
    // torch.nn.functional.embedding's (negative ids included).
    // Where the ids are checked: on the host, by check_values, before anything is dispatched. The tokens
    // are small (4 bytes per output row of d values), and a check on the device would still need a
    // read-back before the call could raise kf::Error, and would leave the output written; so the core
    // reads the ids back (one wait for the device per call) and the kernel never sees a bad id (it
    // would write NaN, never read out of bounds).
    OpDef op;
    op.name = "embedding";
    op.family = Family::Elementwise;
    op.inputs = {"tokens", "table", "pos"};
    op.required_inputs = 2;
    op.outputs = {"y"};
    op.input_dtypes = {DType::i32};
    op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs&) {
      const Shape& tok = in[0];
      const Shape& table = in[1];
      if (table.size() != 2) shape_error(d, "table", table, "[V, d] (2 dimensions)");
      if (!in[2].empty() && (in[2].size() != 2 || in[2][1] != table[1] || in[2][0] < tok.back()))
        shape_error(d, "pos", in[2], "[P, " + std::to_string(table[1]) + "] with P >= " + std::to_string(tok.back()) +
                                         " (the last dimension of tokens)");
      Shape y = tok;
      y.push_back(table[1]);
      if (y.size() > static_cast<size_t>(kMaxDims))
        shape_error(d, "tokens", tok, "at most " + std::to_string(kMaxDims - 1) + " dimensions (y adds one)");
      return std::vector<Shape>{y};
    };
    op.check_values = [](const OpDef& d, const std::vector<Tensor>& in) {
      std::vector<int32_t> ids(static_cast<size_t>(in[0].numel()));
      in[0].download(ids.data(), ids.size() * 4);
      const int64_t V = in[1].shape()[0];
      for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= V)
          throw Error(ErrorCode::InvalidArgument, d.name + ": argument 'tokens' holds id " + std::to_string(ids[i]) +
                                                      " at index " + std::to_string(i) + "; expected ids in [0, " +
                                                      std::to_string(V) + ") (the rows of 'table')");
    };
    op.reference = [](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs&) {
      const int64_t V = in[1].shape[0], D = in[1].shape[1], L = in[0].shape.back();
      const int64_t rows = static_cast<int64_t>(in[0].data.size());
      for (int64_t r = 0; r < rows; ++r) {
        const double id = in[0].data[r];
        if (!(id >= 0 && id < double(V)))
          throw Error(ErrorCode::InvalidArgument, "embedding: argument 'tokens' holds id " + std::to_string(id) +
                                                      " at index " + std::to_string(r) + "; expected ids in [0, " +
                                                      std::to_string(V) + ")");
        const int64_t t = static_cast<int64_t>(id);
        for (int64_t c = 0; c < D; ++c)
          out[0].data[r * D + c] = in[1].data[t * D + c] + (in[2].present() ? in[2].data[(r % L) * D + c] : 0.0);
      }
    };
    // Test ids: uniform in [0, V) (every row of a small table used), from the uniform draws.
    op.prepare_inputs = [](const std::vector<Shape>& shapes, const Attrs&, std::vector<std::vector<double>>& v) {
      const double V = double(shapes[1][0]);
      for (auto& x : v[0]) x = std::min(V - 1, std::floor((x + 1) / 2 * V));
    };
    op.tests = {{"t1_v1_d1", {{1}, {1, 1}, {}}},
                {"t7_v50_d17", {{7}, {50, 17}, {}}},
                {"b3x5_v11_d8_pos5", {{3, 5}, {11, 8}, {5, 8}}},
                {"b2x4_v1000_d33_pos6", {{2, 4}, {1000, 33}, {6, 33}}},
                {"b4x65_v300_d64_pos65", {{4, 65}, {300, 64}, {65, 64}}},
                {"b2x3_v9_d3_pos3", {{2, 3}, {9, 3}, {3, 3}}}};
    ops.push_back(op);
  }
  register_conv_ops(ops);
}

}  // namespace kf
