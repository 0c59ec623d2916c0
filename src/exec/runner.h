// A graph with its executor for one batch size, and the forward+backward of one optimizer step over
// micro-batches (gradients accumulated into the ParamStore, scaled 1/M). Shared by the trainer, the
// evaluator and the benchmarks, so that what `braid bench` times is exactly what `braid train` runs.
#pragma once
#include <memory>
#include <span>
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
  // Each trainable parameter's gradient value and its entry in the ParamStore (resolved once, not per step).
  std::vector<std::pair<ValueId, size_t>> grads;
  bool grads_in_store = false;  // the executor writes gradients into the store's tensors (one micro-batch)
};

// Builds the graph (with backward when training, with metrics otherwise), creates missing parameters in
// `store` (initialised from `seed`) and the executor.
struct RunnerOptions {
  // For steps of exactly one micro-batch: the gradients are computed in place in the store's grad tensors,
  // so forward_backward copies nothing.
  bool grads_in_store = false;
  // ExecutorOptions::fuse. Calibration turns it off: it times every op kind on its own.
  bool fuse = true;
};
std::unique_ptr<Runner> make_runner(const io::ModelSpec& m, int64_t batch, bool training, ParamStore& store,
                                    uint64_t seed, const RunnerOptions& options = {});
// The dataset's view of the model inputs (per-sample descs, integer bounds from their consumers).
std::vector<io::DatasetInput> dataset_inputs(const io::ModelSpec& m, const graph::Graph& g);
// The run's training set over `inputs` (shuffled from the run's seed); a user error at data.train when it holds
// fewer samples than one batch. Shared by train() and bench().
std::unique_ptr<io::Dataset> open_train_data(const io::RunConfig& cfg, const std::vector<io::DatasetInput>& inputs);
// Per-sample length of the first integer sequence input (tokens per sample), 0 when there is none.
int64_t tokens_per_sample(const std::vector<io::DatasetInput>& inputs);
// Where forward_backward's time went (seconds, added to): reading data, running the graph, accumulating
// gradients into the store. For `braid time`; pass nullptr (the default) to read no clock.
struct PhaseTimes {
  double data_s = 0, graph_s = 0, accumulate_s = 0;
};
// A data-parallel replica's part of every micro-batch: samples [index * micro / count, (index + 1) * micro / count)
// (micro divisible by count; the Runner is built for micro / count). Replicas read their parts in parallel
// (io::Dataset::read is thread-safe).
struct Shard {
  int index = 0;
  int count = 1;
};
// Forward and backward over batch_idx.size() / micro micro-batches (of `micro` samples each, of which this
// shard runs its part); returns the mean loss over the shard. `scratch` holds the shard's indices (no
// allocation per step). The dropout stream of micro-batch m is step * M + m, and a shard's masks are those
// of its samples in the whole micro-batch (KernelCtx::batch_offset).
// `times`, when set, receives where the time went.
double forward_backward(Runner& r, ParamStore& store, io::Dataset& data, std::span<const int64_t> batch_idx,
                        int64_t micro, uint64_t seed, int64_t step, std::vector<int64_t>& scratch,
                        const Shard& shard = {}, PhaseTimes* times = nullptr);
double scalar(const Tensor& t);
// dst = scale * src (first) or dst += scale * src: gradient accumulation over micro-batches (same desc).
void accumulate(Tensor& dst, const Tensor& src, double scale, bool first);

}  // namespace braid::exec
