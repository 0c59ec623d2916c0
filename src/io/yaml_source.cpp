// YAML with locations. A pre-scan checks size, text encoding, tabs in indentation and nesting depth; libyaml's
// event parser (the reference C parser, PyYAML's) then feeds a builder that makes YNode trees with 1-based
// line:col (columns in characters), drops duplicate keys after reporting them at their second occurrence, and
// expands aliases and `<<` merge keys under a node budget. parse_yaml never throws.
// libyaml replaced yaml-cpp (issue 42): yaml-cpp scanned 3-4 MB/s, so a 16 MiB file took 4-6 s whatever it held;
// libyaml reads the same files 6-25x faster.
#include "io/yaml_source.h"

#include <yaml.h>

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "io/line_table.h"
#include "io/paths.h"

namespace braid::io {

// ---- YNode ------------------------------------------------------------------------------------------------

YNode::YNode() = default;
YNode::YNode(const YNode&) = default;
YNode::YNode(YNode&&) noexcept = default;
YNode& YNode::operator=(const YNode&) = default;
YNode& YNode::operator=(YNode&&) noexcept = default;
YNode::~YNode() = default;

const YNode* YNode::get(const std::string& key) const {
  for (const auto& [k, v] : map)
    if (k.scalar == key) return &v;
  return nullptr;
}

YNode* YNode::get_mut(const std::string& key) {
  for (auto& [k, v] : map)
    if (k.scalar == key) return &v;
  return nullptr;
}

const SourceLoc* YNode::key_loc(const std::string& key) const {
  for (const auto& [k, v] : map)
    if (k.scalar == key) return &k.loc;
  return nullptr;
}

std::vector<std::string> YNode::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : map) out.push_back(k.scalar);
  return out;
}

std::string YNode::kind_name() const {
  switch (kind) {
    case Kind::Map: return "a mapping";
    case Kind::Seq: return "a list";
    case Kind::Scalar: return "a scalar";
    case Kind::Null: break;
  }
  return "nothing";
}

namespace {

// BOM dropped, CRLF and lone CR turned into LF (the line table counts only LF as a line break).
std::string normalize_text(const std::string& in) {
  size_t start = in.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  std::string out;
  out.reserve(in.size() - start);
  for (size_t i = start; i < in.size(); ++i) {
    if (in[i] == '\r') {
      out += '\n';
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      out += in[i];
    }
  }
  return out;
}

// ---- pre-scan -----------------------------------------------------------------------------------------------

std::string hex_byte(unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", c);
  return buf;
}

// Rejects NUL bytes, control characters and invalid UTF-8 with one error at the first bad byte.
bool check_text(const std::string& s, const LineTable& lt, Diagnostics& diags) {
  const std::string hint = "model and run files are UTF-8 text; is this a binary file?";
  size_t n = s.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == 0) {
        diags.error(lt.at_offset(i), "not a text file: NUL byte", hint);
        return false;
      }
      if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7F) {
        diags.error(lt.at_offset(i), "not a text file: control character " + hex_byte(c), hint);
        return false;
      }
      ++i;
      continue;
    }
    int len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    bool ok = len > 0 && i + len <= n;
    for (int k = 1; ok && k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok && len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    if (ok && len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ok = false;
    if (!ok) {
      diags.error(lt.at_offset(i), "not a text file: invalid UTF-8 byte " + hex_byte(c), hint);
      return false;
    }
    if (cp >= 0x80 && cp <= 0x9F && cp != 0x85) {  // C1 controls: not printable in YAML
      char buf[16];
      std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
      diags.error(lt.at_offset(i), std::string("not a text file: control character ") + buf,
                  "YAML allows no C1 control character in its text; is this a binary file?");
      return false;
    }
    if (cp == 0xFFFE || cp == 0xFFFF) {
      diags.error(lt.at_offset(i), "not a text file: noncharacter U+" + std::string(cp == 0xFFFE ? "FFFE" : "FFFF"), hint);
      return false;
    }
    if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) {  // line breaks to YAML 1.1 (libyaml), not to editors
      char buf[16];
      std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
      diags.error(lt.at_offset(i), std::string("line break character ") + buf + " in the text",
                  "YAML reads it as a new line where editors show none; write a plain newline, or the escape "
                  "in double quotes");
      return false;
    }
    i += len;
  }
  return true;
}

