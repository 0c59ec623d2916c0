// The CUDA backend (exec/backend.h): stage programs on CudaExecutor (bf16 or fp16 autocast under the run's
// precision), gradients accumulated over micro-batches and updated by CudaOptimizer's fused AdamW / SGD on the
// device, the data-parallel gradients as one flat block per stage, all-reduced by the engine; NCCL between distinct
// GPUs (in one process, or joined over the job's world between processes), host memory when plan devices share a
// GPU (cuda:0,0,0,0: any plan on one GPU, checked against the CPU). Evaluation runs the whole evaluation graph on
// plan device 0's GPU. The engine (exec/engine.h) does everything else, as for every backend.
#pragma once
#include <memory>

#include "exec/backend.h"

namespace braid::exec {

std::unique_ptr<Backend> make_cuda_backend();
// Registers the CUDA backend for device kind "cuda" (the module's entry point does; tests that drive exec::train on
// cuda without the module call it too). Idempotent.
void install_cuda_backend();

}  // namespace braid::exec
