// Tensors with a zero-sized dimension (docs/ops.md, "Empty tensors"): every op takes them where its
// shapes allow, returns outputs of the shapes its rules give, dispatches nothing to the backend
// (last_variant "empty"), and fills the non-empty outputs (reductions over an empty axis) with the
// documented values.
#include <cmath>
#include <set>

#include "common.hpp"

namespace kf::test {
namespace {

// Shapes with a zero dimension built from an op's first case: each dimension of each input set to 0
// alone, and with every dimension of the same size in the other inputs (so that shapes that must agree
// still do). The ones the op's rules reject are left out by the caller.
std::vector<std::vector<Shape>> empty_variants(const std::vector<Shape>& base) {
  std::set<std::vector<Shape>> out;
  for (size_t k = 0; k < base.size(); ++k)
    for (size_t d = 0; d < base[k].size(); ++d) {
      auto one = base;
      one[k][d] = 0;
      out.insert(one);
      auto all = base;
      const int64_t v = base[k][d];
      for (auto& s : all)
        for (auto& x : s)
          if (x == v) x = 0;
      out.insert(all);
    }
  return {out.begin(), out.end()};
}

bool accepted(const OpDef& op, const std::vector<Shape>& shapes, const Attrs& attrs, std::vector<Shape>* outs) {
  try {
    auto all = shapes;
    all.resize(op.inputs.size());
    *outs = op.infer(op, all, attrs);
    return true;
  } catch (const Error&) {
    return false;
  }
}

bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])) || std::abs(a[i] - b[i]) <= 1e-2 * std::abs(b[i])))
      return false;
  return true;
}

class Empty : public ::testing::TestWithParam<DeviceRef> {};

TEST_P(Empty, EveryOpTakesZeroSizedDimensions) {
  Context& ctx = context_for(GetParam());
  ValidationCheck vc(ctx);
  int ops_with_empty = 0, calls = 0;
  std::string none;  // ops whose shape rules take no zero-sized dimension of their first case
  for (const OpDef& op : registry()) {
    if (op.tests.empty()) continue;
    const TestCase& tc = op.tests.front();
    const DType dtype = DType::f32;
    if (std::find(op.dtypes.begin(), op.dtypes.end(), dtype) == op.dtypes.end()) continue;
    if (!ctx.supports(op.name, dtype)) continue;
    bool any = false;
    for (const auto& shapes : empty_variants(tc.inputs)) {
      std::vector<Shape> out_shapes;
      if (!accepted(op, shapes, tc.attrs, &out_shapes)) continue;
      any = true;
      ++calls;
      SCOPED_TRACE(op.name + " inputs " + [&] {
        std::string s;
        for (const auto& x : shapes) s += to_string(x) + " ";
        return s;
      }());
      std::vector<Tensor> inputs;
      std::vector<HostTensor> host(op.inputs.size());
      const auto values = check::random_inputs(shapes, tc.range, 1);
      auto prepared = values;
      // prepare_inputs (class indices, variances) is written for non-empty shapes: zeros are valid too.
      if (op.prepare_inputs)
        for (auto& v : prepared) std::fill(v.begin(), v.end(), 0.0);
      for (size_t k = 0; k < shapes.size(); ++k) {
        if (shapes[k].empty()) {
          inputs.emplace_back();
          continue;
        }
        inputs.push_back(ctx.from_host(shapes[k], op.input_dtype(k, dtype, tc.attrs), prepared[k]));
        host[k] = {shapes[k], inputs.back().to_double()};
      }
      std::vector<Tensor> outs;
      try {
        outs = ctx.call(op.name, inputs, tc.attrs);
      } catch (const Error& e) {
        // The values may not fit the empty shapes (a token id into a table of zero rows, a class index
        // with zero classes): the op refuses them, as torch does. Any other refusal is a failure.
        bool index_inputs = false;  // class indices, token ids: i32 inputs whose values the op checks
        for (const auto& t : op.input_dtypes) index_inputs |= t.has_value();
        if (!index_inputs || e.code() != ErrorCode::InvalidArgument) ADD_FAILURE() << "rejected: " << e.what();
        continue;
      }
      EXPECT_EQ(ctx.last_variant(), "empty");
      ASSERT_EQ(outs.size(), out_shapes.size());
      std::vector<HostTensor> ref(out_shapes.size());
      for (size_t k = 0; k < outs.size(); ++k) {
        EXPECT_EQ(outs[k].shape(), out_shapes[k]);
        ref[k] = {out_shapes[k], std::vector<double>(static_cast<size_t>(numel(out_shapes[k])), 0.0)};
      }
      bool any_output = false;
      for (const auto& o : ref) any_output |= !o.data.empty();
      if (any_output) op.reference(host, ref, tc.attrs);  // as the core does: empty outputs need none
      for (size_t k = 0; k < outs.size(); ++k)
        EXPECT_TRUE(same_values(outs[k].to_double(), ref[k].data)) << "output " << op.outputs[k];
    }
    ops_with_empty += any;
    if (!any) none += " " + op.name;
  }
  EXPECT_GT(ops_with_empty, 0);
  std::printf("%d ops, %d calls with a zero-sized dimension; none accepted by:%s\n", ops_with_empty, calls,
              none.c_str());
}

