// Evaluation batches on one GPU for the CUDA engines (cuda_engine.cpp, cuda_plan_engine.cpp): an executor of the
// model's evaluation graph per batch size (the last batch of a set may be smaller), built on first use with the
// run's precision; its parameters are uploaded from the host store whenever the training state moved on.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "exec/cuda/cuda_executor.h"
#include "io/dataset.h"
#include "io/run_config.h"

namespace braid::exec {

class DeviceEvaluator {
 public:
  // `store`: the whole model's host parameters; `options`: the run's (device, precision); `plan`: training runs a
  // plan (its graphs keep f32 values, device_value_dtype; evaluation does as training does).
  DeviceEvaluator(const io::RunConfig& cfg, ParamStore& store, const CudaExecutorOptions& options, bool plan = false);
  // The loss and metrics of one batch. `version` identifies the training state (the optimizer's step count);
  // when it differs from the one an executor last uploaded, `refresh` brings `store` up to date first.
  std::vector<std::pair<std::string, double>> run(io::Dataset& data, std::span<const int64_t> idx, int64_t version,
                                                  const std::function<void()>& refresh);
  // After the host store was written from elsewhere (a checkpoint): every executor uploads again.
  void invalidate();

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
  bool plan_ = false;
  std::map<int64_t, std::unique_ptr<Eval>> evals_;  // by batch size
};

}  // namespace braid::exec
