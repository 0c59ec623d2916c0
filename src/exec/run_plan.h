// The plan a run trains (or benchmarks) with on cpu:N: its plan file, read and validated (every mistake
// located), or with `parallel: {plan: auto}` and N > 1 the planner's choice for cpu:N (planner/search.h) on
// the calibrated cost model when a profile is cached, else the analytic one (exec/calibrate.h). Either way
// with the cost model's prediction of its step time, for the closed loop (trainer) and bench.
// nullopt: one device, or plan auto where the planner finds nothing (the caller falls back to DataParallel).
#pragma once
#include <memory>
#include <optional>
#include <string>

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

}  // namespace braid::exec
