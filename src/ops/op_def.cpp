// Attribute access, init specs, SBP printing, attribute completion and the generic default helpers.
#include "ops/op_def.h"

#include "core/error.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace braid::ops {

const AttrValue& Attrs::at(const std::string& name) const {
  auto it = values_.find(name);
  BRAID_ASSERT(it != values_.end(), "attribute '", name, "' is not set");
  return it->second;
}
int64_t Attrs::i(const std::string& name) const {
  const auto& v = at(name);
  BRAID_ASSERT(std::holds_alternative<int64_t>(v), "attribute '", name, "' is not an int");
  return std::get<int64_t>(v);
}
double Attrs::f(const std::string& name) const {
  const auto& v = at(name);
  if (std::holds_alternative<int64_t>(v)) return static_cast<double>(std::get<int64_t>(v));
  BRAID_ASSERT(std::holds_alternative<double>(v), "attribute '", name, "' is not a number");
  return std::get<double>(v);
}
bool Attrs::b(const std::string& name) const {
  const auto& v = at(name);
  BRAID_ASSERT(std::holds_alternative<bool>(v), "attribute '", name, "' is not a bool");
  return std::get<bool>(v);
}
const std::string& Attrs::s(const std::string& name) const {
  const auto& v = at(name);
  BRAID_ASSERT(std::holds_alternative<std::string>(v), "attribute '", name, "' is not a string");
  return std::get<std::string>(v);
}
const std::vector<int64_t>& Attrs::ints(const std::string& name) const {
  const auto& v = at(name);
  BRAID_ASSERT(std::holds_alternative<std::vector<int64_t>>(v), "attribute '", name, "' is not a list");
  return std::get<std::vector<int64_t>>(v);
}

static std::string value_str(const AttrValue& v) {
  std::ostringstream os;
  if (auto* i = std::get_if<int64_t>(&v)) os << *i;
  else if (auto* d = std::get_if<double>(&v)) os << *d;
  else if (auto* b = std::get_if<bool>(&v)) os << (*b ? "true" : "false");
  else if (auto* s = std::get_if<std::string>(&v)) os << *s;
  else {
    const auto& l = std::get<std::vector<int64_t>>(v);
    os << "[";
    for (size_t k = 0; k < l.size(); ++k) os << (k ? ", " : "") << l[k];
    os << "]";
  }
  return os.str();
}

std::string Attrs::str() const {
  std::string out;
  for (const auto& [k, v] : values_) {
    if (!out.empty()) out += ", ";
    out += k + "=" + value_str(v);
  }
  return out;
}

std::string InitSpec::str() const {
  std::ostringstream os;
  os.precision(9);
  switch (kind) {
    case Kind::Zeros: return "zeros";
    case Kind::Ones: return "ones";
    case Kind::Constant: os << "constant(" << a << ")"; break;
    case Kind::Uniform: os << "uniform(" << a << ", " << b << ")"; break;
    case Kind::Normal: os << "normal(" << a << ", " << b << ")"; break;
  }
  return os.str();
}

std::optional<InitSpec> InitSpec::parse(const std::string& text, std::string* err) {
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  if (t == "zeros") return zeros();
  if (t == "ones") return ones();
  auto open = t.find('(');
  if (open == std::string::npos || t.back() != ')') {
    *err = "expected zeros, ones, constant(v), uniform(a, b) or normal(mean, std), got '" + text + "'";
    return std::nullopt;
  }
  std::string fn = t.substr(0, open);
  std::vector<double> args;
  std::string body = t.substr(open + 1, t.size() - open - 2);
  std::stringstream ss(body);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(v)) {
      *err = "init argument '" + item + "' is not a number";
      return std::nullopt;
    }
    args.push_back(v);
  }
  auto want = [&](size_t n) {
    if (args.size() == n) return true;
    *err = fn + " takes " + std::to_string(n) + " argument(s), got " + std::to_string(args.size());
    return false;
  };
  if (fn == "constant") {
    if (!want(1)) return std::nullopt;
    return InitSpec{Kind::Constant, args[0], 0};
  }
  if (fn == "uniform") {
    if (!want(2)) return std::nullopt;
    if (!(args[0] < args[1])) {
      *err = "uniform(a, b) needs a < b";
      return std::nullopt;
    }
    return uniform(args[0], args[1]);
  }
  if (fn == "normal") {
    if (!want(2)) return std::nullopt;
    if (args[1] < 0) {
      *err = "normal(mean, std) needs std >= 0";
      return std::nullopt;
    }
    return normal(args[0], args[1]);
  }
  *err = "unknown init '" + fn + "'; expected zeros, ones, constant, uniform or normal";
  return std::nullopt;
}

bool Sbp::splits_evenly(int64_t len, int64_t parts) const {
  if (kind != Kind::Split || parts <= 1) return true;
  if (!segmented()) return len % parts == 0;
  const int64_t units = seg[0] + seg[1] + seg[2];
  if (units <= 0 || len % units != 0) return false;
  for (int64_t s : seg)
    if (s % parts != 0) return false;
  return true;
}

std::string Sbp::str() const {
  switch (kind) {
    case Kind::Split:
      return "S(" + std::to_string(axis) + ")" +
             (segmented() ? "[" + std::to_string(seg[0]) + "," + std::to_string(seg[1]) + "," + std::to_string(seg[2]) + "]"
                          : std::string());
    case Kind::Broadcast: return "B";
    case Kind::Partial: return "P";
  }
  return "?";
}

