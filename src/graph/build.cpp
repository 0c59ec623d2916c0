// Model spec -> graph: the loop over layers, attribute evaluation and error reporting. Sizes are checked as
// the graph grows (issue 24): every tensor's element and byte counts fit in int64, and the graph's bytes (all
// values, each parameter three more times for its gradient and optimizer moments, every workspace) stay
// under kMaxGraphBytes, so FLOPs, parameter counts and memory-plan offsets computed from them cannot wrap.
#include "graph/build.h"

#include <atomic>
#include <set>

#include "graph/autodiff.h"
#include "ops/registry.h"
#include "ops/tie.h"

namespace braid::graph {
namespace {

constexpr int64_t kMaxGraphBytes = int64_t{1} << 62;  // 4 EiB
constexpr int kParamCopies = 4;                         // value, gradient, two optimizer moments
const char* const kSizeHint = "sizes multiply: is a size, the batch or a var far too large?";

// Bytes of the graph so far; add() is false when `bytes` would take it past kMaxGraphBytes.
struct SizeBudget {
  int64_t total = 0;
  bool add(int64_t bytes, int copies = 1) {
    int64_t b = 0, t = 0;
    if (__builtin_mul_overflow(bytes, copies, &b) || __builtin_add_overflow(total, b, &t) || t > kMaxGraphBytes)
      return false;
    total = t;
    return true;
  }
};

// Checks one tensor of `what` (reported at loc): its sizes fit in int64 and the budget takes it.
bool check_tensor(const TensorDesc& d, const std::string& what, const SourceLoc& loc, SizeBudget& budget,
                  Diagnostics& diags, int copies = 1) {
  auto bytes = d.checked_bytes();
  if (!bytes) {
    diags.error(loc, what + " " + d.str() + " has more elements or bytes than a 64-bit integer holds", kSizeHint);
    return false;
  }
  if (!budget.add(*bytes, copies)) {
    diags.error(loc, what + " " + d.str() + " takes the graph past 2^62 bytes (4 EiB)", kSizeHint);
    return false;
  }
  return true;
}

// The node's workspace in the budget; an OpError (a size past int64) or a budget overrun is reported at loc.
bool check_workspace(const Node& n, const Graph& g, const std::string& who, SizeBudget& budget, Diagnostics& diags) {
  if (!n.op->workspace) return true;
  std::vector<TensorDesc> in, out;
  for (ValueId v : n.inputs) in.push_back(g.value(v).desc);
  for (ValueId v : n.outputs) out.push_back(g.value(v).desc);
  try {
    size_t ws = n.op->workspace(n.attrs, in, out);
    if (ws <= static_cast<size_t>(kMaxGraphBytes) && budget.add(static_cast<int64_t>(ws))) return true;
    diags.error(n.loc, who + ": its workspace of " + std::to_string(ws) + " bytes takes the graph past 2^62 bytes",
                kSizeHint);
  } catch (const ops::OpError& e) {
    diags.error(n.loc, who + ": workspace: " + e.what(), e.hint());
  }
  return false;
}

struct Builder {
  const io::ModelSpec& model;
  Graph& g;
  Diagnostics& diags;  // the current layer's (build_graph folds them into the copies' groups)
  DType half = DType::f32;  // BuildOptions::half
  const ops::Registry& reg = ops::Registry::get();
  std::map<std::string, ValueId> values;  // value names visible to `from`
  SizeBudget budget;                      // bytes of the forward graph so far
  // Every layer built so far: its op and the parameter value it uses under each local name (a tied layer's
  // is the named layer's), for `tie`.
  struct LayerParams {
    std::string op;
    std::map<std::string, ValueId> params;
  };
  std::map<std::string, LayerParams> layer_params;

