// Layer lists and blocks of a model file: parsing each layer mapping, checking block uses (unknown, cyclic,
// too deep, too large — sizes are computed with saturating arithmetic, so `repeat: 1000000000` is refused
// without expanding anything) and expanding blocks and repeats into flat LayerSpecs with resolved `from`.
// A block's `from` names are checked once per block (used or not); expansion itself reports nothing new.
// The op layers of blocks never expanded go to ModelSpec::unused_block_layers for the graph's op checks.
#include "io/model_layers.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <unordered_set>

namespace braid::io::detail {

namespace {

constexpr int64_t kSat = std::numeric_limits<int64_t>::max();
int64_t add_sat(int64_t a, int64_t b) { return a > kSat - b ? kSat : a + b; }
int64_t mul_sat(int64_t a, int64_t b) { return (b != 0 && a > kSat / b) ? kSat : a * b; }

// Length of the UTF-8 sequence at s[i] (1-4), or 0 where none starts (a stray or overlong byte, a surrogate).
size_t utf8_len_at(const std::string& s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  uint32_t cp = c & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  return len;
}

// A control character of `len` bytes at s[i]: C0 and DEL, or C1 (U+0080-U+009F, UTF-8 C2 80-C2 9F).
bool is_control(const std::string& s, size_t i, size_t len) {
  unsigned char u = static_cast<unsigned char>(s[i]);
  if (len == 1) return u < 0x20 || u == 0x7F;
  return len == 2 && u == 0xC2 && static_cast<unsigned char>(s[i + 1]) <= 0x9F;
}

}  // namespace

std::string quote(const std::string& s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size();) {
    size_t len = utf8_len_at(s, i);
    if (len > 0 && !is_control(s, i, len)) {
      out.append(s, i, len);
      i += len;
      continue;
    }
    for (size_t k = 0; k < std::max<size_t>(len, 1); ++k, ++i) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i]));
      out += buf;
    }
  }
  return out + "'";
}

std::string TopNames::resolve(const std::string& name) const {
  if (auto it = local.find(name); it != local.end()) return it->second;
  if (inputs.count(name) || flat.count(name)) return name;
  return "";
}

std::vector<std::string> TopNames::candidates() const {
  std::vector<std::string> out(inputs.begin(), inputs.end());
  for (const auto& [k, v] : local) out.push_back(k);
  return out;
}

bool check_name(const std::string& name, const SourceLoc& loc, const std::string& what, Diagnostics& diags) {
  if (name.empty()) {
    diags.error(loc, what + " name is empty");
    return false;
  }
  for (size_t i = 0; i < name.size();) {
    size_t len = utf8_len_at(name, i);
    if (len == 0) {  // the file is checked UTF-8, but yaml-cpp decodes the escapes \N and \_ to single bytes
      diags.error(loc, what + " name " + quote(name) + " is not UTF-8 text",
                  "is an escape such as \\N or \\_ in the quotes? write the character itself");
      return false;
    }
    if (is_control(name, i, len)) {
      diags.error(loc, what + " name " + quote(name) + " holds a control character",
                  "names are printable text; is an escape such as \\0, \\t or \\x85 in the quotes?");
      return false;
    }
    i += len;
  }
  if (name.find_first_of(". \t\n") != std::string::npos) {
    diags.error(loc, what + " name " + quote(name) + " holds a '.' or a space",
                "'.' separates the parts of expanded names (h.0.fc); use '_' or '-'");
    return false;
  }
  return true;
}

// ---- parsing ------------------------------------------------------------------------------------------------

