// Reverse-mode autodiff as a graph pass: appends, after the forward nodes, the backward nodes that each
// op's gradient rule emits, summing the contributions of values used more than once. Parameter gradients
// end up in ParamInfo::grad. The seed is ones_like(loss): the loss is a scalar mean, as in PyTorch.
#pragma once
#include "graph/ir.h"

namespace braid::graph {

void append_backward(Graph& g);

}  // namespace braid::graph
