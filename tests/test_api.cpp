// The typed entry points (include/kf/linalg.hpp, attention.hpp, conv.hpp and ops.hpp's primitives) against
// the op by name: every function gives the bytes Context::call gives for the same op, inputs and
// attributes (built here by hand from the documented mapping), on every device where the op runs in f32;
// options that change the result are checked to change it (a function that dropped one would fail); and a
// bad argument raises the kf::Error that Context::run raises, naming the op and the argument, with the
// inputs and Context::run's outputs untouched.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>

#include "common.hpp"

namespace kf::test {
namespace {

// One typed call and the same op by name.
struct Case {
  std::string label;
  std::string op;
  std::vector<Tensor> inputs;  // as Context::call takes them (undefined = an optional input left out)
  Attrs attrs;
  std::function<std::vector<Tensor>()> typed;
  // Where the options change the result: the attributes (and inputs, when not the same) of a plain call
  // whose output 0 the result's must differ from; empty when the case has no option to check.
  std::optional<Attrs> plain;
  std::vector<Tensor> plain_inputs;
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  return raw_bytes(a) == raw_bytes(b);
}

std::string describe(const Tensor& t) { return to_string(t.shape()) + " " + to_string(t.dtype()); }

// Attention: B = 2, Hq = 2 over Hkv = 1 (grouped-query), Sq = 5, Sk = 7, D = 8 (lavapipe is slow).
struct AttentionInputs {
  Tensor q, k, v, slopes, sinks, lengths, pq, pk, pv, cu_q, cu_k, mask;
};

class Api : public ::testing::TestWithParam<DeviceRef> {
 protected:
  void SetUp() override { ctx_ = &context_for(GetParam()); }

  Tensor values(const Shape& s, double range = 1, DType t = DType::f32) {
    return ctx_->from_host(s, t, uniform(static_cast<size_t>(numel(s)), range, rng_));
  }
  Tensor ints(const Shape& s, const std::vector<double>& v) { return ctx_->from_host(s, DType::i32, v); }

  // Runs each case where the device runs its op in f32 (an option the device lacks: that case is skipped,
  // said in the log); returns how many ran.
  int run_cases(const std::vector<Case>& cases) {
    ValidationCheck vc(*ctx_);
    int ran = 0;
    for (const Case& c : cases) {
      SCOPED_TRACE(c.label);
      if (std::string why; !ctx_->supports(c.op, DType::f32, &why)) {
        std::printf("  [%s] skipped: %s\n", c.label.c_str(), why.c_str());
        continue;
      }
      std::vector<Tensor> want;
      try {
        want = ctx_->call(c.op, c.inputs, c.attrs);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::Unsupported) throw;
        std::printf("  [%s] skipped: %s\n", c.label.c_str(), e.what());
        continue;
      }
      const std::vector<Tensor> got = c.typed();
      EXPECT_EQ(got.size(), want.size());
      for (size_t k = 0; k < std::min(got.size(), want.size()); ++k) {
        EXPECT_TRUE(got[k].defined()) << "output " << k;
        if (!got[k].defined()) continue;
        EXPECT_TRUE(same_bytes(got[k], want[k]))
            << "output " << k << " differs from Context::call: " << describe(got[k]) << " against " << describe(want[k]);
      }
      if (c.plain) {
        const Tensor plain = ctx_->call(c.op, c.plain_inputs.empty() ? c.inputs : c.plain_inputs, *c.plain)[0];
        EXPECT_FALSE(same_bytes(got[0], plain)) << "the options did not change the result: the case checks nothing";
      }
      ++ran;
    }
    return ran;
  }

