// The braid command: CLI11 parsing and the exit-status contract (0 ok, 2 user error, 3 internal error,
// 1 a failure outside the user's files: another process, out of memory, a full disk).
#include <CLI/CLI.hpp>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "core/machine_load.h"
#include "core/resource_error.h"
#include "distributed/launch.h"
#include "exec/backend.h"
#include "exec/signals.h"

namespace {

// OpenMP's wait, which libgomp reads when it is loaded (before main), so braid re-executes itself once with it
// set unless the user chose one (OMP_WAIT_POLICY or GOMP_SPINCOUNT set); if the re-exec fails braid runs with
// libgomp's default. libgomp's own default (a thread spins ~300k iterations at every barrier before sleeping) is
// pathological on a shared machine: a spinning thread holds the core the thread it waits for needs (on the 2-core
// machine under a load of 9, LeNet ran at 40 samples/s spinning and 490 with OMP_WAIT_POLICY=passive). Sleeping at
// once costs a wake-up at every parallel region instead (a step runs 10-60 of them, microseconds apart; about
// 50 us each on a VM), 5-8% of the MLP's and the GPT's step on an idle 2-core machine. So: where no other work
// is ready to run at start (core/machine_load.h, openmp_wait_choice), a short spin, GOMP_SPINCOUNT=1000 (about
// 10-30 us); else passive. BRAID_OPENMP_WAIT tells `braid bench` which was chosen (docs/benchmarks.md).
void choose_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  const std::string choice = braid::openmp_wait_choice(braid::other_runnable(), cores);
  const bool spin = choice == "spin";
  if (setenv(spin ? "GOMP_SPINCOUNT" : "OMP_WAIT_POLICY", spin ? "1000" : "passive", 1) != 0) return;
  setenv("BRAID_OPENMP_WAIT", spin ? "spin 1000 (idle machine at start)" : "passive (other work ready at start)", 1);
  execv("/proc/self/exe", argv);
  unsetenv(spin ? "GOMP_SPINCOUNT" : "OMP_WAIT_POLICY");
  unsetenv("BRAID_OPENMP_WAIT");
}

}  // namespace

