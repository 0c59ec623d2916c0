// Recursive-descent evaluator for number expressions (MODEL_FORMAT.md): + - * / // % ( ), unary minus, min,
// max, ceil, vars. Integers are exact int64 with overflow reported; `/` is true division (exact integers
// stay integers); `//` and `%` follow Python's floor semantics. The first error of an expression is reported
// at the column of its token; evaluation then stops. Plain/quoted rules for YAML scalars live in eval_*.
#include "io/expr.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace braid::io {

namespace {

const std::vector<std::string> kFunctions = {"min", "max", "ceil"};
// Nesting levels of '(', calls and unary signs in one expression: the parser recurses per level, so ten
// thousand '(' would overflow the stack. The YAML reader bounds its nesting the same way (YamlLimits).
constexpr int kMaxExprDepth = 64;

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

std::string fmt_number(const Number& n) {
  if (n.is_int) return std::to_string(n.i);
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, n.f);
  std::string s(buf, p);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

class ExprParser {
 public:
  ExprParser(const std::string& text, const SourceLoc& loc, const VarEnv& vars, const VarSites* sites,
             Diagnostics& diags)
      : t_(text), loc_(loc), vars_(vars), sites_(sites), diags_(diags) {}

  std::optional<Number> run() {
    skip_ws();
    if (p_ == t_.size()) return fail(0, "empty expression");
    auto v = expr();
    if (!v) return std::nullopt;
    skip_ws();
    if (p_ < t_.size()) return fail(p_, "unexpected '" + token_text(p_) + "' in expression '" + t_ + "'");
    return v;
  }

 private:
  // Location of byte offset `off`: the scalar's column plus the characters before it.
  SourceLoc at(size_t off) const {
    SourceLoc l = loc_;
    if (l.line <= 0) return l;
    int chars = 0;
    for (size_t i = 0; i < off && i < t_.size(); ++i)
      if ((static_cast<unsigned char>(t_[i]) & 0xC0) != 0x80) ++chars;
    l.col = (l.col > 0 ? l.col : 1) + chars;
    return l;
  }
  std::nullopt_t fail(size_t off, const std::string& msg, const std::string& hint = "") {
    diags_.error(at(off), msg, hint);
    return std::nullopt;
  }
  std::string token_text(size_t off) const {
    size_t e = off + 1;
    if (is_ident_char(t_[off]))
      while (e < t_.size() && is_ident_char(t_[e])) ++e;
    else
      while (e < t_.size() && (static_cast<unsigned char>(t_[e]) & 0xC0) == 0x80) ++e;
    return t_.substr(off, e - off);
  }
  void skip_ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\t' || t_[p_] == '\n')) ++p_;
  }
  bool accept(const char* op) {
    skip_ws();
    size_t n = std::char_traits<char>::length(op);
    if (t_.compare(p_, n, op) != 0) return false;
    if (n == 1 && op[0] == '/' && p_ + 1 < t_.size() && t_[p_ + 1] == '/') return false;
    p_ += n;
    return true;
  }

  std::optional<Number> finite(std::optional<Number> v, size_t off) {
    if (v && !v->is_int && !std::isfinite(v->f)) return fail(off, "expression result is not a finite number");
    return v;
  }
  std::nullopt_t overflow(size_t off) {
    return fail(off, "integer overflow in '" + t_ + "'", "integers are 64-bit");
  }

  // expr := term (('+' | '-') term)*
  std::optional<Number> expr() {
    auto a = term();
    while (a) {
      skip_ws();
      size_t op = p_;
      char c = op < t_.size() ? t_[op] : 0;
      if (c != '+' && c != '-') break;
      ++p_;
      auto b = term();
      if (!b) return std::nullopt;
      if (a->is_int && b->is_int) {
        int64_t r;
        bool ovf = c == '+' ? __builtin_add_overflow(a->i, b->i, &r) : __builtin_sub_overflow(a->i, b->i, &r);
        if (ovf) return overflow(op);
        a = Number::of_int(r);
      } else {
        a = finite(Number::of_float(c == '+' ? a->as_double() + b->as_double() : a->as_double() - b->as_double()), op);
      }
    }
    return a;
  }

