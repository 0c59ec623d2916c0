// The device side of a training step for CudaExecutor: gradients accumulated on the device in fp32 over
// micro-batches (scaled 1/M, as exec/trainer.cpp does on the host) and the fused multi-tensor AdamW / SGD of
// backends/cuda/kernels/optim.cu over the executor's fp32 parameters (the master weights, also under bf16 autocast).
// Optimizer state (exp_avg, exp_avg_sq / momentum_buffer) and accumulators live in one DeviceArena of their
// own, allocated at construction; a step copies nothing to or from the host.
// Gradient-norm clipping is the caller's (grad_norm, then scale_grads), as the CPU trainer clips between the
// backward and the update; download / upload move the state to and from a host exec::Optimizer (checkpoints).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_executor.h"
#include "backends/cpu/optimizer.h"
#include "io/run_config.h"

namespace braid::exec {

class CudaOptimizer {
 public:
  // Every parameter of ex's graph that has a gradient. micro_batches > 1 (or `accumulators`): accumulate() sums each
  // micro-batch's gradients into fp32 accumulators, one contiguous block (flat_gradients); else the update reads
  // the graph's gradient values in place.
  // Optimizer-state sharding (ZeRO): `owned` (empty: all) names the parameters this replica keeps state for and
  // updates; the others get no state and no update (their values arrive by broadcast, or, under ZeRO-3, are not
  // here). `owned_grads_only` (ZeRO-2 and 3): only the owned parameters have accumulators, which accumulate_one
  // fills with the gradient reduced to this replica; else every gradient has one (ZeRO-1 all-reduces them all).
  CudaOptimizer(CudaExecutor& ex, const io::OptimizerSpec& spec, int micro_batches = 1, bool accumulators = false,
                const std::function<bool(const std::string&)>& owned = {}, bool owned_grads_only = false);
  ~CudaOptimizer();
  // After micro-batch mb's run (slot 0): dst = g / (M loss_scale) (mb 0) or dst += g / (M loss_scale): the run's
  // gradients were of the loss times loss_scale (CudaExecutor::set_loss_scale). A no-op without accumulators (then
  // the caller divides by the loss scale with scale_grads).
  // `slot`: the executor slot the micro-batch ran in (plans keep several micro-batches in flight).
  void accumulate(int mb, double loss_scale = 1, int slot = 0);
  // ZeRO-2: `g`, micro-batch mb's gradient `grad` of an owned parameter already reduced over the data group, into
  // its accumulator (as accumulate() does for all).
  void accumulate_one(ValueId grad, const Tensor& g, int mb, double loss_scale = 1);
  int micro_batches() const { return micro_batches_; }
  bool accumulates() const { return accumulate_; }
  // With accumulators: all of them as one f32 tensor (the gaps between them zero), for one all-reduce; else
  // undefined.
  const Tensor& flat_gradients() const { return flat_; }
  // One update of every parameter at learning rate lr; enqueued on the executor's stream, not synchronised.
  void step(double lr);
  int64_t steps_taken() const { return step_; }
  size_t device_bytes() const;
  // The L2 norm of the gradients the next step() reads (the accumulated ones), in double; synchronises. Not finite
  // when a gradient holds an inf or NaN (an fp16 overflow under loss scaling).
  double grad_norm();
  // Their sum of squares (double), over the parameters set_norm_params counts (all by default); synchronises.
  double grad_sum_squares();
  // Which parameters grad_sum_squares counts (a plan counts a replicated gradient on one device only).
  void set_norm_params(const std::function<bool(const std::string&)>& counted);
  // Those gradients *= k (clipping: k = max_norm / (norm + 1e-6) when below 1).
  void scale_grads(double k);
  // The state (exp_avg, exp_avg_sq / momentum_buffer, by parameter name as exec::Optimizer names them) and the
  // step count, to a host optimizer over the same parameters and back from one. upload() of a host optimizer
  // that has taken no step leaves the device state zero (its tensors are not initialised until its first step).
  void download(Optimizer& host) const;
  void upload(const Optimizer& host);

 private:
  CudaExecutor& ex_;
  io::OptimizerSpec spec_;
  int micro_batches_;
  bool accumulate_;
  Tensor flat_;
  std::unique_ptr<cuda::DeviceArena> arena_;
  void* table_ = nullptr;
  int count_ = 0;
  int64_t max_n_ = 0;
  int64_t step_ = 0;
  std::vector<std::pair<ValueId, float*>> accum_;  // (graph gradient, accumulator) when micro_batches > 1
  std::vector<cuda::ParamSlot> slots_;             // host copy of the table
  void* norm_table_ = nullptr;                     // set_norm_params' subset (null: the whole table)
  int norm_count_ = 0;
  struct State {
    std::string name;
    float* m = nullptr;  // exp_avg / momentum_buffer
    float* v = nullptr;  // exp_avg_sq
    int64_t n = 0;
  };
  std::vector<State> states_;
  // copy(host bytes, device state, bytes) for every state tensor, the host's by exec::Optimizer's names.
  template <typename StateMap, typename Copy>
  void each_state(StateMap& state, const Copy& copy) const;
  double* norm_ = nullptr;  // grad_norm's device sum
};

}  // namespace braid::exec
