// The named pieces exec::train (trainer.cpp) runs over: the trace (train_trace.cpp), the banner and the log
// (train_log.cpp: the metrics file, the progress and log lines), checkpointing (train_checkpoints.cpp: resume,
// save cadence, `latest`) and evaluation (train_eval.cpp). Not an interface: everything here serves train(). Between
// processes rank 0 speaks and writes; the pieces take `rank0` and an `out` that is /dev/null elsewhere, and every
// collective they hold (gathers for checkpoints and evaluation) runs on every rank.
#pragma once
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "exec/closed_loop.h"
#include "exec/engine.h"
#include "exec/run_setup.h"
#include "exec/train_state.h"
#include "exec/trainer.h"
#include "io/checkpoint.h"
#include "io/dataset.h"
#include "io/metrics.h"
#include "io/progress.h"
#include "io/trace.h"

namespace braid::exec {

using TrainClock = std::chrono::steady_clock;
using Scores = std::vector<std::pair<std::string, double>>;  // an evaluation's loss and metrics, by name

// What each local device holds (static: the memory plan's arenas and the shards; docs/parallel.md, "Memory").
struct MemoryReport {
  std::vector<DeviceMemory> memory;  // per local device
  std::vector<int> local;            // their device ids
};

// The trace (TrainOptions::trace): a lane per device (and one for each device's gradient all-reduce thread under
// data parallelism) with forward/backward per micro-batch, sends, receives, all-reduces, optimizer, eval and
// checkpoints. In one process: one file. Between processes each rank writes its part (`trace`.rankN.json) and
// rank 0 merges them on the job's clock (write()); a job that fails leaves each surviving rank's part, its events
// up to the failure, and never a half-written merged file. No trace asked for: every call does nothing.
class TrainTrace {
 public:
  TrainTrace(const TrainOptions& opts, Engine& engine);
  ~TrainTrace();  // while an exception unwinds, between processes: this rank's part
  TrainTrace(const TrainTrace&) = delete;
  TrainTrace& operator=(const TrainTrace&) = delete;

  io::TraceLane* lane0() const { return lane0_; }  // this process's first device: eval and checkpoint spans
  void count_memory(const MemoryReport& m);        // a counter track per device
  void write(FILE* out, bool rank0);               // the file (merged between processes), and a line saying so

 private:
  const TrainOptions& opts_;
  std::unique_ptr<io::TraceRecorder> tracer_;
  io::TraceLane* lane0_ = nullptr;
  int uncaught_;
};

// The banner: the model, steps, batch and data; the plan and its memory strategies; the devices; the planner's
// choice; data parallelism; then print_memory's line. Nothing here decides anything.
void print_banner(FILE* out, const io::RunConfig& cfg, const std::optional<RunPlan>& run, Engine& engine,
                  int64_t parameters, int64_t total_steps, const io::Dataset& train_data);
void print_memory(FILE* out, const MemoryReport& m);

// "loss 0.1234, accuracy 97.50%"
std::string scores_str(const Scores& s);

// The metrics file (log.metrics, rank 0; appended to by a resumed run) and the terminal's lines: the progress of
// each step (samples/s over the window since the last logged step), evaluations, the plan's prediction against
// its measurement, a stop, the final evaluation and the summary. A record per logged or evaluated step; the
// run's first holds what each device holds.
class TrainLog {
 public:
  TrainLog(const io::RunConfig& cfg, bool rank0, FILE* out, bool progress, int64_t total_steps, int64_t start_step);
  void start(TrainClock::time_point t) { window_start_ = t; }
  // Under a plan on host devices: the step's time against the plan's prediction (ClosedLoop's advice and record).
  void closed_loop(ClosedLoop& loop, int64_t step, int64_t first_step, int64_t total_steps, double step_s,
                   const RunPlan& run, Engine& engine);
  // After step `step` (0-based): its progress line; log_step() says whether it is a logged one.
  void step(int64_t step, double loss, double lr);
  bool log_step(int64_t step) const;
  void eval_line(int64_t step, const Scores& s);
  // The metrics record of step `step` when logged or evaluated (`evaluated`); closes the window when logged.
  void record(int64_t step, const StepResult& r, double lr, int64_t epoch, Engine& engine, const Scores& eval,
              bool evaluated, const MemoryReport& memory);
  void stopped(int64_t steps, const std::string& last_checkpoint);
  void finish() { progress_.finish(); }
  void final_eval(int64_t total_steps, int64_t samples, const Scores& s);
  void summary(int64_t steps, double secs, double samples_per_s);

 private:
  const io::RunConfig& cfg_;
  FILE* out_;
  std::unique_ptr<io::MetricsWriter> metrics_;
  io::Progress progress_;
  int64_t total_steps_;
  TrainClock::time_point window_start_;
  int64_t window_samples_ = 0;
  double samples_per_s_ = 0;  // of the window, at the last step()
  bool memory_logged_ = false;
};

// Checkpointing: resume (restore a checkpoint into the host model and the sampler), the step state a checkpoint
// records, the cadence (every checkpoint.every_steps, at the end, when asked to stop) and the save (a gather of
// every process, then rank 0 writes and moves `latest`; a diverged state is refused and never replaces it).
class Checkpoints {
 public:
  Checkpoints(const io::RunConfig& cfg, Engine& engine, ParamStore& store, Optimizer& opt, io::BatchSampler& sampler);
  void resume(const std::string& path, int64_t total_steps, FILE* out);  // says where it resumes
  // The folder (rank 0) and what a stop signal says it will save; after resume and the scatter.
  void open(bool rank0);
  const StepState& state() const { return state_; }
  void start(TrainClock::time_point t) { step_start_ = t; }
  void step_done(int64_t steps);  // `steps` completed; the wall time since the last one counted
  bool due(int64_t steps, int64_t total_steps, bool stop) const;
  // A collective. Returns the path written; "" when nothing was (no checkpoint.dir, or not rank 0).
  std::string save(io::TraceLane* lane);

 private:
  const io::RunConfig& cfg_;
  Engine& engine_;
  ParamStore& store_;
  Optimizer& opt_;
  io::BatchSampler& sampler_;
  StepState state_;
  std::unique_ptr<io::CheckpointDir> dir_;
  TrainClock::time_point step_start_;
};

// Evaluation over the evaluation set (eval.batches batches at most) on the engine's device 0, with the host
// model's parameters: when it is due during training (every eval.every_steps, else at each epoch's end but the
// last), and the final one. No evaluation set: never due.
class Evaluation {
 public:
  Evaluation(const io::RunConfig& cfg, std::unique_ptr<io::Dataset> data) : cfg_(cfg), data_(std::move(data)) {}
  bool enabled() const { return data_ != nullptr; }
  bool due(int64_t step, int64_t total_steps, const io::BatchSampler& sampler) const;
  // During training: a gather on every process, then rank 0 evaluates (the others return nothing).
  Scores during_training(Engine& engine, ParamStore& store, bool rank0, io::TraceLane* lane);
  Scores run(Engine& engine, ParamStore& store);  // the parameters in `store` current
  int64_t samples() const;                        // evaluated per run

 private:
  const io::RunConfig& cfg_;
  std::unique_ptr<io::Dataset> data_;
};

}  // namespace braid::exec
