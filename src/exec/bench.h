// Steady-state measurement of a run file's training step, for `braid bench` and `braid time`. What is timed
// is exactly train()'s step: the same plan (the run's, or the trivial one), the engine's step over the same
// dataset and sampler, clipping, schedule and optimizer, without checkpoints, evaluation, metrics files or
// progress output. Warmup steps run first and are not timed. Nothing here prints; the CLI formats the results.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/run_config.h"

namespace braid::exec {

struct BenchOptions {
  int64_t steps = 50;     // timed optimizer steps
  int64_t warmup = 10;    // untimed steps before them
  bool per_node = false;  // time every node (`braid time`); off for `braid bench`
};

// One layer of `braid time`: its nodes' seconds summed over the timed steps, split by direction.
struct LayerTime {
  std::string layer, op;  // op: the layer's (first) forward node's op
  std::string fused_into;  // the layer whose fused kernel ran this layer's forward (its time is counted there)
  std::string backward_fused_into;  // the layer whose fused kernel ran this layer's backward (an activation's
                                    // gradient in the next layer's dx GEMM)
  double forward_s = 0, backward_s = 0;
};

struct BenchResult {
  std::string model;
  int64_t batch = 0, micro_batch = 0, threads = 0;
  std::string devices;            // the run's `devices` (cpu, cpu:4, ...)
  int64_t data_parallel = 1;      // data-parallel replicas (N of cpu:N, else 1)
  int64_t tokens_per_sample = 0;   // per-sample length of the first integer sequence input; 0: none
  int64_t params = 0;              // trainable elements
  double train_flops_per_step = 0; // sum of every training-graph node's cost, times the micro-batches
  size_t arena_bytes = 0, workspace_bytes = 0;
  std::vector<double> step_s;      // wall time of each timed step
  // per_node only: layers in model order, and the step's other phases (seconds over the timed steps).
  std::vector<LayerTime> layers;
  double data_s = 0, accumulate_s = 0, optimizer_s = 0;
  // per_node only: seconds over the timed steps by node op (forward and backward ops apart: linear, linear_dx,
  // ...), the most first.
  std::vector<std::pair<std::string, double>> ops;
  // Runs under a plan (a plan file, or plan: auto on cpu:N): the engine's step is timed; the plan in one line
  // and the cost model's predicted step time (exec/run_setup.h). Empty / 0 on one device.
  std::string plan;
  double predicted_step_s = 0;
  // On an accelerator (devices: cuda:N, exec/backend.h): the device ("cuda:0 (NVIDIA H200), bf16
  // autocast") and its dense peak in FLOP/s, which MFU is then reported against instead of the CPU's.
  std::string device;
  double device_peak_flops = 0;
};

BenchResult bench(const io::RunConfig& cfg, const BenchOptions& opts);

}  // namespace braid::exec
