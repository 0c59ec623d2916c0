// The parsed model file: vars resolved, blocks expanded into a flat list of layers whose `from` names are
// resolved to value names (model inputs or earlier layers). Attribute values stay as YNodes (with their
// locations) because only the op registry (src/ops, not visible here) knows their kinds; the graph builder
// evaluates them with eval_int/eval_float over `vars`. Structural mistakes (unknown keys, dangling from,
// block cycles, bad repeat, duplicate names, ...) are all reported here, together.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "io/expr.h"
#include "io/yaml_source.h"

namespace braid::io {

struct InputSpec {
  std::string name;
  std::vector<int64_t> shape;  // per sample
  DType dtype = DType::f32;
  SourceLoc loc;
};

struct LayerSpec {
  std::string name;            // flattened: "h.0.fc"; unnamed layers "<op>_<index>"
  std::string op;
  SourceLoc loc;               // of the layer's mapping
  SourceLoc op_loc;            // of the `op` value
  std::vector<std::string> from;      // resolved value names (model inputs or earlier layer names)
  std::vector<SourceLoc> from_locs;   // one per entry (the layer's loc where from was implicit)
  std::vector<std::pair<std::string, YNode>> attrs;  // every other key, in file order (keys: attr names)
  std::vector<SourceLoc> attr_key_locs;              // one per attr
  std::vector<std::pair<std::string, YNode>> init;   // `init: {weight: "normal(0, 0.02)"}` entries
  std::string block_path;      // "" for top-level layers; "h.0" for layers expanded from a block copy
};

struct OutputSpec {
  std::string name;
  SourceLoc loc;
};

struct ModelSpec {
  std::string path;   // as given
  std::string text;   // whole file text
  std::string name;
  VarEnv vars;        // after overrides
  std::vector<InputSpec> inputs;
  std::vector<LayerSpec> layers;    // topological (file) order, blocks expanded
  std::vector<OutputSpec> outputs;  // first = training loss
  std::vector<LayerSpec> metrics;   // name = metric name; op/from/attrs as layers (from resolved)
  // The op layers of blocks no layer expands (name "<block>.<layer>", block_path "<block>", `from` as
  // written): the graph builder checks their ops and attributes, which need no inputs (MODEL_FORMAT.md:
  // blocks are checked even when unused).
  std::vector<LayerSpec> unused_block_layers;
  // False when vars or inputs had errors: the inputs' shapes and dtypes are stand-ins, so the graph builder
  // treats the inputs as unknown (no shape checks, no cascaded errors) and checks only what needs no input.
  bool inputs_known = true;
};

struct VarOverride {
  std::string name;
  YNode value;     // a scalar (expression allowed)
  SourceLoc loc;   // where the override was written (run file or command line)
};

struct ModelLimits {
  int64_t max_layers = 100000;  // after expansion of blocks and repeats
  int max_block_depth = 32;
};

// Loads and validates a model file. All errors are collected in diags (the caller throws).
ModelSpec load_model(const std::string& path, const std::vector<VarOverride>& overrides, Diagnostics& diags,
                     const SourceLoc& from = {}, const ModelLimits& limits = {});
ModelSpec parse_model(const std::string& text, const std::string& path,
                      const std::vector<VarOverride>& overrides, Diagnostics& diags,
                      const ModelLimits& limits = {});
// parse_model on the tree parse_yaml made of `text` (a file read and parsed once, as load_run_or_model does).
ModelSpec parse_model_tree(const YNode& root, const std::string& text, const std::string& path,
                           const std::vector<VarOverride>& overrides, Diagnostics& diags,
                           const ModelLimits& limits = {});

}  // namespace braid::io
