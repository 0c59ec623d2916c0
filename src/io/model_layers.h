// Internal to src/io: the layer lists of a model file (top level and blocks) parsed into RawLayers, block
// checks (unknown blocks, cycles, nesting, expanded sizes against ModelLimits, all before anything is
// expanded) and expansion into the flat, from-resolved LayerSpecs of a ModelSpec.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "io/model_spec.h"

namespace braid::io::detail {

struct RawFrom {
  std::string name;
  SourceLoc loc;
};

struct RawLayer {
  std::string name;       // local name: given, or "<op>_<index>" / "<block>_<index>"
  SourceLoc name_loc;     // of the `name` value, else of the layer's mapping
  SourceLoc loc;          // of the layer's mapping
  std::string op, block;  // at most one is set; both empty when the layer is broken
  SourceLoc op_loc, block_loc;
  bool has_from = false;
  std::vector<RawFrom> from;
  bool has_repeat = false;
  int64_t repeat = 1;
  SourceLoc repeat_loc;
  std::vector<std::pair<std::string, YNode>> attrs;
  std::vector<SourceLoc> attr_key_locs;
  std::vector<std::pair<std::string, YNode>> init;
};

struct RawBlock {
  std::string name;
  SourceLoc loc;  // of the block's name
  std::vector<RawLayer> layers;
};

// Names a top-level reference (an output, a metric's from) may use.
struct TopNames {
  std::map<std::string, std::string> local;  // top-level layer name -> its final value name
  std::set<std::string> flat;                // every expanded layer name ("h.0.fc")
  std::set<std::string> inputs;
  // The value `name` refers to, or "" when it names nothing.
  std::string resolve(const std::string& name) const;
  std::vector<std::string> candidates() const;
};

// A name of a layer, input, block, var or metric: non-empty, no '.', no spaces; reports otherwise.
// A name is non-empty, holds no '.' or space and no control character: C0, DEL or C1 (U+0080-U+009F; a NUL
// would cut it short in checkpoints and messages, issue 24; U+0085 is a line break to some readers, issue 42),
// and is UTF-8 text.
bool check_name(const std::string& name, const SourceLoc& loc, const std::string& what, Diagnostics& diags);
// 'name' for messages, control characters and bytes that are not UTF-8 written as \xNN (a C1 one as its two
// bytes, \xc2\x85) so that a message is never cut at a NUL and is always UTF-8.
std::string quote(const std::string& s);

// `what` names the list in messages ("layers", "block 'decoder'").
std::vector<RawLayer> parse_layer_list(const YNode& list, const std::string& what, bool in_block,
                                       const VarEnv& vars, const ModelLimits& limits, Diagnostics& diags);

// Checks every block (used or not) and the top-level list, then expands `layers` into spec.layers unless
// a limit is exceeded; fills `names` for outputs and metrics.
void expand_model(const std::vector<RawBlock>& blocks, const std::vector<RawLayer>& layers,
                  const SourceLoc& layers_loc, ModelSpec& spec, const ModelLimits& limits, Diagnostics& diags,
                  TopNames& names);

}  // namespace braid::io::detail
