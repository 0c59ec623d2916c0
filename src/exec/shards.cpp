// The whole model's tensors and a plan's shards of them (engine.h): the ZeRO partition of a stage's parameters,
// each device's shards drawn from the seed, and their gathering into (and scattering from) whole tensors for
// checkpoints, evaluation and a change of plan.
#include <algorithm>
#include <utility>

#include "exec/engine.h"

namespace braid::exec {

std::map<std::string, int> zero_owners(const StageProgram& p) {
  std::vector<const ParamShard*> trainable;
  for (const auto& sh : p.params) {
    const graph::ParamInfo* pi = p.g.find_param(sh.name);
    if (!sh.buffer && pi && pi->grad.valid()) trainable.push_back(&sh);
  }
  std::stable_sort(trainable.begin(), trainable.end(), [&](const ParamShard* a, const ParamShard* b) {
    return shard_desc(a->global, a->layout, a->parts).bytes() > shard_desc(b->global, b->layout, b->parts).bytes();
  });
  std::vector<size_t> held(static_cast<size_t>(p.dp), 0);
  std::map<std::string, int> owner;
  for (const ParamShard* sh : trainable) {
    const size_t r = static_cast<size_t>(std::min_element(held.begin(), held.end()) - held.begin());
    held[r] += shard_desc(sh->global, sh->layout, sh->parts).bytes();
    owner[sh->name] = static_cast<int>(r);
  }
  return owner;
}

void add_stage_params(const StageProgram& p, int tensor_rank, uint64_t seed, ParamStore& store) {
  for (const auto& pi : p.g.params())
    init_shard(store.add(pi.name, pi.spec, pi.grad.valid()).value, shard_of(p, pi.name), pi.spec.init, seed, tensor_rank);
}

void gather_shards(const std::vector<StageProgram>& programs, const std::function<ShardHolder(int)>& local,
                   Communicator* host, ParamStore& full, Optimizer* full_opt, const StateOwner& state_owner,
                   bool values_sharded) {
  // Every shard that counts (replica 0's value; tensor rank 0's unless it is a slice; its optimizer state from the
  // replica that holds it), in one order all processes agree on: programs, then tensor ranks, then parameters.
  // Device 0's process assembles; a tensor of another process travels over `host` (the devices are idle, so the
  // caller's thread may use it).
  const ShardHolder root = local(0);
  int shard_index = 0;  // counts the same shards in every process: message tags agree
  for (const StageProgram& p : programs)
    for (int t = 0; t < p.tp; ++t)
      for (const auto& sh : p.params) {
        if (!shard_counts(sh, t)) continue;
        int tag = (1 << 28) + 8 * shard_index++;
        const int replica = state_owner && !sh.buffer ? state_owner(p, sh.name) : 0;
        const int value_dev = p.devices[static_cast<size_t>((values_sharded ? replica : 0) * p.tp + t)];
        const int state_dev = p.devices[static_cast<size_t>(replica * p.tp + t)];
        const ShardHolder vh = local(value_dev), st = local(state_dev);
        // One tensor: from `source` (local: `part`) into `whole` (in device 0's process).
        auto move = [&](const Tensor* part, int source, Tensor* whole) {
          const int at = tag++;
          if (part && whole) {
            put_shard(*part, *whole, sh, t);
          } else if (part) {
            host->send(*part, 0, at);
          } else if (whole) {
            Tensor in = Tensor::empty(shard_desc(whole->desc(), sh.layout, sh.parts));
            host->recv(in, source, at);
            put_shard(in, *whole, sh, t);
          }
        };
        move(vh.store ? &vh.store->find(sh.name)->value : nullptr, value_dev,
             root.store ? &full.find(sh.name)->value : nullptr);
        if (!full_opt || sh.buffer) continue;
        // The optimizer state in key order: the holder's tensors, the whole model's.
        std::vector<const Tensor*> parts;
        if (st.store && st.opt)
          if (auto it = std::as_const(*st.opt).state().find(sh.name); it != st.opt->state().end())
            for (const auto& [key, x] : it->second) parts.push_back(&x);
        std::vector<Tensor*> wholes;
        if (root.store)
          if (auto it = full_opt->state().find(sh.name); it != full_opt->state().end())
            for (auto& [key, x] : it->second) wholes.push_back(&x);
        const size_t count = std::max(parts.size(), wholes.size());
        BRAID_ASSERT((parts.empty() || !root.store || parts.size() == wholes.size()) && count <= 7, "parameter ",
                     sh.name, ": ", parts.size(), " optimizer state tensors on device ", state_dev, ", ", wholes.size(),
                     " in the whole model");
        for (size_t k = 0; k < count; ++k)
          move(k < parts.size() ? parts[k] : nullptr, state_dev, k < wholes.size() ? wholes[k] : nullptr);
      }
}

void scatter_stage(const StageProgram& p, int tensor_rank, const ParamStore& full, const Optimizer* full_opt,
                   ParamStore& store, Optimizer* opt) {
  for (const auto& sh : p.params) {
    const ParamEntry* src = full.find(sh.name);
    BRAID_ASSERT(src, "the whole model has no parameter ", sh.name);
    Tensor& value = store.find(sh.name)->value;
    if (value.bytes() > 0 || src->value.bytes() == 0) take_shard(src->value, value, sh, tensor_rank);  // ZeRO-3: held elsewhere
    if (!full_opt || !opt || sh.buffer) continue;
    auto it = opt->state().find(sh.name);
    if (it == opt->state().end()) continue;
    for (auto& [key, t] : it->second) take_shard(full_opt->state().at(sh.name).at(key), t, sh, tensor_rank);
  }
}

}  // namespace braid::exec
