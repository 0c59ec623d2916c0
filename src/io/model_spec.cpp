// Model files (MODEL_FORMAT.md, "Model file"): top-level keys, vars (evaluated in order, overrides applied
// in place), inputs, blocks and layers (parsed and expanded by model_layers.cpp), outputs and metrics.
// Every structural mistake goes to the caller's Diagnostics and parsing goes on where it makes sense;
// what only the op registry can judge (op names, attribute names and kinds) is left to the graph builder.
#include "io/model_spec.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <unordered_map>

#include "io/model_layers.h"
#include "io/paths.h"

namespace braid::io {

namespace {

using detail::RawBlock;
using detail::RawLayer;
using detail::TopNames;

const std::vector<std::string> kModelKeys = {"name", "vars", "inputs", "blocks", "layers", "outputs", "metrics"};

using detail::quote;

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// "a, b, c", or the first `max` of them and how many more: a hint never lists a hundred thousand vars.
std::string join(const std::vector<std::string>& v, size_t max = 20) {
  std::string out;
  for (size_t i = 0; i < v.size() && i < max; ++i) out += (i ? ", " : "") + v[i];
  if (v.size() > max) out += " and " + std::to_string(v.size() - max) + " more";
  return out;
}

// One pass over the vars in order, each evaluated over those above it: linear in the file (maps, no search).
void parse_vars(const YNode* vars, const std::vector<VarOverride>& overrides, ModelSpec& spec, Diagnostics& diags) {
  std::vector<std::string> names;
  if (vars && !vars->is_map() && !vars->is_null())
    diags.error(vars->loc, "expected a mapping of name: number for 'vars', got " + vars->kind_name());
  std::unordered_map<std::string, const VarOverride*> last_override;  // the last override of a name wins
  for (const auto& o : overrides) last_override[o.name] = &o;
  VarSites sites;
  if (vars && vars->is_map())
    for (const auto& [k, v] : vars->map) sites.emplace(k.scalar, k.loc);
  if (vars && vars->is_map()) {
    for (const auto& [k, v] : vars->map) {
      const std::string& name = k.scalar;
      names.push_back(name);
      if (!is_identifier(name)) {
        diags.error(k.loc, "var name " + quote(name) + " is not an identifier",
                    "use letters, digits and '_', not starting with a digit");
        continue;
      }
      if (name == "min" || name == "max" || name == "ceil") {
        diags.error(k.loc, "var name " + quote(name) + " is the name of a function");
        continue;
      }
      auto ov = last_override.find(name);
      auto r = eval_number(ov != last_override.end() ? ov->second->value : v, spec.vars, "var " + quote(name), diags,
                           &sites);
      spec.vars[name] = r ? *r : Number::of_int(1);  // a stand-in keeps one mistake from cascading
    }
  }
  for (const auto& o : overrides) {
    if (sites.count(o.name)) continue;
    if (diags.full()) break;
    std::string hint = did_you_mean_hint(o.name, names);
    if (hint.empty()) hint = names.empty() ? "the model has no vars" : "the model's vars are: " + join(names);
    diags.error(o.loc, "unknown var " + quote(o.name) + " in vars override", hint);
  }
}

// True when a misspelt top-level key already stands for `key` (its did-you-mean is reported instead).
bool misspelt(const YNode& root, const std::string& key) {
  for (const auto& k : root.keys())
    if (std::find(kModelKeys.begin(), kModelKeys.end(), k) == kModelKeys.end() && did_you_mean(k, kModelKeys) == key)
      return true;
  return false;
}

void parse_inputs(const YNode* inputs, const YNode& root, ModelSpec& spec, Diagnostics& diags) {
  if (!inputs) {
    if (!misspelt(root, "inputs"))
      diags.error(root.loc, "missing required key 'inputs'", "e.g. inputs: {x: {shape: [784]}}");
    return;
  }
  if (!inputs->is_map()) {
    diags.error(inputs->loc, "expected a mapping of input name: {shape, dtype} for 'inputs', got " +
                                 inputs->kind_name());
    return;
  }
  if (inputs->map.empty()) diags.error(inputs->loc, "'inputs' is empty");
  for (const auto& [k, v] : inputs->map) {
    InputSpec in;
    in.name = k.scalar;
    in.loc = k.loc;
    detail::check_name(in.name, k.loc, "input", diags);
    std::string what = "input " + quote(in.name);
    if (!v.is_map()) {
      diags.error(v.loc, "expected {shape: [...], dtype: ...} for " + what + ", got " + v.kind_name());
      spec.inputs.push_back(std::move(in));
      continue;
    }
    check_keys(v, {"shape", "dtype"}, what, diags);
    const YNode* shape = v.get("shape");
    if (!shape) {
      diags.error(v.loc, what + " has no 'shape'", "per-sample shape, e.g. shape: [784]; shape: [] is a scalar");
    } else if (!shape->is_seq()) {
      diags.error(shape->loc, "expected a list of sizes for the shape of " + what + ", got " + shape->kind_name(),
                  "e.g. shape: [seq] or shape: [1, 28, 28]");
    } else {
      for (const auto& d : shape->seq) {
        auto n = eval_int(d, spec.vars, "a size in the shape of " + what, diags);
        if (n && *n < 1) diags.error(d.loc, "size in the shape of " + what + " must be at least 1, got " + std::to_string(*n));
        in.shape.push_back(n && *n >= 1 ? *n : 1);
      }
    }
    if (const YNode* dt = v.get("dtype")) {
      if (auto s = eval_string(*dt, "the dtype of " + what, diags)) {
        if (auto t = parse_dtype(*s)) {
          in.dtype = *t;
        } else {
          std::string hint = did_you_mean_hint(*s, dtype_names());
          diags.error(dt->loc, "unknown dtype " + quote(*s), hint.empty() ? "dtypes: " + join(dtype_names()) : hint);
        }
      }
    }
    spec.inputs.push_back(std::move(in));
  }
}

std::vector<RawBlock> parse_blocks(const YNode* blocks, const ModelSpec& spec, const ModelLimits& limits,
                                   Diagnostics& diags) {
  std::vector<RawBlock> out;
  if (!blocks || blocks->is_null()) return out;
  if (!blocks->is_map()) {
    diags.error(blocks->loc, "expected a mapping of block name: [layers] for 'blocks', got " + blocks->kind_name());
    return out;
  }
  for (const auto& [k, v] : blocks->map) {
    if (!detail::check_name(k.scalar, k.loc, "block", diags)) continue;
    RawBlock b;
    b.name = k.scalar;
    b.loc = k.loc;
    b.layers = detail::parse_layer_list(v, "block " + quote(b.name), true, spec.vars, limits, diags);
    out.push_back(std::move(b));
  }
  return out;
}

void parse_outputs(const YNode* outputs, const YNode& root, const TopNames& names, ModelSpec& spec,
                   Diagnostics& diags) {
  if (!outputs) {
    if (!misspelt(root, "outputs"))
      diags.error(root.loc, "missing required key 'outputs'", "e.g. outputs: [loss]; the first is the training loss");
    return;
  }
  if (!outputs->is_seq()) {
    diags.error(outputs->loc, "expected a list of layer names for 'outputs', got " + outputs->kind_name(),
                "e.g. outputs: [loss]");
    return;
  }
  if (outputs->seq.empty())
    diags.error(outputs->loc, "'outputs' is empty", "name at least the training loss, e.g. outputs: [loss]");
  std::map<std::string, SourceLoc> seen;
  for (const auto& o : outputs->seq) {
    auto s = eval_string(o, "an output", diags);
    if (!s) continue;
    std::string v = names.resolve(*s);
    if (v.empty() && names.local.empty() && names.flat.empty()) continue;  // no layers: reported already
    if (v.empty()) {
      diags.error(o.loc, "output " + quote(*s) + " names no layer or input",
                  diags.full() ? "" : did_you_mean_hint(*s, names.candidates()));
      continue;
    }
    if (!seen.emplace(v, o.loc).second) {
      diags.error(o.loc, "duplicate output " + quote(*s));
      continue;
    }
    spec.outputs.push_back(OutputSpec{v, o.loc});
  }
}

void parse_metrics(const YNode* metrics, const TopNames& names, ModelSpec& spec, Diagnostics& diags) {
  if (!metrics || metrics->is_null()) return;
  if (!metrics->is_map()) {
    diags.error(metrics->loc, "expected a mapping of metric name: {op, from, ...} for 'metrics', got " +
                                  metrics->kind_name());
    return;
  }
  for (const auto& [k, v] : metrics->map) {
    if (!detail::check_name(k.scalar, k.loc, "metric", diags)) continue;
    std::string what = "metric " + quote(k.scalar);
    if (!v.is_map()) {
      diags.error(v.loc, "expected {op: ..., from: [...]} for " + what + ", got " + v.kind_name());
      continue;
    }
    LayerSpec m;
    m.name = k.scalar;
    m.loc = v.loc;
    bool has_op = false, has_from = false;
    for (const auto& [ak, av] : v.map) {
      if (ak.scalar == "op") {
        has_op = true;
        if (auto s = eval_string(av, "'op' of " + what, diags)) m.op = *s, m.op_loc = av.loc;
      } else if (ak.scalar == "from") {
        has_from = true;
        std::vector<const YNode*> items;
        if (av.is_scalar()) items.push_back(&av);
        else if (av.is_seq() && av.seq.empty()) diags.error(av.loc, "'from' of " + what + " is an empty list");
        else if (av.is_seq()) for (const auto& x : av.seq) items.push_back(&x);
        else diags.error(av.loc, "expected a name or a list of names for 'from' of " + what + ", got " + av.kind_name());
        for (const YNode* x : items) {
          auto s = eval_string(*x, "a name in 'from' of " + what, diags);
          if (!s) continue;
          std::string r = names.resolve(*s);
          if (r.empty())
            diags.error(x->loc, "dangling from: no input or layer is named " + quote(*s),
                        diags.full() ? "" : did_you_mean_hint(*s, names.candidates()));
          m.from.push_back(r.empty() ? *s : r);
          m.from_locs.push_back(x->loc);
        }
      } else if (ak.scalar == "name" || ak.scalar == "block" || ak.scalar == "repeat" || ak.scalar == "init") {
        diags.error(ak.loc, "unknown key " + quote(ak.scalar) + " in " + what,
                    "a metric is {op: ..., from: [...], attributes}");
      } else {
        m.attrs.emplace_back(ak.scalar, av);
        m.attr_key_locs.push_back(ak.loc);
      }
    }
    if (!has_op) diags.error(v.loc, what + " has no 'op'", "e.g. {op: accuracy, from: [logits, targets]}");
    if (!has_from) diags.error(v.loc, what + " has no 'from'", "e.g. {op: accuracy, from: [logits, targets]}");
    spec.metrics.push_back(std::move(m));
  }
}

}  // namespace

namespace {
ModelSpec empty_spec(const std::string& text, const std::string& path) {
  ModelSpec spec;
  spec.path = path;
  spec.text = text;
  spec.name = std::filesystem::path(path).stem().string();
  return spec;
}
}  // namespace

ModelSpec parse_model(const std::string& text, const std::string& path, const std::vector<VarOverride>& overrides,
                      Diagnostics& diags, const ModelLimits& limits) {
  size_t before = diags.size();
  YNode root = parse_yaml(text, path, diags);
  if (root.is_null() && diags.size() > before) {  // not YAML at all: nothing more to say
    ModelSpec spec = empty_spec(text, path);
    spec.inputs_known = false;
    return spec;
  }
  return parse_model_tree(root, text, path, overrides, diags, limits);
}

ModelSpec parse_model_tree(const YNode& root, const std::string& text, const std::string& path,
                           const std::vector<VarOverride>& overrides, Diagnostics& diags, const ModelLimits& limits) {
  ModelSpec spec = empty_spec(text, path);
  if (!root.is_map()) {
    spec.inputs_known = false;
    diags.error(root.loc.valid() ? root.loc : SourceLoc{path, 1, 1},
                "a model file is a mapping with keys " + join(kModelKeys) + "; got " + root.kind_name());
    return spec;
  }
  // 1. top-level keys and the model's name
  check_keys(root, kModelKeys, "the model file", diags);
  if (const YNode* n = root.get("name"))
    if (auto s = eval_string(*n, "the model name", diags)) spec.name = *s;
  // 2. vars, in order, with overrides
  const size_t before_inputs = diags.size();
  parse_vars(root.get("vars"), overrides, spec, diags);
  // 3. inputs
  parse_inputs(root.get("inputs"), root, spec, diags);
  spec.inputs_known = diags.size() == before_inputs;
  // 4. blocks and layers, parsed
  std::vector<RawBlock> blocks = parse_blocks(root.get("blocks"), spec, limits, diags);
  std::vector<RawLayer> layers;
  const YNode* layers_node = root.get("layers");
  SourceLoc layers_loc = root.loc;
  if (!layers_node) {
    if (!misspelt(root, "layers")) diags.error(root.loc, "missing required key 'layers'");
  } else {
    layers_loc = *root.key_loc("layers");
    layers = detail::parse_layer_list(*layers_node, "'layers'", false, spec.vars, limits, diags);
  }
  for (const auto& L : layers)
    for (const auto& in : spec.inputs)
      if (L.name == in.name) diags.error(L.name_loc, "layer name " + quote(L.name) + " is also the name of an input");
  // 5. blocks checked (even unused), then everything expanded with `from` resolved
  TopNames names;
  detail::expand_model(blocks, layers, layers_loc, spec, limits, diags, names);
  // 6. outputs and metrics, which name top-level values
  parse_outputs(root.get("outputs"), root, names, spec, diags);
  parse_metrics(root.get("metrics"), names, spec, diags);
  return spec;
}

ModelSpec load_model(const std::string& path, const std::vector<VarOverride>& overrides, Diagnostics& diags,
                     const SourceLoc& from, const ModelLimits& limits) {
  std::string text;
  try {
    text = read_file(path, YamlLimits{}.max_bytes);
  } catch (const UserError& e) {
    std::string why = e.diagnostics().empty() ? "cannot read" : e.diagnostics()[0].message;
    if (from.valid()) diags.error(from, "model file '" + path + "': " + why);
    else diags.error(SourceLoc{path, 0, 0}, why);
    ModelSpec spec;
    spec.path = path;
    spec.inputs_known = false;
    return spec;
  }
  return parse_model(text, path, overrides, diags, limits);
}

}  // namespace braid::io
