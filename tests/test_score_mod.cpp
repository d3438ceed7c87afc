// The custom score function language (src/ops/score_mod.hpp): float64 evaluation against hand-computed
// values, parse errors (each naming the op, the argument and the column), the derivative in score against
// central finite differences, the canonical form, and the emitted GLSL (its text, and that glslangValidator
// compiles it into a Vulkan compute shader when the tool is installed).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "kf/error.hpp"
#include "ops/score_mod.hpp"

namespace kf {
namespace {

const double kInf = std::numeric_limits<double>::infinity();

double ev(const std::string& text, double score = 0.5, int64_t b = 1, int64_t h = 2, int64_t i = 3, int64_t j = 4) {
  return ScoreMod::parse("attention", text).eval(score, b, h, i, j);
}

// The message of the kf::Error that parsing `text` raises ("" if none).
std::string error_of(const std::string& text) {
  try {
    ScoreMod::parse("attention", text);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    return e.what();
  }
  return "";
}

void expect_error(const std::string& text, const std::string& what, int column) {
  const std::string msg = error_of(text);
  SCOPED_TRACE(text.substr(0, 80) + " -> " + msg);
  EXPECT_NE(msg.find("attention: argument 'score_mod'"), std::string::npos);
  EXPECT_NE(msg.find(what), std::string::npos);
  EXPECT_NE(msg.find("at column " + std::to_string(column)), std::string::npos);
}

TEST(ScoreMod, Empty) {
  ScoreMod m;
  EXPECT_TRUE(m.empty());
  EXPECT_TRUE(ScoreMod::parse("attention", "").empty());
  EXPECT_EQ(m.eval(1.5, 0, 0, 0, 0), 1.5);
  EXPECT_EQ(m.grad(1.5, 0, 0, 0, 0), 1.0);
  EXPECT_EQ(m.glsl(), "score");
  EXPECT_FALSE(ScoreMod::parse("attention", "score").empty());
}

TEST(ScoreMod, EvalBasics) {
  EXPECT_EQ(ev("score"), 0.5);
  EXPECT_EQ(ev("b + h * 10 + i * 100 + j * 1000"), 4321);
  EXPECT_EQ(ev("2"), 2.0);
  EXPECT_EQ(ev("0.25"), 0.25);
  EXPECT_EQ(ev("1e-3"), 1e-3);
  EXPECT_EQ(ev("2."), 2.0);
  EXPECT_EQ(ev(".5"), 0.5);
  EXPECT_EQ(ev("1.5E+2"), 150.0);
  EXPECT_EQ(ev("inf"), kInf);
  EXPECT_EQ(ev("-inf"), -kInf);
  EXPECT_DOUBLE_EQ(ev("pi"), std::acos(-1.0));
  EXPECT_EQ(ev("  score   -   0.1 * float(i - j)  ", 2.0), 2.0 - 0.1 * -1.0);
}

TEST(ScoreMod, Precedence) {
  EXPECT_EQ(ev("1 + 2 * 3"), 7);
  EXPECT_EQ(ev("(1 + 2) * 3"), 9);
  EXPECT_EQ(ev("10 - 4 - 3"), 3);        // left-associative
  EXPECT_EQ(ev("100 / 10 / 5"), 2);      // left-associative
  EXPECT_EQ(ev("-2 * -3"), 6);
  EXPECT_EQ(ev("- - 2"), 2);
  EXPECT_EQ(ev("2 * 3 % 4"), 2);         // (2 * 3) % 4
  EXPECT_EQ(ev("1 + 2 < 4 ? 1 : 0"), 1);  // + binds tighter than <
  EXPECT_EQ(ev("1 < 2 == 2 < 3 ? 5 : 6"), 5);
  EXPECT_EQ(ev("i == 3 || j == 0 && h == 7 ? 1 : 0"), 1);  // && binds tighter than ||
  EXPECT_EQ(ev("(i == 0 || j == 4) && h == 7 ? 1 : 0"), 0);
  EXPECT_EQ(ev("!(i == 3) ? 1 : 2"), 2);
  EXPECT_EQ(ev("i > 2 ? j > 9 ? 10 : 20 : 30"), 20);  // right-associative ternary
  EXPECT_EQ(ev("i > 5 ? 10 : j > 3 ? 20 : 30"), 20);
  EXPECT_EQ(ev("i < 3 || (i + j) % 5 == 0 ? -inf : score", 0.5, 0, 0, 1, 4), -kInf);
  EXPECT_EQ(ev("i < 3 || (i + j) % 5 == 0 ? -inf : score", 0.5, 0, 0, 3, 3), 0.5);
}

TEST(ScoreMod, Types) {
  EXPECT_EQ(ev("7 / 2"), 3);          // int stays int
  EXPECT_EQ(ev("7 / 2.0"), 3.5);      // mixing promotes
  EXPECT_EQ(ev("float(7) / 2"), 3.5);
  EXPECT_EQ(ev("i / j"), 0);          // 3 / 4
  EXPECT_EQ(ev("score + i / 2"), 1.5);  // 0.5 + 1
  EXPECT_EQ(ev("int(2.9) + int(-2.9)"), 0);
  EXPECT_EQ(ev("int(score * 10.0)", 0.77), 7);
  EXPECT_EQ(ev("float(i < j) + float(i > j) * 10.0 + float(int(i == 3))"), 2);
}

TEST(ScoreMod, IntegerDivision) {
  EXPECT_EQ(ev("-7 / 2"), -3);  // truncation toward zero
  EXPECT_EQ(ev("7 / -2"), -3);
  EXPECT_EQ(ev("-7 / -2"), 3);
  EXPECT_EQ(ev("-7 % 3"), -1);  // the sign of the dividend
  EXPECT_EQ(ev("7 % -3"), 1);
  EXPECT_EQ(ev("-7 % -3"), -1);
  EXPECT_EQ(ev("(i - j) / 2", 0, 0, 0, 1, 6), -2);
  EXPECT_EQ(ev("(i - j) % 2", 0, 0, 0, 1, 6), -1);
  // Division and remainder by a zero at run time give 0.
  EXPECT_EQ(ev("i / (j - 4)"), 0);
  EXPECT_EQ(ev("i % (j - 4)"), 0);
  EXPECT_EQ(ev("100 / j", 0, 0, 0, 0, 0), 0);
  EXPECT_EQ(ev("i / j + 1", 0, 0, 0, 5, 0), 1);
  EXPECT_EQ(ev("score / float(j)", 1.0, 0, 0, 0, 0), kInf);  // float division is IEEE
  EXPECT_EQ(ev("2147483647 * 2147483647 * 2147483647 * 2147483647 / (i - 3) + 1"), 1);  // no overflow trap
}

TEST(ScoreMod, Functions) {
  EXPECT_EQ(ev("abs(-3)"), 3);
  EXPECT_EQ(ev("abs(score)", -0.25), 0.25);
  EXPECT_EQ(ev("min(i, j) + max(i, j) * 10"), 43);
  EXPECT_EQ(ev("min(score, 1)", 2.0), 1.0);
  EXPECT_EQ(ev("max(score, -1.5)", -3.0), -1.5);
  EXPECT_EQ(ev("clamp(i - j, 0, 5)"), 0);
  EXPECT_EQ(ev("clamp(score, -1.0, 1.0)", 7.0), 1.0);
  EXPECT_EQ(ev("clamp(score, -1.0, 1.0)", 0.3), 0.3);
  EXPECT_DOUBLE_EQ(ev("exp(score)", 1.0), std::exp(1.0));
  EXPECT_DOUBLE_EQ(ev("log(score)", 2.0), std::log(2.0));
  EXPECT_DOUBLE_EQ(ev("sqrt(j)"), 2.0);
  EXPECT_DOUBLE_EQ(ev("tanh(score)", 0.7), std::tanh(0.7));
  EXPECT_DOUBLE_EQ(ev("sigmoid(score)", 0.7), 1.0 / (1.0 + std::exp(-0.7)));
  EXPECT_DOUBLE_EQ(ev("sin(score) + cos(score)", 0.7), std::sin(0.7) + std::cos(0.7));
  EXPECT_EQ(ev("floor(score)", -1.5), -2.0);
  EXPECT_EQ(ev("pow(2, 10)"), 1024.0);
  EXPECT_EQ(ev("pow(score, 0.5)", 9.0), 3.0);
  EXPECT_EQ(ev("float(3) / 2"), 1.5);
  EXPECT_EQ(ev("int(-2.5)"), -2);
  EXPECT_EQ(ev("min(max(h, 1), clamp(j, 0, 3))"), 2);
  EXPECT_EQ(ev("sqrt(-1.0) == sqrt(-1.0) ? 1 : 0"), 0);  // NaN
}

TEST(ScoreMod, UsesScore) {
  EXPECT_TRUE(ScoreMod::parse("attention", "score * 2.0").uses_score());
  EXPECT_FALSE(ScoreMod::parse("attention", "i >= j ? 0.0 : -inf").uses_score());
  EXPECT_FALSE(ScoreMod::parse("attention", "-0.1 * float(abs(i - j))").uses_score());
  EXPECT_EQ(ScoreMod::parse("attention", "float(j)").grad(1, 2, 3, 4, 5), 0.0);
}

TEST(ScoreMod, ParseErrors) {
  expect_error("score +", "expected an operand", 8);
  EXPECT_EQ(error_of("score +"),
            "invalid argument: attention: argument 'score_mod' is \"score +\": expected an operand at column 8");
  expect_error(" ", "expected an operand", 2);
  expect_error("score + foo", "unknown name 'foo'", 9);
  expect_error("Score", "unknown name 'Score'", 1);
  expect_error("score(1)", "expected an operator or the end, got '('", 6);
  expect_error("score 1", "expected an operator or the end, got '1'", 7);
  expect_error("(score", "expected ')'", 7);
  expect_error("score)", "got ')'", 6);
  expect_error("min(score)", "function 'min' takes 2 arguments, got 1", 1);
  expect_error("1 + clamp(score, 1, 2, 3)", "function 'clamp' takes 3 arguments, got 4", 5);
  expect_error("exp()", "function 'exp' takes 1 argument, got 0", 1);
  expect_error("exp", "expected '(' after the function 'exp'", 4);
  expect_error("score && i < j ? 1 : 0", "operator '&&' takes bool operands, got float and bool", 7);
  expect_error("i < j || 1 ? 1 : 0", "operator '||' takes bool operands", 7);
  expect_error("!i ? 1 : 0", "operator '!' takes a bool, got int", 1);
  expect_error("-(i < j) ? 1 : 0", "operator '-' takes a number, got bool", 1);
  expect_error("(i < j) + 1", "operator '+' takes numbers, got bool and int", 9);
  expect_error("i ? 1 : 0", "the condition of '?' is int, not bool", 3);
  expect_error("i < j ? 1 : i < 2", "the branches of '?' are int and bool", 7);
  expect_error("i < j", "the expression is bool", 1);
  expect_error("score % 2", "operator '%' takes int operands, got float and int", 7);
  expect_error("i / 0", "division by the constant integer zero", 3);
  expect_error("i % (2 - 2)", "remainder by the constant integer zero", 3);
  expect_error("score + i / int(0.5)", "division by the constant integer zero", 11);
  expect_error("score + 1e", "malformed number '1e'", 9);
  expect_error("2x", "malformed number '2x'", 1);
  expect_error("1.2.3", "malformed number", 1);
  expect_error("0x10", "malformed number", 1);
  expect_error("score = 1", "unexpected character '='", 7);
  expect_error("score & 1", "unexpected character '&'", 7);
  expect_error("score; 1", "unexpected character ';'", 6);
  expect_error("2147483648 + score", "larger than 2147483647", 1);
  expect_error("score + 1e39", "beyond the float range", 9);
  expect_error("3.4028236e38", "beyond the float range", 1);
  expect_error("score\t+ 1", "not printable ASCII (byte 0x09)", 6);
  expect_error("score + \xC3\xA9", "not printable ASCII (byte 0xC3)", 9);
  expect_error("score\n", "not printable ASCII (byte 0x0A)", 6);
  expect_error(std::string(4097, ' '), "longer than 4096 characters", 4097);
  // Nesting: 64 levels at most (parentheses, operators, calls).
  EXPECT_EQ(error_of(std::string(60, '(') + "score" + std::string(60, ')')), "");
  expect_error(std::string(70, '(') + "score" + std::string(70, ')'), "nested more than 64 levels deep", 65);
  expect_error(std::string(100, '-') + "score", "nested more than 64 levels deep", 65);
  std::string chain = "score";
  for (int k = 0; k < 70; ++k) chain += " + score";
  expect_error(chain, "nested more than 64 levels deep", 8 * 64 - 1);  // the 64th '+'
  std::string calls = "score";
  for (int k = 0; k < 70; ++k) calls = "exp(" + calls + ")";
  EXPECT_NE(error_of(calls).find("nested more than 64 levels deep"), std::string::npos);
  // The emitted GLSL is bounded too (nested integer remainders double it at each level).
  std::string mods = "j";
  for (int k = 0; k < 30; ++k) mods = "(i % " + mods + ")";
  EXPECT_NE(error_of("score + float(" + mods + ")").find("exceeds 65536 characters"), std::string::npos);
  // The message quotes the text escaped and shortened.
  EXPECT_NE(error_of("\"x\"").find("is \"\\\"x\\\"\": unexpected character '\"' at column 1"), std::string::npos);
  EXPECT_NE(error_of(std::string(100, 'a')).find("\"" + std::string(64, 'a') + "...\""), std::string::npos);
  // Another op's name.
  try {
    ScoreMod::parse("attention_backward", "score +");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_backward: argument 'score_mod'"), std::string::npos);
  }
}

const std::vector<std::string>& smooth_exprs() {
  static const std::vector<std::string> v = {
      "score",
      "score - 0.1 * float(i - j)",
      "score * score",
      "score * (1.0 + 0.25 * float(h)) - float(b) * 0.5 + (j / 4 == i / 4 ? 0.3 : 0.0)",
      "i >= j ? score / 2.0 : -inf",
      "3.0 * tanh(score / 3.0)",
      "exp(score) - log(score * score + 1.0)",
      "sigmoid(score) * score",
      "sqrt(score * score + 1.0)",
      "sin(score) * cos(2.0 * score)",
      "pow(score * score + 1.0, 1.5)",
      "pow(2.0, score)",
      "pow(score * score + 1.0, score)",
      "1.0 / (score * score + 1.0)",
      "score / (1.0 + abs(score))",
      "min(score, 0.3) + max(score, -0.2) * 2.0",
      "clamp(score, -0.5, 0.5) + clamp(score * 2.0, score, 1.0)",
      "score > 0.0 ? score * score : -score",
      "float(int(score * 4.0)) + score",
      "floor(score) + abs(score - 0.1)",
      "-(-score) * -float(h)",
      "b == 1 ? score : max(score, -1.5) + 0.1 * tanh(float(j - i))",
  };
  return v;
}

TEST(ScoreMod, GradMatchesFiniteDifferences) {
  const double points[] = {-2.3, -0.7, -0.13, 0.21, 0.45, 0.77, 1.9};
  for (const std::string& text : smooth_exprs()) {
    const ScoreMod m = ScoreMod::parse("attention", text);
    for (double s : points) {
      for (int64_t i : {0, 5}) {
        const int64_t b = 1, h = 2, j = 3;
        const double step = 1e-6;
        const double f0 = m.eval(s - step, b, h, i, j), f1 = m.eval(s + step, b, h, i, j);
        const double g = m.grad(s, b, h, i, j);
        SCOPED_TRACE(text + " at score " + std::to_string(s) + ", i " + std::to_string(i));
        if (std::isinf(m.eval(s, b, h, i, j))) {
          EXPECT_EQ(g, 0.0);  // a masked key
          continue;
        }
        const double fd = (f1 - f0) / (2 * step);
        if (std::abs(fd) > 1e5) continue;  // a jump (floor, int) between the two points
        EXPECT_NEAR(g, fd, 1e-6 * (1.0 + std::abs(fd)));
      }
    }
  }
}

TEST(ScoreMod, GradSimplified) {
  EXPECT_EQ(ScoreMod::parse("attention", "score").glsl_grad(), "1.0");
  EXPECT_EQ(ScoreMod::parse("attention", "score - 0.1 * float(i - j)").glsl_grad(), "1.0");
  EXPECT_EQ(ScoreMod::parse("attention", "i >= j ? 0.0 : -inf").glsl_grad(), "0.0");
  EXPECT_EQ(ScoreMod::parse("attention", "2.0 * score + 1.0").glsl_grad(), "2.0");
  EXPECT_EQ(ScoreMod::parse("attention", "i >= j ? score : -inf").glsl_grad(), "((i >= j) ? 1.0 : 0.0)");
  EXPECT_EQ(ScoreMod::parse("attention", "score * score").glsl_grad(), "(score + score)");
  EXPECT_EQ(ScoreMod::parse("attention", "abs(score)").grad(-2, 0, 0, 0, 0), -1.0);
  EXPECT_EQ(ScoreMod::parse("attention", "abs(score)").grad(0, 0, 0, 0, 0), 0.0);
}

TEST(ScoreMod, Canonical) {
  const auto canon = [](const std::string& t) { return ScoreMod::parse("attention", t).canonical(); };
  EXPECT_EQ(canon("score+1"), canon(" score + 1 "));
  EXPECT_EQ(canon("score+1"), "(score + 1.0)");
  EXPECT_EQ(canon("((score)) + (1.0)"), "(score + 1.0)");
  EXPECT_NE(canon("score + 1"), canon("score - 1"));
  EXPECT_NE(canon("float(i / 2)"), canon("float(i) / 2.0"));
  EXPECT_EQ(canon("i / 2"), "float((i / 2))");
  EXPECT_EQ(canon("score * 0.1"), "(score * 0.1)");
  EXPECT_EQ(canon("-inf"), "(-inf)");
  // The canonical form parses back to itself.
  for (const std::string& text : smooth_exprs()) EXPECT_EQ(canon(canon(text)), canon(text)) << text;
}

TEST(ScoreMod, GlslText) {
  const auto glsl = [](const std::string& t) { return ScoreMod::parse("attention", t).glsl(); };
  EXPECT_EQ(glsl("score"), "score");
  EXPECT_EQ(glsl("score - 0.1 * float(i - j)"), "(score - (0.1 * float((i - j))))");
  EXPECT_EQ(glsl("score + i"), "(score + float(i))");
  EXPECT_EQ(glsl("2 * i"), "float((2 * i))");
  EXPECT_EQ(glsl("i >= j ? score : -inf"), "((i >= j) ? score : (-uintBitsToFloat(0x7f800000u)))");
  EXPECT_EQ(glsl("score * 1e-3 + 2.0 + 1e20"), "(((score * 0.001) + 2.0) + 1.0e+20)");
  EXPECT_EQ(glsl("i / j"), "float((j == 0 ? 0 : (i / j)))");
  EXPECT_EQ(glsl("i % 3"), "float((i - (i / 3) * 3))");
  EXPECT_EQ(glsl("i % (j - 1)"), "float(((j - 1) == 0 ? 0 : i - (i / (j - 1)) * (j - 1)))");
  EXPECT_EQ(glsl("sigmoid(score)"), "(1.0 / (1.0 + exp(-score)))");
  EXPECT_EQ(glsl("clamp(score, 0, 1)"), "min(max(score, 0.0), 1.0)");
  EXPECT_EQ(glsl("pi"), "3.1415927");
  EXPECT_EQ(glsl("3.4028235e38 - 1e-45"), "(3.4028235e+38 - 1.0e-45)");  // float max, denormal min
  EXPECT_EQ(glsl("-2 + i"), "float(((-2) + i))");
  // Only the variables and the names the printer spells itself, whatever the input.
  const std::set<std::string> allowed = {"score", "b", "h", "i", "j", "float", "int", "abs", "min", "max",
                                         "exp", "log", "sqrt", "tanh", "sin", "cos", "floor", "pow", "sign",
                                         "uintBitsToFloat"};
  for (const std::string& text : smooth_exprs()) {
    const ScoreMod m = ScoreMod::parse("attention", text);
    for (const std::string& g : {m.glsl(), m.glsl_grad()}) {
      for (size_t k = 0; k < g.size();) {
        if (std::isalpha(static_cast<unsigned char>(g[k])) || g[k] == '_') {
          size_t e = k;
          while (e < g.size() && (std::isalnum(static_cast<unsigned char>(g[e])) || g[e] == '_')) ++e;
          const bool in_number = k > 0 && std::isdigit(static_cast<unsigned char>(g[k - 1]));
          if (!in_number) {
            EXPECT_TRUE(allowed.count(g.substr(k, e - k))) << g.substr(k, e - k) << " in " << g;
          }
          k = e;
        } else {
          ++k;
        }
      }
    }
  }
}

TEST(ScoreMod, GlslCompiles) {
  if (std::system("glslangValidator --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no glslangValidator";
  std::vector<std::string> exprs = smooth_exprs();
  for (const char* t : {"i / j + i % (j - 1) + abs(i - j) + min(i, 3) + max(j, h) + clamp(b, 0, h)",
                        "i < 3 || (i + j) % 5 == 0 ? -inf : score", "!(i == j) && b != 0 ? 1e-30 : 1.5e30",
                        "(i < j) == (h > b) ? float(i < j) + float(int(score)) : 2.", "score + 1e-45 + 3.4e38"})
    exprs.push_back(t);
  // One shader with a function per expression and per derivative.
  std::string shader =
      "#version 450\nlayout(local_size_x = 1) in;\nlayout(std430, binding = 0) buffer B { float o[]; };\n";
  std::string calls;
  for (size_t k = 0; k < exprs.size(); ++k) {
    const ScoreMod m = ScoreMod::parse("attention", exprs[k]);
    for (int g = 0; g < 2; ++g) {
      const std::string name = "f" + std::to_string(2 * k + g);
      shader += "float " + name + "(float score, int b, int h, int i, int j) { return " +
                (g ? m.glsl_grad() : m.glsl()) + "; }  // " + exprs[k] + "\n";
      calls += "  o[" + std::to_string(2 * k + g + 2) + "] = " + name + "(o[1], 1, 2, 3, 4);\n";
    }
  }
  shader += "void main() {\n" + calls + "}\n";
  const std::string path = testing::TempDir() + "score_mod_test.comp", log = path + ".log";
  std::ofstream(path) << shader;
  const std::string cmd = "glslangValidator -V --target-env vulkan1.2 " + path + " -o /dev/null > " + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << shader << output;
  std::remove(log.c_str());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kf
