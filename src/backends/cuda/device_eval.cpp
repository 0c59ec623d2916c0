// DeviceEvaluator (device_eval.h).
#include "backends/cuda/device_eval.h"

#include "exec/runner.h"
#include "graph/build.h"
#include "graph/verify.h"
#include "backends/cuda/kernels/runtime.h"

namespace braid::exec {

DeviceEvaluator::DeviceEvaluator(const io::RunConfig& cfg, ParamStore& store, const CudaExecutorOptions& options,
                                 DType values, const graph::Graph* eval)
    : cfg_(cfg), store_(store), options_(options), values_(values), eval_(eval) {
  options_.mirror_keep = true;  // the loss and metrics: scalars
}

std::vector<std::pair<std::string, double>> DeviceEvaluator::run(io::Dataset& data, std::span<const int64_t> idx,
                                                                 int64_t version) {
  cuda::set_device(options_.device);
  const int64_t b = static_cast<int64_t>(idx.size());
  auto& e = evals_[b];
  if (!e) {
    e = std::make_unique<Eval>();
    graph::BuildOptions bo;
    bo.with_metrics = true;
    bo.half = values_;  // as the training graphs
    e->g = eval_ && eval_->batch() == b ? *eval_ : graph::build_graph(cfg_.model, b, bo);  // the run's, built once
    graph::verify(e->g);
    std::vector<ValueId> keep{e->g.loss()};
    for (const auto& [n, v] : e->g.metrics) keep.push_back(v);
    try {
      e->exec = std::make_unique<CudaExecutor>(e->g, store_, keep, ExecutorOptions{}, options_);
    } catch (const cuda::DeviceOutOfMemory& oom) {
      throw UserError(SourceLoc{cfg_.path, 0, 0},
                      std::string(oom.what()) + ": evaluation batches of " + std::to_string(b) +
                          " samples (the whole model on cuda:" + std::to_string(options_.device) +
                          ") do not fit beside the training step",
                      "lower train.batch (evaluation runs batches of train.batch samples)");
    }
    for (const auto& in : cfg_.model.inputs) e->inputs.push_back(e->exec->input(in.name));
  }
  if (e->fresh_at != version) {  // this executor's copy of the parameters: through the host store
    e->exec->upload_params();
    e->fresh_at = version;
  }
  data.read(idx, e->inputs);
  e->exec->run(false, cfg_.train.seed, 0);
  std::vector<std::pair<std::string, double>> out{{"loss", scalar(e->exec->value(e->g.loss()))}};
  for (const auto& [name, v] : e->g.metrics) out.emplace_back(name, scalar(e->exec->value(v)));
  return out;
}

}  // namespace braid::exec
