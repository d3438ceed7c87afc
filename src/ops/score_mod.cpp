// The custom score function of attention (score_mod.hpp): lexer, recursive-descent parser with type
// checking, float64 evaluation, symbolic derivative in score, and the GLSL / canonical printer. Our own
// parser because no Debian library parses one expression and both evaluates it in float64 and emits the
// identical GLSL. The GLSL is printed from the typed tree only (names, operators and numbers the printer
// spells itself), never from the user's text, so nothing can be injected into the shader.
#include "ops/score_mod.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "kf/error.hpp"

namespace kf {
namespace {

constexpr size_t kMaxText = 4096, kMaxGlsl = 65536;
constexpr int kMaxDepth = 64;
constexpr double kFloatEnd = 0x1.ffffffp127;  // doubles from here on round to float infinity

enum class T : uint8_t { Int, Float, Bool };
enum class Op : uint8_t {
  Lit, Var, ToFloat, ToInt, Neg, Not, Add, Sub, Mul, Div, Mod, Lt, Le, Gt, Ge, Eq, Ne, And, Or, Sel,
  Abs, Min, Max, Clamp, Exp, Log, Sqrt, Tanh, Sigmoid, Sin, Cos, Floor, Pow, Sign,
};
const char* const kVars[] = {"score", "b", "h", "i", "j"};

struct Expr;
using P = std::shared_ptr<const Expr>;
struct Expr {
  Op op;
  T type;
  double f = 0;   // Lit of type Float
  int64_t n = 0;  // Lit of type Int
  int var = 0;    // Var: index into kVars
  std::vector<P> a;
  bool score = false, vars = false;  // depends on score; on any variable
  int height = 1;                    // operators and calls (conversions do not count)
};

P mk(Op op, T type, std::vector<P> a, double f = 0, int64_t n = 0, int var = 0) {
  auto e = std::make_shared<Expr>();
  e->op = op, e->type = type, e->f = f, e->n = n, e->var = var, e->a = std::move(a);
  e->score = op == Op::Var && var == 0;
  e->vars = op == Op::Var;
  int h = 0;
  for (const P& c : e->a) e->score |= c->score, e->vars |= c->vars, h = std::max(h, c->height);
  e->height = (op == Op::ToFloat || op == Op::ToInt) ? h : h + 1;
  return e;
}
P flit(double v) { return mk(Op::Lit, T::Float, {}, v); }
P ilit(int64_t v) { return mk(Op::Lit, T::Int, {}, 0, v); }
bool is_lit(const P& e, double v) { return e->op == Op::Lit && e->type == T::Float && e->f == v; }
P to_float(const P& x) {
  if (x->type == T::Float) return x;
  if (x->op == Op::Lit && x->type == T::Int) return flit(double(x->n));
  return mk(Op::ToFloat, T::Float, {x});
}
bool numeric(const P& x) { return x->type != T::Bool; }
const char* type_name(T t) { return t == T::Int ? "int" : t == T::Float ? "float" : "bool"; }

// ---- evaluation (double and wrapping int64; bools as 0 / 1) ----
struct Val { double f = 0; int64_t n = 0; };
struct Env { double score; int64_t v[4]; };  // score; b, h, i, j
Val fv(double f) { return {f, 0}; }
Val iv(int64_t n) { return {0, n}; }
int64_t wrap(uint64_t u) { return static_cast<int64_t>(u); }
int64_t trunc_int(double x) {
  if (std::isnan(x)) return 0;
  if (x >= 9.2e18) return INT64_MAX;
  if (x <= -9.2e18) return INT64_MIN;
  return static_cast<int64_t>(x);
}

Val ev(const Expr& e, const Env& env) {
  const auto X = [&](size_t k) { return ev(*e.a[k], env); };
  const bool fl = !e.a.empty() && e.a[0]->type == T::Float;  // operands promoted alike
  switch (e.op) {
    case Op::Lit: return {e.f, e.n};
    case Op::Var: return e.var == 0 ? fv(env.score) : iv(env.v[e.var - 1]);
    case Op::ToFloat: return fv(fl ? X(0).f : double(X(0).n));
    case Op::ToInt: return iv(fl ? trunc_int(X(0).f) : X(0).n);
    case Op::Neg: return fl ? fv(-X(0).f) : iv(wrap(0 - uint64_t(X(0).n)));
    case Op::Not: return iv(!X(0).n);
    case Op::And: return iv(X(0).n && X(1).n);
    case Op::Or: return iv(X(0).n || X(1).n);
    case Op::Sel: return X(0).n ? X(1) : X(2);
    default: break;
  }
  if (e.a.size() == 2) {
    const Val x = X(0), y = X(1);
    const uint64_t ux = uint64_t(x.n), uy = uint64_t(y.n);
    switch (e.op) {
      case Op::Add: return fl ? fv(x.f + y.f) : iv(wrap(ux + uy));
      case Op::Sub: return fl ? fv(x.f - y.f) : iv(wrap(ux - uy));
      case Op::Mul: return fl ? fv(x.f * y.f) : iv(wrap(ux * uy));
      case Op::Div: return fl ? fv(x.f / y.f) : iv(y.n == 0 ? 0 : y.n == -1 ? wrap(0 - ux) : x.n / y.n);
      case Op::Mod: return iv(y.n == 0 || y.n == -1 ? 0 : x.n % y.n);
      case Op::Lt: return iv(fl ? x.f < y.f : x.n < y.n);
      case Op::Le: return iv(fl ? x.f <= y.f : x.n <= y.n);
      case Op::Gt: return iv(fl ? x.f > y.f : x.n > y.n);
      case Op::Ge: return iv(fl ? x.f >= y.f : x.n >= y.n);
      case Op::Eq: return iv(fl ? x.f == y.f : x.n == y.n);
      case Op::Ne: return iv(fl ? x.f != y.f : x.n != y.n);
      case Op::Min: return fl ? fv(y.f < x.f ? y.f : x.f) : iv(y.n < x.n ? y.n : x.n);  // GLSL's min
      case Op::Max: return fl ? fv(x.f < y.f ? y.f : x.f) : iv(x.n < y.n ? y.n : x.n);  // GLSL's max
      case Op::Pow: return fv(std::pow(x.f, y.f));
      default: break;
    }
  }
  if (e.op == Op::Clamp) {
    const Val x = X(0), lo = X(1), hi = X(2);  // min(max(x, lo), hi) as GLSL's min and max
    const Val m = fl ? fv(x.f < lo.f ? lo.f : x.f) : iv(x.n < lo.n ? lo.n : x.n);
    return fl ? fv(hi.f < m.f ? hi.f : m.f) : iv(hi.n < m.n ? hi.n : m.n);
  }
  const Val x = X(0);
  switch (e.op) {
    case Op::Abs: return fl ? fv(std::fabs(x.f)) : iv(x.n < 0 ? wrap(0 - uint64_t(x.n)) : x.n);
    case Op::Exp: return fv(std::exp(x.f));
    case Op::Log: return fv(std::log(x.f));
    case Op::Sqrt: return fv(std::sqrt(x.f));
    case Op::Tanh: return fv(std::tanh(x.f));
    case Op::Sigmoid: return fv(1.0 / (1.0 + std::exp(-x.f)));
    case Op::Sin: return fv(std::sin(x.f));
    case Op::Cos: return fv(std::cos(x.f));
    case Op::Floor: return fv(std::floor(x.f));
    case Op::Sign: return fv(x.f > 0 ? 1.0 : x.f < 0 ? -1.0 : 0.0);
    default: return {};
  }
}

// ---- derivative in score, with trivial simplification ----
P neg(const P& x) {
  if (x->op == Op::Lit) return flit(-x->f);
  if (x->op == Op::Neg) return x->a[0];
  return mk(Op::Neg, T::Float, {x});
}
P fold(Op op, const P& x, const P& y) {  // two literals: one literal, when it is a finite float
  if (x->op == Op::Lit && y->op == Op::Lit) {
    const double a = x->f, b = y->f;
    const double v = op == Op::Add ? a + b : op == Op::Sub ? a - b : op == Op::Mul ? a * b : a / b;
    if (std::fabs(v) < kFloatEnd) return flit(v);
  }
  return mk(op, T::Float, {x, y});
}
P add(const P& x, const P& y) { return is_lit(x, 0) ? y : is_lit(y, 0) ? x : fold(Op::Add, x, y); }
P sub(const P& x, const P& y) { return is_lit(y, 0) ? x : is_lit(x, 0) ? neg(y) : fold(Op::Sub, x, y); }
P mul(const P& x, const P& y) {
  if (is_lit(x, 0) || is_lit(y, 0)) return flit(0);
  return is_lit(x, 1) ? y : is_lit(y, 1) ? x : fold(Op::Mul, x, y);
}
P div(const P& x, const P& y) { return is_lit(x, 0) ? flit(0) : is_lit(y, 1) ? x : fold(Op::Div, x, y); }
P sel(const P& c, const P& x, const P& y) {
  return x == y || (is_lit(x, 0) && is_lit(y, 0)) ? x : mk(Op::Sel, T::Float, {c, x, y});
}
P lt(const P& x, const P& y) { return mk(Op::Lt, T::Bool, {x, y}); }
P fn(Op op, std::vector<P> a) { return mk(op, T::Float, std::move(a)); }

P d(const P& e) {
  if (e->type != T::Float || !e->score) return flit(0);
  const P& x = e->a.empty() ? e : e->a[0];
  const P& y = e->a.size() > 1 ? e->a[1] : e;
  const P one = flit(1);
  switch (e->op) {
    case Op::Var: return one;
    case Op::Neg: return neg(d(x));
    case Op::Add: return add(d(x), d(y));
    case Op::Sub: return sub(d(x), d(y));
    case Op::Mul: return add(mul(d(x), y), mul(x, d(y)));
    case Op::Div: {
      const P dy = d(y);
      return is_lit(dy, 0) ? div(d(x), y) : div(sub(mul(d(x), y), mul(x, dy)), mul(y, y));
    }
    case Op::Sel: return sel(e->a[0], d(e->a[1]), d(e->a[2]));
    case Op::Abs: return mul(fn(Op::Sign, {x}), d(x));
    case Op::Min: return sel(lt(y, x), d(y), d(x));
    case Op::Max: return sel(lt(x, y), d(y), d(x));
    case Op::Clamp: {
      const P &lo = e->a[1], &hi = e->a[2];
      return sel(lt(hi, fn(Op::Max, {x, lo})), d(hi), sel(lt(x, lo), d(lo), d(x)));
    }
    case Op::Exp: return mul(e, d(x));
    case Op::Log: return div(d(x), x);
    case Op::Sqrt: return div(d(x), mul(flit(2), e));
    case Op::Tanh: return mul(sub(one, mul(e, e)), d(x));
    case Op::Sigmoid: return mul(mul(e, sub(one, e)), d(x));
    case Op::Sin: return mul(fn(Op::Cos, {x}), d(x));
    case Op::Cos: return mul(neg(fn(Op::Sin, {x})), d(x));
    case Op::Pow:  // y x^(y-1) x' + x^y log(x) y'
      return add(mul(mul(y, fn(Op::Pow, {x, sub(y, one)})), d(x)), mul(mul(e, fn(Op::Log, {x})), d(y)));
    default: return flit(0);  // floor, sign; int-valued nodes never reach here
  }
}

struct FnInfo { const char* name; Op op; size_t nargs; };
const FnInfo kFns[] = {
    {"abs", Op::Abs, 1},         {"min", Op::Min, 2},     {"max", Op::Max, 2},   {"clamp", Op::Clamp, 3},
    {"exp", Op::Exp, 1},         {"log", Op::Log, 1},     {"sqrt", Op::Sqrt, 1}, {"tanh", Op::Tanh, 1},
    {"sigmoid", Op::Sigmoid, 1}, {"sin", Op::Sin, 1},     {"cos", Op::Cos, 1},   {"floor", Op::Floor, 1},
    {"pow", Op::Pow, 2},         {"float", Op::ToFloat, 1}, {"int", Op::ToInt, 1}};

const char* fn_name(Op op) {
  for (const FnInfo& f : kFns)
    if (f.op == op) return f.name;
  return "sign";  // only in derivatives
}

// ---- printing: GLSL, or the canonical form (full-precision literals, the language's own spelling) ----
struct TooLarge {};
class Printer {
 public:
  Printer(bool glsl, size_t limit) : glsl_(glsl), limit_(limit) {}
  std::string run(const Expr& e) { go(e); return std::move(s_); }

