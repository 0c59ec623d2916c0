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
//   recompute: activation recomputation. Per forward node, the recompute group it belongs to (-1: none). A group's
//          values are not kept for backward: just before the first backward node that reads one, the group's
//          nodes run again (clones, backward nodes drawing the same random numbers: Node::rng_as) and every backward
//          use reads the clone's value. keeps_outputs[g]: group g keeps the values its nodes pass to forward nodes
//          outside it (a block's output: "full" recomputation of a block from its input, Megatron's); otherwise
//          every value of the group is recomputed ("selective": a cheap op again from its kept input). A clone
//          reads a recomputed value of another group from that group's clone.
struct BackwardSpec {
  std::vector<std::pair<ValueId, ValueId>> seeds;
  std::vector<ValueId> wants;
  std::vector<int> recompute_group;
  std::vector<bool> keeps_outputs;
};
std::vector<ValueId> append_backward(Graph& g, const BackwardSpec& spec);

}  // namespace braid::graph
