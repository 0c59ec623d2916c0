// The CUDA DeviceEngine (cuda_engine.h): one GPU or data parallelism over several, the trainer's loop around it.
#include "exec/cuda/cuda_engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <thread>

#include "exec/comm/inproc.h"
#include "exec/cuda/cuda_executor.h"
#include "exec/cuda/nccl_comm.h"
#include "exec/cuda/staged_comm.h"
#include "exec/cuda/cuda_optimizer.h"
#include "exec/cuda/cuda_plan_engine.h"
#include "exec/cuda/device_eval.h"
#include "exec/device_engine.h"
#include "exec/loss_scale.h"
#include "exec/runner.h"
#include "graph/build.h"
#include "graph/verify.h"
#include "ops/cuda/device_info.h"
#include "ops/cuda/runtime.h"

namespace braid::exec {
namespace {

// One GPU (devices: cuda:N), or data parallelism over several (cuda:0-3): a replica per listed device, each
// running its share of every micro-batch (samples [r share, (r + 1) share), with the batch offset that keeps the
// dropout masks of the whole micro-batch), its gradients summed over the replicas (NCCL, one process, a thread
// per GPU; through host memory for replicas sharing a GPU) and averaged, then the same clipping and update on
// every replica, as exec/data_parallel.cpp does on cpu:N.
class CudaEngine final : public DeviceEngine {
 public:
  explicit CudaEngine(const DeviceEngineArgs& a) : cfg_(a.cfg), store_(a.store), train_(a.train), micro_(a.micro) {
    const SourceLoc at{cfg_.path, 0, 0};
    std::vector<int> devices = a.devices.empty() ? std::vector<int>{0} : a.devices;
    std::string why;
    const int visible = cuda::device_count(&why);
    if (visible == 0)
      throw UserError(at, "devices " + cfg_.devices + ": no CUDA device is visible (" + why + ")",
                      "run on a machine with an NVIDIA GPU and its driver, or train on cpu");
    for (int d : devices)
      if (d < 0 || d >= visible)
        throw UserError(at, "devices " + cfg_.devices + ": there is no CUDA device " + std::to_string(d) + "; " +
                                std::to_string(visible) + " visible (0-" + std::to_string(visible - 1) + ")");
    const int n = static_cast<int>(devices.size());
    share_ = micro_ / n;  // make_device_engine built train_ for share_ samples
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
    for (int r = 0; r < n; ++r) {
      auto rep = std::make_unique<Replica>();
      rep->device = devices[static_cast<size_t>(r)];
      CudaExecutorOptions co = copts_;
      co.device = rep->device;
      try {
        rep->exec = std::make_unique<CudaExecutor>(train_, store_, keep, ExecutorOptions{}, co);
        // Several replicas: accumulators even for one micro-batch, so that the gradients are one block to all-reduce.
        rep->opt = std::make_unique<CudaOptimizer>(*rep->exec, cfg_.optimizer, static_cast<int>(micro_batches), n > 1);
      } catch (const cuda::DeviceOutOfMemory& e) {
        throw UserError(at, std::string(e.what()) + ": the training graph at a micro-batch of " + std::to_string(share_) +
                                " samples" + (n > 1 ? " per replica" : "") +
                                ", its parameters, gradients and optimizer state do not fit",
                        "lower train.micro_batch (the step accumulates gradients over micro-batches; " +
                            std::to_string(cfg_.train.batch) + " samples a step either way) or train.batch");
      }
      rep->loss = Tensor::empty(train_.value(train_.loss()).desc);
      for (const auto& in : cfg_.model.inputs) rep->inputs.push_back(rep->exec->input(in.name));
      reps_.push_back(std::move(rep));
    }
    copts_.device = devices[0];
    eval_ = std::make_unique<DeviceEvaluator>(cfg_, store_, copts_);
    name_ = cuda::device_name(devices[0]);
    std::vector<int> sorted = devices;
    std::sort(sorted.begin(), sorted.end());
    gpus_ = static_cast<int>(std::unique(sorted.begin(), sorted.end()) - sorted.begin());
    shared_gpu_ = gpus_ < n;
    if (n > 1) {
      if (shared_gpu_) {
        host_world_ = std::make_unique<InProcWorld>(n);
        for (int r = 0; r < n; ++r)
          reps_[static_cast<size_t>(r)]->comm =
              host_staged(host_world_->communicator(r), reps_[static_cast<size_t>(r)]->exec->stream());
      } else {
        nccl_ = std::make_unique<NcclWorld>(devices);
        for (int r = 0; r < n; ++r) reps_[static_cast<size_t>(r)]->comm = nccl_->communicator(r);
      }
    }
  }

