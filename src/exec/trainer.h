// The single-device training loop: run file -> graphs (train with backward, eval with metrics) -> data ->
// steps of (micro-batches: forward, backward, gradient accumulation) + clipping + optimizer + schedule,
// with evaluation, a metrics file and terminal progress. Same run file and seed: bit-identical run.
#pragma once
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "io/run_config.h"

namespace braid::exec {

struct TrainOptions {
  std::string init_from;   // HDF5 file with /params/<name> tensors: start from these weights
  std::string save_init;   // write the initial weights (HDF5, /params/<name>) before the first step
  std::string save_final;  // write the final weights after the last step
  bool progress = true;    // terminal progress (a bar on a TTY, plain lines otherwise)
  FILE* out = stdout;
};

struct TrainResult {
  std::vector<double> losses;                         // per optimizer step
  std::vector<std::pair<std::string, double>> eval;   // last evaluation: loss and metrics
  int64_t steps = 0;
  double samples_per_s = 0;
  size_t arena_bytes = 0;
};

TrainResult train(const io::RunConfig& cfg, const TrainOptions& opts);

}  // namespace braid::exec