  // `typed` must raise the kf::Error that Context::run raises for the same op, inputs and attributes
  // (same code, same message, naming the op and `arg`); neither call may write its inputs, nor run its
  // outputs (poisoned, of the shapes `out_shapes`).
  void expect_same_error(const std::function<void()>& typed, const std::string& op, const std::vector<Tensor>& inputs,
                         const Attrs& attrs, const std::vector<Shape>& out_shapes, ErrorCode code, const std::string& arg,
                         DType out_dtype = DType::f32) {
    SCOPED_TRACE(op + " / " + arg);
    std::vector<std::vector<uint8_t>> before;
    for (const Tensor& t : inputs) before.push_back(t.defined() ? raw_bytes(t) : std::vector<uint8_t>());
    std::vector<Tensor> outs;
    for (const Shape& s : out_shapes) {
      outs.push_back(ctx_->empty(s, out_dtype));
      outs.back().fill_bytes(kPoison);
    }
    std::string by_name;
    expect_rejected(
        *ctx_,
        [&] {
          try {
            ctx_->run(op, inputs, outs, attrs);
          } catch (const Error& e) {
            by_name = e.what();
            throw;
          }
        },
        code, {op + ": ", "'" + arg + "'"}, outs);
    std::string from_typed;
    expect_rejected(
        *ctx_,
        [&] {
          try {
            typed();
          } catch (const Error& e) {
            from_typed = e.what();
            throw;
          }
        },
        code, {op + ": ", "'" + arg + "'"}, {});
    EXPECT_EQ(from_typed, by_name);
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (inputs[k].defined()) {
        EXPECT_TRUE(raw_bytes(inputs[k]) == before[k]) << "input " << k << " was written";
      }
    }
    // The context stays usable.
    EXPECT_EQ(add(values({3}), values({3})).shape(), Shape{3});
  }

  AttentionInputs attention_inputs() {
    AttentionInputs in;
    in.q = values({2, 2, 5, 8}, 2);
    in.k = values({2, 1, 7, 8}, 2);
    in.v = values({2, 1, 7, 8}, 2);
    in.slopes = values({2});
    in.sinks = values({2});
    in.lengths = ints({2}, {4, 7});
    // Packed: two sequences of 2 and 3 queries over 3 and 4 keys.
    in.pq = values({1, 2, 5, 8}, 2);
    in.pk = values({1, 1, 7, 8}, 2);
    in.pv = values({1, 1, 7, 8}, 2);
    in.cu_q = ints({3}, {0, 2, 5});
    in.cu_k = ints({3}, {0, 3, 7});
    // Blocks of 4: [ceil(5 / 4), ceil(7 / 4)] = [2, 2], one skipped.
    in.mask = ints({2, 2}, {1, 0, 1, 1});
    return in;
  }

  Context* ctx_ = nullptr;
  std::mt19937_64 rng_{2929};
};

Attrs act_attrs(int64_t act) {
  Attrs a;
  a.act = act;
  return a;
}