  // `tie: NAME` of layer l (ops/tie.h): the parameter `param` of the layer NAME names (inside a block, a layer of
  // the same copy first, then a layer of the whole model), or kNoValue after reporting why not at l.
  ValueId resolve_tie(const io::LayerSpec& l, const std::string& name, const std::string& param) {
    const std::string who = "layer '" + l.name + "' (" + l.op + ")";
    SourceLoc at = l.loc;
    for (size_t k = 0; k < l.attrs.size(); ++k)
      if (l.attrs[k].first == "tie") at = l.attrs[k].second.loc;
    std::vector<std::string> names;
    if (!l.block_path.empty()) names.push_back(l.block_path + "." + name);
    names.push_back(name);
    for (const auto& n : names) {
      auto it = layer_params.find(n);
      if (it == layer_params.end()) continue;
      auto p = it->second.params.find(param);
      if (p == it->second.params.end()) {
        diags.error(at, who + ": tie: layer '" + n + "' (" + it->second.op + ") has no parameter '" + param + "'",
                    "tie to an embedding or a linear layer");
        return kNoValue;
      }
      return p->second;
    }
    for (const auto& n : names) {
      if (n == l.name) {
        diags.error(at, who + ": tie names the layer itself", "tie to another layer's weight, such as an embedding's");
        return kNoValue;
      }
      if (values.count(n)) return kNoValue;  // the named layer failed: reported there
    }
    for (const auto& n : names)
      for (const auto& other : model.layers)
        if (other.name == n) {
          diags.error(at, who + ": tie names layer '" + n + "', which comes after it",
                      "a layer ties to a layer defined before it; move '" + l.name + "' after '" + n + "'");
          return kNoValue;
        }
    std::vector<std::string> known;
    for (const auto& [n, lp] : layer_params) known.push_back(n);
    diags.error(at, who + ": tie names no layer '" + name + "'",
                diags.full() ? "" : did_you_mean_hint(name, known));
    return kNoValue;
  }

  std::optional<ops::AttrValue> eval_attr(const ops::AttrSpec& spec, const io::YNode& node, const std::string& what) {
    switch (spec.kind) {
      case ops::AttrKind::Int:
        if (auto v = io::eval_int(node, model.vars, what, diags)) return ops::AttrValue(*v);
        return std::nullopt;
      case ops::AttrKind::Float:
        if (auto v = io::eval_float(node, model.vars, what, diags)) return ops::AttrValue(*v);
        return std::nullopt;
      case ops::AttrKind::Bool:
        if (auto v = io::eval_bool(node, what, diags)) return ops::AttrValue(*v);
        return std::nullopt;
      case ops::AttrKind::String:
        if (auto v = io::eval_string(node, what, diags)) return ops::AttrValue(*v);
        return std::nullopt;
      case ops::AttrKind::Ints: {
        if (node.is_seq()) {
          std::vector<int64_t> out;
          bool ok = true;
          for (const auto& item : node.seq) {
            auto v = io::eval_int(item, model.vars, what, diags);
            ok &= v.has_value();
            if (v) out.push_back(*v);
          }
          if (!ok) return std::nullopt;
          return ops::AttrValue(out);
        }
        if (auto v = io::eval_int(node, model.vars, what, diags)) return ops::AttrValue(*v);
        return std::nullopt;
      }
    }
    return std::nullopt;
  }

  // Graphs with 16-bit values: casts the layer's floating data inputs to the dtypes its op's autocast rule asks
  // for; the cast nodes belong to the layer (named "<layer>/cast<k>", input k).
  void autocast_inputs(const ops::OpDef& op, const io::LayerSpec& l, std::vector<ValueId>& inputs,
                       std::vector<TensorDesc>& data) {
    bool any_full = false;
    for (const auto& d : data) any_full = any_full || d.dtype == DType::f32;
    for (size_t k = 0; k < inputs.size(); ++k) {
      const DType t = data[k].dtype;
      if (!is_float(t)) continue;
      DType want = t;
      switch (op.autocast) {
        case ops::Autocast::Half: want = t == DType::f32 ? half : t; break;
        case ops::Autocast::F32: want = is_half(t) ? DType::f32 : t; break;
        case ops::Autocast::Follow: want = is_half(t) && any_full ? DType::f32 : t; break;
      }
      if (want == t) continue;
      const ops::OpDef& cast = reg.at("cast");
      ops::Attrs a{{"dtype", std::string(dtype_name(want))}};
      inputs[k] = g.add_node(cast, a, {inputs[k]}, 1, l.name + "/cast" + std::to_string(k), l.name, l.loc, false)[0];
      data[k] = g.value(inputs[k]).desc;
    }
  }

