// Argument checks and small helpers shared by the normalization and training ops (normalization.cpp,
// training.cpp). Every failure is a kf::Error naming the op and the argument.
#pragma once
#include <cmath>
#include <sstream>
#include <string>

#include "kf/error.hpp"
#include "ops/registry.hpp"

namespace kf::opcheck {

inline int64_t features(const Shape& s) { return s.empty() ? 1 : s.back(); }
inline int64_t rows_of(const Shape& s) { return numel(s) / features(s); }

[[noreturn]] inline void shape_error(const OpDef& op, const std::string& arg, const Shape& got,
                                     const std::string& expected) {
  throw Error(ErrorCode::Shape, op.name + ": argument '" + arg + "' has shape " + to_string(got) + "; expected " +
                                    expected);
}

[[noreturn]] inline void value_error(const OpDef& op, const std::string& arg, double got, const std::string& expected) {
  std::ostringstream s;
  s.precision(17);
  s << op.name << ": argument '" << arg << "' is " << got << "; expected " << expected;
  throw Error(ErrorCode::InvalidArgument, s.str());
}

// Input k, when present, has exactly the shape `want`.
inline void expect_shape(const OpDef& op, const std::vector<Shape>& in, size_t k, const Shape& want) {
  if (k < in.size() && !in[k].empty() && in[k] != want) shape_error(op, op.inputs[k], in[k], to_string(want));
}

// eps after defaulting (Attrs::eps == 0 selects OpDef::default_eps) must be positive and finite.
inline double check_eps(const OpDef& op, const Attrs& a) {
  const double e = op.eps_of(a);
  if (!(e > 0) || !std::isfinite(e)) {
    std::ostringstream s;
    s.precision(17);
    s << "a positive finite number (0 selects the default, " << op.default_eps << ")";
    value_error(op, "eps", a.eps, s.str());
  }
  return e;
}

}  // namespace kf::opcheck

namespace kf {
// The section 3 backward ops (src/ops/backward.cpp), registered by register_training_ops.
void register_backward_ops(std::vector<OpDef>& ops);
// adamw_step, sgd_step (src/ops/optim.cpp), registered by register_training_ops.
void register_optimizer_ops(std::vector<OpDef>& ops);
// linear_cross_entropy and its backward (src/ops/linear_xent.cpp), registered by register_training_ops.
void register_linear_cross_entropy_ops(std::vector<OpDef>& ops);
}  // namespace kf