// A conservative structural scan: tabs in block indentation (reported at the tab) and nesting depth
// (block indentation levels, compact `- ` / `? ` entries and flow brackets; reported where the limit is
// passed). It skips quoted scalars, comments and block scalars the way YAML does, closely enough that a
// real nesting level is never missed by more than a few.
class StructureScan {
 public:
  StructureScan(const std::string& s, const LineTable& lt, Diagnostics& diags, int max_depth)
      : s_(s), lt_(lt), diags_(diags), max_depth_(max_depth) {}

  bool run() {
    size_t pos = 0, n = s_.size();
    while (pos <= n && !too_deep_) {
      size_t eol = s_.find('\n', pos);
      if (eol == std::string::npos) eol = n;
      line(pos, eol);
      pos = eol + 1;
    }
    return !tab_error_ && !too_deep_;
  }

 private:
  static bool is_ws(char c) { return c == ' ' || c == '\t'; }
  bool ws_or_end(size_t k, size_t eol) const { return k >= eol || is_ws(s_[k]); }

  void push_level(size_t col, size_t off) {
    if (stack_.empty() || col > stack_.back()) stack_.push_back(col);
    check_depth(off);
  }
  void check_depth(size_t off) {
    if (too_deep_ || static_cast<int>(stack_.size()) + flow_ <= max_depth_) return;
    diags_.error(lt_.at_offset(off), "nesting deeper than " + std::to_string(max_depth_) + " levels",
                 "model and run files are shallow; is a bracket or the indentation off?");
    too_deep_ = true;
  }

  void line(size_t pos, size_t eol) {
    size_t k = pos;
    if (block_scalar_indent_ >= 0) {  // inside a `|` or `>` scalar: content lines are skipped
      while (k < eol && s_[k] == ' ') ++k;
      size_t t = k;
      while (t < eol && is_ws(s_[t])) ++t;
      if (t == eol || static_cast<int>(k - pos) > block_scalar_indent_) return;
      block_scalar_indent_ = -1;
      k = pos;
    }
    if (quote_) {  // a quoted scalar continues from an earlier line
      k = scan_quote(pos, eol);
      if (quote_) return;
      node_start_ = false;
    } else {
      while (k < eol && is_ws(s_[k])) {
        if (s_[k] == '\t' && flow_ == 0) {
          diags_.error(lt_.at_offset(k), "tab character in indentation",
                       "YAML does not allow tabs for indentation; use spaces");
          tab_error_ = true;
          return;
        }
        ++k;
      }
      if (k == eol || s_[k] == '#') return;
      line_indent_ = static_cast<int>(k - pos);
      if (flow_ == 0) {
        bool doc_marker = k == pos && eol - k >= 3 &&
                          (s_.compare(k, 3, "---") == 0 || s_.compare(k, 3, "...") == 0) && ws_or_end(k + 3, eol);
        if (k == pos && s_[k] == '%') return;  // directive
        if (doc_marker) {
          stack_.clear();
          k += 3;
        } else {
          while (!stack_.empty() && k - pos < stack_.back()) stack_.pop_back();
          push_level(k - pos, k);
        }
      }
      node_start_ = true;
    }
    rest_of_line(pos, k, eol);
  }

  void rest_of_line(size_t pos, size_t k, size_t eol) {
    bool after_quote = false;
    while (k < eol && !too_deep_) {
      char c = s_[k];
      if (is_ws(c)) {
        if (c == '\t' && node_start_) sep_tabs_.push_back(k);  // between an indicator and its node
        ++k;
        continue;
      }
      if (c == '#' && (k == pos || is_ws(s_[k - 1]))) return;
      bool was_after_quote = after_quote;
      after_quote = false;
      if (node_start_) {
        if ((c == '-' || c == '?' || c == ':') && ws_or_end(k + 1, eol)) {
          ++k;
          for (; k < eol && is_ws(s_[k]); ++k)
            if (s_[k] == '\t') sep_tabs_.push_back(k);
          if (flow_ == 0 && k < eol && s_[k] != '#') push_level(k - pos, k);
          continue;
        }
        if (c == '"' || c == '\'') {
          quote_ = c;
          k = scan_quote(k + 1, eol);
          if (quote_) return;
          node_start_ = false;
          after_quote = true;
          continue;
        }
        if ((c == '|' || c == '>') && flow_ == 0) {
          block_scalar_indent_ = line_indent_;
          return;
        }
        if (c == '&' || c == '!') {  // anchor or tag: the node itself follows
          while (k < eol && !is_ws(s_[k])) ++k;
          continue;
        }
      }
      if (c == '[' || c == '{') {
        if (node_start_ || flow_ > 0) {
          ++flow_;
          check_depth(k);
          node_start_ = true;
        }
        ++k;
        continue;
      }
      if (flow_ > 0 && (c == ']' || c == '}')) {
        --flow_;
        node_start_ = false;
        ++k;
        continue;
      }
      if (flow_ > 0 && c == ',') {
        node_start_ = true;
        ++k;
        continue;
      }
      if (c == ':' && (ws_or_end(k + 1, eol) || (flow_ > 0 && was_after_quote))) {
        node_start_ = true;
        ++k;
        continue;
      }
      node_start_ = false;
      ++k;
    }
  }

