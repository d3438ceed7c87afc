// The unfused baselines of kf-bench (OpDef::unfused): on every device, each op's chain of primitives
// gives the fused op's result within the tolerance of the dtype (docs/ops.md; see compare_chain), on the
// op's own small test cases (broadcast, packed, dropout forms). A form without a chain (packed swiglu, a
// scalar operand) must say so with ErrorCode::Unsupported, and every op with a chain runs it somewhere.
#include <cmath>
#include <sstream>

#include "common.hpp"

namespace kf::test {
namespace {

constexpr int64_t kSmall = 20000;  // elements of all inputs together: the cases CI can afford here

// The chain against the fused op. Per element: |chain - fused| <= atol + rtol |fused| with the dtype's
// tolerance (docs/ops.md), NaN and infinities matched exactly. Relative L2 error <= the dtype's err, except
// for f16 / bf16 outputs of fewer than 1000 elements: the chain stores every intermediate in the dtype
// (the fused op does not), so one value whose intermediate is near zero (an f16 subnormal, say) carries a
// large relative error; per element it is within atol, but in the L2 norm of a tiny output it dominates.
std::string compare_chain(const std::vector<double>& chain, const std::vector<double>& fused, DType dtype,
                          double terms) {
  const Tolerance tol = tolerance(dtype);
  const double atol = tol.atol * std::sqrt(terms);
  std::ostringstream s;
  s.precision(9);
  if (chain.size() != fused.size()) return "sizes differ";
  double d2 = 0, r2 = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < chain.size(); ++i) {
    const double c = chain[i], f = fused[i];
    bool ok;
    if (!std::isfinite(f)) {
      ok = std::isnan(f) ? std::isnan(c) : c == f;
    } else {
      const double d = std::fabs(c - f);  // NaN when c is NaN (a poisoned element never written)
      ok = d <= atol + tol.rtol * std::fabs(f);
      if (std::isfinite(d)) d2 += d * d;
      r2 += f * f;
    }
    if (!ok && ++bad <= 8) s << "\n  [" << i << "] chain " << c << " fused " << f;
  }
  if (bad) s << "\n  " << bad << " of " << chain.size() << " elements outside atol " << atol << " + rtol " << tol.rtol;
  const bool l2 = !(dtype == DType::f16 || dtype == DType::bf16) || chain.size() >= 1000;
  if (l2 && r2 > 0 && std::sqrt(d2 / r2) > tol.err) s << "\n  relative L2 error " << std::sqrt(d2 / r2) << " > " << tol.err;
  return s.str();
}

struct ChainParam {
  DeviceRef device;
  const OpDef* op;
  std::string name;  // cpu0_bias_gelu
  friend void PrintTo(const ChainParam& p, std::ostream* os) { *os << p.name; }
};

std::vector<ChainParam> chain_params() {
  std::vector<ChainParam> v;
  for (const auto& d : devices())
    for (const auto& op : registry())
      if (op.unfused) v.push_back({d, &op, sanitize(d.tag + "_" + op.name)});
  return v;
}

class Unfused : public ::testing::TestWithParam<ChainParam> {};

TEST_P(Unfused, ChainMatchesFusedOp) {
  const ChainParam& p = GetParam();
  const OpDef& op = *p.op;
  Context& ctx = context_for(p.device);
  ValidationCheck vc(ctx);
  int dtypes_run = 0;
  for (DType dtype : op.dtypes) {
    std::string why;
    if (!ctx.supports(op.name, dtype, &why)) continue;
    int cases_run = 0;
    std::vector<std::string> no_chain;
    for (const TestCase& tc : op.tests) {
      int64_t n = 0;
      for (const auto& s : tc.inputs) n += s.empty() ? 0 : numel(s);
      if (n > kSmall) continue;
      const uint64_t seed = fresh_seed();
      std::mt19937_64 rng(seed);
      std::vector<std::vector<double>> values;
      for (const auto& s : tc.inputs) values.push_back(s.empty() ? std::vector<double>{} : uniform(numel(s), tc.range, rng));
      if (op.prepare_inputs) op.prepare_inputs(tc.inputs, tc.attrs, values);  // class indices (int32 inputs)
      std::vector<Tensor> in;
      for (size_t k = 0; k < tc.inputs.size(); ++k)
        in.push_back(tc.inputs[k].empty() ? Tensor() : ctx.from_host(tc.inputs[k], op.input_dtype(k, dtype, tc.attrs), values[k]));
      std::vector<Shape> shapes = tc.inputs;
      shapes.resize(op.inputs.size());
      const auto out_shapes = op.infer(op, shapes, tc.attrs);
      std::vector<Tensor> fused, chain;
      for (const auto& s : out_shapes) {
        fused.push_back(ctx.empty(s, dtype));
        chain.push_back(ctx.empty(s, dtype));
        chain.back().fill_bytes(0xFF);  // NaN in every float dtype: an element never written fails
      }
      ctx.run(op.name, in, fused, tc.attrs);
      try {
        op.unfused(ctx, in, chain, tc.attrs);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::Unsupported) {
          ADD_FAILURE() << op.name << " " << to_string(dtype) << " case " << tc.label << ": the chain raised " << e.what();
        } else {
          EXPECT_NE(std::string(e.what()).find(op.name), std::string::npos) << "the message names no op: " << e.what();
          no_chain.push_back(tc.label);
        }
        continue;
      }
      ++cases_run;
      for (size_t k = 0; k < fused.size(); ++k) {
        const std::string msg = compare_chain(chain[k].to_double(), fused[k].to_double(), dtype, op.terms(shapes));
        EXPECT_TRUE(msg.empty()) << op.name << " " << to_string(dtype) << " case " << tc.label << " on "
                                 << p.device.name << ": the unfused chain differs from the fused op (input seed "
                                 << seed << "):" << msg;
      }
    }
    // A primitive the device lacks in this dtype (GLSL has no float64 exp) leaves no case run: only then
    // may a supported fused op have no chain at all.
    EXPECT_TRUE(cases_run > 0 || !no_chain.empty() || dtype == DType::f64)
        << op.name << " " << to_string(dtype) << ": no small test case ran its chain";
    if (cases_run > 0) ++dtypes_run;
  }
  EXPECT_GT(dtypes_run, 0) << op.name << " ran its unfused chain in no dtype on " << p.device.name;
}