  // term := unary (('*' | '/' | '//' | '%') unary)*
  std::optional<Number> term() {
    auto a = unary();
    while (a) {
      skip_ws();
      size_t op = p_;
      std::string o;
      if (accept("//")) o = "//";
      else if (accept("*")) o = "*";
      else if (accept("/")) o = "/";
      else if (accept("%")) o = "%";
      else break;
      if (o == "*" && p_ < t_.size() && t_[p_] == '*')
        return fail(op, "'**' is not supported", "write the product out, e.g. d * d");
      auto b = unary();
      if (!b) return std::nullopt;
      a = binary(o, *a, *b, op);
    }
    return a;
  }

  std::optional<Number> binary(const std::string& o, Number a, Number b, size_t op) {
    bool ints = a.is_int && b.is_int;
    if (o == "*") {
      if (!ints) return finite(Number::of_float(a.as_double() * b.as_double()), op);
      int64_t r;
      if (__builtin_mul_overflow(a.i, b.i, &r)) return overflow(op);
      return Number::of_int(r);
    }
    if (b.is_int ? b.i == 0 : b.f == 0.0) return fail(op, "division by zero in '" + t_ + "'");
    if (o == "/") {
      if (ints) {
        if (a.i == std::numeric_limits<int64_t>::min() && b.i == -1) return overflow(op);
        if (a.i % b.i == 0) return Number::of_int(a.i / b.i);
      }
      return finite(Number::of_float(a.as_double() / b.as_double()), op);
    }
    if (o == "//") {
      if (ints) {
        if (a.i == std::numeric_limits<int64_t>::min() && b.i == -1) return overflow(op);
        int64_t q = a.i / b.i;
        if (a.i % b.i != 0 && ((a.i < 0) != (b.i < 0))) --q;
        return Number::of_int(q);
      }
      return finite(Number::of_float(std::floor(a.as_double() / b.as_double())), op);
    }
    // "%": the result takes the sign of the divisor (Python).
    if (ints) {
      if (b.i == -1) return Number::of_int(0);
      int64_t r = a.i % b.i;
      if (r != 0 && ((r < 0) != (b.i < 0))) r += b.i;
      return Number::of_int(r);
    }
    double r = std::fmod(a.as_double(), b.as_double());
    if (r != 0 && ((r < 0) != (b.as_double() < 0))) r += b.as_double();
    return finite(Number::of_float(r), op);
  }

  // unary := ('-' | '+') unary | primary
  std::optional<Number> unary() {
    skip_ws();
    size_t op = p_;
    if (depth_ > kMaxExprDepth)  // the outermost unary() is level 0, the expression itself; report the opener
      return fail(opener_, "expression nests deeper than " + std::to_string(kMaxExprDepth) + " levels",
                  "parentheses, calls and signs count as levels; split it with vars");
    struct Level {
      int& d;
      explicit Level(int& x) : d(++x) {}
      ~Level() { --d; }
    } level(depth_);
    if (accept("-")) {
      opener_ = op;
      auto v = unary();
      if (!v) return std::nullopt;
      if (!v->is_int) return Number::of_float(-v->f);
      if (v->i == std::numeric_limits<int64_t>::min()) return overflow(op);
      return Number::of_int(-v->i);
    }
    if (accept("+")) {
      opener_ = op;
      return unary();
    }
    return primary();
  }

  // primary := number | var | func '(' args ')' | '(' expr ')'
  std::optional<Number> primary() {
    skip_ws();
    if (p_ >= t_.size()) return fail(p_, "expression '" + t_ + "' ends too early", "expected a number, a var or '('");
    size_t start = p_;
    char c = t_[p_];
    if (c == '(') {
      opener_ = start;
      ++p_;
      auto v = expr();
      if (!v) return std::nullopt;
      if (!accept(")")) return fail(p_ < t_.size() ? p_ : start, "missing ')' in '" + t_ + "'");
      return v;
    }
    if (is_digit(c) || (c == '.' && p_ + 1 < t_.size() && is_digit(t_[p_ + 1]))) return number();
    if (is_ident_start(c)) {
      while (p_ < t_.size() && is_ident_char(t_[p_])) ++p_;
      std::string name = t_.substr(start, p_ - start);
      skip_ws();
      if (p_ < t_.size() && t_[p_] == '(') return call(name, start);
      if (std::find(kFunctions.begin(), kFunctions.end(), name) != kFunctions.end())
        return fail(start, "'" + name + "' is a function", "write " + name + "(...)");
      auto it = vars_.find(name);
      if (it != vars_.end()) return it->second;
      if (sites_)
        if (auto later = sites_->find(name); later != sites_->end())
          return fail(start, "var '" + name + "' is used before its definition",
                      "it is defined at line " + std::to_string(later->second.line) + ", column " +
                          std::to_string(later->second.col) +
                          "; vars are evaluated in order, each over the vars above it");
      if (diags_.full()) return std::nullopt;  // the error would not be kept: skip its hint's search
      std::vector<std::string> names;
      for (const auto& [k, v] : vars_) names.push_back(k);
      return fail(start, "unknown var '" + name + "'", did_you_mean_hint(name, names));
    }
    return fail(start, "unexpected '" + token_text(start) + "' in expression '" + t_ + "'",
                "expected a number, a var or '('");
  }