namespace {

void parse_from(const YNode& v, RawLayer& L, Diagnostics& diags) {
  L.has_from = true;
  if (v.is_scalar()) {
    L.from.push_back({v.scalar, v.loc});
  } else if (v.is_seq()) {
    if (v.seq.empty()) diags.error(v.loc, "'from' is an empty list", "name one or more inputs or earlier layers");
    for (const auto& item : v.seq) {
      if (item.is_scalar()) L.from.push_back({item.scalar, item.loc});
      else diags.error(item.loc, "expected a layer or input name in 'from', got " + item.kind_name());
    }
  } else {
    diags.error(v.loc, "expected a name or a list of names for 'from', got " + v.kind_name());
  }
  for (const auto& f : L.from)
    if (f.name.empty()) diags.error(f.loc, "empty name in 'from'");
}

void parse_init(const YNode& v, RawLayer& L, Diagnostics& diags) {
  if (!v.is_map()) {
    diags.error(v.loc, "expected a mapping for 'init' (e.g. {weight: \"normal(0, 0.02)\", bias: zeros}), got " +
                           v.kind_name());
    return;
  }
  for (const auto& [k, val] : v.map) {
    if (!val.is_scalar()) {
      diags.error(val.loc, "expected an initializer such as zeros or \"normal(0, 0.02)\" for parameter " +
                               quote(k.scalar) + ", got " + val.kind_name());
      continue;
    }
    L.init.emplace_back(k.scalar, val);
  }
}

RawLayer parse_layer(const YNode& item, size_t index, bool in_block, const VarEnv& vars, const ModelLimits& limits,
                     Diagnostics& diags) {
  RawLayer L;
  L.loc = L.name_loc = item.loc;
  bool named = false;
  const YNode* init_node = nullptr;
  for (const auto& [k, v] : item.map) {
    const std::string& key = k.scalar;
    if (key == "name") {
      if (auto s = eval_string(v, "the layer name", diags); s && check_name(*s, v.loc, "layer", diags)) {
        L.name = *s;
        L.name_loc = v.loc;
        named = true;
      }
    } else if (key == "op") {
      if (auto s = eval_string(v, "'op'", diags)) L.op = *s, L.op_loc = v.loc;
    } else if (key == "block") {
      if (auto s = eval_string(v, "'block'", diags)) L.block = *s, L.block_loc = v.loc;
    } else if (key == "from") {
      parse_from(v, L, diags);
    } else if (key == "repeat") {
      L.has_repeat = true;
      L.repeat_loc = v.loc;
      auto r = eval_int(v, vars, "'repeat'", diags);
      if (r && *r < 1) {
        diags.error(v.loc, "'repeat' must be at least 1, got " + std::to_string(*r));
      } else if (r && *r > limits.max_layers) {
        diags.error(v.loc, "repeat " + std::to_string(*r) + " is more than the limit of " +
                               std::to_string(limits.max_layers) + " layers in a model");
      } else if (r) {
        L.repeat = *r;
      }
    } else if (key == "init") {
      init_node = &v;
      parse_init(v, L, diags);
    } else {
      L.attrs.emplace_back(key, v);
      L.attr_key_locs.push_back(k.loc);
    }
  }
  std::string who = named ? "layer " + quote(L.name) : "the layer";
  if (!L.op.empty() && !L.block.empty()) {
    diags.error(L.block_loc, who + " has both 'op' and 'block'", "a layer is either one op or one block");
    L.block.clear();
  } else if (L.op.empty() && L.block.empty()) {
    diags.error(item.loc, who + " has neither 'op' nor 'block'");
  }
  if (!L.block.empty()) {
    const std::vector<std::string> allowed = {"name", "block", "from", "repeat"};
    for (size_t a = 0; a < L.attrs.size(); ++a) {
      std::string hint = did_you_mean_hint(L.attrs[a].first, allowed);
      diags.error(L.attr_key_locs[a], "unknown key " + quote(L.attrs[a].first) + " in block layer",
                  hint.empty() ? "a block layer takes name, block, from and repeat" : hint);
    }
    L.attrs.clear();
    L.attr_key_locs.clear();
    if (init_node) diags.error(init_node->loc, "'init' belongs to op layers; write it inside the block");
    if (L.from.size() > 1)
      diags.error(L.from[1].loc, "a block takes a single input, but 'from' names " + std::to_string(L.from.size()));
  }
  if (!named) {
    const std::string& base = !L.op.empty() ? L.op : !L.block.empty() ? L.block : std::string("layer");
    L.name = base + "_" + std::to_string(index);
    if (!check_name(L.name, L.loc, "generated layer", diags)) L.name = "layer_" + std::to_string(index);
  }
  if (in_block && L.name == "input")
    diags.error(L.name_loc, "a layer inside a block may not be named 'input'",
                "'input' names the block's input value");
  return L;
}

}  // namespace