  // Scans a quoted scalar from k (just past the opening quote, or a continuation line); returns the offset
  // after the closing quote, or eol with quote_ still set when the scalar goes on past this line.
  size_t scan_quote(size_t k, size_t eol) {
    while (k < eol) {
      char c = s_[k];
      if (quote_ == '"' && c == '\\') {
        k += 2;
        continue;
      }
      if (c == quote_) {
        if (quote_ == '\'' && k + 1 < eol && s_[k + 1] == '\'') {
          k += 2;
          continue;
        }
        quote_ = 0;
        return k + 1;
      }
      ++k;
    }
    return eol;
  }

  const std::string& s_;
  const LineTable& lt_;
  Diagnostics& diags_;
  int max_depth_;
  std::vector<size_t> stack_;  // columns of the enclosing block levels
  int flow_ = 0;
  bool node_start_ = true;
  char quote_ = 0;
  int block_scalar_indent_ = -1;
  int line_indent_ = 0;
  bool tab_error_ = false, too_deep_ = false;

 public:
  // Tabs that separate an indicator (`key:`, `- `, `,`) from its node. YAML allows them there, but libyaml
  // refuses one after a block mapping's `:` ("a:\t1"); the parser gets a space in their place instead.
  std::vector<size_t> sep_tabs_;
};

// ---- builder ------------------------------------------------------------------------------------------------

struct Abort {};  // ends the event loop once an error that ends parsing has been reported
using anchor_t = size_t;  // 0: no anchor

size_t count_nodes(const YNode& n) {
  size_t c = 1;
  for (const auto& x : n.seq) c += count_nodes(x);
  for (const auto& [k, v] : n.map) c += count_nodes(k) + count_nodes(v);
  return c;
}

class Builder {
 public:
  Builder(Diagnostics& diags, const YamlLimits& limits) : diags_(diags), limits_(limits) {}

  YNode root;
  bool has_root = false;

  void OnDocumentStart(const SourceLoc& mark) {
    if (++docs_ > 1) {
      diags_.error(mark, "a second YAML document starts here",
                   "a model or run file holds exactly one document; remove the '---' line");
      throw Abort{};
    }
  }
  void OnNull(const SourceLoc& mark, anchor_t anchor) {
    YNode n;
    n.loc = mark;
    size_t start = take(1, n.loc);
    add(std::move(n), anchor, start, 1);
  }

  void OnScalar(const SourceLoc& mark, bool quoted, anchor_t anchor, std::string value) {
    YNode n;
    n.kind = YNode::Kind::Scalar;
    n.scalar = std::move(value);
    n.quoted = quoted;
    n.loc = mark;
    size_t start = take(1, n.loc);
    add(std::move(n), anchor, start, 1);
  }