TEST_P(Api, Linalg) {
  Tensor x = values({2, 3, 12}), W = values({10, 12}), bias = values({10}), res = values({2, 3, 10});
  Tensor a = values({2, 5, 12}), bb = values({2, 12, 9}), b2 = values({12, 9}), mbias = values({9}), mres = values({2, 5, 9});
  Tensor res16 = values({2, 3, 10}, 1, DType::f16);
  Tensor W1 = values({16, 12}), b1 = values({16}), W2 = values({7, 16}), b2v = values({7});
  Tensor Wgu = values({20, 12}), Wd = values({7, 10});
  Tensor tokens = ints({2, 4}, {0, 5, 3, 10, 10, 1, 0, 7}), table = values({11, 6}), pos = values({5, 6});

  Attrs gelu_all = act_attrs(kActGelu);
  Attrs out16 = act_attrs(kActSilu);
  out16.out_dtype = DType::f16;
  Attrs relu = act_attrs(kActRelu);
  Attrs drop = act_attrs(kActSilu);
  drop.p = 0.3, drop.seed = 5, drop.offset = 2;
  Attrs ffn_a = act_attrs(kActGeluTanh);
  ffn_a.p = 0.2, ffn_a.seed = 11, ffn_a.offset = 3;
  Attrs ffn_plain;  // the same dropout without the activation: act must matter
  ffn_plain.p = 0.2, ffn_plain.seed = 11, ffn_plain.offset = 3;

  const std::vector<Case> cases = {
      {"linear", "linear", {x, W, bias, res}, gelu_all,
       [&] { return std::vector<Tensor>{linear(x, W, bias, res, {.act = kActGelu})}; }, Attrs{}},
      {"linear_no_bias", "linear", {x, W, {}, res}, relu,
       [&] { return std::vector<Tensor>{linear(x, W, {}, res, {.act = kActRelu})}; }, Attrs{}},
      {"linear_out_f16", "linear", {x, W, bias, res16}, out16,
       [&] { return std::vector<Tensor>{linear(x, W, bias, res16, {.act = kActSilu, .out_dtype = DType::f16})}; },
       [] { Attrs p; p.out_dtype = DType::f16; return p; }()},
      {"matmul_batched", "matmul", {a, bb, mbias, mres}, relu,
       [&] { return std::vector<Tensor>{matmul(a, bb, mbias, mres, {.act = kActRelu})}; }, Attrs{}},
      {"matmul_shared_b", "matmul", {a, b2}, act_attrs(kActGelu),
       [&] { return std::vector<Tensor>{matmul(a, b2, {}, {}, {.act = kActGelu})}; }, Attrs{}},
      {"linear_dropout", "linear_dropout", {x, W, bias, res}, drop,
       [&] {
         return std::vector<Tensor>{linear_dropout(x, W, bias, res, {.act = kActSilu, .p = 0.3, .seed = 5, .offset = 2})};
       },
       [] { Attrs p; p.act = kActSilu; p.p = 0.3; p.seed = 5; p.offset = 1; return p; }()},  // offset must matter
      {"ffn", "ffn", {x, W1, b1, W2, b2v}, ffn_a,
       [&] { return std::vector<Tensor>{ffn(x, W1, b1, W2, b2v, {.act = kActGeluTanh, .p = 0.2, .seed = 11, .offset = 3})}; },
       ffn_plain},
      {"ffn_swiglu", "ffn_swiglu", {x, Wgu, Wd}, {}, [&] { return std::vector<Tensor>{ffn_swiglu(x, Wgu, Wd)}; }, {}},
      {"embedding_pos", "embedding", {tokens, table, pos}, {},
       [&] { return std::vector<Tensor>{embedding(tokens, table, pos)}; }, {}},
      {"embedding", "embedding", {tokens, table}, {}, [&] { return std::vector<Tensor>{embedding(tokens, table)}; }, {}},
  };
  EXPECT_GT(run_cases(cases), 0);
  // The position table is added: the two embeddings differ.
  if (ctx_->supports("embedding", DType::f32)) {
    EXPECT_FALSE(same_bytes(embedding(tokens, table, pos), embedding(tokens, table)));
  }
}

TEST_P(Api, LinalgErrors) {
  Tensor x = values({3, 12}), W = values({10, 12}), Wbad = values({10, 11}), bias = values({10});
  expect_same_error([&] { linear(x, Wbad, bias); }, "linear", {x, Wbad, bias}, {}, {{3, 10}}, ErrorCode::Shape, "W");
  expect_same_error([&] { linear(x, W, {}, {}, {.act = static_cast<Activation>(9)}); }, "linear", {x, W}, act_attrs(9),
                    {{3, 10}}, ErrorCode::InvalidArgument, "act");
  expect_same_error([&] { linear(x, Tensor(), bias); }, "linear", {x, Tensor(), bias}, {}, {{3, 10}}, ErrorCode::Shape, "W");
  {
    Attrs a;
    a.out_dtype = DType::i32;
    expect_same_error([&] { linear(x, W, {}, {}, {.out_dtype = DType::i32}); }, "linear", {x, W}, a, {{3, 10}},
                      ErrorCode::DType, "out_dtype");
  }
  Tensor bb = values({11, 4});
  expect_same_error([&] { matmul(x, bb); }, "matmul", {x, bb}, {}, {{3, 4}}, ErrorCode::Shape, "b");
  {
    Attrs a;
    a.p = 1.0;
    expect_same_error([&] { linear_dropout(x, W, bias, {}, {.p = 1.0}); }, "linear_dropout", {x, W, bias}, a, {{3, 10}},
                      ErrorCode::InvalidArgument, "p");
  }
  Tensor W2 = values({5, 10}), b1bad = values({9}), b2 = values({5});
  expect_same_error([&] { ffn(x, W, b1bad, W2, b2); }, "ffn", {x, W, b1bad, W2, b2}, {}, {{3, 5}}, ErrorCode::Shape, "b1");
  Tensor Wgu = values({9, 12}), Wd = values({5, 4});
  expect_same_error([&] { ffn_swiglu(x, Wgu, Wd); }, "ffn_swiglu", {x, Wgu, Wd}, {}, {{3, 5}}, ErrorCode::Shape,
                    "W_gate_up");
  Tensor table = values({6, 4});
  if (ctx_->supports("embedding", DType::f32)) {
    Tensor bad_ids = ints({3}, {0, 6, 2});  // 6 is past the table's 6 rows
    expect_same_error([&] { embedding(bad_ids, table); }, "embedding", {bad_ids, table}, {}, {{3, 4}},
                      ErrorCode::InvalidArgument, "tokens");
  }
  Tensor float_ids = values({3});
  expect_same_error([&] { embedding(float_ids, table); }, "embedding", {float_ids, table}, {}, {{3, 4}}, ErrorCode::DType,
                    "tokens");
}


