// The braid subcommands as library functions (the CLI parses arguments and calls these), so tests reach
// every behaviour without a shell. Each returns the process exit status; user errors throw UserError
// (status 2 in main), internal errors InternalError (status 3).
#pragma once
#include <cstdio>
#include <string>
#include <vector>

namespace braid::cli {

struct CheckArgs {
  std::string path;
  std::vector<std::string> sets;
  int64_t batch = 0;     // 0: the run's batch (micro-batch when set), or 1 for a bare model
  std::string dot;       // write the graph as Graphviz DOT here
  bool json = false;     // machine-readable layer list on stdout
};
int check(const CheckArgs& a, FILE* out);

struct TrainArgs {
  std::string path;
  std::vector<std::string> sets;
  std::string resume, init_from, save_init, save_final;
  bool init_partial = false;
  int64_t stop_after = 0;
  std::string trace;
  bool no_progress = false;
};
int train(const TrainArgs& a, FILE* out);

// `braid inspect`: a checkpoint's step, run and tensor table; with `diff`, how it differs from a run file.
struct InspectArgs {
  std::string path;               // checkpoint file, or checkpoint folder (its latest)
  std::string diff;               // run or model file to compare with
  std::vector<std::string> sets;  // --set overrides of the diff run
};
int inspect(const InspectArgs& a, FILE* out);

// `braid bench`: steady-state throughput, FLOP/s, MFU and memory of each run (and sweep point); see
// docs/benchmarks.md for every column and formula.
struct BenchArgs {
  std::vector<std::string> paths;
  std::vector<std::string> sets;    // applied to every run
  std::vector<std::string> sweeps;  // "key=v1,v2,...": the cartesian product of these --set overrides
  int64_t steps = 50, warmup = 10, window = 10;
  double peak_gflops = 0;           // 0: detect the CPU's peak from /proc/cpuinfo
  std::string csv, json;            // files to write ("" = none)
};
int bench(const BenchArgs& a, FILE* out);

// `braid time`: forward and backward time per layer, with each layer's share of the step.
struct TimeArgs {
  std::string path;
  std::vector<std::string> sets;
  int64_t steps = 10, warmup = 2;
};
int time_layers(const TimeArgs& a, FILE* out);

// `braid plan`: the planner's plan for a run on its devices, a cpu:N, a preset or a cluster file
// (docs/planner.md); --explain shows why.
struct PlanArgs {
  std::string path;
  std::vector<std::string> sets;
  std::string devices;   // cpu:N (default: the run's devices)
  std::string cluster;   // a cluster file or a preset name (h200x8, dgx-a100-80gb:16)
  std::string out;       // plan file to write ("" = stdout)
  std::string dot;       // Graphviz DOT of the plan's stages
  bool explain = false;
};
int plan(const PlanArgs& a, FILE* out);

// `braid calibrate`: measures this machine for cpu:N and caches the profile the planner reads
// (exec/calibrate.h, docs/planner.md "Calibration").
struct CalibrateArgs {
  std::string devices = "cpu:2";
  double budget_s = 40;   // seconds for op measurements (collectives take a few more)
  bool print = false;     // also print the profile
  // Metrics files of runs on this machine: measure nothing, fit the cached profile's feedback for cpu:N from
  // their closed-loop records instead (exec/closed_loop.h, fit_feedback).
  std::vector<std::string> from_run;
};
int calibrate(const CalibrateArgs& a, FILE* out);

// `braid tokenize train`: a SentencePiece tokenizer trained on text files, written as a `.model` file.
struct TokenizeTrainArgs {
  std::vector<std::string> inputs;  // text files
  std::string out;                  // the .model file
  int64_t vocab_size = 8000;
  std::string model_type = "bpe";   // bpe | unigram
  double character_coverage = 0.9995;
  int64_t max_sentences = 0;        // 0: every line
  uint64_t seed = 1;
};
int tokenize_train(const TokenizeTrainArgs& a, FILE* out);

// `braid tokenize encode`: text files through a tokenizer into one token file (the `tokens` data format).
struct TokenizeEncodeArgs {
  std::string model;                // the tokenizer's .model
  std::vector<std::string> inputs;  // text files, concatenated in order
  std::string out;                  // the token file
  std::string dtype;                // u16 | u32 | i32; "": u16 when the vocabulary fits, else u32
  bool eos = false;                 // an end-of-sequence id after each file
  bool no_progress = false;
};
int tokenize_encode(const TokenizeEncodeArgs& a, FILE* out);

// `braid tokenize decode`: a token file (or a slice of it) or a list of ids back to text.
struct TokenizeDecodeArgs {
  std::string model;
  std::string tokens;               // a token file, or
  std::string ids;                  // ids separated by commas
  std::string dtype;                // as encode's
  int64_t offset = 0, count = -1;   // the slice of the token file (count -1: to its end)
  std::string out;                  // "" = standard output
};
int tokenize_decode(const TokenizeDecodeArgs& a, FILE* out);

// `braid ops`: every op usable in model files with its attributes and defaults.
int list_ops(FILE* out);

}  // namespace braid::cli