  std::optional<Number> number() {
    size_t start = p_;
    bool is_float = false;
    while (p_ < t_.size() && is_digit(t_[p_])) ++p_;
    if (p_ < t_.size() && t_[p_] == '.') {
      is_float = true;
      ++p_;
      while (p_ < t_.size() && is_digit(t_[p_])) ++p_;
    }
    if (p_ < t_.size() && (t_[p_] == 'e' || t_[p_] == 'E')) {
      size_t q = p_ + 1;
      if (q < t_.size() && (t_[q] == '+' || t_[q] == '-')) ++q;
      if (q < t_.size() && is_digit(t_[q])) {
        is_float = true;
        p_ = q;
        while (p_ < t_.size() && is_digit(t_[p_])) ++p_;
      }
    }
    if (p_ < t_.size() && (is_ident_char(t_[p_]) || t_[p_] == '.'))
      return fail(p_, "unexpected '" + token_text(p_) + "' after the number '" + t_.substr(start, p_ - start) + "'",
                  "put an operator between a number and a name, e.g. 4 * d");
    const char* b = t_.data() + start;
    const char* e = t_.data() + p_;
    if (is_float) {
      double d = 0;
      auto r = std::from_chars(b, e, d);
      if (r.ec != std::errc() || !std::isfinite(d)) return fail(start, "number '" + std::string(b, e) + "' is out of range");
      return Number::of_float(d);
    }
    int64_t i = 0;
    auto r = std::from_chars(b, e, i);
    if (r.ec != std::errc())
      return fail(start, "integer '" + std::string(b, e) + "' does not fit in 64 bits", "integers are 64-bit");
    return Number::of_int(i);
  }

  std::optional<Number> call(const std::string& name, size_t start) {
    if (std::find(kFunctions.begin(), kFunctions.end(), name) == kFunctions.end())
      return fail(start, "unknown function '" + name + "'", did_you_mean_hint(name, kFunctions));
    opener_ = start;
    accept("(");
    std::vector<Number> args;
    skip_ws();
    if (!accept(")")) {
      while (true) {
        auto v = expr();
        if (!v) return std::nullopt;
        args.push_back(*v);
        if (accept(")")) break;
        if (!accept(",")) return fail(p_ < t_.size() ? p_ : start, "expected ',' or ')' in the call of " + name + "()");
      }
    }
    if (name == "ceil") {
      if (args.size() != 1) return fail(start, "ceil() takes exactly one argument");
      if (args[0].is_int) return args[0];
      double c = std::ceil(args[0].f);
      if (!(c >= -9.2233720368547758e18 && c < 9.2233720368547758e18)) return overflow(start);
      return Number::of_int(static_cast<int64_t>(c));
    }
    if (args.size() < 2) return fail(start, name + "() takes two or more arguments");
    Number best = args[0];  // like Python, the first of equal candidates wins and keeps its type
    for (size_t k = 1; k < args.size(); ++k) {
      bool better;
      if (best.is_int && args[k].is_int) better = name == "min" ? args[k].i < best.i : args[k].i > best.i;
      else better = name == "min" ? args[k].as_double() < best.as_double() : args[k].as_double() > best.as_double();
      if (better) best = args[k];
    }
    return best;
  }

  const std::string& t_;
  SourceLoc loc_;
  const VarEnv& vars_;
  const VarSites* sites_;  // may be null
  Diagnostics& diags_;
  size_t p_ = 0;
  int depth_ = 0;      // unary() calls in progress: one more than the nesting levels entered
  size_t opener_ = 0;  // offset of the last '(', call or sign read: the one that opens a level too many
};

