// YAML with a source location on every node. Built on yaml-cpp, then converted into YNode trees with
// file:line:col (1-based), duplicate keys reported at their second occurrence, tabs and garbage reported
// with their place, anchors/aliases expanded up to a fixed node budget (a "billion laughs" file is an
// error, not an out-of-memory), nesting depth and file size bounded. Never throws anything but UserError.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace braid::io {

struct YNode {
  enum class Kind { Null, Scalar, Seq, Map };
  Kind kind = Kind::Null;
  std::string scalar;  // Scalar only: the text as written (without quotes)
  bool quoted = false; // Scalar written with quotes: always a string, never a number
  SourceLoc loc;       // where the node starts
  std::vector<YNode> seq;
  std::vector<std::pair<YNode, YNode>> map;  // in file order; keys are scalars

  // Defined (defaulted) in yaml_source.cpp: with clang and libstdc++, implicit special members here would
  // instantiate std::pair<YNode, YNode> while YNode is still incomplete, which does not compile.
  YNode();
  YNode(const YNode&);
  YNode(YNode&&) noexcept;
  YNode& operator=(const YNode&);
  YNode& operator=(YNode&&) noexcept;
  ~YNode();

  bool is_null() const { return kind == Kind::Null; }
  bool is_scalar() const { return kind == Kind::Scalar; }
  bool is_seq() const { return kind == Kind::Seq; }
  bool is_map() const { return kind == Kind::Map; }
  const YNode* get(const std::string& key) const;   // Map lookup; nullptr when absent
  YNode* get_mut(const std::string& key);
  const SourceLoc* key_loc(const std::string& key) const;
  std::vector<std::string> keys() const;
  std::string kind_name() const;  // "a mapping", "a list", "a scalar", "nothing"
};

struct YamlLimits {
  size_t max_bytes = 16u << 20;       // 16 MiB of text
  size_t max_nodes = 1000000;         // after alias expansion
  int max_depth = 64;
};

// Parses text (reported as coming from `file`). Syntax errors, duplicate keys and limit overruns go to diags;
// returns a Null node when the text cannot be parsed at all. An empty document is an error at 1:1.
YNode parse_yaml(const std::string& text, const std::string& file, Diagnostics& diags,
                 const YamlLimits& limits = {});
// Reads and parses a file; a missing or unreadable file is an error at `from` (or the file itself).
YNode load_yaml_file(const std::string& path, Diagnostics& diags, const SourceLoc& from = {},
                     const YamlLimits& limits = {});

// Checks that a Map node holds only `allowed` keys; reports the others with did-you-mean.
void check_keys(const YNode& map, const std::vector<std::string>& allowed, const std::string& what,
                Diagnostics& diags);

}  // namespace braid::io
