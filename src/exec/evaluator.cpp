// make_evaluator (evaluator.h): evaluation as a forward-only program on the backend's device.
#include "exec/evaluator.h"

#include <omp.h>

#include <map>

#include "graph/build.h"
#include "exec/run_data.h"

namespace braid::exec {
namespace {

class ProgramEvaluator final : public Evaluator {
 public:
  ProgramEvaluator(Backend& backend, const io::RunConfig& cfg, ParamStore& store, int where, DType values,
                   const graph::Graph* eval)
      : backend_(backend), cfg_(cfg), store_(store), where_(where), values_(values), eval_(eval) {}

  std::vector<std::pair<std::string, double>> run(io::Dataset& data, std::span<const int64_t> idx,
                                                  int64_t version) override {
    const auto b = static_cast<int64_t>(idx.size());
    auto& e = evals_[b];
    if (!e) e = compile(b);
    e->device->enter_thread(-1, 1, omp_get_max_threads());  // the calling thread, unpinned (a GPU: made current)
    if (e->fresh_at != version) {  // a device's copy of the parameters: from the host store
      e->device->upload(false);
      e->fresh_at = version;
    }
    data.read(idx, e->inputs);
    e->program->forward(0, RunIds{cfg_.train.seed, 0, 0, false});
    std::vector<std::pair<std::string, double>> vals{{"loss", e->program->scalar(e->prog.loss, 0)}};
    for (const auto& [name, v] : e->prog.g.metrics) vals.emplace_back(name, e->program->scalar(v, 0));
    return vals;
  }

 private:
  struct Eval {
    StageProgram prog;
    std::unique_ptr<Device> device;
    std::unique_ptr<Program> program;
    std::vector<Tensor> inputs;  // in model order
    int64_t fresh_at = -1;
  };

  std::unique_ptr<Eval> compile(int64_t batch) {
    auto e = std::make_unique<Eval>();
    StageProgram& p = e->prog;
    graph::BuildOptions bo;
    bo.with_metrics = true;
    bo.half = values_;  // as the training graphs
    p.g = eval_ && eval_->batch() == batch ? *eval_ : graph::build_graph(cfg_.model, batch, bo);  // the run's, built once
    p.devices = {0};
    for (const auto& in : cfg_.model.inputs) p.model_inputs.push_back(in.name);
    p.loss = p.g.loss();
    p.keep = {p.loss};
    for (const auto& [name, v] : p.g.metrics) p.keep.push_back(v);
    for (const auto& pi : p.g.params()) p.params.push_back(ParamShard{pi.name, pi.spec.desc, ops::Sbp::B(), 1, pi.spec.buffer});
    p.forward_nodes = static_cast<int>(p.g.nodes().size());
    e->device = backend_.device(cfg_, where_);
    e->device->enter_thread(-1, 1, omp_get_max_threads());
    ProgramSpec spec;
    spec.prog = &p;
    spec.micro = batch;
    e->program = e->device->compile(spec, store_);
    for (const auto& in : cfg_.model.inputs) e->inputs.push_back(e->program->input(in.name, 0));
    return e;
  }

  Backend& backend_;
  const io::RunConfig& cfg_;
  ParamStore& store_;
  int where_ = 0;
  DType values_ = DType::f32;
  const graph::Graph* eval_;
  std::map<int64_t, std::unique_ptr<Eval>> evals_;  // by batch size
};

}  // namespace

std::unique_ptr<Evaluator> make_evaluator(Backend& backend, const io::RunConfig& cfg, ParamStore& store, int where,
                                          DType values, const graph::Graph* eval) {
  return std::make_unique<ProgramEvaluator>(backend, cfg, store, where, values, eval);
}

}  // namespace braid::exec
