// A small streaming JSON writer for metrics lines and machine-readable CLI output (`braid check --json`).
// Commas, quoting and escaping are handled here; misuse (a value without a key inside an object, unbalanced
// ends) is an internal error. Doubles are written in the shortest form that reads back to the same bits;
// NaN and infinities, which JSON cannot express, are written as null. Deliberately no parser.
#pragma once
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace braid::io {

// `s` as a JSON string literal, quotes included ("a\"b\n" -> "\"a\\\"b\\n\"").
std::string json_quote(std::string_view s);
// A double as JSON: the fewest %g digits that round-trip ("0.1", "0.0003", "3", "1e+300"), or "null"
// when not finite. (Full precision like %.17g, without printing 0.1 as 0.10000000000000001.)
std::string json_number(double v);

class JsonWriter {
 public:
  // indent 0: everything on one line (JSON lines); > 0: pretty-printed with that many spaces per level.
  explicit JsonWriter(int indent = 0) : indent_(indent) {}

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);  // inside an object, before each value

  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(double v);
  JsonWriter& value(bool b);
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  JsonWriter& value(T v) {
    return raw_value(std::to_string(v));
  }
  JsonWriter& null() { return raw_value("null"); }

  // Shorthands: key(k).value(v).
  template <typename T>
  JsonWriter& field(std::string_view k, const T& v) {
    return key(k).value(v);
  }

  // The text so far; complete() is true once every object and array is closed.
  const std::string& str() const { return out_; }
  bool complete() const { return stack_.empty() && wrote_top_; }

 private:
  JsonWriter& raw_value(std::string_view text);
  void before_value();
  void newline();
  enum class Ctx : uint8_t { Object, Array };
  struct Level {
    Ctx ctx;
    bool has_items = false;
    bool has_key = false;
  };
  std::string out_;
  std::vector<Level> stack_;
  int indent_;
  bool wrote_top_ = false;
};

}  // namespace braid::io