std::vector<SplitSignature> all_broadcast(std::span<const TensorDesc> inputs, std::span<const TensorDesc> outputs) {
  return {SplitSignature{"replicated", std::vector<Sbp>(inputs.size(), Sbp::B()),
                         std::vector<Sbp>(outputs.size(), Sbp::B())}};
}

Cost op_cost(const OpDef& op, const Attrs& attrs, std::span<const TensorDesc> in, std::span<const TensorDesc> out) {
  return op.cost ? op.cost(attrs, in, out) : default_cost(in, out);
}

Cost default_cost(std::span<const TensorDesc> inputs, std::span<const TensorDesc> outputs, double flops_per_out) {
  Cost c;
  for (const auto& d : inputs) c.bytes += static_cast<double>(d.bytes());
  for (const auto& d : outputs) {
    c.bytes += static_cast<double>(d.bytes());
    c.flops += flops_per_out * static_cast<double>(d.numel());
  }
  return c;
}

OpDef internal_op(std::string name, std::string doc, int num_inputs) {
  OpDef d;
  d.name = std::move(name);
  d.doc = std::move(doc);
  d.internal = true;
  d.differentiable = false;
  d.min_inputs = d.max_inputs = num_inputs;
  return d;
}

static const char* kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::Int: return "an integer";
    case AttrKind::Float: return "a number";
    case AttrKind::Bool: return "true or false";
    case AttrKind::String: return "a string";
    case AttrKind::Ints: return "an integer or a list of integers";
  }
  return "?";
}

void complete_attrs(const OpDef& def, Attrs& attrs) {
  for (const auto& [name, v] : attrs.all()) {
    bool known = false;
    for (const auto& s : def.attrs) known |= s.name == name;
    if (!known) {
      std::vector<std::string> names;
      for (const auto& s : def.attrs) names.push_back(s.name);
      throw OpError("unknown attribute '" + name + "' for op '" + def.name + "'", did_you_mean_hint(name, names));
    }
  }
  for (const auto& spec : def.attrs) {
    if (!attrs.has(spec.name)) {
      if (spec.default_value) attrs.set(spec.name, *spec.default_value);
      else if (!spec.optional) throw OpError("op '" + def.name + "' needs attribute '" + spec.name + "'");
      continue;
    }
    AttrValue v = attrs.all().at(spec.name);
    // Coerce: an Int where a Float is wanted; a scalar where a list is wanted.
    if (spec.kind == AttrKind::Float && std::holds_alternative<int64_t>(v))
      v = static_cast<double>(std::get<int64_t>(v));
    if (spec.kind == AttrKind::Ints && std::holds_alternative<int64_t>(v))
      v = std::vector<int64_t>(spec.list_len > 0 ? spec.list_len : 1, std::get<int64_t>(v));
    bool ok = (spec.kind == AttrKind::Int && std::holds_alternative<int64_t>(v)) ||
              (spec.kind == AttrKind::Float && std::holds_alternative<double>(v)) ||
              (spec.kind == AttrKind::Bool && std::holds_alternative<bool>(v)) ||
              (spec.kind == AttrKind::String && std::holds_alternative<std::string>(v)) ||
              (spec.kind == AttrKind::Ints && std::holds_alternative<std::vector<int64_t>>(v));
    if (!ok) throw OpError("attribute '" + spec.name + "' must be " + kind_name(spec.kind));
    if (spec.kind == AttrKind::String && !spec.choices.empty()) {
      const auto& s = std::get<std::string>(v);
      bool found = false;
      std::string list;
      for (const auto& c : spec.choices) {
        found |= c == s;
        list += (list.empty() ? "" : ", ") + c;
      }
      if (!found)
        throw OpError("attribute '" + spec.name + "' is '" + s + "'; expected one of: " + list,
                      did_you_mean_hint(s, spec.choices));
    }
    if (spec.kind == AttrKind::Ints) {
      const auto& l = std::get<std::vector<int64_t>>(v);
      if (spec.list_len > 0 && static_cast<int>(l.size()) != spec.list_len)
        throw OpError("attribute '" + spec.name + "' needs " + std::to_string(spec.list_len) + " values, got " +
                      std::to_string(l.size()));
    }
    std::vector<int64_t> check;
    if (auto* i = std::get_if<int64_t>(&v)) check = {*i};
    if (auto* l = std::get_if<std::vector<int64_t>>(&v)) check = *l;
    for (int64_t x : check) {
      if (spec.positive && x < 1)
        throw OpError("attribute '" + spec.name + "' must be at least 1, got " + std::to_string(x));
      if (spec.non_negative && x < 0)
        throw OpError("attribute '" + spec.name + "' must not be negative, got " + std::to_string(x));
    }
    attrs.set(spec.name, v);
  }
  if (def.canonicalize) def.canonicalize(attrs);
}

}  // namespace braid::ops

namespace braid::ops {

Act activation_of(const OpDef& op, const Attrs& attrs) {
  BRAID_ASSERT(op.activation >= 0 && op.activation < kNumActivations, "op ", op.name, " is not an activation");
  return activation_of(static_cast<Act>(op.activation), attrs);
}

Act activation_of(Act first, const Attrs& attrs) {
  const ActivationRow& row = activation_row(first);
  if (row.attr == nullptr || !attrs.has(row.attr)) return first;
  return activation_variant(first, attrs.s(row.attr).c_str());
}

}  // namespace braid::ops