 private:
  void put(const std::string& t) {
    s_ += t;
    if (s_.size() > limit_) throw TooLarge{};
  }
  void call(const char* name, const Expr& e) {
    put(name), put("(");
    for (size_t k = 0; k < e.a.size(); ++k) {
      if (k) put(", ");
      go(*e.a[k]);
    }
    put(")");
  }
  void bin(const Expr& x, const char* op, const Expr& y) { put("("), go(x), put(op), go(y), put(")"); }
  // The shortest decimal that reads back as the same double (canonical) or float (GLSL, rounded once here).
  void number(double v) {
    if (glsl_) v = double(float(v));
    if (std::isinf(v)) return put(v > 0 ? inf() : "(-" + inf() + ")");
    char buf[40];
    for (int prec = 1;; ++prec) {
      std::snprintf(buf, sizeof buf, "%.*g", prec, std::fabs(v));
      if (glsl_ ? std::strtof(buf, nullptr) == float(std::fabs(v)) : std::strtod(buf, nullptr) == std::fabs(v))
        break;
    }
    std::string t = buf;
    if (t.find_first_of(".e") == std::string::npos) t += ".0";
    else if (t.find('.') == std::string::npos) t.insert(t.find('e'), ".0");
    put(std::signbit(v) ? "(-" + t + ")" : t);
  }
  std::string inf() const { return glsl_ ? "uintBitsToFloat(0x7f800000u)" : "inf"; }
  void go(const Expr& e) {
    static const char* const ops[] = {" + ", " - ", " * ", " / ", " % ", " < ", " <= ", " > ", " >= ", " == ", " != ",
                                      " && ", " || "};
    const bool int_div = (e.op == Op::Div || e.op == Op::Mod) && e.type == T::Int;
    if (e.op == Op::Lit) {
      if (e.type == T::Float) return number(e.f);
      return put(e.n < 0 ? "(" + std::to_string(e.n) + ")" : std::to_string(e.n));
    }
    if (e.op == Op::Var) return put(kVars[e.var]);
    if (e.op == Op::Neg || e.op == Op::Not) return put(e.op == Op::Neg ? "(-" : "(!"), go(*e.a[0]), put(")");
    if (glsl_ && int_div && (e.op == Op::Mod || e.a[1]->op != Op::Lit)) {
      // C semantics and 0 for a zero divisor: (y == 0 ? 0 : (x / y)), (y == 0 ? 0 : x - (x / y) * y); no
      // test for a literal divisor, never 0 (the parser rejects constant zero divisors).
      const Expr &x = *e.a[0], &y = *e.a[1];
      put("(");
      if (y.op != Op::Lit) go(y), put(" == 0 ? 0 : ");
      if (e.op == Op::Mod) go(x), put(" - ");
      put("("), go(x), put(" / "), go(y), put(")");
      if (e.op == Op::Mod) put(" * "), go(y);
      return put(")");
    }
    if (e.op >= Op::Add && e.op <= Op::Or) return bin(*e.a[0], ops[int(e.op) - int(Op::Add)], *e.a[1]);
    if (e.op == Op::Sel) return put("("), go(*e.a[0]), put(" ? "), go(*e.a[1]), put(" : "), go(*e.a[2]), put(")");
    if (glsl_ && e.op == Op::Clamp) {  // GLSL's clamp is undefined for lo > hi: min(max(x, lo), hi) is not
      put("min(max("), go(*e.a[0]), put(", "), go(*e.a[1]), put("), "), go(*e.a[2]);
      return put(")");
    }
    if (glsl_ && e.op == Op::Sigmoid) return put("(1.0 / (1.0 + exp(-"), go(*e.a[0]), put(")))");
    call(fn_name(e.op), e);
  }
  bool glsl_;
  size_t limit_;
  std::string s_;
};

// ---- lexer and parser ----
struct Tok {
  enum Kind { Num, Id, Punct, End } kind;
  std::string s;  // Id, Punct: the spelling; Num: the digits
  size_t col;     // 1-based
  bool is_float = false;
  double f = 0;
  int64_t n = 0;
};

std::string quoted(const std::string& text) {
  std::string q;
  for (size_t k = 0; k < text.size() && k < 64; ++k) {
    const unsigned char c = static_cast<unsigned char>(text[k]);
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02X", c);
    if (c == '"' || c == '\\') q += '\\';
    q += c < 0x20 || c > 0x7e ? std::string(buf) : std::string(1, char(c));
  }
  return "\"" + q + (text.size() > 64 ? "...\"" : "\"");
}

class Parser {
 public:
  Parser(const std::string& op, const std::string& text) : op_(op), text_(text) {}
  [[noreturn]] void fail(const std::string& what, size_t col) const {
    throw Error(ErrorCode::InvalidArgument, op_ + ": argument 'score_mod' is " + quoted(text_) + ": " + what +
                                                " at column " + std::to_string(col));
  }
  P run() {
    if (text_.size() > kMaxText) fail("longer than " + std::to_string(kMaxText) + " characters", kMaxText + 1);
    for (size_t k = 0; k < text_.size(); ++k) {
      const unsigned char c = static_cast<unsigned char>(text_[k]);
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02X", c);
      if (c < 0x20 || c > 0x7e) fail(std::string("a character that is not printable ASCII (byte ") + buf + ")", k + 1);
    }
    lex();
    P e = ternary();
    if (tok().kind != Tok::End) fail("expected an operator or the end, got '" + tok().s + "'", tok().col);
    if (e->type == T::Bool) fail("the expression is bool; expected a number (e.g. c ? score : -inf)", 1);
    return to_float(e);
  }

