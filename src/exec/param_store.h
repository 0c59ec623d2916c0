// Parameter, buffer, gradient and optimizer-state storage of one model, by full parameter name
// ("h.0.fc.weight"). Tensors are allocated once; executors view them. Initialisation draws each
// parameter from its own random stream keyed by (seed, name), so values do not depend on layer order.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/ir.h"

namespace braid::exec {

struct ParamEntry {
  std::string name;
  ops::ParamSpec spec;
  Tensor value;
  Tensor grad;  // accumulated gradient (trainable parameters only)
  bool has_grad = false;  // the loss depends on this parameter
};

class ParamStore {
 public:
  // Creates and initialises every parameter and buffer of g (idempotent for names already present).
  void create(const graph::Graph& g, uint64_t seed);
  // Adds an entry with uninitialised value (and gradient when trainable); the caller fills the value.
  // For stores of plan devices, whose entries are shards of the model's parameters.
  ParamEntry& add(const std::string& name, const ops::ParamSpec& spec, bool has_grad);
  ParamEntry* find(const std::string& name);
  // Index of `name` in entries() (stable: entries are only appended); asserts that it exists.
  size_t index_of(const std::string& name) const;
  const ParamEntry* find(const std::string& name) const;
  std::vector<ParamEntry>& entries() { return entries_; }
  const std::vector<ParamEntry>& entries() const { return entries_; }
  void zero_grads();
  int64_t num_trainable() const;

 private:
  std::vector<ParamEntry> entries_;
  std::map<std::string, size_t> index_;
};

// Fills t from spec (uniform/normal draws from Rng(seed, hash(name))).
void init_tensor(Tensor& t, const ops::InitSpec& spec, uint64_t seed, const std::string& name);
uint64_t name_hash(const std::string& s);

}  // namespace braid::exec
