// Reverse-mode autodiff as a graph pass: appends, after the forward nodes, the backward nodes that each
// op's gradient rule emits, summing the contributions of values used more than once. Parameter gradients
// end up in ParamInfo::grad. The seed is ones_like(loss): the loss is a scalar mean, as in PyTorch.
#pragma once
#include "graph/ir.h"

namespace braid::graph {

void append_backward(Graph& g);

// The general form, for the per-device graphs of a plan (src/exec/lower.h), which may hold no loss (a
// pipeline stage before the last) and continue a backward that later stages started:
//   seeds: (value, gradient) pairs: `gradient` (usually an Input value filled from a received message) is
//          added to the gradient of `value`; the loss, when the graph has one, is seeded with ones as above.
//   wants: values (usually stage inputs) whose total gradient the caller needs; they count as requiring a
//          gradient like trainable parameters.
// Returns the gradient of each `wants` value (kNoValue when none flows to it).
struct BackwardSpec {
  std::vector<std::pair<ValueId, ValueId>> seeds;
  std::vector<ValueId> wants;
};
std::vector<ValueId> append_backward(Graph& g, const BackwardSpec& spec);

}  // namespace braid::graph
