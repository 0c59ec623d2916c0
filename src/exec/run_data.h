// What every run shares about its data: the dataset's view of the model inputs, the run's training set, the tokens
// per sample, and a tensor's first element as a double.
#pragma once
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "graph/ir.h"
#include "io/dataset.h"
#include "io/model_spec.h"
#include "io/run_config.h"

namespace braid::exec {

// The dataset's view of the model inputs (per-sample descs, integer bounds from their consumers).
std::vector<io::DatasetInput> dataset_inputs(const io::ModelSpec& m, const graph::Graph& g);
// The run's training set over `inputs` (shuffled from the run's seed); a user error at data.train when it holds
// fewer samples than one batch. Shared by train() and bench().
std::unique_ptr<io::Dataset> open_train_data(const io::RunConfig& cfg, const std::vector<io::DatasetInput>& inputs);
// Per-sample length of the first integer sequence input (tokens per sample), 0 when there is none.
int64_t tokens_per_sample(const std::vector<io::DatasetInput>& inputs);
double scalar(const Tensor& t);

}  // namespace braid::exec
