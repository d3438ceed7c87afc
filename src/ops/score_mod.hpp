// The custom score function of attention (docs/ops.md section 5, Attrs::score_mod): a small expression
// language, parsed once and used three ways: evaluated in float64 by the CPU reference, emitted as a GLSL
// expression that the Vulkan kernel compiles at run time, and differentiated in `score` for the backward
// pass (evaluated in float64 and emitted as GLSL as well). The parser is our own: no Debian library parses
// one expression and both evaluates it in float64 and emits the identical computation as GLSL.
//
// The language:
// - Literals: decimal integers (2, 128; at most 2147483647, the largest GLSL int) and floats (0.5, 1e-3, 2.,
//   .5; finite in float32); `inf` (float +infinity) and `pi`.
// - Variables: `score` (float: the scaled, soft-capped, ALiBi-biased score), `b` (batch, or the sequence
//   when packed), `h` (query head), `i` (query index), `j` (key index), all int. Other names are errors.
// - Operators, with C precedence from the tightest: unary - !; * / %; + -; < <= > >=; == !=; &&; ||;
//   c ? x : y (right-associative); parentheses.
// - Functions: abs(x), min(x, y), max(x, y), clamp(x, lo, hi) = min(max(x, lo), hi), exp, log, sqrt, tanh,
//   sigmoid(x) = 1 / (1 + exp(-x)), sin, cos, floor, pow(x, y), float(x), int(x) (truncates toward zero).
//   float() and int() also take a bool (1 or 0).
// - Types int, float, bool. int op int stays int for + - * / % with C semantics (/ truncates toward zero,
//   % takes the sign of the dividend, % takes ints only); dividing by a constant integer zero is an error
//   and by a zero at run time gives 0. Mixing int and float gives float. Comparisons give bool (== and !=
//   also compare two bools); ! && || take bools; the condition of ?: is bool and its branches are
//   promoted to a common type. abs, min, max, clamp stay int when every argument is int; the other
//   functions give float. The whole expression is a number (an int result becomes float); -inf masks the key.
// - Limits: at most 4096 characters of printable ASCII (and spaces); at most 64 levels of nesting
//   (parentheses, operators and calls); the emitted GLSL (of the function and of its derivative) at most
//   65536 characters each.
// Evaluation is in double and int64 (wrapping); the GPU computes in float and 32-bit int (int(x) of a float
// beyond the int range is undefined there). Float division by zero and log / sqrt of negatives give IEEE
// inf / NaN in eval and are undefined in GLSL, as is pow(x, y) for x < 0 (eval gives the C result). The
// GLSL relies on int / truncating toward zero as in C (true of NVIDIA and Mesa drivers; GLSL leaves
// negative operands undefined) and writes x % y as x - (x / y) * y.
// The derivative in score is symbolic (min, max, clamp, ?: follow the branch the function takes, abs'(x)
// = sign(x); floor, int and comparisons have derivative 0), simplified so that 0 * x gives 0 (also where x
// is infinite).
// An empty ScoreMod is no function: eval returns score, grad 1, glsl() "score", canonical() "".
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace kf {

// A parsed custom score function (Attrs::score_mod): an expression of score (float: the scaled, soft-capped,
// ALiBi-biased score), b, h, i, j (integers: batch or packed sequence, query head, query index, key index),
// giving the new score; -inf masks the key.
class ScoreMod {
 public:
  ScoreMod() = default;  // empty: no function
  // Parses `text` ("" gives an empty ScoreMod). Throws kf::Error(ErrorCode::InvalidArgument,
  // "<op>: argument 'score_mod' is \"<text>\": <what is wrong> at column <1-based column>").
  static ScoreMod parse(const std::string& op, const std::string& text);
  bool empty() const;
  bool uses_score() const;  // false when the result does not depend on score (a pure mask/bias)
  double eval(double score, int64_t b, int64_t h, int64_t i, int64_t j) const;
  double grad(double score, int64_t b, int64_t h, int64_t i, int64_t j) const;  // d result / d score
  std::string glsl() const;       // GLSL expression (float) of `float score`, `int b, h, i, j`
  std::string glsl_grad() const;  // GLSL expression (float) of the derivative in score
  std::string canonical() const;  // a normalized, fully parenthesized form (equal for equal ASTs)

 private:
  struct Node;
  std::shared_ptr<const Node> root_, grad_;
};

}  // namespace kf