std::vector<RawLayer> parse_layer_list(const YNode& list, const std::string& what, bool in_block,
                                       const VarEnv& vars, const ModelLimits& limits, Diagnostics& diags) {
  std::vector<RawLayer> out;
  if (!list.is_seq()) {
    diags.error(list.loc, "expected a list of layers for " + what + ", got " + list.kind_name());
    return out;
  }
  if (list.seq.empty()) diags.error(list.loc, what + " has no layers");
  std::map<std::string, SourceLoc> seen;
  for (size_t i = 0; i < list.seq.size(); ++i) {
    const YNode& item = list.seq[i];
    if (!item.is_map()) {
      diags.error(item.loc, "expected a layer mapping such as {name: fc, op: linear, out: 10}, got " + item.kind_name());
      continue;
    }
    RawLayer L = parse_layer(item, i, in_block, vars, limits, diags);
    auto [it, inserted] = seen.emplace(L.name, L.name_loc);
    if (!inserted)
      diags.error(L.name_loc, "duplicate layer name " + quote(L.name),
                  "first used at line " + std::to_string(it->second.line) + ", column " +
                      std::to_string(it->second.col));
    out.push_back(std::move(L));
  }
  return out;
}

// ---- checks and expansion -----------------------------------------------------------------------------------

namespace {

class Expander {
 public:
  Expander(const std::vector<RawBlock>& blocks, ModelSpec& spec, const ModelLimits& limits, Diagnostics& diags)
      : spec_(spec), limits_(limits), diags_(diags) {
    for (const auto& b : blocks) by_name_.emplace(b.name, &b);  // duplicates were reported by the YAML layer
    for (const auto& in : spec.inputs) inputs_.insert(in.name);
  }

  // 1. unknown block uses, 2. cycles, nesting and sizes, 3. `from` inside every block.
  void check_blocks(const std::vector<RawBlock>& blocks) {
    for (const auto& b : blocks) check_uses(b.layers);
    for (const auto& b : blocks)
      if (!color_.count(b.name)) visit(b.name);
    for (const auto& b : blocks) walk(b.layers, "", "input", true, 0, false, true);
  }

  // The top-level list: checked and expanded into spec_.layers (only checked when a limit is exceeded).
  void expand_top(const std::vector<RawLayer>& layers, const SourceLoc& layers_loc, TopNames& names) {
    check_uses(layers);
    bool ok = true;
    int64_t total = 0;
    for (const auto& L : layers) {
      int64_t n = layer_size(L, &ok);
      total = add_sat(total, n);
    }
    if (ok && total > limits_.max_layers) {
      diags_.error(layers_loc, "the model expands to " + count_str(total) + " layers, more than the limit of " +
                                   std::to_string(limits_.max_layers));
      ok = false;
    }
    std::string first_input = spec_.inputs.empty() ? "" : spec_.inputs[0].name;
    names.inputs = inputs_;
    walk(layers, "", first_input, false, 0, ok, true, &names.local);
    for (const auto& l : spec_.layers) names.flat.insert(l.name);
  }

  // The op layers of every block that no expansion reached (unused, or refused: a cycle, a limit), for the
  // graph builder's input-free checks (ops, attributes, inits).
  void collect_unused(const std::vector<RawBlock>& blocks) {
    for (const auto& b : blocks) {
      if (expanded_.count(b.name)) continue;
      for (const auto& L : b.layers) {
        if (L.op.empty()) continue;
        LayerSpec s;
        s.name = b.name + "." + L.name;
        s.op = L.op;
        s.loc = L.loc;
        s.op_loc = L.op_loc;
        for (const auto& f : L.from) s.from.push_back(f.name), s.from_locs.push_back(f.loc);
        s.attrs = L.attrs;
        s.attr_key_locs = L.attr_key_locs;
        s.init = L.init;
        s.block_path = b.name;
        spec_.unused_block_layers.push_back(std::move(s));
      }
    }
  }

 private:
  static std::string count_str(int64_t n) { return n == kSat ? "more than 9.2e18" : std::to_string(n); }

  void check_uses(const std::vector<RawLayer>& layers) {
    std::vector<std::string> names;
    for (const auto& [k, v] : by_name_) names.push_back(k);
    for (const auto& L : layers) {
      if (L.block.empty() || by_name_.count(L.block)) continue;
      if (diags_.full()) break;
      std::string hint = did_you_mean_hint(L.block, names);
      if (hint.empty()) hint = names.empty() ? "the model defines no blocks" : "is it an op? write op: " + L.block;
      diags_.error(L.block_loc, "unknown block " + quote(L.block), hint);
    }
  }

