// What every backend's executor shares (the CPU's exec::Executor, the CUDA backend's CudaExecutor): the graph's
// static memory plan, every value's tensor per slot (placed at the plan's offsets in the backend's memory), each
// node's input and output tensors per slot, its random key, the forward / backward split with the layer range
// for trace names, the communicators of its comm_* nodes and the hooks the engine sets (per-node timing, a call
// after each node, tracing). A backend's executor adds its memory, its kernels and its run loop.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "exec/comm/comm.h"
#include "exec/memory_plan.h"
#include "exec/param_store.h"
#include "graph/ir.h"
#include "io/trace.h"

namespace braid::exec {

struct ExecutorOptions;

// A device's communication thread (the engine's): jobs run one at a time, in submission order, beside the device's
// compute. Every replica of a group submits the same collectives in the same order.
class CommQueue {
 public:
  virtual ~CommQueue() = default;
  // Queues `job`; its ticket.
  virtual uint64_t submit(std::function<void()> job) = 0;
  // Until job `ticket` has run; rethrows what any job threw.
  virtual void wait(uint64_t ticket) = 0;
  // The thread's trace lane (nullptr: off).
  virtual io::TraceLane* lane() const = 0;
};

class NodeLoop {
 public:
  // The communicators of the graph's comm_* nodes: the stage's tensor group and data-parallel group.
  // tensor_rank (the rank in the tensor group) also places batch-split nodes (Node::batch_offset_per_rank).
  void set_groups(Communicator* tensor, Communicator* data);
  // ZeRO-3's gathers overlapped with compute: every comm_gather_param runs on `queue`'s thread over `gather` (a
  // data-group communicator of its own), and reaching one starts the next of the same pass (next_gathers,
  // memory_plan.h) while the nodes between run. Null (the default): each runs inline, on the device thread.
  void set_gather_prefetch(Communicator* gather, CommQueue* queue) {
    gather_comm_ = gather;
    queue_ = queue;
  }
  // Per-node timing (`braid time`): while set, a run adds each node's wall time in seconds to node_seconds[i]
  // (one slot per graph node, in node order). nullptr (the default) turns it off.
  void set_node_timing(double* node_seconds) { node_seconds_ = node_seconds; }
  // Called with each node's index right after it ran (nullptr: off). For hooks such as starting a gradient
  // all-reduce as soon as the gradients it needs exist, while the rest of backward runs.
  void set_after_node(const std::function<void(size_t)>* hook) { after_node_ = hook; }
  // Tracing (`braid train --trace`): one forward and one backward event per run on the lane, named by the layer
  // range and the micro-batch given by set_trace_micro_batch, each collective an event of its own. nullptr: off.
  void set_trace(io::TraceLane* lane) { trace_ = lane; }
  void set_trace_micro_batch(int mb) { trace_mb_ = mb; }
  const MemoryPlan& plan() const { return plan_; }
  const graph::Graph& graph() const { return g_; }
  int slots() const { return static_cast<int>(views_.size()); }
  bool has_backward() const { return first_backward_ < g_.nodes().size(); }

  // Runs every node in order, in slot 0. rng_stream distinguishes runs (step and micro-batch) for dropout masks;
  // batch_offset is the index of this run's first sample in the whole micro-batch (KernelCtx::batch_offset: a
  // data-parallel shard draws the masks of its samples in the unsplit run). Traced: one forward and one backward
  // event.
  void run(bool training, uint64_t seed, uint64_t rng_stream, int64_t batch_offset = 0);
  // The forward nodes, or the backward nodes, of one micro-batch held in `slot` (pipelined execution).
  void run_forward(int slot, uint64_t seed, uint64_t rng_stream, int64_t batch_offset, bool training = true);
  void run_backward(int slot, uint64_t seed, uint64_t rng_stream, int64_t batch_offset);

