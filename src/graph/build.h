// Builds the graph of a parsed model (io::ModelSpec) for a given batch size: op lookup with did-you-mean,
// attribute evaluation against each op's AttrSpecs (expressions over the model's vars), parameters with
// PyTorch names and inits (overridable by `init:`), shape inference layer by layer. Every mistake is
// reported with the layer's file:line:col; all of them in one pass (a layer whose input failed is skipped).
#pragma once
#include "core/error.h"
#include "graph/ir.h"
#include "io/model_spec.h"

namespace braid::graph {

struct BuildOptions {
  bool with_metrics = false;   // add the model's metrics (for evaluation graphs)
  bool with_backward = false;  // run autodiff (training graphs)
};

// Throws UserError with every error found.
Graph build_graph(const io::ModelSpec& model, int64_t batch, const BuildOptions& opts = {});

// For synthetic data: the exclusive upper bound of each integer model input, from the ops that consume it.
std::map<std::string, int64_t> integer_input_bounds(const Graph& g);

}  // namespace braid::graph