 private:
  const Tok& tok() const { return toks_[pos_]; }
  bool is(const char* p) const { return tok().kind == Tok::Punct && tok().s == p; }
  bool accept(const char* p) { return is(p) ? (++pos_, true) : false; }
  void expect(const char* p) {
    if (!accept(p)) fail(std::string("expected '") + p + "'" + got(), tok().col);
  }
  std::string got() const { return tok().kind == Tok::End ? "" : ", got '" + tok().s + "'"; }

  void lex() {
    const std::string& s = text_;
    const auto digit = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '9'; };
    const auto alpha = [&](size_t k) {
      return k < s.size() && (std::isalpha(static_cast<unsigned char>(s[k])) || s[k] == '_');
    };
    size_t k = 0;
    while (true) {
      while (k < s.size() && s[k] == ' ') ++k;
      Tok t{Tok::End, "", k + 1};
      if (k == s.size()) return toks_.push_back(t);
      const size_t b = k;
      if (digit(k) || (s[k] == '.' && digit(k + 1))) {
        t.kind = Tok::Num;
        while (digit(k)) ++k;
        if (k < s.size() && s[k] == '.') t.is_float = true, ++k;
        while (digit(k)) ++k;
        if (k < s.size() && (s[k] == 'e' || s[k] == 'E')) {
          size_t q = k + 1;
          if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
          if (!digit(q)) fail("malformed number '" + s.substr(b, q - b) + "'", t.col);
          for (t.is_float = true, k = q; digit(k);) ++k;
        }
        t.s = s.substr(b, k - b);
        if (alpha(k) || digit(k) || (k < s.size() && s[k] == '.'))
          fail("malformed number '" + t.s + s[k] + "'", t.col);
        if (t.is_float) {
          t.f = std::strtod(t.s.c_str(), nullptr);
          if (!(t.f < kFloatEnd)) fail("the number " + t.s + " is beyond the float range", t.col);
        } else {
          for (char c : t.s)
            if ((t.n = t.n * 10 + (c - '0')) > 2147483647)
              fail("the integer " + t.s + " is larger than 2147483647", t.col);
        }
      } else if (alpha(k)) {
        t.kind = Tok::Id;
        while (alpha(k) || digit(k)) ++k;
        t.s = s.substr(b, k - b);
      } else {
        static const char* const puncts[] = {"<=", ">=", "==", "!=", "&&", "||", "+", "-", "*", "/", "%", "(", ")",
                                             "<",  ">",  "!",  "?",  ":",  ","};
        t.kind = Tok::Punct;
        for (const char* p : puncts)
          if (s.compare(k, std::char_traits<char>::length(p), p) == 0) {
            t.s = p;
            break;
          }
        if (t.s.empty()) fail(std::string("unexpected character '") + s[k] + "'", t.col);
        k += t.s.size();
      }
      toks_.push_back(t);
    }
  }

