// Human-facing views of a graph: the per-layer table of `braid check` (shape, parameters, forward FLOPs)
// and Graphviz DOT. Pure functions of the graph.
#pragma once
#include <string>
#include <vector>

#include "graph/ir.h"

namespace braid::graph {

struct LayerRow {
  std::string name, op;
  Shape out_shape;        // graph-level (batch first)
  DType dtype = DType::f32;
  int64_t params = 0;     // trainable elements
  double flops = 0;       // forward, for the graph's batch
  SourceLoc loc;
};

std::vector<LayerRow> layer_table(const Graph& g);
// One node's FLOPs from its op's cost function (one per output element when the op declares none).
double node_flops(const Graph& g, const Node& n);
std::string to_dot(const Graph& g, bool include_backward = false);

}  // namespace braid::graph