  double step(io::Dataset& data, std::span<const int64_t> batch_idx, int64_t step, double lr, double clip,
              double* grad_norm) override {
    const int64_t m_count = static_cast<int64_t>(batch_idx.size()) / micro_;
    BRAID_ASSERT(m_count == reps_[0]->opt->micro_batches() && m_count * micro_ == static_cast<int64_t>(batch_idx.size()),
                 "a step of ", batch_idx.size(), " samples for ", reps_[0]->opt->micro_batches(), " micro-batches of ", micro_);
    // fp16: the loss's gradient scaled by S (exec/loss_scale.h), the gradients divided by S before anything reads them.
    const double scale = copts_.f16 ? scaler_.scale() : 1.0;
    const bool need_norm = clip > 0 || copts_.f16;
    // 1. Forward and backward on every replica, the gradients summed over replicas and averaged; each replica's
    //    norm of the averaged gradients (the same bits on every replica).
    auto run = [&](int r) {
      Replica& rep = *reps_[static_cast<size_t>(r)];
      cuda::set_device(rep.device);
      rep.exec->set_loss_scale(scale);
      rep.scratch.resize(static_cast<size_t>(share_));
      rep.loss_sum = 0;
      for (int64_t m = 0; m < m_count; ++m) {
        auto first = batch_idx.begin() + m * micro_ + r * share_;
        std::copy(first, first + share_, rep.scratch.begin());
        data.read(rep.scratch, rep.inputs);
        rep.exec->set_trace_micro_batch(static_cast<int>(m));
        rep.exec->run(true, cfg_.train.seed, static_cast<uint64_t>(step * m_count + m), r * share_);
        rep.exec->fetch(train_.loss(), rep.loss);
        rep.loss_sum += scalar(rep.loss) / static_cast<double>(m_count);
        rep.opt->accumulate(static_cast<int>(m), scale);
      }
      if (scale != 1 && !rep.opt->accumulates()) rep.opt->scale_grads(1.0 / scale);
      if (rep.comm) {  // one all-reduce of the accumulator block, then the average
        rep.exec->stream().synchronize();
        Tensor flat = rep.opt->flat_gradients();
        rep.comm->all_reduce(flat);
        rep.opt->scale_grads(1.0 / static_cast<double>(reps_.size()));
      }
      rep.norm = need_norm ? rep.opt->grad_norm() : -1;
    };
    on_every_replica(run);
    double loss = 0;
    for (const auto& rep : reps_) loss += rep->loss_sum / static_cast<double>(reps_.size());
    // 2. The same decision on every replica: skip (fp16 overflow), clip, update.
    io::TraceScope scope(trace_, io::TraceLabel{io::TraceKind::Optimizer, {}, {}, "step"});
    *grad_norm = -1;
    const double norm = reps_[0]->norm;
    if (copts_.f16 && !scaler_.update(std::isfinite(norm))) {  // an fp16 overflow: no update, S halved
      ++skipped_;
      if (clip > 0) *grad_norm = norm;
      return loss;
    }
    const double coef = clip > 0 ? clip_coefficient(norm, clip) : 1.0;  // exec::clip_grad_norm's rule
    if (clip > 0) *grad_norm = norm;
    for (auto& rep : reps_) {
      cuda::set_device(rep->device);
      if (coef < 1.0) rep->opt->scale_grads(coef);
      rep->opt->step(lr);
    }
    cuda::set_device(reps_[0]->device);
    return loss;
  }

  void to_host(ParamStore& store, Optimizer* opt) override {
    BRAID_ASSERT(&store == &store_, "the CUDA engine's host store is the one it was built with");
    Replica& rep = *reps_[0];  // every replica holds the same parameters and state
    cuda::set_device(rep.device);
    rep.exec->download_params();  // after the queued steps: same stream, and each copy synchronises
    if (opt) {
      rep.opt->download(*opt);
      opt->loss_scale = copts_.f16 ? scaler_.state() : LossScaleState{};
    }
  }

  void from_host(const ParamStore& store, const Optimizer* opt) override {
    BRAID_ASSERT(&store == &store_, "the CUDA engine's host store is the one it was built with");
    for (auto& rep : reps_) {
      cuda::set_device(rep->device);
      rep->exec->upload_params();
      if (opt) rep->opt->upload(*opt);
    }
    cuda::set_device(reps_[0]->device);
    if (opt) scaler_ = LossScaler(opt->loss_scale);  // a checkpoint without one (not fp16): the initial scale
    eval_->invalidate();
  }

