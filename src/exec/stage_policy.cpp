// StagePolicy (stage_policy.h): the training policy every backend's Program shares.
#include "exec/stage_policy.h"

#include <algorithm>

#include "io/trace.h"

namespace braid::exec {

StagePolicy::StagePolicy(const ProgramSpec& spec) : spec_(spec) {
  const graph::Graph& g = spec.prog->g;
  BRAID_ASSERT(!spec.grad_owner || spec.bucket_bytes == 0, "gradient shards are reduced one by one, not in buckets");
  grads_at_node_.assign(g.nodes().size(), {});
  for (const auto& pi : g.params()) {
    if (!pi.grad.valid()) continue;
    grads_at_node_[g.value(pi.grad).producer.idx()].push_back(grads_.size());
    grads_.push_back(Grad{pi.grad, pi.name, spec.grad_owner ? spec.grad_owner->at(pi.name) : -1});
  }
}

ExecutorOptions StagePolicy::executor_options() const {
  ExecutorOptions eo;
  eo.slots = spec_.slots;
  if (spec_.slots > 1) eo.stash = spec_.prog->stash;  // one slot: one region, packed as a single-device graph is
  eo.fuse = spec_.fuse;
  if (spec_.params_sharded) {  // ZeRO-3: the parameters another replica holds have no bytes here
    eo.param_owner = spec_.grad_owner;
    eo.replica = spec_.replica;
  }
  return eo;
}

std::vector<ValueId> StagePolicy::keep() const {
  std::vector<ValueId> keep = spec_.prog->keep;
  if (reduces_to_owner())
    std::erase_if(keep, [&](ValueId v) {
      return std::any_of(grads_.begin(), grads_.end(), [&](const Grad& gr) { return gr.value == v; });
    });
  return keep;
}

bool StagePolicy::reduce_to_owner(size_t gi, Tensor v, Communicator& data, io::TraceLane* lane, int micro_batch) const {
  const Grad& gr = grads_[gi];
  {
    io::TraceScope scope(lane, io::TraceLabel{io::TraceKind::Collective, {}, {}, "reduce grad", micro_batch, -1,
                                              static_cast<double>(v.bytes())});
    data.reduce(v, gr.owner, ReduceOp::Avg);
  }
  return gr.owner == spec_.replica;
}

bool StagePolicy::counts_in_norm(const ParamShard& sh) const {
  const std::string& name = sh.name;
  if (sh.buffer || !shard_counts(sh, spec_.tensor_rank)) return false;
  return spec_.state_owner && spec_.state_owner->count(name) ? owns_state(name) : spec_.replica == 0;
}

bool StagePolicy::owns_state(const std::string& name) const {
  auto* owner = spec_.state_owner;
  return !owner || !owner->count(name) || owner->at(name) == spec_.replica;
}

}  // namespace braid::exec