  // Nesting guards: the parser's recursion and the height of the tree.
  [[noreturn]] void too_deep(size_t col) const {
    fail("nested more than " + std::to_string(kMaxDepth) + " levels deep", col);
  }
  struct Deeper {
    Parser& p;
    explicit Deeper(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.too_deep(p.tok().col);
    }
    ~Deeper() { --p.depth_; }
  };
  P checked(P e, size_t col) const {
    if (e->height > kMaxDepth) too_deep(col);
    return e;
  }

  P ternary() {
    Deeper guard(*this);
    P c = binary(0);
    if (!is("?")) return c;
    const size_t col = tok().col;
    ++pos_;
    P x = ternary();
    expect(":");
    P y = ternary();
    if (c->type != T::Bool) fail(std::string("the condition of '?' is ") + type_name(c->type) + ", not bool", col);
    if (numeric(x) != numeric(y))
      fail(std::string("the branches of '?' are ") + type_name(x->type) + " and " + type_name(y->type), col);
    if (x->type != y->type) x = to_float(x), y = to_float(y);
    return checked(mk(Op::Sel, x->type, {c, x, y}), col);
  }

  // Binary operators by level, loosest first: || && (== !=) (< <= > >=) (+ -) (* / %).
  P binary(int level) {
    static const std::vector<std::pair<const char*, Op>> levels[] = {
        {{"||", Op::Or}},
        {{"&&", Op::And}},
        {{"==", Op::Eq}, {"!=", Op::Ne}},
        {{"<", Op::Lt}, {"<=", Op::Le}, {">", Op::Gt}, {">=", Op::Ge}},
        {{"+", Op::Add}, {"-", Op::Sub}},
        {{"*", Op::Mul}, {"/", Op::Div}, {"%", Op::Mod}}};
    if (level == 6) return unary();
    P x = binary(level + 1);
    while (true) {
      const auto& ops = levels[level];
      auto it = ops.begin();
      while (it != ops.end() && !is(it->first)) ++it;
      if (it == ops.end()) return x;
      const size_t col = tok().col;
      ++pos_;
      x = combine(it->second, it->first, x, binary(level + 1), col);
    }
  }