  // On replica 0's GPU.
  std::vector<std::pair<std::string, double>> evaluate(io::Dataset& data, std::span<const int64_t> idx) override {
    Replica& rep = *reps_[0];
    return eval_->run(data, idx, rep.opt->steps_taken(), [&] {
      cuda::set_device(rep.device);
      rep.exec->download_params();
    });
  }

  void set_trace(io::TraceLane* lane) override {
    trace_ = lane;
    reps_[0]->exec->set_trace(lane);  // replica 0's GPU (the others run the same steps)
  }

  void synchronize() override {
    for (auto& rep : reps_) rep->exec->stream().synchronize();
  }

  // Replica 0's nodes (the others wait for it in the all-reduce).
  bool set_node_timing(double* node_seconds) override {
    reps_[0]->exec->set_node_timing(node_seconds);  // CudaExecutor synchronises after each node while it times
    return true;
  }

  double peak_flops() const override { return cuda::dense_bf16_peak_flops(name_) * static_cast<double>(gpus_); }

  std::string describe() const override {
    std::string where = "cuda:" + std::to_string(reps_[0]->device) + " (" + name_ + ")";
    if (reps_.size() > 1) {
      where = "cuda:" + std::to_string(reps_[0]->device);
      for (size_t r = 1; r < reps_.size(); ++r) where += "," + std::to_string(reps_[r]->device);
      where += " (" + std::to_string(reps_.size()) + " data-parallel replicas, " + name_ +
               (shared_gpu_ ? ", sharing GPUs: gradients summed through host memory" : ", NCCL") + ")";
    }
    return where + (copts_.bf16  ? ", bf16 autocast"
                    : copts_.f16 ? ", fp16 autocast with dynamic loss scaling"
                                 : ", fp32");
  }

  std::vector<std::pair<std::string, double>> step_metrics() const override {
    if (!copts_.f16) return {};
    return {{"loss_scale", scaler_.scale()}, {"skipped_steps", static_cast<double>(skipped_)}};
  }

  // Per device (replica 0's).
  size_t device_bytes() const override { return reps_[0]->exec->device_bytes() + reps_[0]->opt->device_bytes(); }

 private:
  struct Replica {
    int device = 0;
    std::unique_ptr<CudaExecutor> exec;
    std::unique_ptr<CudaOptimizer> opt;
    std::unique_ptr<Communicator> comm;  // over the replicas (several only)
    std::vector<Tensor> inputs;
    Tensor loss;  // host copy of the loss of the last run
    std::vector<int64_t> scratch;
    double loss_sum = 0, norm = -1;
  };


  // fn(r) for every replica: on this thread with one, on a thread per replica with several; the first error is
  // rethrown after every replica stopped (a failing replica aborts the others' collectives first).
  template <typename F>
  void on_every_replica(F& fn) {
    if (reps_.size() == 1) {
      fn(0);
      return;
    }
    std::vector<std::exception_ptr> errors(reps_.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < reps_.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          fn(static_cast<int>(r));
        } catch (...) {
          errors[r] = std::current_exception();
          reps_[r]->comm->abort("replica " + std::to_string(r) + " failed");
        }
      });
    for (auto& t : threads) t.join();
    cuda::set_device(reps_[0]->device);
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  const io::RunConfig& cfg_;
  ParamStore& store_;
  const graph::Graph& train_;
  int64_t micro_;
  int64_t share_ = 0;  // samples of each micro-batch per replica
  CudaExecutorOptions copts_;
  std::vector<std::unique_ptr<Replica>> reps_;
  int gpus_ = 1;             // distinct GPUs
  bool shared_gpu_ = false;  // a GPU listed twice: gradients summed through host memory
  std::unique_ptr<NcclWorld> nccl_;
  std::unique_ptr<InProcWorld> host_world_;
  std::unique_ptr<DeviceEvaluator> eval_;  // on replica 0's GPU
  io::TraceLane* trace_ = nullptr;
  std::string name_;
  LossScaler scaler_;     // fp16 only
  int64_t skipped_ = 0;   // steps skipped for an fp16 overflow in this run
};

std::unique_ptr<DeviceEngine> make_cuda_engine(const DeviceEngineArgs& a) {
  if (a.plan) return make_cuda_plan_engine(a);  // a plan file over the GPUs
  return std::make_unique<CudaEngine>(a);
}

}  // namespace

void install_cuda_engine() { register_device_engine("cuda", &make_cuda_engine); }

}  // namespace braid::exec