  void OnAlias(const SourceLoc& loc, const std::string& name) {
    auto id = anchor_ids_.find(name);
    if (id == anchor_ids_.end()) {
      diags_.error(loc, "alias '*" + name + "' names no anchor",
                   "an alias '*name' needs an anchor '&name' written before it");
      throw Abort{};
    }
    anchor_t anchor = id->second;
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      diags_.error(loc, "alias '*" + anchor_name(anchor) + "' refers to a node that contains it",
                   "an alias may only name a node that is complete at the point of use");
      throw Abort{};
    }
    // An alias may not nest its node deeper than the text itself may go (copies are recursive).
    if (static_cast<int>(stack_.size()) + it->second.height > limits_.max_depth) {
      diags_.error(loc, "alias '*" + anchor_name(anchor) + "' nests deeper than " + std::to_string(limits_.max_depth) +
                            " levels");
      throw Abort{};
    }
    size_t start = take(it->second.size, loc);
    YNode copy = it->second.node;
    copy.loc = loc;
    add(std::move(copy), 0, start, it->second.height);
  }

  void OnSequenceStart(const SourceLoc& mark, anchor_t anchor) { open(YNode::Kind::Seq, mark, anchor); }
  void OnSequenceEnd() { close(); }
  void OnMapStart(const SourceLoc& mark, anchor_t anchor) { open(YNode::Kind::Map, mark, anchor); }
  void OnMapEnd() { close(); }

  // A node's anchor `&name`: a new id, so that a later anchor of the same name stands for a new node (the
  // id is known to aliases from here on, but its node only once the node is complete).
  anchor_t define_anchor(const std::string& name) {
    if (name.empty()) return 0;
    anchor_t id = ++anchor_count_;
    anchor_ids_[name] = id;
    anchor_names_[id] = name;
    return id;
  }

 private:
  struct Frame {
    YNode node;
    anchor_t anchor = 0;
    size_t start = 0;
    bool have_key = false;
    YNode key;
    std::unordered_map<std::string, size_t> seen;  // key -> its index in node.map (the entry holds its place)
    std::vector<YNode> merges;  // values of `<<` keys, applied at the end of the mapping
    int child_height = 0;       // height of the tallest child so far
  };
  struct Anchored {
    YNode node;
    size_t size = 0;
    int height = 1;  // levels of the subtree, itself included
  };

  std::string anchor_name(anchor_t a) const {
    auto it = anchor_names_.find(a);
    return it == anchor_names_.end() ? "?" : it->second;
  }

  // Counts n more nodes against the budget; returns the count before them.
  size_t take(size_t n, const SourceLoc& loc) {
    size_t before = count_;
    if (n > limits_.max_nodes || count_ + n > limits_.max_nodes) {
      diags_.error(loc, "more than " + std::to_string(limits_.max_nodes) + " YAML nodes after expanding aliases",
                   "is this a 'billion laughs' file? anchors and aliases may not expand past that limit");
      throw Abort{};
    }
    count_ += n;
    return before;
  }

  void open(YNode::Kind kind, const SourceLoc& mark, anchor_t anchor) {
    Frame f;
    f.node.kind = kind;
    f.node.loc = mark;
    f.anchor = anchor;
    f.start = take(1, f.node.loc);
    if (static_cast<int>(stack_.size()) >= limits_.max_depth) {  // the pre-scan normally catches this first
      diags_.error(f.node.loc, "nesting deeper than " + std::to_string(limits_.max_depth) + " levels");
      throw Abort{};
    }
    stack_.push_back(std::move(f));
  }

  void close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (f.node.is_map()) apply_merges(f);
    add(std::move(f.node), f.anchor, f.start, f.child_height + 1);
  }

  void apply_merges(Frame& f) {
    for (const YNode& m : f.merges) {
      std::vector<const YNode*> sources;
      if (m.is_map()) sources.push_back(&m);
      for (const auto& item : m.seq)
        if (item.is_map()) sources.push_back(&item);
      if (sources.empty() || (m.is_seq() && sources.size() != m.seq.size())) {
        diags_.error(m.loc, "the merge key '<<' needs a mapping or a list of mappings, got " + m.kind_name());
        continue;
      }
      for (const YNode* src : sources)
        for (const auto& [k, v] : src->map) {
          if (f.seen.count(k.scalar)) continue;  // keys written in the mapping win over merged ones
          take(count_nodes(k) + count_nodes(v), k.loc);
          f.seen.emplace(k.scalar, f.node.map.size());
          f.node.map.emplace_back(k, v);
        }
    }
  }

  // Adds a finished node of `height` levels to its parent; `start` is the node count before it.
  void add(YNode n, anchor_t anchor, size_t start, int height) {
    if (anchor) {
      size_t size = count_ - start;
      take(size, n.loc);  // the stored copy counts too, so nested anchors cannot multiply memory
      anchors_[anchor] = Anchored{n, size, height};
    }
    if (stack_.empty()) {
      root = std::move(n);
      has_root = true;
      return;
    }
    Frame& top = stack_.back();
    top.child_height = std::max(top.child_height, height);
    if (top.node.is_seq()) {
      top.node.seq.push_back(std::move(n));
    } else if (!top.have_key) {
      top.key = std::move(n);
      top.have_key = true;
    } else {
      top.have_key = false;
      insert_pair(top, std::move(top.key), std::move(n));
    }
  }

  void insert_pair(Frame& f, YNode key, YNode value) {
    if (!key.is_scalar()) {
      diags_.error(key.loc, key.is_null() ? "empty mapping key" : "mapping keys must be scalars, got " + key.kind_name());
      return;
    }
    if (key.scalar == "<<" && !key.quoted) {
      f.merges.push_back(std::move(value));
      return;
    }
    if (value.is_null() && value.loc.line != key.loc.line && key.scalar.find('\n') == std::string::npos) {
      // An empty value belongs just past `key:`, not at the next token on a later line.
      value.loc = key.loc;
      for (unsigned char c : key.scalar) value.loc.col += (c & 0xC0) != 0x80;
      value.loc.col += key.quoted ? 3 : 1;
    }
    auto [it, inserted] = f.seen.emplace(key.scalar, f.node.map.size());
    if (!inserted) {
      const SourceLoc& first = f.node.map[it->second].first.loc;
      diags_.error(key.loc, "duplicate key '" + key.scalar + "'",
                   "first written at line " + std::to_string(first.line) + ", column " + std::to_string(first.col));
      return;
    }
    f.node.map.emplace_back(std::move(key), std::move(value));
  }

  Diagnostics& diags_;
  const YamlLimits& limits_;
  std::vector<Frame> stack_;
  std::unordered_map<anchor_t, Anchored> anchors_;
  std::unordered_map<anchor_t, std::string> anchor_names_;
  std::unordered_map<std::string, anchor_t> anchor_ids_;  // the latest anchor of each name
  anchor_t anchor_count_ = 0;
  size_t count_ = 0;
  int docs_ = 0;
};

