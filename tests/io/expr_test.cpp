// Tests of number expressions: Python floor semantics for // and %, true division and integrality,
// 64-bit overflow, functions, error columns, and the plain/quoted rules of eval_int/float/bool/string.
#include <gtest/gtest.h>

#include <cmath>

#include "io/expr.h"
#include "yaml_test_util.h"

using namespace braid;
using namespace braid::io;

namespace {

const SourceLoc kLoc{"m.yaml", 3, 10};

VarEnv vars() { return VarEnv{{"d", Number::of_int(128)}, {"heads", Number::of_int(4)}, {"p", Number::of_float(0.5)}}; }

Number ok(const std::string& text, const VarEnv& env = vars()) {
  Diagnostics d;
  auto r = eval_expr(text, kLoc, env, d);
  EXPECT_TRUE(r.has_value()) << text << "\n" << iotest::dump(d);
  EXPECT_TRUE(d.empty()) << text;
  return r.value_or(Number{});
}

int64_t ok_int(const std::string& text) {
  Number n = ok(text);
  EXPECT_TRUE(n.is_int) << text;
  return n.i;
}

double ok_float(const std::string& text) {
  Number n = ok(text);
  EXPECT_FALSE(n.is_int) << text;
  return n.f;
}

Diagnostics bad(const std::string& text, const VarEnv& env = vars()) {
  Diagnostics d;
  auto r = eval_expr(text, kLoc, env, d);
  EXPECT_FALSE(r.has_value()) << text;
  EXPECT_EQ(d.size(), 1u) << text << "\n" << iotest::dump(d);
  return d;
}

YNode scalar(const std::string& text, bool quoted = false, SourceLoc loc = kLoc) {
  YNode n;
  n.kind = YNode::Kind::Scalar;
  n.scalar = text;
  n.quoted = quoted;
  n.loc = loc;
  return n;
}

TEST(Expr, ArithmeticAndPrecedence) {
  EXPECT_EQ(ok_int("2 + 3 * 4"), 14);
  EXPECT_EQ(ok_int("(2 + 3) * 4"), 20);
  EXPECT_EQ(ok_int("-2 * 3"), -6);
  EXPECT_EQ(ok_int("2 - -3"), 5);
  EXPECT_EQ(ok_int("10 - 2 - 3"), 5);
  EXPECT_EQ(ok_int("100 // 10 // 3"), 3);
  EXPECT_EQ(ok_int("2 * 3 // 4"), 1);
  EXPECT_EQ(ok_int("4 * d"), 512);
  EXPECT_EQ(ok_int("d // heads"), 32);
  EXPECT_EQ(ok_int("+7"), 7);
  EXPECT_EQ(ok_int("  ( ( 1 ) )  "), 1);
  EXPECT_DOUBLE_EQ(ok_float("p * 2.5"), 1.25);
}

TEST(Expr, FloorDivisionAndModuloFollowPython) {
  EXPECT_EQ(ok_int("7 // 2"), 3);
  EXPECT_EQ(ok_int("-7 // 2"), -4);
  EXPECT_EQ(ok_int("7 // -2"), -4);
  EXPECT_EQ(ok_int("-7 // -2"), 3);
  EXPECT_EQ(ok_int("-8 // 2"), -4);
  EXPECT_EQ(ok_int("7 % 3"), 1);
  EXPECT_EQ(ok_int("-7 % 3"), 2);
  EXPECT_EQ(ok_int("7 % -3"), -2);
  EXPECT_EQ(ok_int("-7 % -3"), -1);
  EXPECT_EQ(ok_int("-6 % 3"), 0);
  EXPECT_EQ(ok_int("-9223372036854775807 - 1 % -1"), -9223372036854775807);
  EXPECT_EQ(ok_int("(-9223372036854775807 - 1) % -1"), 0);
  EXPECT_DOUBLE_EQ(ok_float("-7.5 // 2"), -4.0);
  EXPECT_DOUBLE_EQ(ok_float("-7.5 % 2"), 0.5);
  EXPECT_DOUBLE_EQ(ok_float("7.5 % -2"), -0.5);
  EXPECT_DOUBLE_EQ(ok_float("7 // 2.0"), 3.0);
}

TEST(Expr, TrueDivision) {
  EXPECT_EQ(ok_int("8 / 2"), 4);  // exact: stays an integer
  EXPECT_DOUBLE_EQ(ok_float("7 / 2"), 3.5);
  EXPECT_DOUBLE_EQ(ok_float("-7 / 2"), -3.5);
  EXPECT_DOUBLE_EQ(ok_float("1 / 4 * 4"), 1.0);
  Diagnostics d;
  EXPECT_EQ(eval_int(scalar("d / 2"), vars(), "'out'", d), 64);
  EXPECT_EQ(eval_int(scalar("1 / 4 * 8"), vars(), "'out'", d), 2);  // 2.0 is integral
  EXPECT_EQ(eval_int(scalar("1e3"), vars(), "'out'", d), 1000);
  EXPECT_TRUE(d.empty()) << iotest::dump(d);
  EXPECT_FALSE(eval_int(scalar("7 / 2"), vars(), "'out'", d));
  EXPECT_DIAG(d, 3, 10, "'out' must be an integer, got 3.5");
  EXPECT_DIAG(d, 3, 10, "'//'");
}

TEST(Expr, DivisionByZeroHasTheOperatorColumn) {
  EXPECT_DIAG(bad("d / (d - d)"), 3, 12, "division by zero");
  EXPECT_DIAG(bad("1 // 0"), 3, 12, "division by zero");
  EXPECT_DIAG(bad("5 % 0"), 3, 12, "division by zero");
  EXPECT_DIAG(bad("1.5 / 0.0"), 3, 14, "division by zero");
}

TEST(Expr, IntegerOverflowIsAnError) {
  EXPECT_EQ(ok_int("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(ok_int("-9223372036854775807 - 1"), INT64_MIN);
  EXPECT_DIAG(bad("9223372036854775807 + 1"), 3, 30, "integer overflow");
  EXPECT_DIAG(bad("4611686018427387904 * 2"), 3, 30, "integer overflow");
  EXPECT_DIAG(bad("-9223372036854775807 - 2"), 3, 31, "integer overflow");
  EXPECT_DIAG(bad("-(-9223372036854775807 - 1)"), 3, 10, "integer overflow");
  EXPECT_DIAG(bad("(-9223372036854775807 - 1) // -1"), 3, 37, "integer overflow");
  EXPECT_DIAG(bad("9223372036854775808"), 3, 10, "does not fit in 64 bits");
  EXPECT_DIAG(bad("1e400"), 3, 10, "out of range");
  EXPECT_DIAG(bad("1e300 * 1e300"), 3, 16, "not a finite number");
  EXPECT_DIAG(bad("ceil(1e19)"), 3, 10, "integer overflow");
}

TEST(Expr, Functions) {
  EXPECT_EQ(ok_int("max(3, 5, 4)"), 5);
  EXPECT_EQ(ok_int("min(d, heads * 2)"), 8);
  EXPECT_DOUBLE_EQ(ok_float("min(2, 1.5)"), 1.5);
  EXPECT_EQ(ok_int("max(2, 1.5)"), 2);  // like Python, the winner keeps its type
  EXPECT_EQ(ok_int("ceil(7 / 2)"), 4);
  EXPECT_EQ(ok_int("ceil(-3.5)"), -3);
  EXPECT_EQ(ok_int("ceil(4)"), 4);
  EXPECT_DIAG(bad("max(1)"), 3, 10, "two or more arguments");
  EXPECT_DIAG(bad("ceil(1, 2)"), 3, 10, "exactly one argument");
  EXPECT_DIAG(bad("maxx(1, 2)"), 3, 10, "did you mean 'max'?");
  EXPECT_DIAG(bad("2 * min"), 3, 14, "'min' is a function");
  EXPECT_DIAG(bad("max(1 2)"), 3, 16, "expected ',' or ')'");
}

TEST(Expr, FloatLiterals) {
  EXPECT_DOUBLE_EQ(ok_float("3.0e-4"), 3.0e-4);
  EXPECT_DOUBLE_EQ(ok_float("1e-3"), 1e-3);
  EXPECT_DOUBLE_EQ(ok_float("1E+2"), 100.0);
  EXPECT_DOUBLE_EQ(ok_float(".5"), 0.5);
  EXPECT_DOUBLE_EQ(ok_float("2."), 2.0);
}

TEST(Expr, UnknownVarSuggests) {
  Diagnostics d = bad("4 * dd");
  EXPECT_DIAG(d, 3, 14, "unknown var 'dd'");
  EXPECT_DIAG(d, 3, 14, "did you mean 'd'?");
  EXPECT_DIAG(bad("head + 1"), 3, 10, "did you mean 'heads'?");
}

TEST(Expr, SyntaxErrorsHaveColumns) {
  EXPECT_DIAG(bad(""), 3, 10, "empty expression");
  EXPECT_DIAG(bad("2 +"), 3, 13, "ends too early");
  EXPECT_DIAG(bad("(2"), 3, 10, "missing ')'");
  EXPECT_DIAG(bad("2 3"), 3, 12, "unexpected '3'");
  EXPECT_DIAG(bad("4d"), 3, 11, "unexpected 'd'");
  EXPECT_DIAG(bad("2 ** 3"), 3, 12, "'**' is not supported");
  EXPECT_DIAG(bad("2 $ 3"), 3, 12, "unexpected '$'");
  EXPECT_DIAG(bad("é + 1"), 3, 10, "unexpected 'é'");
}

TEST(Expr, EvalIntOnNodes) {
  Diagnostics d;
  EXPECT_EQ(eval_int(scalar("max(d, 7)", true), vars(), "'out'", d), 128);  // quoted expression
  EXPECT_TRUE(d.empty()) << iotest::dump(d);
  EXPECT_FALSE(eval_int(scalar("max(d, zz)", true), vars(), "'out'", d));
  EXPECT_DIAG(d, 3, 18, "unknown var 'zz'");  // past the opening quote
  Diagnostics d2;
  EXPECT_FALSE(eval_int(scalar("5", true), vars(), "'out'", d2));
  EXPECT_DIAG(d2, 3, 10, "got the string \"5\"");
  EXPECT_FALSE(eval_int(scalar("true"), vars(), "'out'", d2));
  EXPECT_DIAG(d2, 3, 10, "expected an integer for 'out', got 'true'");
  YNode seq;
  seq.kind = YNode::Kind::Seq;
  seq.loc = kLoc;
  EXPECT_FALSE(eval_int(seq, vars(), "'out'", d2));
  EXPECT_DIAG(d2, 3, 10, "got a list");
  EXPECT_FALSE(eval_float(YNode{}, vars(), "'p'", d2));
  EXPECT_DIAG(d2, 0, 0, "got nothing");
}

TEST(Expr, EvalFloatAndNumber) {
  Diagnostics d;
  EXPECT_DOUBLE_EQ(eval_float(scalar("3.0e-4"), vars(), "lr", d).value(), 3.0e-4);
  EXPECT_DOUBLE_EQ(eval_float(scalar("d"), vars(), "lr", d).value(), 128.0);
  auto n = eval_number(scalar("d // 3"), vars(), "var", d);
  ASSERT_TRUE(n && n->is_int);
  EXPECT_EQ(n->i, 42);
  EXPECT_TRUE(d.empty()) << iotest::dump(d);
}

TEST(Expr, EvalBoolFollowsYaml12Core) {
  Diagnostics d;
  for (const char* t : {"true", "True", "TRUE"}) EXPECT_EQ(eval_bool(scalar(t), "causal", d), true);
  for (const char* t : {"false", "False", "FALSE"}) EXPECT_EQ(eval_bool(scalar(t), "causal", d), false);
  EXPECT_TRUE(d.empty());
  EXPECT_FALSE(eval_bool(scalar("yes"), "causal", d));
  EXPECT_DIAG(d, 3, 10, "YAML 1.2");
  EXPECT_FALSE(eval_bool(scalar("true", true), "causal", d));
  EXPECT_DIAG(d, 3, 10, "remove the quotes");
  Diagnostics q;
  EXPECT_FALSE(eval_bool(scalar("yes please", true), "causal", q));  // removing the quotes would not help
  EXPECT_DIAG(q, 3, 10, "write true or false, without quotes");
  EXPECT_FALSE(::braid::io::iotest::has_diag(q, 3, 10, "remove the quotes")) << ::braid::io::iotest::dump(q);
  EXPECT_FALSE(eval_bool(scalar("1"), "causal", d));
  EXPECT_DIAG(d, 3, 10, "expected true or false for causal");
}

TEST(Expr, EvalString) {
  Diagnostics d;
  EXPECT_EQ(eval_string(scalar("normal(0, 0.02)", true), "init", d), "normal(0, 0.02)");
  EXPECT_EQ(eval_string(scalar("12"), "name", d), "12");
  EXPECT_TRUE(d.empty());
  YNode m;
  m.kind = YNode::Kind::Map;
  m.loc = kLoc;
  EXPECT_FALSE(eval_string(m, "name", d));
  EXPECT_DIAG(d, 3, 10, "expected a string for name, got a mapping");
}

}  // namespace

namespace {

// Issue 24: deep nesting is an error at the level past the limit, not a stack overflow.
TEST(Expr, NestingDepthIsBounded) {
  std::string deep(10000, '(');
  deep += "1" + std::string(10000, ')');
  Diagnostics d = bad(deep);
  EXPECT_NE(d.all()[0].message.find("nests deeper than 64 levels"), std::string::npos) << iotest::dump(d);
  EXPECT_EQ(d.all()[0].loc.str(), "m.yaml:3:" + std::to_string(10 + 64));  // the 65th '('
  std::string calls;
  for (int i = 0; i < 10000; ++i) calls += "min(";
  Diagnostics c = bad(calls + "1");
  EXPECT_NE(c.all()[0].message.find("nests deeper"), std::string::npos) << iotest::dump(c);
  Diagnostics s = bad(std::string(100000, '-') + "1");
  EXPECT_NE(s.all()[0].message.find("nests deeper"), std::string::npos) << iotest::dump(s);
  // Long flat sums are not nesting.
  std::string sum = "1";
  for (int i = 0; i < 20000; ++i) sum += " + 1";
  EXPECT_EQ(ok_int(sum), 20001);
}

// Issue 42: the limit is "at most 64 levels" (MODEL_FORMAT.md, docs/model_format.md): 64 parentheses, calls or
// signs evaluate, the 65th is refused at its own column.
TEST(Expr, SixtyFourLevelsAreAllowed) {
  EXPECT_EQ(ok_int(std::string(64, '(') + "2" + std::string(64, ')')), 2);
  Diagnostics p = bad(std::string(65, '(') + "2" + std::string(65, ')'));
  EXPECT_DIAG(p, 3, 10 + 64, "nests deeper than 64 levels");
  EXPECT_EQ(ok_int(std::string(64, '-') + "3"), 3);
  Diagnostics s = bad(std::string(65, '-') + "3");
  EXPECT_DIAG(s, 3, 10 + 64, "nests deeper than 64 levels");
  std::string calls, close;
  for (int i = 0; i < 64; ++i) calls += "ceil(", close += ")";
  EXPECT_EQ(ok_int(calls + "7" + close), 7);
  Diagnostics c = bad("ceil(" + calls + "7" + close + ")");
  EXPECT_DIAG(c, 3, 10 + 5 * 64, "nests deeper than 64 levels");  // the 65th ceil(
  // Mixed, with spaces: 32 signs and 32 parentheses are 64 levels.
  std::string mixed;
  for (int i = 0; i < 32; ++i) mixed += "- ( ";
  EXPECT_EQ(ok_int(mixed + "5" + std::string(32, ')')), 5);
  Diagnostics m = bad(mixed + "(5" + std::string(33, ')'));
  EXPECT_DIAG(m, 3, 10 + 4 * 32, "nests deeper than 64 levels");
}

}  // namespace
