// Test helper: a model file's training graph (forward, loss, backward) at a batch size, with a parameter store
// initialised from a seed and the values a training step reads afterwards (the loss and every gradient).
#pragma once
#include <string>
#include <vector>

#include "exec/param_store.h"
#include "graph/build.h"
#include "io/model_spec.h"

namespace braid::test {

struct TrainingGraph {
  io::ModelSpec model;
  graph::Graph g;
  exec::ParamStore store;
  std::vector<ValueId> keep;  // the loss, then every parameter gradient
};

inline void load_training_graph(TrainingGraph& t, const std::string& model_file, int64_t batch, uint64_t seed) {
  Diagnostics d;
  t.model = io::load_model(model_file, {}, d);
  d.throw_if_any();
  graph::BuildOptions bo;
  bo.with_backward = true;
  t.g = graph::build_graph(t.model, batch, bo);
  t.store.create(t.g, seed);
  t.keep = {t.g.loss()};
  for (const auto& p : t.g.params())
    if (p.grad.valid()) t.keep.push_back(p.grad);
}

}  // namespace braid::test
