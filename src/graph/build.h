// Builds the graph of a parsed model (io::ModelSpec) for a given batch size: op lookup with did-you-mean,
// attribute evaluation against each op's AttrSpecs (expressions over the model's vars), parameters with
// PyTorch names and inits (overridable by `init:`), shape inference layer by layer. Every mistake is
// reported with the layer's file:line:col; all of them in one pass (a layer whose input failed is checked
// only for what needs no input, and its value is unknown).
#pragma once
#include "core/error.h"
#include "graph/ir.h"
#include "io/model_spec.h"

namespace braid::graph {

struct BuildOptions {
  bool with_metrics = false;   // add the model's metrics (for evaluation graphs)
  bool with_backward = false;  // run autodiff (training graphs)
  // 16-bit values (bf16 or f16; f32: off): mixed precision by graph, as torch.autocast. Before each layer's node,
  // `cast` nodes convert its floating data inputs as its op's autocast rule says (ops::Autocast: GEMM ops take
  // 16-bit inputs, precision-sensitive ops f32, elementwise and shape ops follow their inputs); parameters,
  // their gradients, statistics and the loss stay f32. Values between the GEMM ops (the MLP's hidden layer,
  // attention's qkv and context, their gradients) are then 16-bit in memory: half the bytes of f32.
  DType half = DType::f32;
};

// Throws UserError with every error found.
Graph build_graph(const io::ModelSpec& model, int64_t batch, const BuildOptions& opts = {});
// The same, adding every error to `diags` instead of throwing (the errors of a block's copies once, naming
// the copies; the op layers of unused blocks checked as far as they can be without inputs). The graph is
// whole (and has its backward part when asked) only when `diags` is empty.
Graph build_graph(const io::ModelSpec& model, int64_t batch, const BuildOptions& opts, Diagnostics& diags);
// The backward part of a whole forward graph `g` (build_graph's with_backward, for a graph already built): autodiff,
// then check_graph_sizes into `diags`. Copy the forward graph first to keep it.
void add_backward(Graph& g, Diagnostics& diags);
// How many graphs build_graph has built in this process (relaxed atomics): tests count a run's builds with them.
// evaluation_build_count: those with metrics (evaluation graphs); build_count: all of them.
int64_t build_count();
int64_t evaluation_build_count();
// Throws UserError at the first layer whose tensors or workspace take the graph past 2^62 bytes or past int64
// (build_graph runs it after appending the backward pass; callers that grow a graph further may run it again).
void check_graph_sizes(const Graph& g);
// The same, adding the first such error to `diags` instead of throwing.
void check_graph_sizes(const Graph& g, Diagnostics& diags);

// For synthetic data: the exclusive upper bound of each integer model input, from the ops that consume it.
std::map<std::string, int64_t> integer_input_bounds(const Graph& g);

}  // namespace braid::graph
