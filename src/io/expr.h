// Number expressions over named vars, as MODEL_FORMAT.md states: + - * / // % ( ), unary minus, min, max,
// ceil; integers are 64-bit and overflow is an error; `/` is true division whose result must be integral
// where an integer is needed; `//` and `%` follow Python (floor). Errors name the column inside the file.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>

#include "core/error.h"
#include "io/yaml_source.h"

namespace braid::io {

// A number: exact integer or floating point.
struct Number {
  bool is_int = true;
  int64_t i = 0;
  double f = 0;
  double as_double() const { return is_int ? static_cast<double>(i) : f; }
  static Number of_int(int64_t v) { return Number{true, v, 0}; }
  static Number of_float(double v) { return Number{false, 0, v}; }
};

using VarEnv = std::map<std::string, Number>;
// Where each var of a model file is defined. Vars are evaluated in order, each over the vars above it; given
// the sites, a var used before its definition is reported as such (with the line of the definition) rather
// than as unknown. Evaluating them in one pass is linear: no var is ever looked up by search or recursion.
using VarSites = std::unordered_map<std::string, SourceLoc>;

// Evaluates `text` (which starts at `loc`). Errors go to diags with the column of the offending token.
std::optional<Number> eval_expr(const std::string& text, const SourceLoc& loc, const VarEnv& vars,
                                Diagnostics& diags, const VarSites* sites = nullptr);

// Node helpers: a scalar that must be an integer / a number / a bool / a string. `what` names the value
// in messages ("attribute 'out' of layer 'fc'"). Return nullopt after reporting an error.
// A number (integer or float) for `what`: the scalar evaluated as an expression.
std::optional<Number> eval_number(const YNode& n, const VarEnv& vars, const std::string& what, Diagnostics& diags,
                                  const VarSites* sites = nullptr);
std::optional<int64_t> eval_int(const YNode& n, const VarEnv& vars, const std::string& what, Diagnostics& diags);
std::optional<double> eval_float(const YNode& n, const VarEnv& vars, const std::string& what, Diagnostics& diags);
std::optional<bool> eval_bool(const YNode& n, const std::string& what, Diagnostics& diags);
std::optional<std::string> eval_string(const YNode& n, const std::string& what, Diagnostics& diags);

}  // namespace braid::io