  P combine(Op op, const std::string& sym, P x, P y, size_t col) const {
    const std::string name = "operator '" + sym + "'";
    const bool logic = op == Op::And || op == Op::Or;
    const bool eq_bools = (op == Op::Eq || op == Op::Ne) && x->type == T::Bool && y->type == T::Bool;
    if (logic && (x->type != T::Bool || y->type != T::Bool))
      fail(name + " takes bool operands, got " + type_name(x->type) + " and " + type_name(y->type), col);
    if (!logic && !eq_bools && (!numeric(x) || !numeric(y)))
      fail(name + " takes numbers, got " + type_name(x->type) + " and " + type_name(y->type), col);
    if (op == Op::Mod && (x->type != T::Int || y->type != T::Int))
      fail(name + " takes int operands, got " + type_name(x->type) + " and " + type_name(y->type), col);
    if ((op == Op::Div || op == Op::Mod) && x->type == T::Int && y->type == T::Int && !y->vars &&
        ev(*y, Env{}).n == 0)
      fail(std::string(op == Op::Div ? "division" : "remainder") + " by the constant integer zero", col);
    if (x->type != y->type) x = to_float(x), y = to_float(y);
    const T type = op >= Op::Lt ? T::Bool : x->type;
    return checked(mk(op, type, {x, y}), col);
  }