  // What can be checked of a layer without its inputs: the op, its attributes (names, kinds, values,
  // defaults) and the `init` strings. Returns the op, or nullptr after reporting errors.
  const ops::OpDef* check_op(const io::LayerSpec& l, ops::Attrs& attrs) {
    const std::string who = "layer '" + l.name + "' (" + l.op + ")";
    const ops::OpDef* op = reg.find(l.op);
    if (!op || op->internal) {
      diags.error(l.op_loc, "unknown op '" + l.op + "' in layer '" + l.name + "'",
                  diags.full() ? "" : did_you_mean_hint(l.op, reg.public_names()));
      return nullptr;
    }
    bool ok = true;
    for (size_t k = 0; k < l.attrs.size(); ++k) {
      const auto& [key, node] = l.attrs[k];
      const ops::AttrSpec* spec = nullptr;
      for (const auto& s : op->attrs)
        if (s.name == key) spec = &s;
      if (!spec) {
        std::vector<std::string> names{"name", "op", "from", "repeat", "init", "block"};
        for (const auto& s : op->attrs) names.push_back(s.name);
        std::string known;
        for (const auto& s : op->attrs) known += (known.empty() ? "" : ", ") + s.name;
        std::string hint = did_you_mean_hint(key, names);
        if (hint.empty()) hint = known.empty() ? "op '" + l.op + "' takes no attributes" : "op '" + l.op + "' takes: " + known;
        diags.error(k < l.attr_key_locs.size() ? l.attr_key_locs[k] : l.loc,
                    "unknown attribute '" + key + "' for " + who, hint);
        ok = false;
        continue;
      }
      auto v = eval_attr(*spec, node, "attribute '" + key + "' of " + who);
      if (!v) ok = false;
      else attrs.set(key, *v);
    }
    for (const auto& [pname, node] : l.init)
      if (auto text = io::eval_string(node, "init of '" + pname + "'", diags)) {
        std::string err;
        if (!ops::InitSpec::parse(*text, &err)) {
          diags.error(node.loc, "layer '" + l.name + "': init of '" + pname + "': " + err);
          ok = false;
        }
      } else {
        ok = false;
      }
    if (!ok) return nullptr;
    try {
      ops::complete_attrs(*op, attrs);
    } catch (const ops::OpError& e) {
      diags.error(l.loc, who + ": " + e.what(), e.hint());
      return nullptr;
    }
    return op;
  }