Attrs attention_attrs(const AttentionOptions& o, bool lse) {  // the documented mapping, by hand
  Attrs a;
  a.attn_scale = o.scale;
  a.causal = o.causal;
  a.window = o.window;
  a.alibi = o.alibi;
  a.softcap = o.softcap;
  a.rope = o.rope;
  a.rope_base = o.rope_base;
  a.score_mod = o.score_mod;
  a.p = o.dropout_p;
  a.seed = o.seed;
  a.offset = o.offset;
  a.block_size = o.block_size;
  a.return_lse = lse;
  return a;
}

TEST_P(Api, Attention) {
  const AttentionInputs in = attention_inputs();
  const Tensor& q = in.q;
  const Tensor& k = in.k;
  const Tensor& v = in.v;
  // Each group of options in its own case, so that each mapping shows.
  std::vector<std::pair<std::string, AttentionOptions>> groups = {
      {"scale_causal_window", {.scale = 0.3, .causal = true, .window = 3}},
      {"alibi_softcap_rope_half", {.alibi = true, .softcap = 2, .rope = kRopeHalf, .rope_base = 500}},
      {"rope_interleaved_dropout", {.rope = kRopeInterleaved, .dropout_p = 0.3, .seed = 77, .offset = 5}},
      {"slopes_lengths_sinks", {.causal = true, .alibi_slopes = in.slopes, .key_lengths = in.lengths, .sinks = in.sinks}},
      {"block_mask", {.block_size = 4, .block_mask = in.mask}},
      {"score_mod", {.score_mod = "score - 0.25 * float(abs(i - j))"}},
  };
  std::vector<Case> cases;
  cases.push_back({"attention_scores", "attention_scores", {q, k}, [] { Attrs a; a.attn_scale = 0.5; return a; }(),
                   [&] { return std::vector<Tensor>{attention_scores(q, k, 0.5)}; }, Attrs{}});
  cases.push_back({"attention_default", "attention", {q, k, v}, {}, [&] { return std::vector<Tensor>{attention(q, k, v)}; }, {}});
  for (const auto& group : groups) {
    const std::string& name = group.first;
    const AttentionOptions o = group.second;
    const std::vector<Tensor> all = {q, k, v, o.alibi_slopes, o.key_lengths, o.cu_seqlens_q, o.cu_seqlens_k, o.sinks, o.block_mask};
    // The plain call: no option, no optional input.
    cases.push_back({"attention_" + name, "attention", all, attention_attrs(o, false),
                     [&, o] { return std::vector<Tensor>{attention(q, k, v, o)}; }, Attrs{}, {q, k, v}});
    cases.push_back({"attention_with_lse_" + name, "attention", all, attention_attrs(o, true), [&, o] {
                       auto r = attention_with_lse(q, k, v, o);
                       return std::vector<Tensor>{r.o, r.lse};
                     }, [] { Attrs a; a.return_lse = true; return a; }(), {q, k, v}});
  }
  {  // packed sequences
    const AttentionOptions o = {.causal = true, .cu_seqlens_q = in.cu_q, .cu_seqlens_k = in.cu_k};
    Attrs plain;
    plain.causal = true;  // the same without the packing
    cases.push_back({"attention_packed", "attention", {in.pq, in.pk, in.pv, {}, {}, in.cu_q, in.cu_k},
                     attention_attrs(o, false), [&, o] { return std::vector<Tensor>{attention(in.pq, in.pk, in.pv, o)}; },
                     plain, {in.pq, in.pk, in.pv}});
  }
  {  // decoding: Sq = 1 over caches of different lengths
    Tensor q1 = values({2, 2, 1, 8});
    const AttentionOptions o = {.key_lengths = in.lengths};
    cases.push_back({"decode", "attention", {q1, k, v, {}, in.lengths}, attention_attrs(o, false),
                     [&, q1, o] { return std::vector<Tensor>{attention(q1, k, v, o)}; }, Attrs{}, {q1, k, v}});
  }
  EXPECT_GT(run_cases(cases), 0);
}

