// The plan a run trains (or benchmarks) with on cpu:N: its plan file, read and validated (every mistake
// located), or with `parallel: {plan: auto}` and N > 1 the planner's choice for cpu:N (planner/search.h) on
// the calibrated cost model when a profile is cached, else the analytic one (exec/calibrate.h). Either way
// with the cost model's prediction of its step time, for the closed loop (trainer) and bench.
// nullopt: one device, or plan auto where the planner finds nothing (the run then trains data parallel over
// every listed device: data_parallel_plan). make_engine builds the engine of either.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "exec/engine.h"
#include "graph/ir.h"
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

// What a run is set up from, derived once (by preflight, exec/preflight.h) and reused by everything after it: the
// device string parsed once, the backend's run-setup answers, the plan, and each graph built once (forward graphs
// by batch and value dtype: the planner's, the plan's validation, the trivial plan's layers, the lowering's and the
// host store's are one graph when their batch and dtype agree, as on one device, data parallel and plan files).
struct RunSetup {
  bool parsed = false;                // parse_run_devices ran
  planner::DeviceSpec devices;        // cfg.devices, parsed once
  std::string devices_error;          // why cfg.devices does not parse ("": it does)
  const Backend* planning = nullptr;  // the kind's run-setup answers (planning_backend); null when it does not parse
  std::optional<planner::Plan> plan_file;  // parallel.plan's file, read (once) and not yet validated
  int64_t graph_batch = 1;            // the batch of the training graph preflight checks and the planner plans on
  std::optional<RunPlan> run;         // run_plan's
  std::optional<planner::Plan> plan;  // what the engine runs: run's plan, else the trivial one (data_parallel_plan)
  DType values = DType::f32;          // between ops in the plan's graphs (Backend::value_dtype)
  std::optional<graph::Graph> eval;   // the evaluation graph (with metrics) at train.batch, f32 values

  // The forward graph of `m` at `batch` with `half` values, built the first time it is asked for (UserError, or
  // into `diags`: then it is whole only when diags holds nothing new).
  const graph::Graph& forward(const io::ModelSpec& m, int64_t batch, DType half = DType::f32);
  const graph::Graph& forward(const io::ModelSpec& m, int64_t batch, DType half, Diagnostics& diags);

 private:
  std::map<std::pair<int64_t, DType>, graph::Graph> forward_;
  graph::Graph scratch_;  // the last graph built with mistakes
};

// The run's devices parsed into `s` (devices, devices_error, planning), unless they were.
void parse_run_devices(const io::RunConfig& cfg, RunSetup& s);
// parse_run_devices, parallel.plan's file read (its mistakes are run_plan's to report), and the batch of the training
// graph: the plan file's micro-batch, the data-parallel replica's under plan: auto, else the run's micro-batch.
void set_up_devices(const io::RunConfig& cfg, RunSetup& s);
// UserError at the run file when `devices` data-parallel replicas do not divide the run's micro-batch.
void check_data_parallel_split(const io::RunConfig& cfg, int devices);
// run_plan over `s`'s devices and graphs; then s.run, s.plan (the trivial plan without one: UserError when the
// devices do not divide the micro-batch) and s.values.
std::optional<RunPlan> run_plan(const io::RunConfig& cfg, RunSetup& s);
void set_up_plan(const io::RunConfig& cfg, RunSetup& s);
// The same from the run file alone (bench, tests): a setup of its own.
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
// The same over a setup (set_up_plan done): its plan, backend and graphs, which must outlive the engine.
std::unique_ptr<Engine> make_engine(const io::RunConfig& cfg, RunSetup& s, Communicator* world = nullptr, int rank = 0);

// The dtype of the values between ops in the graphs of an accelerator run of one stage without tensor parallelism
// (graph::BuildOptions::half): bf16 under precision bf16, f32 otherwise. BRAID_BF16_VALUES=0 in the environment
// keeps f32 values with GEMM-level autocast (A/B runs). fp16 runs keep f32 values; pipelines and tensor parallel
// plans (`split`) do too.
DType device_value_dtype(const io::RunConfig& cfg, bool split);

}  // namespace braid::exec