std::string syntax_hint(const std::string& msg) {
  auto has = [&](const char* w) { return msg.find(w) != std::string::npos; };
  if (has("expected ',' or") || has("expected key") || has("expected <block end>") || has("expected '-'"))
    return "check the indentation and that every '[' and '{' is closed";
  if (has("mapping values are not allowed"))
    return "is the indentation off, or does a plain value hold ': ' (quote it)?";
  if (has("cannot start any token")) return "'@' and '`' cannot start a plain value; quote it";
  if (has("quoted scalar")) return "is a closing quote missing?";
  return "";
}

// Runs libyaml's event parser over text into the builder. Returns false (with an error) on a syntax error.
bool run_parser(const std::string& text, const LineTable& lt, Builder& builder, Diagnostics& diags) {
  struct Parser {
    yaml_parser_t p;
    Parser() {
      if (!yaml_parser_initialize(&p)) throw std::bad_alloc();
    }
    ~Parser() { yaml_parser_delete(&p); }
  } parser;
  struct Event {
    yaml_event_t e{};
    ~Event() { yaml_event_delete(&e); }
  };
  yaml_parser_set_input_string(&parser.p, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  yaml_parser_set_encoding(&parser.p, YAML_UTF8_ENCODING);
  auto str = [](const yaml_char_t* s) { return s ? std::string(reinterpret_cast<const char*>(s)) : std::string(); };
  for (;;) {
    Event ev;
    if (!yaml_parser_parse(&parser.p, &ev.e)) {
      if (parser.p.error == YAML_MEMORY_ERROR) throw std::bad_alloc();
      std::string msg = parser.p.problem ? parser.p.problem : "cannot parse";
      if (parser.p.context)
        msg += std::string(" (") + parser.p.context + " that starts at line " +
               std::to_string(parser.p.context_mark.line + 1) + ", column " +
               std::to_string(parser.p.context_mark.column + 1) + ")";
      diags.error(lt.at_char(parser.p.problem_mark.line, parser.p.problem_mark.column), "invalid YAML: " + msg,
                  syntax_hint(msg));
      return false;
    }
    const yaml_event_t& e = ev.e;
    const SourceLoc loc = lt.at_char(e.start_mark.line, e.start_mark.column);
    switch (e.type) {
      case YAML_STREAM_END_EVENT: return true;
      case YAML_DOCUMENT_START_EVENT: builder.OnDocumentStart(loc); break;
      case YAML_SCALAR_EVENT: {
        const auto& sc = e.data.scalar;
        anchor_t anchor = builder.define_anchor(str(sc.anchor));
        std::string value(reinterpret_cast<const char*>(sc.value), sc.length);
        bool plain = sc.style == YAML_PLAIN_SCALAR_STYLE && sc.tag == nullptr;
        if (plain && (value.empty() || value == "~" || value == "null" || value == "Null" || value == "NULL"))
          builder.OnNull(loc, anchor);
        else
          builder.OnScalar(loc, !plain, anchor, std::move(value));
        break;
      }
      case YAML_ALIAS_EVENT: builder.OnAlias(loc, str(e.data.alias.anchor)); break;
      case YAML_SEQUENCE_START_EVENT:
        builder.OnSequenceStart(loc, builder.define_anchor(str(e.data.sequence_start.anchor)));
        break;
      case YAML_SEQUENCE_END_EVENT: builder.OnSequenceEnd(); break;
      case YAML_MAPPING_START_EVENT:
        builder.OnMapStart(loc, builder.define_anchor(str(e.data.mapping_start.anchor)));
        break;
      case YAML_MAPPING_END_EVENT: builder.OnMapEnd(); break;
      default: break;  // stream start, document end
    }
  }
}

}  // namespace