TEST_P(Api, AttentionBackward) {
  if (std::string why; !ctx_->supports("attention_backward", DType::f32, &why)) GTEST_SKIP() << why;
  const AttentionInputs in = attention_inputs();
  const Tensor& q = in.q;
  const Tensor& k = in.k;
  const Tensor& v = in.v;
  Tensor dout = values({2, 2, 5, 8});
  std::vector<std::pair<std::string, AttentionOptions>> groups = {
      {"plain", {}},
      {"causal_window_alibi_softcap_rope", {.scale = 0.4, .causal = true, .window = 4, .alibi = true, .softcap = 3, .rope = kRopeHalf}},
      {"dropout_slopes_lengths_sinks",
       {.dropout_p = 0.25, .seed = 9, .offset = 1, .alibi_slopes = in.slopes, .key_lengths = in.lengths, .sinks = in.sinks}},
  };
  std::vector<Case> cases;
  for (const auto& group : groups) {
    const std::string& name = group.first;
    const AttentionOptions o = group.second;
    Tensor fo, lse;
    try {
      auto f = attention_with_lse(q, k, v, o);
      fo = f.o, lse = f.lse;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Unsupported) throw;
      std::printf("  [%s] skipped: %s\n", name.c_str(), e.what());
      continue;
    }
    const std::vector<Tensor> all = {q, k, v, fo, dout, lse, o.alibi_slopes, o.key_lengths, o.cu_seqlens_q, o.cu_seqlens_k,
                                     o.sinks, o.block_mask};
    cases.push_back({"attention_backward_" + name, "attention_backward", all, attention_attrs(o, false),
                     [&, o, fo, lse] {
                       auto g = attention_backward(q, k, v, fo, dout, lse, o);
                       return std::vector<Tensor>{g.dq, g.dk, g.dv};
                     },
                     name == "plain" ? std::optional<Attrs>() : std::optional<Attrs>(Attrs{}), {q, k, v, fo, dout, lse}});
  }
  EXPECT_GT(run_cases(cases), 0);
}

TEST_P(Api, AttentionErrors) {
  Tensor q = values({1, 2, 3, 8}), k = values({1, 1, 4, 8}), v = values({1, 1, 4, 8});
  Tensor q6 = values({1, 2, 3, 6}), k6 = values({1, 1, 4, 6});
  expect_same_error([&] { attention_scores(q6, k6); }, "attention_scores", {q6, k6}, {}, {{1, 2, 3, 4}}, ErrorCode::Shape, "q");
  {
    Attrs a;
    a.window = -1;
    expect_same_error([&] { attention(q, k, v, {.window = -1}); }, "attention", {q, k, v}, a, {{1, 2, 3, 8}},
                      ErrorCode::InvalidArgument, "window");
  }
  {
    Attrs a;
    a.rope = 3;
    expect_same_error([&] { attention_with_lse(q, k, v, {.rope = static_cast<RopeLayout>(3)}); }, "attention", {q, k, v}, a,
                      {{1, 2, 3, 8}}, ErrorCode::InvalidArgument, "rope");
  }
  {
    Attrs a;
    a.p = -0.5;
    expect_same_error([&] { attention(q, k, v, {.dropout_p = -0.5}); }, "attention", {q, k, v}, a, {{1, 2, 3, 8}},
                      ErrorCode::InvalidArgument, "p");
  }
  Tensor float_lengths = values({1});
  expect_same_error([&] { attention(q, k, v, {.key_lengths = float_lengths}); }, "attention",
                    {q, k, v, {}, float_lengths}, {}, {{1, 2, 3, 8}}, ErrorCode::DType, "key_lengths");
  Tensor o = values({1, 2, 3, 8}), dout = values({1, 2, 3, 8}), lse_bad = values({1, 2, 4});
  expect_same_error([&] { attention_backward(q, k, v, o, dout, lse_bad); }, "attention_backward", {q, k, v, o, dout, lse_bad},
                    {}, {{1, 2, 3, 8}, {1, 1, 4, 8}, {1, 1, 4, 8}}, ErrorCode::Shape, "lse");
}

