// The plan a run trains (or benchmarks) with on cpu:N: its plan file, read and validated (every mistake
// located), or with `parallel: {plan: auto}` and N > 1 the planner's choice for cpu:N (planner/search.h) on
// the calibrated cost model when a profile is cached, else the analytic one (exec/calibrate.h). Either way
// with the cost model's prediction of its step time, for the closed loop (trainer) and bench.
// nullopt: one device, or plan auto where the planner finds nothing (the run then trains data parallel over
// every listed device: data_parallel_plan). make_engine builds the engine of either.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "exec/engine.h"
#include "io/run_config.h"
#include "planner/evaluate.h"
#include "planner/plan.h"

namespace braid::exec {

struct RunPlan {
  planner::Plan plan;                  // complete and validated
  bool automatic = false;              // chosen by the planner (plan: auto)
  planner::StepPrediction prediction;  // of `plan` by the cost model below
  std::string cost_model;              // its description
  double busy_scale = 1, tail_scale = 1;  // the runs' measurements it had fed back (CostModel::busy_scale)
  double search_s = 0;                 // planning time (automatic only)
  std::string summary;                 // one line: the shape, schedule, prediction and cost model
};

std::optional<RunPlan> run_plan(const io::RunConfig& cfg);

// The cost model `plan: auto` (and `braid plan`) uses for `count` cuda devices: the analytic model of one node of
// H200-class GPUs (the h200x8 preset sized to count), its products at the 16-bit tensor-core peak when the run's
// precision is bf16 or f16. *description says so. braid does not calibrate GPUs yet.
std::unique_ptr<planner::CostModel> gpu_cost_model(const io::RunConfig& cfg, int count, std::string* description);

// The engine that trains (or benchmarks) a run: `run`'s plan or, without one, the trivial plan over the run's devices
// (one device, or data parallel over every listed one: data_parallel_plan), on the backend of their kind (cpu built
// in, cuda loaded as a module). In a job of several processes (`world`) this process runs plan device `rank`.
// UserError (exit status 2) for a kind this braid has no backend for, naming what is missing, or devices that do
// not fit the plan.
std::unique_ptr<Engine> make_engine(const io::RunConfig& cfg, const std::optional<RunPlan>& run,
                                    Communicator* world = nullptr, int rank = 0);

// The run's devices when they are accelerators (`cuda`, `cuda:N`): true and *dev; false for cpu devices and cluster
// files.
bool accelerator_devices(const io::RunConfig& cfg, planner::DeviceSpec* dev);
// The dtype of the values between ops in the graphs of an accelerator run of one stage without tensor parallelism
// (graph::BuildOptions::half): bf16 under precision bf16, f32 otherwise. BRAID_BF16_VALUES=0 in the environment
// keeps f32 values with GEMM-level autocast (A/B runs). fp16 runs keep f32 values; pipelines and tensor parallel
// plans (`split`) do too.
DType device_value_dtype(const io::RunConfig& cfg, bool split);

}  // namespace braid::exec