// ---- entry points -------------------------------------------------------------------------------------------

YNode parse_yaml(const std::string& raw, const std::string& file, Diagnostics& diags, const YamlLimits& limits) {
  try {
    if (raw.size() > limits.max_bytes) {
      diags.error(SourceLoc{file, 1, 1}, "file is too large: " + std::to_string(raw.size()) + " bytes (the limit is " +
                                             std::to_string(limits.max_bytes) + ")");
      return {};
    }
    const std::string text = normalize_text(raw);
    LineTable lt(text, file);
    if (!check_text(text, lt, diags)) return {};
    StructureScan scan(text, lt, diags, limits.max_depth);
    if (!scan.run()) return {};
    std::string spaced;
    if (!scan.sep_tabs_.empty()) {
      spaced = text;
      for (size_t k : scan.sep_tabs_) spaced[k] = ' ';
    }

    Builder builder(diags, limits);
    try {
      if (!run_parser(spaced.empty() ? text : spaced, lt, builder, diags)) return {};
    } catch (const Abort&) {
      return {};
    }
    if (!builder.has_root) {
      diags.error(SourceLoc{file, 1, 1}, "empty file", "expected a YAML mapping");
      return {};
    }
    return std::move(builder.root);
  } catch (const std::bad_alloc&) {
    diags.error(SourceLoc{file, 1, 1}, "out of memory while reading YAML");
  } catch (const std::exception& e) {
    diags.error(SourceLoc{file, 1, 1}, std::string("cannot read YAML: ") + e.what());
  }
  return {};
}

YNode load_yaml_file(const std::string& path, Diagnostics& diags, const SourceLoc& from, const YamlLimits& limits) {
  std::string text;
  try {
    text = read_file(path, limits.max_bytes);
  } catch (const UserError& e) {
    std::string msg = e.diagnostics().empty() ? "cannot read" : e.diagnostics()[0].message;
    if (from.valid()) diags.error(from, "'" + path + "': " + msg);
    else diags.merge(e);
    return {};
  }
  return parse_yaml(text, path, diags, limits);
}

void check_keys(const YNode& map, const std::vector<std::string>& allowed, const std::string& what,
                Diagnostics& diags) {
  if (!map.is_map()) return;
  for (const auto& [k, v] : map.map) {
    if (std::find(allowed.begin(), allowed.end(), k.scalar) != allowed.end()) continue;
    std::string hint = did_you_mean_hint(k.scalar, allowed);
    if (hint.empty()) {
      hint = "allowed keys: ";
      for (size_t i = 0; i < allowed.size(); ++i) hint += (i ? ", " : "") + allowed[i];
    }
    diags.error(k.loc, "unknown key '" + k.scalar + "' in " + what, hint);
  }
}

}  // namespace braid::io