// A plain numeric literal such as 5, -2.5 or 1e-3 (no operators, vars or calls).
bool is_bare_number(const std::string& s) {
  size_t i = 0, n = s.size();
  if (i < n && (s[i] == '-' || s[i] == '+')) ++i;
  size_t digits = 0;
  while (i < n && is_digit(s[i])) ++i, ++digits;
  if (i < n && s[i] == '.') {
    ++i;
    while (i < n && is_digit(s[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '-' || s[i] == '+')) ++i;
    size_t e = 0;
    while (i < n && is_digit(s[i])) ++i, ++e;
    if (e == 0) return false;
  }
  return i == n;
}

bool is_bool_or_null_word(const std::string& s) {
  static const char* kWords[] = {"true", "True", "TRUE", "false", "False", "FALSE", "yes", "no",
                                 "on", "off", "null", "Null", "NULL", "~"};
  for (const char* w : kWords)
    if (s == w) return true;
  return false;
}

// The scalar of `n` as an expression, with checks shared by eval_number/int/float.
std::optional<Number> eval_scalar(const YNode& n, const VarEnv& vars, const std::string& what,
                                  const std::string& expected, Diagnostics& diags, const VarSites* sites = nullptr) {
  if (!n.is_scalar()) {
    diags.error(n.loc, "expected " + expected + " for " + what + ", got " + n.kind_name());
    return std::nullopt;
  }
  if (n.quoted && is_bare_number(n.scalar)) {
    diags.error(n.loc, "expected " + expected + " for " + what + ", got the string \"" + n.scalar + "\"",
                "remove the quotes");
    return std::nullopt;
  }
  if (!n.quoted && is_bool_or_null_word(n.scalar)) {
    diags.error(n.loc, "expected " + expected + " for " + what + ", got '" + n.scalar + "'");
    return std::nullopt;
  }
  SourceLoc loc = n.loc;
  if (n.quoted && loc.line > 0 && n.scalar.find('\n') == std::string::npos) loc.col += 1;  // past the quote
  return eval_expr(n.scalar, loc, vars, diags, sites);
}

}  // namespace

std::optional<Number> eval_expr(const std::string& text, const SourceLoc& loc, const VarEnv& vars,
                                Diagnostics& diags, const VarSites* sites) {
  return ExprParser(text, loc, vars, sites, diags).run();
}

std::optional<Number> eval_number(const YNode& n, const VarEnv& vars, const std::string& what, Diagnostics& diags,
                                  const VarSites* sites) {
  return eval_scalar(n, vars, what, "a number", diags, sites);
}

std::optional<int64_t> eval_int(const YNode& n, const VarEnv& vars, const std::string& what, Diagnostics& diags) {
  auto v = eval_scalar(n, vars, what, "an integer", diags);
  if (!v) return std::nullopt;
  if (v->is_int) return v->i;
  double f = v->f;
  if (f == std::floor(f) && f >= -9.2233720368547758e18 && f < 9.2233720368547758e18) return static_cast<int64_t>(f);
  std::string hint = n.scalar.find('/') != std::string::npos ? "'/' is true division; '//' divides rounding down" : "";
  diags.error(n.loc, what + " must be an integer, got " + fmt_number(*v), hint);
  return std::nullopt;
}

std::optional<double> eval_float(const YNode& n, const VarEnv& vars, const std::string& what, Diagnostics& diags) {
  auto v = eval_scalar(n, vars, what, "a number", diags);
  if (!v) return std::nullopt;
  return v->as_double();
}

std::optional<bool> eval_bool(const YNode& n, const std::string& what, Diagnostics& diags) {
  if (n.is_scalar() && !n.quoted) {
    const std::string& s = n.scalar;
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
  }
  std::string got = n.is_scalar() ? (n.quoted ? "the string \"" + n.scalar + "\"" : "'" + n.scalar + "'") : n.kind_name();
  std::string hint;
  const bool bool_word = n.is_scalar() && (n.scalar == "true" || n.scalar == "false" || n.scalar == "True" ||
                                           n.scalar == "False" || n.scalar == "TRUE" || n.scalar == "FALSE");
  if (n.is_scalar() && n.quoted && bool_word) hint = "remove the quotes";
  else if (n.is_scalar() && n.quoted) hint = "write true or false, without quotes";
  else if (n.is_scalar() && is_bool_or_null_word(n.scalar)) hint = "booleans are written true or false (YAML 1.2)";
  diags.error(n.loc, "expected true or false for " + what + ", got " + got, hint);
  return std::nullopt;
}

std::optional<std::string> eval_string(const YNode& n, const std::string& what, Diagnostics& diags) {
  if (n.is_scalar()) return n.scalar;
  diags.error(n.loc, "expected a string for " + what + ", got " + n.kind_name());
  return std::nullopt;
}

}  // namespace braid::io