  // Adds one layer (or metric); returns its main value or kNoValue after reporting errors. A layer fed by
  // an unknown value (one that failed, or a model input whose shape is unknown) gets the checks that need
  // no input and is then unknown itself: no shape checks, no cascaded errors.
  ValueId add_layer(const io::LayerSpec& l) {
    const std::string who = "layer '" + l.name + "' (" + l.op + ")";
    ops::Attrs attrs;
    const ops::OpDef* op = check_op(l, attrs);
    if (!op) return kNoValue;
    bool ok = true;
    // Inputs.
    int n = static_cast<int>(l.from.size());
    if (n < op->min_inputs || (op->max_inputs >= 0 && n > op->max_inputs)) {
      std::string want = op->max_inputs < 0 ? "at least " + std::to_string(op->min_inputs)
                         : op->min_inputs == op->max_inputs ? std::to_string(op->min_inputs)
                                                            : std::to_string(op->min_inputs) + " to " + std::to_string(op->max_inputs);
      diags.error(l.loc, who + " takes " + want + " input(s) in `from`, got " + std::to_string(n));
      return kNoValue;
    }
    std::vector<ValueId> inputs;
    std::vector<TensorDesc> data;
    for (size_t k = 0; k < l.from.size(); ++k) {
      auto it = values.find(l.from[k]);
      if (it == values.end() || !it->second.valid()) return kNoValue;  // reported where it failed
      inputs.push_back(it->second);
      data.push_back(g.value(it->second).desc);
    }
    if (half != DType::f32) autocast_inputs(*op, l, inputs, data);
    // A tied parameter: the named layer's value, checked against this layer's attributes and inputs.
    const ops::TieRule* tie = nullptr;
    ValueId tied = kNoValue;
    if (attrs.has("tie")) {
      tie = ops::tie_rule(*op);
      BRAID_ASSERT(tie, "op ", op->name, " has a `tie` attribute but no tie rule (ops/tie.h)");
      tied = resolve_tie(l, attrs.s("tie"), tie->param);
      if (!tied.valid()) return kNoValue;
      if (!l.init.empty()) {
        diags.error(l.init[0].second.loc, who + ": a tied layer takes no init",
                    "its " + std::string(tie->param) + " is '" + g.value(tied).name + "', initialised by its own layer");
        return kNoValue;
      }
      try {
        tie->check(attrs, data, g.value(tied).desc);
      } catch (const ops::OpError& e) {
        diags.error(l.loc, who + ": " + e.what(), e.hint());
        return kNoValue;
      }
    }
    // Parameters, with `init:` overrides.
    std::vector<ops::ParamSpec> params;
    try {
      if (op->params) params = op->params(attrs, data);
    } catch (const ops::OpError& e) {
      diags.error(l.loc, who + ": " + e.what(), e.hint());
      return kNoValue;
    }
    for (const auto& [pname, node] : l.init) {
      ops::ParamSpec* target = nullptr;
      std::vector<std::string> names;
      for (auto& p : params) {
        names.push_back(p.name);
        if (p.name == pname) target = &p;
      }
      if (!target) {
        diags.error(node.loc, "layer '" + l.name + "' has no parameter '" + pname + "' to initialise",
                    names.empty() ? "op '" + l.op + "' has no parameters" : did_you_mean_hint(pname, names));
        ok = false;
        continue;
      }
      auto text = io::eval_string(node, "init of '" + pname + "'", diags);
      if (!text) {
        ok = false;
        continue;
      }
      std::string err;
      auto spec = ops::InitSpec::parse(*text, &err);
      if (!spec) {
        diags.error(node.loc, "layer '" + l.name + "': init of '" + pname + "': " + err);
        ok = false;
        continue;
      }
      target->init = *spec;
    }
    if (!ok) return kNoValue;
    for (const auto& p : params)
      if (!tie || p.name != tie->param)
        ok &= check_tensor(p.desc, who + ": parameter '" + p.name + "'", l.loc, budget, diags, kParamCopies);
    if (!ok) return kNoValue;
    std::vector<ValueId> all_inputs = inputs;
    LayerParams& mine = layer_params[l.name];
    mine.op = l.op;
    for (const auto& p : params) {
      all_inputs.push_back(tie && p.name == tie->param ? tied : g.add_param(l.name, p));
      mine.params[p.name] = all_inputs.back();
    }
    try {
      auto outs = g.add_node(*op, attrs, all_inputs, n, l.name, l.name, l.loc, false);
      const Node& node = g.node(g.value(outs[0]).producer);
      for (size_t k = 0; k < outs.size(); ++k)
        ok &= check_tensor(g.value(outs[k]).desc, who + ": output " + std::to_string(k), l.loc, budget, diags);
      ok = ok && check_workspace(node, g, who, budget, diags);
      return ok ? outs[0] : kNoValue;
    } catch (const ops::OpError& e) {
      // Shapes inside ops carry the batch axis; users think per sample, so say what each input is.
      std::string inputs_text;
      for (size_t k = 0; k < l.from.size(); ++k) {
        const auto& d = data[k];
        std::vector<int64_t> per(d.shape.dims().begin() + (d.shape.rank() > 0 ? 1 : 0), d.shape.dims().end());
        inputs_text += (k ? ", " : "") + std::string("'") + l.from[k] + "' " + Shape(per).str();
      }
      std::string hint = e.hint();
      hint += (hint.empty() ? "" : "; ") + std::string("input(s) per sample: ") + inputs_text;
      diags.error(l.loc, who + ": " + e.what(), hint);
      return kNoValue;
    }
  }
};

// The errors of a block's copies (or of a repeated op's) are one mistake: the same place and, with the
// copy's name taken out, the same words. Each is reported once, naming the copies ("in copies h.0..h.5").
class CopyFolder {
 public:
  void add(const Diagnostics& layer, const io::LayerSpec& l) {
    const std::string copy = l.block_path.empty() ? l.name : l.block_path;
    for (const auto& d : layer.all()) {
      std::string key = d.loc.str() + "\n" + without(d.message, copy) + "\n" + without(d.hint, copy);
      auto [it, fresh] = by_key_.emplace(key, groups_.size());
      if (fresh) groups_.push_back(Group{d, {}});
      auto& copies = groups_[it->second].copies;
      if (copies.empty() || copies.back() != copy) copies.push_back(copy);
    }
  }
  void flush(Diagnostics& out) {
    for (const auto& g : groups_) {
      std::string message = g.first.message;
      if (g.copies.size() > 1) message += " (in copies " + copies_text(g.copies) + ")";
      out.error(g.first.loc, message, g.first.hint);
    }
    groups_.clear();
    by_key_.clear();
  }

