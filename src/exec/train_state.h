// What a checkpoint holds of a training run, and putting it back: parameters, buffers, optimizer state,
// random streams, the data cursor and the step. Capture and restore are exact: a resumed run continues
// bit-identically. Mismatches between a checkpoint and the run's model are user errors naming the first
// differing tensor.
#pragma once
#include <cstdio>
#include <string>

#include "backends/cpu/optimizer.h"
#include "exec/param_store.h"
#include "io/checkpoint.h"
#include "io/dataset.h"
#include "io/run_config.h"

namespace braid::exec {

struct StepState {
  int64_t step = 0;           // optimizer steps completed
  int64_t micro_batches = 1;  // per step (the dropout stream advances by this much per step)
  double wall_time_s = 0;     // training time so far, across resumes
};

io::Checkpoint capture(const io::RunConfig& cfg, const ParamStore& store, Optimizer& opt,
                       const io::BatchSampler& sampler, const StepState& s);

// A checkpoint holding NaN/Inf (parameters, buffers, optimizer state) is not saved: a UserError names the
// tensor and the step; the previous checkpoint and `latest` stay as they were.
void refuse_non_finite(const io::Checkpoint& c, const io::RunConfig& cfg, int64_t step);

// Exact continuation: every tensor must match the model; optimizer type must match the run's.
// Returns the step state to continue from.
StepState restore(const io::Checkpoint& c, const std::string& path, const io::RunConfig& cfg, ParamStore& store,
                  Optimizer& opt, io::BatchSampler& sampler);

// Weights only (fine-tuning): parameters and buffers. With `partial`, tensors missing on either side or
// shaped differently are listed on `out` and skipped; otherwise the first mismatch is an error.
void load_weights(const std::string& path, ParamStore& store, bool partial, FILE* out);
// Writes the current parameters and buffers as a checkpoint of step 0 without optimizer state.
void save_weights(const std::string& path, const io::RunConfig& cfg, const ParamStore& store);

}  // namespace braid::exec
