// One evaluator for every backend (exec::Evaluator): the whole model's evaluation graph (loss and metrics, no
// backward), per batch size (the last batch of a set may be smaller), as a forward-only stage program that the
// backend's Device compiles as it compiles a training stage's. The parameters are the host store's; a device that
// copies them (an accelerator) uploads them again whenever the training state moved on.
#pragma once
#include <memory>

#include "exec/backend.h"

namespace braid::exec {

// `where`: the backend's device (Backend::device); `values`: the dtype between ops of the training graphs (evaluation
// does as training does); `eval`: the run's evaluation graph, reused for batches of its size (null: none).
std::unique_ptr<Evaluator> make_evaluator(Backend& backend, const io::RunConfig& cfg, ParamStore& store, int where,
                                          DType values, const graph::Graph* eval);

}  // namespace braid::exec
