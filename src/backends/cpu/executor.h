// Runs one graph on one CPU device (the CPU backend's executor; what every executor shares is NodeLoop's): every
// value is a view into a single arena laid out by the static memory plan (allocated once, at construction),
// parameters and buffers are views into the ParamStore, and a run is a loop over nodes calling each op's CPU
// kernel. Nothing is allocated inside run().
// Communication nodes (OpDef::collective, the reshards of a lowered plan) run on the communicators given by
// set_groups(). For pipelines, an executor holds `slots` copies of the values that live from a micro-batch's
// forward to its backward (MemoryPlan::in_slot), so that that many micro-batches may be in flight at once;
// values that live only inside a forward or a backward share one region.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "exec/comm/comm.h"
#include "exec/memory_plan.h"
#include "exec/node_loop.h"
#include "exec/param_store.h"
#include "graph/ir.h"
#include "io/trace.h"
#include "ops/cpu/fused.h"

namespace braid::exec {

struct ExecutorOptions {
  int slots = 1;            // micro-batches in flight between forward and backward
  std::vector<bool> stash;  // per value: kept per slot (empty: none; with slots == 1 it makes no difference)
  // Values written straight into caller-owned tensors instead of the arena (one slot only): a step of one
  // micro-batch has its gradients land in the ParamStore, with no copy after the run.
  std::vector<std::pair<ValueId, Tensor>> external;
  // Fusion (ops/cpu/fused.h): a linear node whose output feeds the activation node right after it runs as one
  // kernel, the activation applied to each GEMM block while it is in cache; a linear_dw followed by the
  // linear_db of the same dy runs db's sums inside the dW GEMM's threads. The values and their bits are
  // those of the unfused nodes; BRAID_FUSION=0 in the environment turns it off (A/B runs).
  bool fuse = true;
  // ZeRO-3: the data-parallel replica holding each trainable parameter, and this one. A parameter held elsewhere
  // has no bytes here (its graph value is read by comm_gather_param nodes only, which broadcast it from its holder
  // into an arena value just before use). nullptr: every parameter is in the store.
  const std::map<std::string, int>* param_owner = nullptr;
  int replica = 0;
};

class Executor : public NodeLoop {
 public:
  // `keep` values stay readable after run() (loss, gradients, metrics).
  Executor(const graph::Graph& g, ParamStore& params, const std::vector<ValueId>& keep,
           const ExecutorOptions& options = {});
  // The arena view of a model input, to be filled before run().
  const Tensor& input(const std::string& name, int slot = 0) const;
  const Tensor& value(ValueId v, int slot = 0) const { return views_.at(static_cast<size_t>(slot)).at(v.idx()); }
  // Node pairs run as one fused kernel (see ExecutorOptions::fuse), by the index of the first node.
  const std::vector<size_t>& fused() const { return fused_heads_; }

 private:
  void begin_range(int slot, bool training, uint64_t run_key, int64_t batch_offset) override;
  void run_node(size_t i, int slot) override;
  bool run_pair(size_t i, int slot) override;
  void copy_value(const Tensor& dst, const Tensor& src) override;
  void zero_value(const Tensor& dst) override;
  void copy_part(const Tensor& x, const Tensor& y, int axis, int index, int parts) override;
  // A node of 16-bit values on f32 copies (see widen_).
  void run_widened(const graph::Node& n, const ops::KernelCtx& ctx, const std::vector<Tensor>& in,
                   const std::vector<Tensor>& out);
  Tensor arena_, workspace_;
  std::vector<uint8_t> widen_;         // per node: 1 when it reads or writes 16-bit values (run on f32 copies)
  std::vector<const ops::cpu::CpuFusion*> fusions_;  // per head node of a pair (mark_pair): the fused kernel
  ops::KernelCtx ctx_;                 // the current range's (begin_range)
  uint64_t run_key_ = 0;
  int64_t batch_offset_ = 0;
  std::vector<size_t> fused_heads_;
};

// Copies chunk `index` of `parts` equal chunks of `in` along `axis` into `out` (or, with scatter = true,
// `in` into that chunk of `out`). Shapes must agree; any dtype.
void copy_chunk(const Tensor& in, const Tensor& out, int axis, int index, int parts, bool scatter = false);
// copy_chunk's layout of one of `parts` chunks of `whole` along `axis`: `outer` rows of `row` bytes, each holding
// the chunks side by side, `chunk` bytes each (every backend's copy_chunk).
struct ChunkLayout {
  size_t outer = 0, chunk = 0, row = 0;
};
ChunkLayout chunk_layout(const Tensor& whole, const Tensor& part, int axis, int parts);

}  // namespace braid::exec
