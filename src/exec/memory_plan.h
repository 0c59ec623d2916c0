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
  size_t arena_bytes = 0;       // peak activation memory (the shared region; slots come on top)
  // Pipelined execution keeps several micro-batches in flight between their forward and backward: the values
  // marked `stash` (those crossing from forward to backward, stage inputs and outputs) live in a slot
  // region, one copy per in-flight micro-batch; in_slot[v] says which region v's offset is in.
  std::vector<bool> in_slot;
  size_t slot_bytes = 0;
  size_t workspace_bytes = 0;   // largest scratch any node asks for
  size_t naive_bytes = 0;       // what one buffer per value would take (for reports)
};

// `keep` values stay live until the end (loss, gradients read after the run, metrics).
MemoryPlan plan_memory(const graph::Graph& g, const std::vector<ValueId>& keep);
// With a slot region: `stash` (per value) selects the values packed into it; the others share arena_bytes.
// `outside` (per value; empty: none): values whose memory the caller provides (ExecutorOptions::external, such as
// gradients written straight into the parameter store): no place in the arena (offset -1).
MemoryPlan plan_memory(const graph::Graph& g, const std::vector<ValueId>& keep, const std::vector<bool>& stash,
                       const std::vector<bool>& outside = {});

// ZeRO-3's parameter gathers, prefetched (NodeLoop): when comm_gather_param node i runs, the next one of the same
// pass (forward or backward) starts on the device's communication thread. Per node: that next gather's index, or -1.
// The memory plan starts each such gather's output life at node i, so the prefetch writes no live bytes.
std::vector<int> next_gathers(const graph::Graph& g);

}  // namespace braid::exec