INSTANTIATE_TEST_SUITE_P(All, Unfused, ::testing::ValuesIn(chain_params()),
                         [](const ::testing::TestParamInfo<ChainParam>& i) { return i.param.name; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Unfused);

// The elementwise fusions of docs/ops.md section 1 each have a baseline; the primitives themselves have none.
// (Reductions and softmax have no reduction primitive to chain; ops of other sections may add chains.)
TEST(UnfusedCoverage, EveryElementwiseFusionHasAChain) {
  for (const char* name : {"add_relu", "mul_relu", "add_sigmoid", "mul_tanh", "bias_relu", "bias_gelu",
                           "bias_gelu_tanh", "bias_silu", "swiglu", "geglu", "mish_scale", "prelu_bias",
                           "gelu_dropout", "bias_gelu_dropout", "add_dropout_residual"}) {
    const OpDef* op = find_op(name);
    ASSERT_NE(op, nullptr) << name << " is not registered";
    EXPECT_TRUE(op->unfused) << name << " has no unfused chain (kf-bench's fusion baseline)";
  }
  for (const auto& op : registry()) {
    if (op.primitive) {
      EXPECT_FALSE(op.unfused) << op.name << " is a building block, yet has an unfused chain";
    }
  }
}

// The forms without a chain are refused before anything runs, with a reason.
TEST(UnfusedCoverage, PackedFormHasNoChain) {
  const DeviceRef* cpu = nullptr;
  for (const auto& d : devices())
    if (d.backend == "cpu") cpu = &d;
  if (!cpu) GTEST_SKIP() << "no CPU backend in this run";
  Context& ctx = context_for(*cpu);
  Tensor packed = ctx.from_host({2, 6}, DType::f32, std::vector<double>(12, 0.5));
  Tensor y = ctx.empty({2, 3}, DType::f32);
  try {
    get_op("swiglu").unfused(ctx, {packed, Tensor()}, {y}, {});
    FAIL() << "the packed swiglu ran an unfused chain";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("packed"), std::string::npos) << e.what();
  }
}

// kf-bench times the chains with an UnfusedScratch alive: the temporaries are reused run after run, and the
// chain still gives the fused op's result (here on every device, bias_gelu_dropout: three steps, two uses of
// the temporary).
TEST(UnfusedScratch, ReusesTemporariesAndKeepsResults) {
  const OpDef& op = get_op("bias_gelu_dropout");
  for (const auto& d : devices()) {
    Context& ctx = context_for(d);
    ValidationCheck vc(ctx);
    EXPECT_NE(unfused_temporary(ctx, {5}, DType::f32).buffer(), unfused_temporary(ctx, {5}, DType::f32).buffer())
        << "without a scratch, each temporary is fresh";
    UnfusedScratch scratch;
    const Tensor t = unfused_temporary(ctx, {5}, DType::f32);
    EXPECT_EQ(t.buffer(), unfused_temporary(ctx, {5}, DType::f32).buffer());
    EXPECT_NE(t.buffer(), unfused_temporary(ctx, {5}, DType::f32, 1).buffer()) << "another slot";
    EXPECT_NE(t.buffer(), unfused_temporary(ctx, {6}, DType::f32).buffer()) << "another shape";
    std::mt19937_64 rng(fresh_seed());
    Attrs a;
    a.p = 0.25;
    a.seed = 99;
    const Tensor x = ctx.from_host({9, 40}, DType::f32, uniform(360, 1, rng));
    const Tensor b = ctx.from_host({40}, DType::f32, uniform(40, 1, rng));
    Tensor fused = ctx.empty({9, 40}, DType::f32), chain = ctx.empty({9, 40}, DType::f32);
    ctx.run(op.name, {x, b}, {fused}, a);
    for (int run = 0; run < 3; ++run) {
      chain.fill_bytes(0xFF);
      op.unfused(ctx, {x, b}, {chain}, a);
      EXPECT_EQ(compare_chain(chain.to_double(), fused.to_double(), DType::f32, 1), "") << d.name << " run " << run;
    }
  }
}

}  // namespace
}  // namespace kf::test