  // Expanded layer count of one layer (saturating); reports a repeat that alone passes the limit.
  int64_t layer_size(const RawLayer& L, bool* ok) {
    int64_t unit = 0;
    if (!L.op.empty()) unit = 1;
    else if (auto it = by_name_.find(L.block); it != by_name_.end() && !bad_.count(L.block)) unit = size_[L.block];
    int64_t n = mul_sat(L.repeat, unit);
    if (L.has_repeat && unit > 1 && n > limits_.max_layers) {
      diags_.error(L.repeat_loc, "repeat " + std::to_string(L.repeat) + " of block " + quote(L.block) + " (" +
                                     std::to_string(unit) + " layers each) expands to " + count_str(n) +
                                     " layers, more than the limit of " + std::to_string(limits_.max_layers));
      *ok = false;
    }
    return n;
  }

  // Iterative depth-first search over block uses (a long chain of blocks must not overflow the stack):
  // reports cycles at the use that closes them; computes size_ and height_ in post-order.
  void visit(const std::string& root) {
    struct Frame {
      std::string name;
      size_t next = 0;
    };
    std::vector<Frame> stack{{root}};
    color_[root] = 1;
    while (!stack.empty()) {
      Frame& top = stack.back();
      const auto& layers = by_name_.at(top.name)->layers;
      if (top.next < layers.size()) {
        const RawLayer& L = layers[top.next++];
        if (L.block.empty() || !by_name_.count(L.block)) continue;
        auto c = color_.find(L.block);
        if (c != color_.end() && c->second == 1) {
          report_cycle(stack, L);
        } else if (c == color_.end()) {
          color_[L.block] = 1;
          stack.push_back(Frame{L.block});
        }
        continue;
      }
      finish(top.name);
      color_[top.name] = 2;
      stack.pop_back();
    }
  }

  template <typename Stack>
  void report_cycle(const Stack& stack, const RawLayer& L) {
    size_t start = 0;
    while (stack[start].name != L.block) ++start;
    std::string path;
    for (size_t i = start; i < stack.size(); ++i) path += stack[i].name + " -> ";
    path += L.block;
    if (start + 1 == stack.size())
      diags_.error(L.block_loc, "block " + quote(L.block) + " uses itself", "a block may not contain itself");
    else
      diags_.error(L.block_loc, "block " + quote(L.block) + " uses itself through " + path,
                   "blocks may not use each other in a cycle");
  }

  void finish(const std::string& name) {
    const RawBlock& b = *by_name_.at(name);
    bool ok = true;
    int64_t total = 0, height = 0;
    for (const auto& L : b.layers) {
      if (!L.block.empty() && by_name_.count(L.block)) {
        if (bad_.count(L.block) || color_[L.block] == 1) {
          bad_.insert(name);  // in a cycle, or uses a block that cannot be expanded
          continue;
        }
        height = std::max(height, height_[L.block]);
      }
      total = add_sat(total, layer_size(L, &ok));
    }
    height_[name] = height + 1;
    size_[name] = total;
    if (bad_.count(name)) return;
    if (!ok) {
      bad_.insert(name);
    } else if (total > limits_.max_layers) {
      diags_.error(b.loc, "block " + quote(name) + " expands to " + count_str(total) +
                              " layers, more than the limit of " + std::to_string(limits_.max_layers));
      bad_.insert(name);
    } else if (height_[name] > limits_.max_block_depth) {
      diags_.error(b.loc, "block " + quote(name) + " nests blocks more than " +
                              std::to_string(limits_.max_block_depth) + " deep");
      bad_.insert(name);
    }
  }

  // What `f` names in a list being walked; "" when nothing (reported when `report`).
  std::string resolve(const RawFrom& f, const std::vector<RawLayer>& list, size_t index,
                      const std::map<std::string, std::string>& scope, bool in_block, const std::string& input_value,
                      bool emit, bool report) {
    if (in_block && f.name == "input") return input_value;
    if (auto it = scope.find(f.name); it != scope.end()) return it->second;
    if (inputs_.count(f.name)) return f.name;
    if (!in_block && f.name.find('.') != std::string::npos) {  // an expanded name such as h.0.res1
      if (emitted_.count(f.name)) return f.name;
      if (!emit) return f.name;  // only checkable once expanded
    }
    if (!report || diags_.full()) return "";  // full: the error would not be kept, skip its searches
    for (size_t j = index; j < list.size(); ++j)
      if (list[j].name == f.name) {
        diags_.error(f.loc, "dangling from: " + quote(f.name) + " is defined later",
                     "'from' may name only inputs and earlier layers");
        return "";
      }
    std::vector<std::string> cands(inputs_.begin(), inputs_.end());
    for (const auto& [k, v] : scope) cands.push_back(k);
    if (in_block) cands.push_back("input");
    diags_.error(f.loc, "dangling from: no input or earlier layer is named " + quote(f.name),
                 did_you_mean_hint(f.name, cands));
    return "";
  }

