// The run file (MODEL_FORMAT.md, "Run file"): data, training, optimizer, schedule, devices, parallelism,
// checkpoints, logging, eval. `--set key=value` overrides are applied to the YAML tree before it is read,
// so they are checked exactly like the file (an override's errors point at the command line).
// Also loads a bare model file as a run (for `braid check MODEL`), with only the model part filled.
#pragma once
#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/model_spec.h"

namespace braid::io {

struct DataSourceSpec {
  std::string format;                  // idx | hdf5 | bytes | tokens | synthetic
  std::string path;                    // hdf5, bytes, tokens: resolved relative to the run file
  std::string token_dtype;             // tokens: u16 | u32 | i32 (little endian)
  std::string images, labels;          // idx: resolved paths
  std::vector<std::pair<std::string, std::string>> fields;  // hdf5: field -> dataset path ("/x")
  std::vector<std::pair<std::string, std::string>> bind;    // field -> model input; empty = in order
  int64_t seq = 0;                     // bytes, tokens: window length (must equal the model's input length)
  int64_t samples = 1024;              // synthetic: number of samples
  int64_t limit = 0;                   // optional: use only the first `limit` samples (0 = all)
  SourceLoc loc;
};

struct DataSpec {
  DataSourceSpec train;
  std::optional<DataSourceSpec> eval;
  bool shuffle = true;
};

struct TrainSpec {
  int64_t batch = 0;
  std::optional<int64_t> micro_batch;
  std::optional<int64_t> steps;
  std::optional<int64_t> epochs;
  uint64_t seed = 1;
  std::string precision = "f32";  // f32 | bf16 | f16
};

struct OptimizerSpec {
  std::string type;  // sgd | adamw
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  double weight_decay = 0;  // sgd default 0, adamw default 0.01
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-8;
  std::optional<double> clip_grad_norm;
};

struct LrScheduleSpec {
  std::string type = "constant";  // constant | step | cosine
  int64_t step_size = 1;          // step
  double gamma = 0.1;             // step
  int64_t warmup_steps = 0;       // cosine
  double min_lr = 0;              // cosine
};

struct ParallelSpec {
  std::string plan = "auto";      // auto | path of a plan file
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved
  bool sync_batch_norm = false;   // batch norm statistics over data-parallel devices (docs/parallel.md)
};

struct CheckpointSpec {
  std::string dir;           // empty: no checkpoints
  int64_t every_steps = 0;   // 0: only at the end
  int64_t keep = 3;
};

struct LogSpec {
  int64_t every_steps = 10;
  std::string metrics;       // metrics file (JSON lines); default <checkpoint dir>/metrics.jsonl or none
};

struct EvalSpec {
  int64_t every_steps = 0;   // 0: at the end of every epoch and of training
  int64_t batches = 0;       // 0: the whole eval set
};

struct RunConfig {
  std::string path;       // the run file ("" when a bare model was loaded)
  std::string text;       // its text after overrides
  std::string model_path; // resolved
  ModelSpec model;        // loaded with the run's vars applied
  DataSpec data;
  TrainSpec train;
  OptimizerSpec optimizer;
  LrScheduleSpec lr_schedule;
  std::string devices = "cpu";
  ParallelSpec parallel;
  CheckpointSpec checkpoint;
  LogSpec log;
  EvalSpec eval;
  bool is_model_only = false;  // a model file was given instead of a run file
};

// Loads a run file, or a model file (detected by its top-level keys: a run file has `model:`).
// `sets` are "dotted.key=value" strings from the command line. Checks that data files exist.
// Throws UserError with every error found.
RunConfig load_run_or_model(const std::string& path, const std::vector<std::string>& sets);
// The same, adding every error to `diags` instead of throwing, and returning what could be read: the model
// part is complete enough for the graph builder's checks (ModelSpec::inputs_known says whether its inputs
// are), the rest only when no error was added (`braid check` reports the model's mistakes beside the run's).
RunConfig load_run_or_model(const std::string& path, const std::vector<std::string>& sets, Diagnostics& diags);

}  // namespace braid::io
