// JSON writing: string escaping (RFC 8259), shortest round-trip numbers, comma and nesting bookkeeping.
#include "io/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace braid::io {

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;  // UTF-8 bytes pass through unchanged
        }
    }
  }
  out += '"';
  return out;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  // The fewest significant digits that read back to the same double (to_chars' shortest form), printed
  // in %g style so that 3e-4 reads "0.0003" rather than "3e-04".
  char buf[40];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  BRAID_ASSERT(res.ec == std::errc(), "to_chars failed");
  int digits = 0;
  for (const char* p = buf; p < res.ptr && *p != 'e'; ++p) digits += (*p >= '0' && *p <= '9');
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

void JsonWriter::newline() {
  if (indent_ <= 0) return;
  out_ += '\n';
  out_.append(stack_.size() * static_cast<size_t>(indent_), ' ');
}

void JsonWriter::before_value() {
  if (stack_.empty()) {
    BRAID_ASSERT(!wrote_top_, "JSON: a second top-level value");
    wrote_top_ = true;
    return;
  }
  Level& top = stack_.back();
  if (top.ctx == Ctx::Object) {
    BRAID_ASSERT(top.has_key, "JSON: value inside an object without a key");
    top.has_key = false;
    return;
  }
  if (top.has_items) out_ += ',';
  top.has_items = true;
  newline();
}

JsonWriter& JsonWriter::raw_value(std::string_view text) {
  before_value();
  out_ += text;
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view k) {
  BRAID_ASSERT(!stack_.empty() && stack_.back().ctx == Ctx::Object, "JSON: key '", k, "' outside an object");
  Level& top = stack_.back();
  BRAID_ASSERT(!top.has_key, "JSON: two keys in a row ('", k, "')");
  if (top.has_items) out_ += ',';
  top.has_items = true;
  top.has_key = true;
  newline();
  out_ += json_quote(k);
  out_ += indent_ > 0 ? ": " : ":";
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  stack_.push_back(Level{Ctx::Object});
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  BRAID_ASSERT(!stack_.empty() && stack_.back().ctx == Ctx::Object, "JSON: end_object without an object");
  BRAID_ASSERT(!stack_.back().has_key, "JSON: key without a value at end of object");
  bool items = stack_.back().has_items;
  stack_.pop_back();
  if (items) newline();
  out_ += '}';
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  stack_.push_back(Level{Ctx::Array});
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  BRAID_ASSERT(!stack_.empty() && stack_.back().ctx == Ctx::Array, "JSON: end_array without an array");
  bool items = stack_.back().has_items;
  stack_.pop_back();
  if (items) newline();
  out_ += ']';
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view s) { return raw_value(json_quote(s)); }
JsonWriter& JsonWriter::value(double v) { return raw_value(json_number(v)); }
JsonWriter& JsonWriter::value(bool b) { return raw_value(b ? "true" : "false"); }

}  // namespace braid::io