 protected:
  NodeLoop(const graph::Graph& g, const std::vector<ValueId>& keep, const ExecutorOptions& options);
  virtual ~NodeLoop() = default;
  // views_[s][v] for `slots` slots: activations at the plan's offsets from `base` (the shared region first, then
  // `slot_bytes` per slot for the values the plan keeps per slot), parameters and buffers from `param` (once per
  // value, the same tensor in every slot).
  void place_values(char* base, size_t shared, size_t slot_bytes, int slots,
                    const std::function<Tensor(const graph::Value&)>& param);
  // Once views_ is final: every node's tensors per slot, its random key, the first backward node and the forward
  // layer range.
  void index_nodes();
  // The communicator of comm_* node n (its `group` attribute), checked against the node's `parts`.
  Communicator& group_of(const graph::Node& n) const;
  // A comm_* node (OpDef::collective_kind) on in -> out, traced; the memory work through the backend's primitives
  // below (a communicator reads and writes device memory once ready_for_comm has returned).
  // Node i of slot `slot`.
  void run_collective(size_t i, int slot);
  // Prefetched gathers started in a run and not yet reached (none, normally) are waited for (the end of a run).
  void finish_gathers();
  virtual void copy_value(const Tensor& dst, const Tensor& src) = 0;  // same bytes
  virtual void zero_value(const Tensor& dst) = 0;
  // Chunk `index` of `parts` of x along `axis` into y (copy_chunk, executor.h).
  virtual void copy_part(const Tensor& x, const Tensor& y, int axis, int index, int parts) = 0;
  // Every kernel enqueued so far has finished (an accelerator's stream), so a communicator may touch the memory.
  virtual void ready_for_comm() {}
  // Nodes [from, to) of `slot`: each node by run_node, a pair marked by mark_pair by run_pair (falling back to
  // node by node when it returns false), comm_* nodes by run_collective; after each, after_node, the engine's
  // hook and per-node timing (both once ready_for_comm has returned); then finish_gathers().
  void run_range(int slot, bool training, uint64_t seed, uint64_t rng_stream, int64_t batch_offset, size_t from,
                 size_t to);
  // The backend's part of run_range: its kernel context for a range (run_key = hash_key(seed, rng_stream)), a
  // node's kernel, a marked pair as one kernel, and what follows each node.
  virtual void begin_range(int slot, bool training, uint64_t run_key, int64_t batch_offset) = 0;
  virtual void run_node(size_t i, int slot) = 0;
  virtual bool run_pair(size_t /*i*/, int /*slot*/) { return false; }
  virtual void after_node(size_t /*i*/, int /*slot*/) {}
  // Nodes i and i + 1 run as one kernel (run_pair) where the second node's outputs share no bytes with the
  // first's inputs and outputs, nor its other inputs with the first's outputs: the fused kernel writes the second
  // node's outputs while the first node's threads still read and write. The one exception: an in-place tail
  // (OpDef::in_place) whose output is exactly the head's output it reads, rewritten block by block after the head
  // wrote it. False (nothing marked) where they share.
  bool mark_pair(size_t i);
  // The parameter or buffer v's entry in `store` (checked against the graph), or null under ZeRO-3 when another
  // replica holds it.
  ParamEntry* store_entry(ParamStore& store, const graph::Value& v) const;
  // Around the runs: before a run or a forward (an accelerator copies its host inputs in), after a traced phase or
  // a forward (it waits for its queue, so that the event is the phase's time), after a run or a backward (it copies
  // the kept values out and checks the kernels' error flags).
  virtual void begin_run(int /*slot*/) {}
  virtual void end_phase() {}
  virtual void end_run(int /*slot*/) {}
  io::TraceLabel phase(io::TraceKind kind) const { return {kind, first_layer_, last_layer_, {}, trace_mb_}; }
  // Node i's place in the unsplit run, in a kernel context (ops::KernelCtx, cuda::Ctx): its random key in this run
  // (run_key = hash_key(seed, rng_stream)), its first sample (Node::batch_offset_per_rank of this tensor rank) and,
  // on a shard of another axis (sequence parallelism), where its part starts in the whole.
  template <typename Ctx>
  void place_node(Ctx& ctx, size_t i, uint64_t run_key, int64_t batch_offset, const std::vector<Tensor>& in) const {
    const graph::Node& n = g_.nodes()[i];
    ctx.rng_key = hash_key(run_key, node_keys_[i]);
    ctx.batch_offset = batch_offset + tensor_rank_ * n.batch_offset_per_rank;
    ctx.shard_axis = n.shard_axis > 0 ? n.shard_axis : -1;
    if (n.shard_axis > 0) {
      const int64_t len = in[0].shape()[n.shard_axis];
      ctx.shard_start = tensor_rank_ * len;
      ctx.shard_full = len * tensor_size_;
    }
  }
  // ZeRO-3 (ExecutorOptions::param_owner): parameter v is held by another replica of the data-parallel group (no
  // bytes here; only its comm_gather_param nodes read it, on their root).
  bool held_elsewhere(const graph::Value& v) const;

  const graph::Graph& g_;
  MemoryPlan plan_;
  std::vector<bool> outside_;  // per value: memory the caller provides (ExecutorOptions::external)
  std::vector<std::vector<Tensor>> views_;                            // [slot][value]
  std::vector<std::vector<std::vector<Tensor>>> node_in_, node_out_;  // [slot][node]
  std::vector<uint64_t> node_keys_;
  io::TraceLane* trace_ = nullptr;
  int trace_mb_ = -1;
  size_t first_backward_ = 0;             // index of the first backward node (= node count if none)
  std::string first_layer_, last_layer_;  // forward layer range, for trace names
  double* node_seconds_ = nullptr;
  const std::function<void(size_t)>* after_node_ = nullptr;
  Communicator* tensor_comm_ = nullptr;
  Communicator* data_comm_ = nullptr;
  int tensor_rank_ = 0;
  int tensor_size_ = 1;
  const std::map<std::string, int>* param_owner_ = nullptr;
  int replica_ = 0;
  std::vector<int> gather_root_;  // per node: a comm_gather_param's root replica (ZeRO-3), else -1
  std::vector<uint8_t> fused_;    // per node: 1 heads a pair run as one kernel (mark_pair), 2 its tail, else 0

 private:
  // Gather node i of slot `slot` from its root over `comm` (ZeRO-3).
  void gather_param(size_t i, int slot, Communicator& comm);
  // Queues gather node i of slot `slot` on the communication thread, once.
  void start_gather(size_t i, int slot);
  Communicator* gather_comm_ = nullptr;
  CommQueue* queue_ = nullptr;
  std::vector<int> next_gather_;        // per node (next_gathers)
  std::vector<uint64_t> gather_ticket_;  // per node: its queued gather's ticket, 0 when none is pending
};

}  // namespace braid::exec
