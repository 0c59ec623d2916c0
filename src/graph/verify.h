// Graph verification: ids in range, values produced once and before use (topological order), inference
// reproduces every recorded desc, parameter gradients shaped as their parameters. Throws InternalError.
#pragma once
#include "graph/ir.h"

namespace braid::graph {

void verify(const Graph& g);

}  // namespace braid::graph