  // Walks one list: resolves `from`, and when `emit`, appends the expanded layers to spec_.layers.
  // `prefix` is "" or "h.0."; `input_value` is the value fed to the list's first layer. Returns the list's
  // final value.
  std::string walk(const std::vector<RawLayer>& list, const std::string& prefix, const std::string& input_value,
                   bool in_block, int depth, bool emit, bool report,
                   std::map<std::string, std::string>* scope_out = nullptr) {
    std::map<std::string, std::string> scope;
    std::string prev = input_value;
    for (size_t i = 0; i < list.size(); ++i) {
      const RawLayer& L = list[i];
      std::vector<std::string> from;
      std::vector<SourceLoc> from_locs;
      if (L.has_from) {
        for (const auto& f : L.from) {
          std::string v = resolve(f, list, i, scope, in_block, input_value, emit, report);
          from.push_back(v.empty() ? f.name : v);
          from_locs.push_back(f.loc);
        }
      } else {
        if (i == 0 && prev.empty() && report)
          diags_.error(L.loc, "the first layer has no input", "declare the model's inputs under 'inputs:'");
        from.push_back(prev);
        from_locs.push_back(L.loc);
      }
      if (from.empty()) {  // `from: []` (reported while parsing)
        from.push_back(prev);
        from_locs.push_back(L.loc);
      }
      std::string base = prefix + L.name;
      std::string final_value = base;
      if (!L.op.empty() && emit) {
        for (int64_t c = 0; c < L.repeat; ++c) {
          LayerSpec s;
          s.name = L.has_repeat ? base + "." + std::to_string(c) : base;
          s.op = L.op;
          s.loc = L.loc;
          s.op_loc = L.op_loc;
          s.from = from;
          s.from_locs = from_locs;
          if (c > 0) s.from[0] = final_value, s.from_locs[0] = L.loc;  // copies are chained
          s.attrs = L.attrs;
          s.attr_key_locs = L.attr_key_locs;
          s.init = L.init;
          s.block_path = prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1);
          final_value = s.name;
          emitted_.insert(s.name);
          spec_.layers.push_back(std::move(s));
        }
      } else if (!L.op.empty()) {
        if (L.has_repeat) final_value = base + "." + std::to_string(L.repeat - 1);
      } else if (!L.block.empty() && emit && by_name_.count(L.block) && !bad_.count(L.block) &&
                 depth < limits_.max_block_depth) {
        std::string in = from.empty() ? prev : from[0];
        expanded_.insert(L.block);
        for (int64_t c = 0; c < L.repeat; ++c) {
          std::string inner = L.has_repeat ? base + "." + std::to_string(c) + "." : base + ".";
          in = walk(by_name_.at(L.block)->layers, inner, in, true, depth + 1, true, false);
        }
        final_value = in;
      }
      scope[L.name] = final_value;
      prev = final_value;
    }
    if (scope_out) *scope_out = std::move(scope);
    return prev;
  }

  ModelSpec& spec_;
  const ModelLimits& limits_;
  Diagnostics& diags_;
  std::map<std::string, const RawBlock*> by_name_;
  std::set<std::string> inputs_;
  std::unordered_set<std::string> emitted_;  // names in spec_.layers
  std::map<std::string, int> color_;  // 1: on the search path, 2: done
  std::set<std::string> bad_;         // blocks that cannot be expanded (cycle, limits)
  std::set<std::string> expanded_;    // blocks expanded at least once
  std::map<std::string, int64_t> size_;
  std::map<std::string, int64_t> height_;
};

}  // namespace

void expand_model(const std::vector<RawBlock>& blocks, const std::vector<RawLayer>& layers,
                  const SourceLoc& layers_loc, ModelSpec& spec, const ModelLimits& limits, Diagnostics& diags,
                  TopNames& names) {
  Expander x(blocks, spec, limits, diags);
  x.check_blocks(blocks);
  x.expand_top(layers, layers_loc, names);
  x.collect_unused(blocks);
}

}  // namespace braid::io::detail