Attrs conv_attrs(std::array<int64_t, 2> stride, std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation,
                 int64_t groups, int64_t act = kActNone) {
  Attrs a;
  a.stride = stride, a.padding = padding, a.dilation = dilation, a.groups = groups, a.act = act;
  return a;
}

TEST_P(Api, Conv) {
  Tensor x = values({2, 4, 7, 6}), W = values({6, 2, 3, 2}), bias = values({6});
  Tensor Wc = values({5, 4, 3, 3}), c5 = values({5}), bn_b = values({5}), bn_m = values({5});
  Tensor bn_var = ctx_->from_host({5}, DType::f32, {0.5, 1.0, 1.5, 0.75, 2.0});
  Tensor Wdw = values({4, 1, 3, 3}), Wpw = values({3, 4, 1, 1}), bdw = values({4}), bpw = values({3});

  const Conv2dOptions g = {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2};
  Attrs bn = conv_attrs({2, 2}, {1, 1}, {1, 1}, 1);
  bn.eps = 1e-3;
  Attrs gd = conv_attrs({1, 1}, {1, 1}, {1, 1}, 1);
  gd.p = 0.4, gd.seed = 3, gd.offset = 1;
  Attrs gd_plain = gd;  // another offset: the mask must follow it
  gd_plain.offset = 2;

  const std::vector<Case> cases = {
      {"conv2d", "conv2d", {x, W, bias}, conv_attrs({2, 1}, {1, 0}, {1, 2}, 2, kActGelu),
       [&] { return std::vector<Tensor>{conv2d(x, W, bias, kActGelu, g)}; }, conv_attrs({2, 1}, {1, 0}, {1, 2}, 2)},
      {"conv2d_default", "conv2d", {x, Wc}, {}, [&] { return std::vector<Tensor>{conv2d(x, Wc)}; }, {}},
      {"conv2d_bn_relu", "conv2d_bn_relu", {x, Wc, c5, bn_b, bn_m, bn_var, c5}, bn,
       [&] { return std::vector<Tensor>{conv2d_bn_relu(x, Wc, c5, bn_b, bn_m, bn_var, c5, 1e-3, {.stride = {2, 2}, .padding = {1, 1}})}; },
       conv_attrs({2, 2}, {1, 1}, {1, 1}, 1)},  // eps must matter
      {"conv2d_gelu_dropout", "conv2d_gelu_dropout", {x, Wc, c5}, gd,
       [&] { return std::vector<Tensor>{conv2d_gelu_dropout(x, Wc, c5, 0.4, 3, 1, {.padding = {1, 1}})}; }, gd_plain},
      {"depthwise_pointwise", "depthwise_pointwise", {x, Wdw, Wpw, bdw, bpw}, conv_attrs({2, 2}, {1, 1}, {1, 1}, 1, kActRelu),
       [&] {
         return std::vector<Tensor>{depthwise_pointwise(x, Wdw, Wpw, bdw, bpw, {.stride = {2, 2}, .padding = {1, 1}, .act = kActRelu})};
       },
       conv_attrs({2, 2}, {1, 1}, {1, 1}, 1)},
  };
  run_cases(cases);  // lavapipe without the conv kernels skips them all
}

