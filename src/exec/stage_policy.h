// The training policy of a stage program, written once for every backend (issue 38): the executor options and the
// values kept past a run, which node makes each gradient and, under ZeRO-2, which replica keeps it (reduced to it
// right after that node), whether a gradient counts in the global norm on this device, and whether this replica
// owns a parameter's optimizer state. A backend's Program holds one and supplies memory, kernels and copies.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "exec/backend.h"
#include "backends/cpu/executor.h"

namespace braid::exec {

class StagePolicy {
 public:
  struct Grad {
    ValueId value;     // the gradient in the program's graph
    std::string name;  // its parameter
    int owner = -1;    // ZeRO-2 and up: the replica keeping it; -1: every replica
  };

  explicit StagePolicy(const ProgramSpec& spec);

  // Slots, stash, fusion and ZeRO-3's holders, as every backend's executor takes them.
  ExecutorOptions executor_options() const;
  // The program's kept values; under ZeRO-2 less the gradients, which live only for the node that makes them.
  std::vector<ValueId> keep() const;
  // The program's gradients in the graph's parameter order, and those node `node` makes (indices into grads()).
  const std::vector<Grad>& grads() const { return grads_; }
  const std::vector<size_t>& grads_at(size_t node) const { return grads_at_node_[node]; }
  // ZeRO-2 and up: each micro-batch's gradients are reduced to their owners as they are made.
  bool reduces_to_owner() const { return spec_.grad_owner != nullptr; }
  // ZeRO-2: gradient gi's value v (this micro-batch's), averaged over the data group into its owner (traced as
  // "reduce grad" on `lane`). True on the owner, which then adds it to the gradient it keeps; the other replicas'
  // copies were scratch.
  bool reduce_to_owner(size_t gi, Tensor v, Communicator& data, io::TraceLane* lane, int micro_batch) const;
  // A gradient counts once in the global norm: on its state's owner (ZeRO), else on replica 0; a tensor-parallel
  // parameter on every rank holding a slice of it, a replicated one on rank 0; never a buffer's.
  bool counts_in_norm(const ParamShard& sh) const;
  bool counts_in_norm(const std::string& name) const { return counts_in_norm(shard_of(*spec_.prog, name)); }
  // Whether this replica keeps `name`'s optimizer state (ZeRO 1-3; without ZeRO every replica does).
  bool owns_state(const std::string& name) const;
  const ProgramSpec& spec() const { return spec_; }

 private:
  ProgramSpec spec_;
  std::vector<Grad> grads_;
  std::vector<std::vector<size_t>> grads_at_node_;
};

}  // namespace braid::exec