int main(int argc, char** argv) {
  choose_openmp_wait(argv);
  // Before any thread exists: SIGINT/SIGTERM reach one thread that runs no kernel (exec/signals.h: a
  // signal inside oneDNN 2.x's JIT sgemm corrupts the heap).
  braid::exec::route_signals_to_one_thread();
  // A write past the file-size limit (ulimit -f) fails with EFBIG, handled as a full disk (exit 1, the
  // temporary removed, core/resource_error.h), instead of killing braid with SIGXFSZ mid-save.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"braid: train neural networks described in YAML"};
  app.require_subcommand(1);
  // Which backends this braid has: the CPU's is built in; the CUDA one is a module, looked for, not loaded.
  const std::string cuda_module = braid::exec::backend_module_path("cuda");
  app.set_version_flag("--version", "braid 0.1.0\nbackends: cpu (built in), cuda (" +
                                        (braid::exec::backend_module_present("cuda")
                                             ? "module " + cuda_module + ", loaded when a run names cuda devices"
                                             : std::string("not built: no module ") + cuda_module) +
                                        ")");

  braid::cli::CheckArgs check;
  auto* c = app.add_subcommand("check", "check a model or run file; print the layer table or every mistake");
  c->add_option("file", check.path, "model or run file")->required();
  c->add_option("--set", check.sets, "override a value: key=value (dotted keys, e.g. vars.d=64)");
  c->add_option("--batch", check.batch, "batch size for FLOPs and memory (default: the run's)");
  c->add_option("--dot", check.dot, "write the graph as Graphviz DOT to this file");
  c->add_flag("--json", check.json, "print the layer list as JSON");

  braid::cli::TrainArgs train;
  auto* t = app.add_subcommand("train", "train the model of a run file");
  t->add_option("run", train.path, "run file")->required();
  t->add_option("--set", train.sets, "override a value: key=value (dotted keys, e.g. optimizer.lr=1e-3)");
  t->add_option("--resume", train.resume, "continue exactly from a checkpoint: 'latest' (in checkpoint.dir) or a path");
  t->add_option("--init-from", train.init_from,
                "start a new run from the weights of a checkpoint: a file, a checkpoint folder, a latest file or 'latest'");
  t->add_flag("--init-partial", train.init_partial, "with --init-from: load the tensors that match, list the others");
  t->add_option("--trace", train.trace, "write a chrome-trace JSON of the run (a lane per device; open in Perfetto)");
  t->add_option("--stop-after", train.stop_after, "stop after this step as if interrupted (saves a checkpoint)");
  t->add_option("--save-init", train.save_init, "write the initial weights to this file (a step-0 checkpoint)");
  t->add_option("--save-final", train.save_final, "write the final weights to this file (a checkpoint without optimizer state)");
  t->add_flag("--no-progress", train.no_progress, "plain log lines even on a terminal");

  braid::cli::InspectArgs inspect;
  auto* in = app.add_subcommand("inspect", "show a checkpoint's step, run and tensors; --diff compares it with a run");
  in->add_option("checkpoint", inspect.path, "checkpoint file, or checkpoint folder (its latest)")->required();
  in->add_option("--diff", inspect.diff, "run or model file to compare the checkpoint with");
  in->add_option("--set", inspect.sets, "override a value of the --diff run: key=value");

  braid::cli::BenchArgs bench;
  auto* b = app.add_subcommand("bench", "measure training throughput, FLOP/s, MFU and memory of run files");
  b->add_option("runs", bench.paths, "run files")->required();
  b->add_option("--set", bench.sets, "override a value in every run: key=value");
  b->add_option("--sweep", bench.sweeps, "key=v1,v2,...: benchmark every combination of these values (repeatable)");
  b->add_option("--steps", bench.steps, "timed optimizer steps per run")->capture_default_str();
  b->add_option("--warmup", bench.warmup, "untimed steps before them")->capture_default_str();
  b->add_option("--window", bench.window, "steps per window for the median and spread")->capture_default_str();
  b->add_option("--peak-gflops", bench.peak_gflops, "the device's peak GFLOP/s for MFU (default: detected CPU peak)");
  b->add_option("--csv", bench.csv, "write one row per run and sweep point to this CSV file");
  b->add_option("--json", bench.json, "write the results, with every window and step, to this JSON file");

  braid::cli::TimeArgs timing;
  auto* tm = app.add_subcommand("time", "forward and backward time per layer of a run's training step");
  tm->add_option("run", timing.path, "run file")->required();
  tm->add_option("--set", timing.sets, "override a value: key=value");
  tm->add_option("--steps", timing.steps, "timed optimizer steps")->capture_default_str();
  tm->add_option("--warmup", timing.warmup, "untimed steps before them")->capture_default_str();

  braid::cli::PlanArgs planning;
  auto* pl = app.add_subcommand("plan", "choose how a run is split over devices; write the plan file");
  pl->add_option("run", planning.path, "run file")->required();
  pl->add_option("--set", planning.sets, "override a value: key=value");
  pl->add_option("--devices", planning.devices, "plan for cpu:N (default: the run's devices)");
  pl->add_option("--cluster", planning.cluster, "plan for a cluster file or preset (h200x1, h200x8, dgx-a100-80gb:NODES)");
  pl->add_option("--out", planning.out, "write the plan file here (default: standard output)");
  pl->add_option("--dot", planning.dot, "write the plan's stages and splits as Graphviz DOT to this file");
  pl->add_flag("--explain", planning.explain, "show why: runner-up per layer, the pure strategies, what bound the choice");

  braid::cli::CalibrateArgs calib;
  auto* cal = app.add_subcommand("calibrate", "measure this machine's ops and collectives for the planner; cache the profile");
  cal->add_option("--devices", calib.devices, "the cpu:N to measure for")->capture_default_str();
  cal->add_option("--budget", calib.budget_s,
                  "seconds for the op measurements (the collective, optimizer and runner measurements after them "
                  "take about a minute more on 2 cores)")->capture_default_str();
  cal->add_flag("--print", calib.print, "print the profile");
  cal->add_option("--from-run", calib.from_run,
                  "a run's metrics file (log.metrics): fit the cached profile to its closed-loop measurements instead of measuring")
      ->take_all();

  auto* o = app.add_subcommand("ops", "list the ops usable in model files");

  auto* tk = app.add_subcommand("tokenize", "train a SentencePiece tokenizer, turn text into a token file and back");
  tk->require_subcommand(1);
  braid::cli::TokenizeTrainArgs tok_train;
  auto* tkt = tk->add_subcommand("train", "train a tokenizer on text files; write its .model file");
  tkt->add_option("text", tok_train.inputs, "text files (each line a training sentence)")->required();
  tkt->add_option("-o,--out", tok_train.out, "the .model file to write")->required();
  tkt->add_option("--vocab-size", tok_train.vocab_size, "pieces in the vocabulary")->capture_default_str();
  tkt->add_option("--model-type", tok_train.model_type, "bpe or unigram")->capture_default_str();
  tkt->add_option("--character-coverage", tok_train.character_coverage,
                  "share of characters kept as pieces; the rare rest are spelled in bytes")->capture_default_str();
  tkt->add_option("--max-sentences", tok_train.max_sentences, "train on a random sample of this many lines (0: all)")
      ->capture_default_str();
  tkt->add_option("--seed", tok_train.seed, "seed of the line sampling")->capture_default_str();
  braid::cli::TokenizeEncodeArgs tok_enc;
  auto* tke = tk->add_subcommand("encode", "encode text files into a token file (data format `tokens`)");
  tke->add_option("text", tok_enc.inputs, "text files, concatenated in order")->required();
  tke->add_option("-m,--model", tok_enc.model, "the tokenizer's .model file (SentencePiece)")->required();
  tke->add_option("-o,--out", tok_enc.out, "the token file to write")->required();
  tke->add_option("--dtype", tok_enc.dtype, "u16, u32 or i32 (default: u16 when the vocabulary fits, else u32)");
  tke->add_flag("--eos", tok_enc.eos, "append the end-of-sequence id after each file");
  tke->add_flag("--no-progress", tok_enc.no_progress, "no progress bar, even on a terminal");
  braid::cli::TokenizeDecodeArgs tok_dec;
  auto* tkd = tk->add_subcommand("decode", "turn a token file, or ids, back into text");
  tkd->add_option("tokens", tok_dec.tokens, "a token file");
  tkd->add_option("-m,--model", tok_dec.model, "the tokenizer's .model file")->required();
  tkd->add_option("--ids", tok_dec.ids, "ids separated by commas, instead of a token file");
  tkd->add_option("--dtype", tok_dec.dtype, "the token file's dtype (default: as encode chooses)");
  tkd->add_option("--offset", tok_dec.offset, "first token to decode")->capture_default_str();
  tkd->add_option("--count", tok_dec.count, "tokens to decode (default: to the end)");
  tkd->add_option("-o,--out", tok_dec.out, "write the text here (default: standard output)");

  braid::dist::LaunchOptions launch;
  int64_t grace_ms = launch.grace.count(), hb_ms = launch.heartbeat_timeout.count(), hbi_ms = launch.heartbeat_interval.count();
  auto* l = app.add_subcommand("launch", "start a job's processes on this node: braid launch --nproc N -- COMMAND...");
  l->add_option("--nproc", launch.nproc, "processes on this node")->required();
  l->add_option("--nnodes", launch.nnodes, "nodes in the job")->capture_default_str();
  l->add_option("--node-rank", launch.node_rank, "this node's index, 0 to nnodes-1")->capture_default_str();
  l->add_option("--master", launch.master, "ADDR:PORT of the rendezvous store (served by node 0); default 127.0.0.1, a free port");
  l->add_option("--grace-ms", grace_ms, "after a rank fails, wait this long before killing the others")->capture_default_str();
  l->add_option("--heartbeat-timeout-ms", hb_ms, "a rank silent this long is stuck (0: off)")->capture_default_str();
  l->add_option("--heartbeat-interval-ms", hbi_ms, "how often ranks send heartbeats")->capture_default_str();
  l->add_option("command", launch.command, "the command each process runs (after --)")->required();

  // An unknown first word is a mistyped command, not a missing one (CLI11 would say "A subcommand is required").
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), std::string(argv[1])) == names.end()) {
      std::string all;
      for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
      const std::string near = braid::did_you_mean(argv[1], names);
      std::fprintf(stderr, "braid: unknown command '%s'%s\n  commands: %s (braid --help)\n", argv[1],
                   near.empty() ? "" : ("; did you mean '" + near + "'?").c_str(), all.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    if (c->parsed()) return braid::cli::check(check, stdout);
    if (t->parsed()) return braid::cli::train(train, stdout);
    if (in->parsed()) return braid::cli::inspect(inspect, stdout);
    if (b->parsed()) return braid::cli::bench(bench, stdout);
    if (tm->parsed()) return braid::cli::time_layers(timing, stdout);
    if (pl->parsed()) return braid::cli::plan(planning, stdout);
    if (cal->parsed()) return braid::cli::calibrate(calib, stdout);
    if (o->parsed()) return braid::cli::list_ops(stdout);
    if (tkt->parsed()) return braid::cli::tokenize_train(tok_train, stdout);
    if (tke->parsed()) return braid::cli::tokenize_encode(tok_enc, stdout);
    if (tkd->parsed()) return braid::cli::tokenize_decode(tok_dec, stdout);
    if (l->parsed()) {
      launch.grace = std::chrono::milliseconds(grace_ms);
      launch.heartbeat_timeout = std::chrono::milliseconds(hb_ms);
      launch.heartbeat_interval = std::chrono::milliseconds(hbi_ms);
      return braid::dist::launch(launch);
    }
  } catch (const braid::UserError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", e.format().c_str());
    return 2;
  } catch (const braid::InternalError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "braid: %s\nThis is a bug in braid; please report it with the files that caused it.\n", e.what());
    return 3;
  } catch (const braid::ResourceError& e) {  // a full disk, a device's I/O error: not the user's files
    std::fflush(stdout);
    std::fprintf(stderr, "braid: error: %s\n", e.what());
    return 1;
  } catch (const braid::CommError& e) {  // another process failed, or a wait timed out: not a bug
    std::fflush(stdout);
    std::fprintf(stderr, "braid: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "braid: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "braid: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
