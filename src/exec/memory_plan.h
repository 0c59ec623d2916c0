// Static memory plan from liveness: every activation and input value of a graph gets an offset in one
// arena, allocated once per run; two values share bytes only when their lifetimes do not overlap.
// Parameters and buffers live in the ParamStore, not in the arena.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/ir.h"

namespace braid::exec {

struct MemoryPlan {
  std::vector<int64_t> offset;  // per value; -1 when the value is not in the arena
  size_t arena_bytes = 0;       // peak activation memory
  size_t workspace_bytes = 0;   // largest scratch any node asks for
  size_t naive_bytes = 0;       // what one buffer per value would take (for reports)
};

// `keep` values stay live until the end (loss, gradients read after the run, metrics).
MemoryPlan plan_memory(const graph::Graph& g, const std::vector<ValueId>& keep);

}  // namespace braid::exec
