// The training loop over the one engine (exec/engine.h), for every plan and backend: the run set up once
// (preflight: devices, plan, graphs, data, checkpoints) -> the engine -> steps at the schedule's learning rate,
// with evaluation, checkpoints, a metrics file, a trace and terminal progress. Same run file and seed: bit-identical run.
#pragma once
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "exec/comm/comm.h"
#include "io/run_config.h"

namespace braid::exec {

struct TrainOptions {
  std::string resume;      // "latest" (in checkpoint.dir) or a checkpoint path: continue exactly
  std::string init_from;   // a checkpoint or weights file: start from its parameters and buffers
  bool init_partial = false;  // with init_from: load the tensors that match, list the others
  int64_t stop_after = 0;  // stop after this step (as if interrupted: save a checkpoint, return); 0 = never
  std::string trace;       // write a chrome-trace JSON here (a lane per device); "" = no tracing
  std::string save_init;   // write the initial weights (HDF5, /params/<name>) before the first step
  std::string save_final;  // write the final weights after the last step
  bool progress = true;    // terminal progress (a bar on a TTY, plain lines otherwise)
  // Between processes (braid launch, torchrun, Slurm, Open MPI): this process is device `rank` of the plan,
  // `world` its world communicator (owned by the caller). Rank 0 writes checkpoints, metrics, evaluations and
  // the trace; every rank trains. nullptr: every device in this process.
  Communicator* world = nullptr;
  int rank = 0;
  // With `world` and `trace`: this process's steady clock + offset = the job's reference clock
  // (dist::estimate_store_clock_offset), and the host shown in the trace's process name "rank N (host)".
  // Every rank writes `trace`.rankN.json; rank 0 merges them into `trace` onto that clock and removes them.
  std::optional<int64_t> trace_clock_offset_ns;
  std::string trace_host;
  FILE* out = stdout;
};

struct TrainResult {
  std::vector<double> losses;                         // per optimizer step
  std::vector<std::pair<std::string, double>> eval;   // last evaluation: loss and metrics
  int64_t steps = 0;
  double samples_per_s = 0;
  size_t arena_bytes = 0;
  int stop_signal = 0;             // SIGINT/SIGTERM that stopped the run early (0: none)
  bool stopped_early = false;      // by a signal or stop_after
  std::string last_checkpoint;     // path of the newest checkpoint written ("" if none)
};

TrainResult train(const io::RunConfig& cfg, const TrainOptions& opts);

}  // namespace braid::exec