  P unary() {
    if (!is("-") && !is("!")) return primary();
    const size_t col = tok().col;
    const bool minus = tok().s == "-";
    ++pos_;
    Deeper guard(*this);
    P x = unary();
    if (minus && !numeric(x)) fail("operator '-' takes a number, got bool", col);
    if (!minus && x->type != T::Bool) fail(std::string("operator '!' takes a bool, got ") + type_name(x->type), col);
    if (minus && x->op == Op::Lit) return x->type == T::Int ? ilit(-x->n) : flit(-x->f);
    return checked(mk(minus ? Op::Neg : Op::Not, x->type, {x}), col);
  }

  P primary() {
    const Tok t = tok();
    if (t.kind == Tok::Num) return ++pos_, t.is_float ? flit(t.f) : ilit(t.n);
    if (accept("(")) {
      P e = ternary();
      expect(")");
      return e;
    }
    if (t.kind != Tok::Id) fail("expected an operand" + got(), t.col);
    ++pos_;
    for (int v = 0; v < 5; ++v)
      if (t.s == kVars[v]) return mk(Op::Var, v == 0 ? T::Float : T::Int, {}, 0, 0, v);
    if (t.s == "inf") return flit(std::numeric_limits<double>::infinity());
    if (t.s == "pi") return flit(3.14159265358979323846);
    const FnInfo* f = nullptr;
    for (const FnInfo& g : kFns)
      if (t.s == g.name) f = &g;
    if (!f) fail("unknown name '" + t.s + "' (expected score, b, h, i, j, inf, pi or a function)", t.col);
    if (!is("(")) fail("expected '(' after the function '" + t.s + "'", tok().col);
    ++pos_;
    std::vector<P> a;
    if (!is(")")) do a.push_back(ternary());
      while (accept(","));
    expect(")");
    if (a.size() != f->nargs)
      fail("function '" + t.s + "' takes " + std::to_string(f->nargs) + " argument" + (f->nargs > 1 ? "s" : "") +
               ", got " + std::to_string(a.size()),
           t.col);
    const bool any_bool = std::any_of(a.begin(), a.end(), [](const P& x) { return x->type == T::Bool; });
    if (any_bool && (f->op != Op::ToFloat && f->op != Op::ToInt))
      fail("function '" + t.s + "' takes numbers, got bool", t.col);
    if (f->op == Op::ToFloat) {
      if (a[0]->type == T::Float) return a[0];
      if (a[0]->op == Op::Lit) return to_float(a[0]);
      return checked(mk(Op::ToFloat, T::Float, a), t.col);
    }
    if (f->op == Op::ToInt) {
      if (a[0]->type == T::Int) return a[0];
      if (a[0]->op == Op::Lit) return ilit(trunc_int(a[0]->f));
      return checked(mk(Op::ToInt, T::Int, a), t.col);
    }
    const bool keeps_int = f->op == Op::Abs || f->op == Op::Min || f->op == Op::Max || f->op == Op::Clamp;
    const bool all_int = std::all_of(a.begin(), a.end(), [](const P& x) { return x->type == T::Int; });
    if (!(keeps_int && all_int))
      for (P& x : a) x = to_float(x);
    return checked(mk(f->op, a[0]->type, a), t.col);
  }

