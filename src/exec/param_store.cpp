// Parameter creation and initialisation.
#include "exec/param_store.h"

#include "core/rng.h"

namespace braid::exec {

uint64_t name_hash(const std::string& s) {  // FNV-1a, stable across runs and platforms
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

void init_tensor(Tensor& t, const ops::InitSpec& spec, uint64_t seed, const std::string& name) {
  Rng rng(seed, name_hash(name));
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = 0;
    switch (spec.kind) {
      case ops::InitSpec::Kind::Zeros: v = 0; break;
      case ops::InitSpec::Kind::Ones: v = 1; break;
      case ops::InitSpec::Kind::Constant: v = spec.a; break;
      case ops::InitSpec::Kind::Uniform: v = rng.uniform(spec.a, spec.b); break;
      case ops::InitSpec::Kind::Normal: v = rng.normal(spec.a, spec.b); break;
    }
    set_from_double(t, i, v);
  }
}

ParamEntry& ParamStore::add(const std::string& name, const ops::ParamSpec& spec, bool has_grad) {
  BRAID_ASSERT(!index_.count(name), "parameter ", name, " added twice");
  ParamEntry e;
  e.name = name;
  e.spec = spec;
  e.value = Tensor::empty(spec.desc);
  if (!spec.buffer) e.grad = Tensor::empty(spec.desc);
  e.has_grad = has_grad;
  index_[name] = entries_.size();
  entries_.push_back(std::move(e));
  return entries_.back();
}

void ParamStore::create(const graph::Graph& g, uint64_t seed) {
  for (const auto& p : g.params()) {
    if (index_.count(p.name)) {
      BRAID_ASSERT(entries_[index_[p.name]].value.desc() == p.spec.desc, "parameter ", p.name, " changed shape");
      if (p.grad.valid()) entries_[index_[p.name]].has_grad = true;
      continue;
    }
    ParamEntry e;
    e.name = p.name;
    e.spec = p.spec;
    e.value = Tensor::empty(p.spec.desc);
    init_tensor(e.value, p.spec.init, seed, p.name);
    if (!p.spec.buffer) e.grad = Tensor::empty(p.spec.desc);
    e.has_grad = p.grad.valid();
    index_[p.name] = entries_.size();
    entries_.push_back(std::move(e));
  }
}

ParamEntry* ParamStore::find(const std::string& name) {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}
const ParamEntry* ParamStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

size_t ParamStore::index_of(const std::string& name) const {
  auto it = index_.find(name);
  BRAID_ASSERT(it != index_.end(), "parameter ", name, " is not in the store");
  return it->second;
}

void ParamStore::zero_grads() {
  for (auto& e : entries_)
    if (!e.spec.buffer) e.grad.zero();
}

int64_t ParamStore::num_trainable() const {
  int64_t n = 0;
  for (const auto& e : entries_)
    if (!e.spec.buffer) n += e.value.numel();
  return n;
}

}  // namespace braid::exec
