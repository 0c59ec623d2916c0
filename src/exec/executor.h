// Runs one graph on one CPU device: every value is a view into a single arena laid out by the static
// memory plan (allocated once, at construction), parameters and buffers are views into the ParamStore,
// and a run is a loop over nodes calling each op's CPU kernel. Nothing is allocated inside run().
#pragma once
#include <string>
#include <vector>

#include "exec/memory_plan.h"
#include "exec/param_store.h"
#include "graph/ir.h"
#include "io/trace.h"

namespace braid::exec {

class Executor {
 public:
  // `keep` values stay readable after run() (loss, gradients, metrics).
  Executor(const graph::Graph& g, ParamStore& params, const std::vector<ValueId>& keep);
  // The arena view of a model input, to be filled before run().
  const Tensor& input(const std::string& name) const;
  const Tensor& value(ValueId v) const { return views_.at(v.idx()); }
  // Runs every node in order. rng_stream distinguishes runs (step and micro-batch) for dropout masks;
  // batch_offset is the index of this run's first sample in the whole micro-batch (KernelCtx::batch_offset:
  // a data-parallel shard draws the masks of its samples in the unsplit run).
  void run(bool training, uint64_t seed, uint64_t rng_stream, int64_t batch_offset = 0);
  // Per-node timing (`braid time`): while set, run() adds each node's wall time in seconds to
  // node_seconds[i] (one slot per graph node, in node order). nullptr (the default) turns it off; the
  // untimed loop then reads no clock.
  void set_node_timing(double* node_seconds) { node_seconds_ = node_seconds; }
  // Tracing (`braid train --trace`): while set, run() records one forward and one backward event on the
  // lane, named by the layer range and the micro-batch given by set_trace_micro_batch. nullptr: off.
  void set_trace(io::TraceLane* lane) { trace_ = lane; }
  void set_trace_micro_batch(int mb) { trace_mb_ = mb; }
  const MemoryPlan& plan() const { return plan_; }
  const graph::Graph& graph() const { return g_; }

 private:
  void run_range(bool training, uint64_t seed, uint64_t rng_stream, int64_t batch_offset, size_t from, size_t to);
  const graph::Graph& g_;
  MemoryPlan plan_;
  Tensor arena_, workspace_;
  std::vector<Tensor> views_;
  std::vector<std::vector<Tensor>> node_in_, node_out_;
  std::vector<uint64_t> node_keys_;
  io::TraceLane* trace_ = nullptr;
  int trace_mb_ = -1;
  size_t first_backward_ = 0;                // index of the first backward node (= node count if none)
  std::string first_layer_, last_layer_;     // forward layer range, for trace names
  double* node_seconds_ = nullptr;
};

}  // namespace braid::exec
