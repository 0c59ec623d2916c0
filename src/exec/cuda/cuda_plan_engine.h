// `braid train` under a plan over GPUs (a plan file with devices cuda:...): the DeviceEngine of the CUDA backend
// that runs a lowered plan (exec/lower.h) as exec::PlanRunner does on cpu:N, with CudaExecutor in place of
// Executor. Every device of the plan has a thread during the step and interprets its schedule's instructions:
// Forward / Backward on its stage executors' slots, sends and receives of boundary values (device tensors) over
// the world communicator, the data-parallel gradient all-reduce (averaged), then the loss and the global gradient
// norm summed over the world, clipping and each device's update (CudaOptimizer per stage). Tensor-parallel
// collectives inside the stage graphs run through CudaExecutor::set_groups.
// Communicators: NCCL over the listed GPUs when they are distinct (one process, a thread per GPU); when a GPU is
// listed more than once (cuda:0,0,0,0: a plan of four devices on one GPU) the in-process backend through host
// memory (exec/cuda/staged_comm.h), so that any plan can be run, and checked against the CPU, on one GPU.
// Parameters are drawn whole from the run's seed and sliced, as on the CPU; to_host / from_host gather and
// scatter them (and the optimizer state) through the whole-model host store, so checkpoints move between plans,
// devices and the CPU. Evaluation runs the whole evaluation graph on the plan's device 0.
// Not yet: gradient buckets overlapped with the backward (the all-reduce follows the step's last backward),
// several processes (braid launch), a GPU cost model for plan: auto.
#pragma once
#include <memory>

#include "exec/device_engine.h"

namespace braid::exec {

std::unique_ptr<DeviceEngine> make_cuda_plan_engine(const DeviceEngineArgs& a);

}  // namespace braid::exec
