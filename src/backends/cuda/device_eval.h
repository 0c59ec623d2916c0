// Evaluation batches on one GPU for the CUDA backend (exec::Evaluator): an executor of the model's evaluation graph
// per batch size (the last batch of a set may be smaller), built on first use with the run's precision; its
// parameters are uploaded from the host store whenever the training state moved on.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "exec/backend.h"
#include "backends/cuda/cuda_executor.h"
#include "io/dataset.h"
#include "io/run_config.h"

namespace braid::exec {

class DeviceEvaluator final : public Evaluator {
 public:
  // `store`: the whole model's host parameters; `options`: the run's (device, precision); `values`: the dtype
  // between ops of the training graphs (evaluation does as training does).
  // `eval`: the run's evaluation graph (built with `values`), for batches of its size; null: none.
  DeviceEvaluator(const io::RunConfig& cfg, ParamStore& store, const CudaExecutorOptions& options, DType values,
                  const graph::Graph* eval = nullptr);
  // The loss and metrics of one batch. `version` identifies the training state; when it differs from the one an
  // executor last uploaded, the executor uploads the (current) host store first.
  std::vector<std::pair<std::string, double>> run(io::Dataset& data, std::span<const int64_t> idx,
                                                  int64_t version) override;

 private:
  struct Eval {
    graph::Graph g;
    std::unique_ptr<CudaExecutor> exec;
    std::vector<Tensor> inputs;
    int64_t fresh_at = -1;
  };
  const io::RunConfig& cfg_;
  ParamStore& store_;
  CudaExecutorOptions options_;
  DType values_ = DType::f32;
  const graph::Graph* eval_ = nullptr;
  std::map<int64_t, std::unique_ptr<Eval>> evals_;  // by batch size
};

}  // namespace braid::exec
