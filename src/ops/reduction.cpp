// Section 2 of docs/ops.md: reductions and softmax along the last dimension.
#include <cmath>
#include <limits>

#include "kf/error.hpp"
#include "ops/parallel.hpp"
#include "ops/registry.hpp"

namespace kf {
namespace {

int64_t features(const Shape& s) { return s.back(); }

std::vector<TestCase> row_tests() {
  return {{"rows1x1", {{1, 1}}},          {"rows3x17", {{3, 17}}},       {"n1000003", {{1000003}}, {}, 0.25},
          {"rows1x65536", {{1, 65536}}},  {"rows64x1000", {{64, 1000}}}, {"rows5x3x40", {{5, 3, 40}}},
          {"rows2x4096", {{2, 4096}}},    {"rows1000x1", {{1000, 1}}},   {"rows7x9000", {{7, 9000}}},
          {"rows3x131", {{3, 131}}, {}, 8},
          // 8 x 2501 values: parts of a split row that are multiples of nothing, the last one shorter
          // (CUDA's clusters on sm_90: 3 parts in f32, 2 in 16-bit)
          {"rows3x20008", {{3, 20008}}}};
}

// Applies fn(row input, row output) over rows in parallel.
template <class F>
void rows(const std::vector<HostTensor>& in, std::vector<HostTensor>& out, int64_t out_per_row, F&& fn) {
  const int64_t F_ = features(in[0].shape);
  const int64_t R = numel(Shape(in[0].shape.begin(), in[0].shape.end() - 1));  // rows of an empty row too
  parallel_for(R, [&](int64_t b, int64_t e) {
    // data() + offset, not &data[offset]: an empty row's input (or softmax's output) has no element 0.
    for (int64_t r = b; r < e; ++r) fn(in[0].data.data() + r * F_, F_, out[0].data.data() + r * out_per_row);
  }, 1);
}

OpDef reduce_op(const std::string& name, double (*term)(double), bool mean) {
  OpDef op;
  op.name = name;
  op.split = Split::rows;  // one value per row
  op.family = Family::Reduction;
  op.inputs = {"x"};
  op.required_inputs = 1;
  op.outputs = {"y"};
  op.flops_per_element = 2;
  op.infer = [](const OpDef&, const std::vector<Shape>& in, const Attrs&) {
    return std::vector<Shape>{Shape(in[0].begin(), in[0].end() - 1)};
  };
  op.reference = [term, mean](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs&) {
    rows(in, out, 1, [&](const double* x, int64_t F, double* y) {
      double s = 0;
      for (int64_t i = 0; i < F; ++i) s += term(x[i]);
      *y = mean ? s / double(F) : s;
    });
  };
  op.terms = [](const std::vector<Shape>& in) { return double(features(in[0])); };
  op.tests = row_tests();
  op.bench = {{"rows4096", {{16384, 4096}}}, {"rows65536", {{1024, 65536}}}};
  return op;
}

OpDef softmax_op(const std::string& name, bool log) {
  OpDef op;
  op.name = name;
  op.split = Split::rows;
  op.family = Family::Reduction;
  op.inputs = {"x"};
  op.required_inputs = 1;
  op.outputs = {"y"};
  op.transcendental = true;
  op.flops_per_element = log ? 5 : 6;
  op.infer = [](const OpDef& d, const std::vector<Shape>& in, const Attrs& a) {
    if (!std::isfinite(a.scale))
      throw Error(ErrorCode::InvalidArgument,
                  d.name + ": argument 'scale' is " + std::to_string(a.scale) + "; expected a finite number");
    return std::vector<Shape>{in[0]};
  };
  op.reference = [log](const std::vector<HostTensor>& in, std::vector<HostTensor>& out, const Attrs& a) {
    const double s = a.scale;
    rows(in, out, features(in[0].shape), [&](const double* x, int64_t F, double* y) {
      double m = -std::numeric_limits<double>::infinity();
      bool all_neg_inf = true;  // (a NaN leaves m at -inf too, but makes the row NaN)
      for (int64_t i = 0; i < F; ++i) {
        m = std::max(m, s * x[i]);
        all_neg_inf = all_neg_inf && s * x[i] == -std::numeric_limits<double>::infinity();
      }
      if (!log && all_neg_inf) {  // all -inf: zeros (docs/ops.md)
        for (int64_t i = 0; i < F; ++i) y[i] = 0;
        return;
      }
      double sum = 0;
      for (int64_t i = 0; i < F; ++i) sum += std::exp(s * x[i] - m);
      const double lse = std::log(sum);
      for (int64_t i = 0; i < F; ++i) y[i] = log ? s * x[i] - m - lse : std::exp(s * x[i] - m) / sum;
    });
  };
  op.terms = [](const std::vector<Shape>& in) { return double(features(in[0])); };
  op.tests = row_tests();
  op.tests.push_back({"scale0.125", {{4, 333}}, {}, 8});
  op.tests.back().attrs.scale = 0.125;
  op.tests.push_back({"scale-2", {{3, 64}}});
  op.tests.back().attrs.scale = -2;
  op.bench = {{"rows4096", {{16384, 4096}}}, {"rows65536", {{1024, 65536}}}};
  return op;
}

}  // namespace

void register_reduction_ops(std::vector<OpDef>& ops) {
  ops.push_back(reduce_op("sum_squared", [](double v) { return v * v; }, false));
  ops.push_back(reduce_op("mean_abs", [](double v) { return std::fabs(v); }, true));
  ops.push_back(softmax_op("softmax", false));
  ops.push_back(softmax_op("log_softmax", true));
}

}  // namespace kf