// The documented results of reductions over an empty axis (docs/ops.md, "Empty tensors").
TEST_P(Empty, DocumentedValues) {
  Context& ctx = context_for(GetParam());
  ValidationCheck vc(ctx);
  const Tensor rows = ctx.empty({3, 0}, DType::f32);
  if (find_op("sum_squared")) {
    const auto v = ctx.call("sum_squared", {rows})[0].to_double();
    EXPECT_EQ(v, std::vector<double>(v.size(), 0.0));
    EXPECT_EQ(ctx.last_variant(), "empty");
  }
  if (find_op("mean_abs")) {
    const auto v = ctx.call("mean_abs", {rows})[0].to_double();
    EXPECT_FALSE(v.empty());
    for (double x : v) EXPECT_TRUE(std::isnan(x));
  }
  if (find_op("softmax")) {
    const auto out = ctx.call("softmax", {rows});
    EXPECT_EQ(out[0].shape(), (Shape{3, 0}));
    EXPECT_EQ(ctx.last_variant(), "empty");
  }
  // Losses over an empty batch: a mean over zero elements, NaN as in torch.
  const Tensor none = ctx.empty({0, 5}, DType::f32);
  for (const auto& loss : {ctx.call("mse", {none, none})[0],
                           ctx.call("cross_entropy", {none, ctx.empty({0}, DType::i32)})[0]}) {
    const auto v = loss.to_double();
    EXPECT_EQ(v.size(), 1u);
    for (double x : v) EXPECT_TRUE(std::isnan(x)) << x;
  }
  // An optimizer step with no parameters does nothing.
  const Tensor p = ctx.empty({0}, DType::f32);
  Attrs sgd;
  sgd.lr = 0.1;
  for (const auto& t : ctx.call("sgd_step", {p, ctx.empty({0}, DType::f32), ctx.empty({0}, DType::f32)}, sgd))
    EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(ctx.last_variant(), "empty");
  // A batch of zero rows: the op runs, writes nothing, and the context stays usable.
  const Tensor a = ctx.empty({0, 4}, DType::f32);
  const auto out = ctx.call("add_relu", {a, a});
  EXPECT_EQ(out[0].shape(), (Shape{0, 4}));
  EXPECT_EQ(ctx.last_variant(), "empty");
  EXPECT_EQ(ctx.call("add_relu", {ctx.from_host({1}, DType::f32, {1}), ctx.from_host({1}, DType::f32, {2})})[0]
                .to_double(),
            std::vector<double>{3});
}

INSTANTIATE_TEST_SUITE_P(All, Empty, ::testing::ValuesIn(devices()), [](const auto& info) { return info.param.tag; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Empty);

}  // namespace
}  // namespace kf::test