  const std::string& op_;
  const std::string& text_;
  std::vector<Tok> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

struct ScoreMod::Node {
  P e;
};

ScoreMod ScoreMod::parse(const std::string& op, const std::string& text) {
  ScoreMod m;
  if (text.empty()) return m;
  Parser parser(op, text);
  const P root = parser.run(), grad = d(root);
  for (const P& e : {root, grad}) {
    try {
      Printer(true, kMaxGlsl).run(*e);
    } catch (const TooLarge&) {
      parser.fail(std::string("the GLSL of the function") + (e == root ? "" : "'s derivative") + " exceeds " +
                  std::to_string(kMaxGlsl) + " characters", 1);
    }
  }
  m.root_ = std::make_shared<const Node>(Node{root});
  m.grad_ = std::make_shared<const Node>(Node{grad});
  return m;
}

bool ScoreMod::empty() const { return !root_; }
bool ScoreMod::uses_score() const { return !root_ || root_->e->score; }
double ScoreMod::eval(double score, int64_t b, int64_t h, int64_t i, int64_t j) const {
  return root_ ? ev(*root_->e, Env{score, {b, h, i, j}}).f : score;
}
double ScoreMod::grad(double score, int64_t b, int64_t h, int64_t i, int64_t j) const {
  return grad_ ? ev(*grad_->e, Env{score, {b, h, i, j}}).f : 1.0;
}
std::string ScoreMod::glsl() const { return root_ ? Printer(true, SIZE_MAX).run(*root_->e) : "score"; }
std::string ScoreMod::glsl_grad() const { return grad_ ? Printer(true, SIZE_MAX).run(*grad_->e) : "1.0"; }
std::string ScoreMod::canonical() const { return root_ ? Printer(false, SIZE_MAX).run(*root_->e) : ""; }

}  // namespace kf
