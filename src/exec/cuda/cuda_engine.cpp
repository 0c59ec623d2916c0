// The CUDA DeviceEngine (cuda_engine.h): one GPU, the trainer's loop around it.
#include "exec/cuda/cuda_engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "exec/cuda/cuda_executor.h"
#include "exec/cuda/cuda_optimizer.h"
#include "exec/device_engine.h"
#include "exec/loss_scale.h"
#include "exec/runner.h"
#include "graph/build.h"
#include "graph/verify.h"
#include "ops/cuda/device_info.h"
#include "ops/cuda/runtime.h"

namespace braid::exec {
namespace {

class CudaEngine final : public DeviceEngine {
 public:
  explicit CudaEngine(const DeviceEngineArgs& a)
      : cfg_(a.cfg), store_(a.store), train_(a.train), micro_(a.micro), device_(a.devices.empty() ? 0 : a.devices[0]) {
    const SourceLoc at{cfg_.path, 0, 0};
    std::string why;
    const int visible = cuda::device_count(&why);
    if (visible == 0)
      throw UserError(at, "devices " + cfg_.devices + ": no CUDA device is visible (" + why + ")",
                      "run on a machine with an NVIDIA GPU and its driver, or train on cpu");
    if (device_ < 0 || device_ >= visible)
      throw UserError(at, "devices " + cfg_.devices + ": there is no CUDA device " + std::to_string(device_) + "; " +
                              std::to_string(visible) + " visible (0-" + std::to_string(visible - 1) + ")");
    copts_.device = device_;
    copts_.bf16 = cfg_.train.precision == "bf16";
    copts_.f16 = cfg_.train.precision == "f16";  // with dynamic loss scaling (step)
    // Kept to the end of a run: the loss and every gradient (the optimizer reads them in place, or accumulates
    // them, after the run; a value not kept may share its bytes with a later one). Not mirrored to the host: the
    // loss alone is fetched, a few bytes.
    std::vector<ValueId> keep{train_.loss()};
    for (const auto& p : train_.params())
      if (p.grad.valid()) keep.push_back(p.grad);
    copts_.mirror_keep = false;
    const int64_t micro_batches = cfg_.train.batch / micro_;
    try {
      exec_ = std::make_unique<CudaExecutor>(train_, store_, keep, ExecutorOptions{}, copts_);
      opt_ = std::make_unique<CudaOptimizer>(*exec_, cfg_.optimizer, static_cast<int>(micro_batches));
    } catch (const cuda::DeviceOutOfMemory& e) {
      throw UserError(at, std::string(e.what()) + ": the training graph at a micro-batch of " + std::to_string(micro_) +
                              " samples, its parameters, gradients and optimizer state do not fit",
                      "lower train.micro_batch (the step accumulates gradients over micro-batches; " +
                          std::to_string(cfg_.train.batch) + " samples a step either way) or train.batch");
    }
    loss_ = Tensor::empty(train_.value(train_.loss()).desc);
    for (const auto& in : cfg_.model.inputs) inputs_.push_back(exec_->input(in.name));
    name_ = cuda::device_name(device_);
  }

  double step(io::Dataset& data, std::span<const int64_t> batch_idx, int64_t step, double lr, double clip,
              double* grad_norm) override {
    const int64_t m_count = static_cast<int64_t>(batch_idx.size()) / micro_;
    scratch_.resize(static_cast<size_t>(micro_));
    // fp16: the loss's gradient scaled by S (exec/loss_scale.h), the gradients divided by S before anything reads them.
    const double scale = copts_.f16 ? scaler_.scale() : 1.0;
    exec_->set_loss_scale(scale);
    double loss = 0;
    for (int64_t m = 0; m < m_count; ++m) {
      std::copy(batch_idx.begin() + m * micro_, batch_idx.begin() + (m + 1) * micro_, scratch_.begin());
      data.read(scratch_, inputs_);
      exec_->set_trace_micro_batch(static_cast<int>(m));
      exec_->run(true, cfg_.train.seed, static_cast<uint64_t>(step * m_count + m), 0);
      exec_->fetch(train_.loss(), loss_);
      loss += scalar(loss_) / static_cast<double>(m_count);
      opt_->accumulate(static_cast<int>(m), scale);
    }
    io::TraceScope scope(trace_, io::TraceLabel{io::TraceKind::Optimizer, {}, {}, "step"});
    if (scale != 1 && opt_->micro_batches() == 1) opt_->scale_grads(1.0 / scale);
    *grad_norm = -1;
    double norm = -1;
    if (clip > 0 || copts_.f16) norm = opt_->grad_norm();
    if (copts_.f16 && !scaler_.update(std::isfinite(norm))) {  // an fp16 overflow: no update, S halved
      ++skipped_;
      if (clip > 0) *grad_norm = norm;
      return loss;
    }
    if (clip > 0) {  // exec::clip_grad_norm's rule on the device's gradients
      const double coef = clip_coefficient(norm, clip);
      if (coef < 1.0) opt_->scale_grads(coef);
      *grad_norm = norm;
    }
    opt_->step(lr);
    return loss;
  }

