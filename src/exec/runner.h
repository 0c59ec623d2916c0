// A graph with its executor for one batch size on the CPU (evaluation on CPU devices, calibration), and the
// helpers every run shares: the dataset's view of the model inputs and the run's training set. Training steps
// are the engine's (exec/engine.h).
#pragma once
#include <memory>
#include <vector>

#include "exec/executor.h"
#include "graph/ir.h"
#include "io/dataset.h"
#include "io/model_spec.h"
#include "io/run_config.h"

namespace braid::exec {

struct Runner {
  graph::Graph g;
  std::unique_ptr<Executor> exec;
  std::vector<Tensor> inputs;  // arena views of the model inputs, in model order
};

// Builds the graph (with backward when training, with metrics otherwise), creates missing parameters in
// `store` (initialised from `seed`) and the executor.
struct RunnerOptions {
  // ExecutorOptions::fuse. Calibration turns it off: it times every op kind on its own.
  bool fuse = true;
};
std::unique_ptr<Runner> make_runner(const io::ModelSpec& m, int64_t batch, bool training, ParamStore& store,
                                    uint64_t seed, const RunnerOptions& options = {});
// The same over a graph already built from `m` (copied).
std::unique_ptr<Runner> make_runner(const graph::Graph& g, const io::ModelSpec& m, ParamStore& store, uint64_t seed,
                                    const RunnerOptions& options = {});
// The dataset's view of the model inputs (per-sample descs, integer bounds from their consumers).
std::vector<io::DatasetInput> dataset_inputs(const io::ModelSpec& m, const graph::Graph& g);
// The run's training set over `inputs` (shuffled from the run's seed); a user error at data.train when it holds
// fewer samples than one batch. Shared by train() and bench().
std::unique_ptr<io::Dataset> open_train_data(const io::RunConfig& cfg, const std::vector<io::DatasetInput>& inputs);
// Per-sample length of the first integer sequence input (tokens per sample), 0 when there is none.
int64_t tokens_per_sample(const std::vector<io::DatasetInput>& inputs);
double scalar(const Tensor& t);
// dst = scale * src (first) or dst += scale * src: gradient accumulation over micro-batches (same desc).
void accumulate(Tensor& dst, const Tensor& src, double scale, bool first);

}  // namespace braid::exec