 private:
  struct Group {
    Diagnostic first;
    std::vector<std::string> copies;
  };
  // `s` with the copy's name, where it starts a layer name ("h.0." or 'h.0'), replaced by a mark.
  static std::string without(std::string s, const std::string& copy) {
    for (const std::string& pat : {"'" + copy + ".", "'" + copy + "'"}) {
      for (size_t p = s.find(pat); p != std::string::npos; p = s.find(pat, p + 2))
        s.replace(p, pat.size(), pat.back() == '.' ? "'\x01." : "'\x01'");
    }
    return s;
  }
  // "h.0..h.5" for a run of consecutive copies, runs separated by commas: "h.0..h.2, g.0".
  static std::string copies_text(const std::vector<std::string>& copies) {
    auto split = [](const std::string& c, std::string* prefix) -> int64_t {
      size_t dot = c.rfind('.');
      if (dot == std::string::npos || dot + 1 == c.size() ||
          c.find_first_not_of("0123456789", dot + 1) != std::string::npos || c.size() - dot > 10)
        return -1;
      *prefix = c.substr(0, dot);
      return std::stoll(c.substr(dot + 1));
    };
    std::string out;
    for (size_t i = 0; i < copies.size();) {
      std::string prefix, p2;
      int64_t first = split(copies[i], &prefix);
      size_t j = i + 1;
      while (first >= 0 && j < copies.size() && split(copies[j], &p2) == first + static_cast<int64_t>(j - i) &&
             p2 == prefix)
        ++j;
      out += (out.empty() ? "" : ", ") + copies[i] + (j - i > 1 ? ".." + copies[j - 1] : "");
      i = j;
    }
    return out;
  }
  std::vector<Group> groups_;
  std::map<std::string, size_t> by_key_;
};

}  // namespace

namespace {
std::atomic<int64_t> g_builds{0}, g_eval_builds{0};
}  // namespace

int64_t build_count() { return g_builds.load(std::memory_order_relaxed); }
int64_t evaluation_build_count() { return g_eval_builds.load(std::memory_order_relaxed); }

void add_backward(Graph& g, Diagnostics& diags) {
  append_backward(g);
  check_graph_sizes(g, diags);
}

Graph build_graph(const io::ModelSpec& model, int64_t batch, const BuildOptions& opts, Diagnostics& diags) {
  g_builds.fetch_add(1, std::memory_order_relaxed);
  if (opts.with_metrics) g_eval_builds.fetch_add(1, std::memory_order_relaxed);
  Graph g(batch);
  BRAID_ASSERT(opts.half == DType::f32 || is_half(opts.half), "BuildOptions::half is bf16, f16 or f32 (off)");
  const size_t before = diags.size();
  Diagnostics layer_diags;
  Builder b{model, g, layer_diags, opts.half, ops::Registry::get(), {}};
  CopyFolder folder;
  auto one = [&](const io::LayerSpec& l, auto&& check) {
    layer_diags = Diagnostics{};
    ValueId v = check();
    folder.add(layer_diags, l);
    return v;
  };
  // 1. Model inputs, with the batch axis in front; unknown when io found mistakes in vars or inputs.
  for (const auto& in : model.inputs) {
    std::vector<int64_t> dims{batch};
    dims.insert(dims.end(), in.shape.begin(), in.shape.end());
    TensorDesc desc{Shape(dims), in.dtype};
    std::string what = "input '" + in.name + "' (batch " + std::to_string(batch) + ")";
    b.values[in.name] =
        model.inputs_known && check_tensor(desc, what, in.loc, b.budget, diags) ? g.add_input(in.name, desc) : kNoValue;
  }
  // 2. Layers in file order (blocks already expanded by io). A second layer of a name, or a layer named as an
  // input (both reported by io), is checked without its inputs and is unknown.
  std::set<std::string> built;
  for (const auto& in : model.inputs) built.insert(in.name);
  for (const auto& l : model.layers) {
    const bool again = !built.insert(l.name).second;
    ValueId v = one(l, [&] {
      ops::Attrs attrs;
      return again ? (b.check_op(l, attrs), kNoValue) : b.add_layer(l);
    });
    b.values[l.name] = v;
    g.layer_values[l.name] = v;
  }
  // Blocks no layer uses: what needs no input.
  for (const auto& l : model.unused_block_layers)
    one(l, [&] {
      ops::Attrs attrs;
      b.check_op(l, attrs);
      return kNoValue;
    });
  folder.flush(diags);
  // 3. Outputs: the first is the scalar training loss.
  for (size_t k = 0; k < model.outputs.size(); ++k) {
    const auto& o = model.outputs[k];
    auto it = b.values.find(o.name);
    if (it == b.values.end()) {
      diags.error(o.loc, "output '" + o.name + "' is not a layer or input");
      continue;
    }
    if (!it->second.valid()) continue;
    if (k == 0) {
      const auto& d = g.value(it->second).desc;
      if (d.shape.rank() != 0 || !is_float(d.dtype))
        diags.error(o.loc, "the first output '" + o.name + "' must be the scalar training loss, got " + d.str(),
                    "end the model with a loss layer such as cross_entropy or mse_loss");
    }
    g.outputs.emplace_back(o.name, it->second);
  }
  // 4. Metrics (evaluation graphs only).
  if (opts.with_metrics) {
    for (const auto& m : model.metrics) {
      ValueId v = one(m, [&] { return b.add_layer(m); });
      if (v.valid()) g.metrics.emplace_back(m.name, v);
    }
    folder.flush(diags);
  }
  // 5. Backward, of a whole graph only; then the sizes of the whole graph again (gradients and their workspaces
  // count too).
  if (opts.with_backward && diags.size() == before && before == 0) add_backward(g, diags);
  return g;
}

Graph build_graph(const io::ModelSpec& model, int64_t batch, const BuildOptions& opts) {
  Diagnostics diags;
  Graph g = build_graph(model, batch, opts, diags);
  diags.throw_if_any();
  return g;
}

void check_graph_sizes(const Graph& g) {
  Diagnostics diags;
  check_graph_sizes(g, diags);
  diags.throw_if_any();
}

void check_graph_sizes(const Graph& g, Diagnostics& diags) {
  const size_t before = diags.size();
  SizeBudget budget;
  for (ValueId v : g.inputs())
    if (!check_tensor(g.value(v).desc, "input '" + g.value(v).name + "'", SourceLoc{}, budget, diags)) break;
  for (const auto& p : g.params())
    if (!check_tensor(p.spec.desc, "parameter '" + p.name + "'", SourceLoc{}, budget, diags, kParamCopies)) break;
  for (const auto& n : g.nodes()) {
    if (diags.size() > before) break;
    std::string who = "layer '" + n.layer + "' (" + n.op->name + (n.backward ? ", backward" : "") + ")";
    for (ValueId v : n.outputs)
      if (!check_tensor(g.value(v).desc, who + ": value '" + g.value(v).name + "'", n.loc, budget, diags)) break;
    if (diags.size() == before) check_workspace(n, g, who, budget, diags);
  }
}

std::map<std::string, int64_t> integer_input_bounds(const Graph& g) {
  std::map<std::string, int64_t> out;
  for (ValueId in : g.inputs()) {
    const Value& v = g.value(in);
    if (!is_int(v.desc.dtype)) continue;
    for (NodeId n : v.consumers) {
      const Node& node = g.node(n);
      if (!node.op->int_bound) continue;
      std::vector<TensorDesc> data;
      for (int k = 0; k < node.num_data_inputs; ++k) data.push_back(g.value(node.inputs[static_cast<size_t>(k)]).desc);
      for (int k = 0; k < node.num_data_inputs; ++k) {
        if (node.inputs[static_cast<size_t>(k)] != in) continue;
        int64_t bound = node.op->int_bound(node.attrs, data, k);
        if (bound > 0) out[v.name] = out.count(v.name) ? std::min(out[v.name], bound) : bound;
      }
    }
  }
  return out;
}

}  // namespace braid::graph