  void to_host(ParamStore& store, Optimizer* opt) override {
    BRAID_ASSERT(&store == &store_, "the CUDA engine's host store is the one it was built with");
    exec_->download_params();  // after the queued steps: same stream, and each copy synchronises
    if (opt) {
      opt_->download(*opt);
      opt->loss_scale = copts_.f16 ? scaler_.state() : LossScaleState{};
    }
  }

  void from_host(const ParamStore& store, const Optimizer* opt) override {
    BRAID_ASSERT(&store == &store_, "the CUDA engine's host store is the one it was built with");
    exec_->upload_params();
    if (opt) {
      opt_->upload(*opt);
      scaler_ = LossScaler(opt->loss_scale);  // a checkpoint without one (not fp16): the initial scale
    }
    for (auto& [b, e] : evals_) e->fresh_at = -1;
  }

  std::vector<std::pair<std::string, double>> evaluate(io::Dataset& data, std::span<const int64_t> idx) override {
    const int64_t b = static_cast<int64_t>(idx.size());
    auto& e = evals_[b];
    if (!e) {
      e = std::make_unique<Eval>();
      graph::BuildOptions bo;
      bo.with_metrics = true;
      e->g = graph::build_graph(cfg_.model, b, bo);
      graph::verify(e->g);
      std::vector<ValueId> keep{e->g.loss()};
      for (const auto& [n, v] : e->g.metrics) keep.push_back(v);
      CudaExecutorOptions co = copts_;
      co.mirror_keep = true;  // the loss and metrics: scalars
      try {
        e->exec = std::make_unique<CudaExecutor>(e->g, store_, keep, ExecutorOptions{}, co);
      } catch (const cuda::DeviceOutOfMemory& oom) {
        throw UserError(SourceLoc{cfg_.path, 0, 0},
                        std::string(oom.what()) + ": evaluation batches of " + std::to_string(b) +
                            " samples do not fit beside the training step",
                        "lower train.batch (evaluation runs batches of train.batch samples)");
      }
      for (const auto& in : cfg_.model.inputs) e->inputs.push_back(e->exec->input(in.name));
      e->fresh_at = -1;
    }
    if (e->fresh_at != opt_->steps_taken()) {  // this executor's copy of the parameters: through the host store
      exec_->download_params();
      e->exec->upload_params();
      e->fresh_at = opt_->steps_taken();
    }
    data.read(idx, e->inputs);
    e->exec->run(false, cfg_.train.seed, 0);
    std::vector<std::pair<std::string, double>> out{{"loss", scalar(e->exec->value(e->g.loss()))}};
    for (const auto& [name, v] : e->g.metrics) out.emplace_back(name, scalar(e->exec->value(v)));
    return out;
  }

  void set_trace(io::TraceLane* lane) override {
    trace_ = lane;
    exec_->set_trace(lane);
  }

  void synchronize() override { exec_->stream().synchronize(); }

  bool set_node_timing(double* node_seconds) override {
    exec_->set_node_timing(node_seconds);  // CudaExecutor synchronises after each node while it times
    return true;
  }

  double peak_flops() const override { return cuda::dense_bf16_peak_flops(name_); }

  std::string describe() const override {
    return "cuda:" + std::to_string(device_) + " (" + name_ + ")" +
           (copts_.bf16  ? ", bf16 autocast"
            : copts_.f16 ? ", fp16 autocast with dynamic loss scaling"
                         : ", fp32");
  }

  std::vector<std::pair<std::string, double>> step_metrics() const override {
    if (!copts_.f16) return {};
    return {{"loss_scale", scaler_.scale()}, {"skipped_steps", static_cast<double>(skipped_)}};
  }

  size_t device_bytes() const override { return exec_->device_bytes() + opt_->device_bytes(); }

 private:
  struct Eval {
    graph::Graph g;
    std::unique_ptr<CudaExecutor> exec;
    std::vector<Tensor> inputs;
    int64_t fresh_at = -1;  // the optimizer step its parameters were uploaded after
  };
  const io::RunConfig& cfg_;
  ParamStore& store_;
  const graph::Graph& train_;
  int64_t micro_;
  int device_;
  CudaExecutorOptions copts_;
  std::unique_ptr<CudaExecutor> exec_;
  std::unique_ptr<CudaOptimizer> opt_;
  std::vector<Tensor> inputs_;
  Tensor loss_;  // host copy of the loss of the last run
  std::vector<int64_t> scratch_;
  std::map<int64_t, std::unique_ptr<Eval>> evals_;  // by batch size (the last batch may be smaller)
  io::TraceLane* trace_ = nullptr;
  std::string name_;
  LossScaler scaler_;     // fp16 only
  int64_t skipped_ = 0;   // steps skipped for an fp16 overflow in this run
};

std::unique_ptr<DeviceEngine> make_cuda_engine(const DeviceEngineArgs& a) { return std::make_unique<CudaEngine>(a); }

}  // namespace

void install_cuda_engine() { register_device_engine("cuda", &make_cuda_engine); }

}  // namespace braid::exec