TEST_P(Api, ConvErrors) {
  Tensor x = values({1, 3, 5, 5}), W = values({4, 3, 3, 3}), W2 = values({4, 1, 3, 3}), c4 = values({4}), c3 = values({3});
  expect_same_error([&] { conv2d(x, W2, {}, kActNone, {.groups = 2}); }, "conv2d", {x, W2}, conv_attrs({1, 1}, {0, 0}, {1, 1}, 2),
                    {{1, 4, 3, 3}}, ErrorCode::InvalidArgument, "groups");
  expect_same_error([&] { conv2d(x, W, c4, kActNone, {.stride = {0, 1}}); }, "conv2d", {x, W, c4},
                    conv_attrs({0, 1}, {0, 0}, {1, 1}, 1), {{1, 4, 3, 3}}, ErrorCode::InvalidArgument, "stride");
  expect_same_error([&] { conv2d_bn_relu(x, W, c4, c4, c4, c3); }, "conv2d_bn_relu", {x, W, c4, c4, c4, c3}, {},
                    {{1, 4, 3, 3}}, ErrorCode::Shape, "bn_var");
  {
    Attrs a;
    a.eps = -1;
    expect_same_error([&] { conv2d_bn_relu(x, W, c4, c4, c4, c4, {}, -1); }, "conv2d_bn_relu", {x, W, c4, c4, c4, c4}, a,
                      {{1, 4, 3, 3}}, ErrorCode::InvalidArgument, "eps");
  }
  {
    Attrs a;
    a.p = 1.5;
    expect_same_error([&] { conv2d_gelu_dropout(x, W, c4, 1.5, 1); }, "conv2d_gelu_dropout", {x, W, c4}, a, {{1, 4, 3, 3}},
                      ErrorCode::InvalidArgument, "p");
  }
  Tensor Wdw = values({3, 1, 3, 3}), Wpw_bad = values({4, 2, 1, 1});
  expect_same_error([&] { depthwise_pointwise(x, Wdw, Wpw_bad); }, "depthwise_pointwise", {x, Wdw, Wpw_bad}, {},
                    {{1, 4, 3, 3}}, ErrorCode::Shape, "W_pw");
}

TEST_P(Api, Primitives) {
  Tensor a = values({3, 10}, 2), b = values({3, 10}), f = values({10});
  std::vector<Case> cases = {
      {"add", "add", {a, b}, {}, [&] { return std::vector<Tensor>{add(a, b)}; }, {}},
      {"mul_features", "mul", {a, f}, {}, [&] { return std::vector<Tensor>{mul(a, f)}; }, {}},
      {"prelu", "prelu", {a, f}, {}, [&] { return std::vector<Tensor>{prelu(a, f)}; }, {}},
      {"copy", "copy", {a}, {}, [&] { return std::vector<Tensor>{copy(a)}; }, {}},
  };
  for (const char* act : {"relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu", "mish"})
    cases.push_back({std::string("activation_") + act, act, {a}, {}, [&, act] { return std::vector<Tensor>{activation(act, a)}; }, {}});
  EXPECT_GT(run_cases(cases), 0);
  // Values, not only bytes against the op by name: the copy is the input, add and mul are what they say.
  const auto av = a.to_double(), bv = b.to_double(), fv = f.to_double();
  EXPECT_EQ(copy(a).to_double(), av);
  const auto s = add(a, b).to_double(), m = mul(a, f).to_double();
  for (size_t i = 0; i < av.size(); ++i) {
    EXPECT_EQ(s[i], double(float(av[i] + bv[i]))) << i;
    EXPECT_EQ(m[i], double(float(av[i] * fv[i % 10]))) << i;
  }
}

TEST_P(Api, Reshape) {
  Tensor a = values({2, 12});
  Tensor v = a.reshape({2, 3, 1, 4});
  EXPECT_EQ(v.shape(), (Shape{2, 3, 1, 4}));
  EXPECT_EQ(v.to_double(), a.to_double());
  v.fill(0.5);  // the same memory
  EXPECT_EQ(a.to_double(), std::vector<double>(24, 0.5));
  try {
    (void)a.reshape({5, 5});
    ADD_FAILURE() << "reshape to 25 elements";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Shape);
    EXPECT_NE(std::string(e.what()).find("[2, 12]"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)a.reshape({-2, -12}), Error);
  EXPECT_THROW((void)Tensor().reshape({1}), Error);
}

TEST_P(Api, PrimitivesErrors) {
  Tensor a = values({3, 10}), b = values({3, 9});
  expect_same_error([&] { add(a, b); }, "add", {a, b}, {}, {{3, 10}}, ErrorCode::Shape, "b");
  ValidationCheck vc(*ctx_);
  try {
    activation("softplus", a);
    ADD_FAILURE() << "no kf::Error for an unknown activation";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("activation: argument 'act' is 'softplus'"), std::string::npos) << e.what();
  }
  // Every input left out: the error names the op's first argument, as Context::run's does.
  try {
    linear(Tensor(), Tensor());
    ADD_FAILURE() << "no kf::Error for undefined inputs";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Shape);
    EXPECT_NE(std::string(e.what()).find("linear: argument 'x' is required"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Api, ::testing::ValuesIn(devices()),
                         [](const ::testing::TestParamInfo<DeviceRef>& i) { return i.param.tag; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Api);

}  // namespace
}  // namespace kf::test
