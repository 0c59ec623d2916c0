// The device side of a training step for CudaExecutor: gradients accumulated on the device in fp32 over
// micro-batches (scaled 1/M, as exec/trainer.cpp does on the host) and the fused multi-tensor AdamW / SGD of
// ops/cuda/optim.cu over the executor's fp32 parameters (the master weights, also under bf16 autocast).
// Optimizer state (exp_avg, exp_avg_sq / momentum_buffer) and accumulators live in one DeviceArena of their
// own, allocated at construction; a step copies nothing to or from the host.
// Not here yet: clip_grad_norm (needs a device norm; a spec asking for it is refused), checkpointing the state,
// the trainer choosing this path (docs/gpu.md).
#pragma once
#include <memory>
#include <vector>

#include "exec/cuda/cuda_executor.h"
#include "io/run_config.h"

namespace braid::exec {

class CudaOptimizer {
 public:
  // Every parameter of ex's graph that has a gradient. micro_batches > 1: accumulate() sums each micro-batch's
  // gradients into fp32 accumulators; 1: the update reads the graph's gradient values in place.
  CudaOptimizer(CudaExecutor& ex, const io::OptimizerSpec& spec, int micro_batches = 1);
  ~CudaOptimizer();
  // After micro-batch mb's run (slot 0): dst = g / M (mb 0) or dst += g / M. A no-op with one micro-batch.
  void accumulate(int mb);
  // One update of every parameter at learning rate lr; enqueued on the executor's stream, not synchronised.
  void step(double lr);
  int64_t steps_taken() const { return step_; }
  size_t device_bytes() const;

 private:
  CudaExecutor& ex_;
  io::OptimizerSpec spec_;
  int micro_batches_;
  std::unique_ptr<cuda::DeviceArena> arena_;
  void* table_ = nullptr;
  int count_ = 0;
  int64_t max_n_ = 0;
  int64_t step_ = 0;
  std::vector<std::pair<Tensor, float*>> accum_;  // (graph gradient view, accumulator) when micro_batches > 1
};

}  // namespace braid::exec
