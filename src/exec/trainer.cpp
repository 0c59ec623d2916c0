// The training loop around the one engine (exec/engine.h), whatever the devices: the engine runs each step (on
// `cpu`, `cpu:N`, `cuda:N`, under a plan file or the planner's plan, in one process or several); the loop here keeps
// the data order and the learning-rate schedule, over named pieces (exec/train_parts.h): the trace, the banner, the
// log (metrics file and lines), checkpointing and evaluation. The whole model's host tensors (`store`, `opt`) are
// plan device 0's own when it holds all of the model in host memory, else gathered from the devices when needed and
// scattered to them after loading. Steps:
//   0. set up once (preflight, exec/preflight.h, the checks braid check RUN makes too): graphs, plan, data,
//      checkpoints;
//   1. the engine (lowering the plan, creating and initialising every device's parameters) and the host model;
//   2. the datasets bound to the model inputs (opened by the preflight), resume, the banner;
//   3. per step: the engine's step (micro-batches through forward+backward, gradients accumulated and all-reduced,
//      clipping, the update) at the learning rate of the schedule; log, evaluate when due, checkpoint;
//   4. final evaluation and report.
#include "exec/trainer.h"

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "core/finite.h"
#include "exec/closed_loop.h"
#include "exec/engine.h"
#include "backends/cpu/optimizer.h"
#include "exec/preflight.h"
#include "exec/run_setup.h"
#include "exec/signals.h"
#include "exec/train_parts.h"
#include "exec/train_state.h"
#include "graph/build.h"
#include "io/dataset.h"
#include "planner/plan.h"

namespace braid::exec {
namespace {

// 0. The run set up once: a job's devices, the preflight, and a job's plan checked against its processes.
// A job of N processes on a run that names one cpu device (`devices: cpu`, also the default) trains N cpu devices,
// one per process, planned as `devices: cpu:N` would be: what torchrun users expect of a run file written for one
// process. An explicit count (cpu:1, cpu:3) is the user's word and must match.
Preflight set_up(const io::RunConfig& run_cfg, io::RunConfig& cfg, const TrainOptions& opts, FILE* out) {
  const bool multi = opts.world != nullptr;
  RunSetup setup;
  parse_run_devices(cfg, setup);  // the one parse of the device string
  if (multi && opts.world->size() > 1 && setup.planning && !setup.planning->numbered_devices() &&
      cfg.devices.find(':') == std::string::npos) {
    const int n = opts.world->size();
    cfg.devices = setup.devices.kind + ":" + std::to_string(n);
    setup.devices.count = n;
    setup.devices.ids.clear();
    for (int i = 0; i < n; ++i) setup.devices.ids.push_back(i);
    std::fprintf(out, "braid: devices %s in a job of %d processes: training as %s, one device per process\n",
                 run_cfg.devices.c_str(), n, cfg.devices.c_str());
  }
  Diagnostics diags;
  Preflight pre = preflight(cfg, PreflightOptions{opts.resume, opts.init_from}, diags, std::move(setup));
  diags.throw_if_any();
  if ((!pre.setup.planning || !pre.setup.planning->mixed_precision()) && cfg.train.precision != "f32")  // said, not refused: a GPU run file may be tried on a CPU
    std::fprintf(stderr, "braid: warning: %s: train.precision %s is mixed precision on cuda devices; devices %s train in f32\n",
                 cfg.path.c_str(), cfg.train.precision.c_str(), cfg.devices.c_str());
  if (multi) {  // one device per process
    const int n = pre.setup.plan ? pre.setup.plan->summary.devices : 1;
    if (!pre.setup.run && n != opts.world->size())
      throw UserError(SourceLoc{cfg.path, 0, 0},
                      "a job of " + std::to_string(opts.world->size()) + " processes needs a plan over " +
                          std::to_string(opts.world->size()) + " devices",
                      "set devices: cpu:" + std::to_string(opts.world->size()) + " or cuda:0-" +
                          std::to_string(opts.world->size() - 1) +
                          " (with parallel.plan auto or a plan file): one device per process");
    if (n != opts.world->size())
      throw UserError(SourceLoc{cfg.path, 0, 0},
                      "the plan uses " + std::to_string(n) + " devices but the job has " +
                          std::to_string(opts.world->size()) + " processes",
                      "start one process per device of the plan");
  }
  return pre;
}

// 1. The whole model in host memory for checkpoints, evaluation and initial weights: plan device 0's own when it
// holds all of it in host memory, else whole host tensors (gathered from the devices when needed, scattered to them
// after loading), with the gradients' entries, so that the host optimizer keeps state for every trainable tensor.
struct HostModel {
  ParamStore own_store;
  std::unique_ptr<Optimizer> own_opt;
  ParamStore* store;
  Optimizer* opt;

  HostModel(const io::RunConfig& cfg, RunSetup& setup, Engine& engine) : store(engine.whole_store()) {
    if (store) {
      opt = engine.whole_optimizer();
      return;
    }
    graph::Graph g = setup.forward(cfg.model, engine.plan().summary.micro_batch);
    Diagnostics diags;
    graph::add_backward(g, diags);
    own_store.create(g, cfg.train.seed);
    own_opt = std::make_unique<Optimizer>(cfg.optimizer, own_store);
    store = &own_store;
    opt = own_opt.get();
  }
};

size_t largest_arena(Engine& engine) {
  if (!engine.backend().host_memory()) return engine.device_bytes();
  size_t most = 0;
  for (size_t b : engine.arena_bytes()) most = std::max(most, b);
  return most;
}

// A diverged step stops the run before anything is saved at it.
void check_finite(const io::RunConfig& cfg, const StepResult& r, int64_t step) {
  if (!std::isfinite(r.loss))
    throw UserError(SourceLoc{cfg.path, 0, 0}, "the loss became " + non_finite_name(r.loss) + " at step " +
                                                  std::to_string(step + 1) + " (nothing saved at this step)",
                    "lower the learning rate or enable optimizer.clip_grad_norm; resume from the last checkpoint");
  if (r.grad_norm != -1 && !std::isfinite(r.grad_norm))  // -1: not computed (no clipping)
    throw UserError(SourceLoc{cfg.path, 0, 0},
                    "the gradient norm became " + non_finite_name(r.grad_norm) + " at step " +
                        std::to_string(step + 1) + " (nothing saved at this step)",
                    "lower the learning rate; resume from the last checkpoint");
}

}  // namespace

TrainResult train(const io::RunConfig& run_cfg, const TrainOptions& opts) {
  TrainResult res;
  // Between processes, rank 0 speaks, writes checkpoints, metrics and evaluations; the others train quietly.
  const bool multi = opts.world != nullptr;
  const bool rank0 = !multi || opts.rank == 0;
  std::unique_ptr<FILE, int (*)(FILE*)> devnull(rank0 ? nullptr : std::fopen("/dev/null", "w"), &std::fclose);
  FILE* out = rank0 ? opts.out : devnull.get();

  // 0-1. The run set up once; the engine over the run's plan (a plan file, the planner's choice for plan: auto, or
  // the trivial one over the run's devices); the host model; the trace.
  io::RunConfig cfg = run_cfg;
  Preflight pre = set_up(run_cfg, cfg, opts, out);
  const std::optional<RunPlan>& run = pre.setup.run;
  std::unique_ptr<Engine> engine = make_engine(cfg, pre.setup, multi ? opts.world : nullptr, opts.rank);
  HostModel host(cfg, pre.setup, *engine);
  ParamStore& store = *host.store;
  Optimizer& opt = *host.opt;
  TrainTrace trace(opts, *engine);
  if (!pre.init_from_path.empty()) load_weights(pre.init_from_path, store, opts.init_partial, out);
  if (!opts.save_init.empty() && rank0) save_weights(opts.save_init, cfg, store);
  res.arena_bytes = largest_arena(*engine);

  // 2. Data, resume, checkpoints, the log, the banner.
  const int64_t batch = cfg.train.batch;
  std::unique_ptr<io::Dataset> train_data = std::move(pre.train_data);
  Evaluation eval(cfg, std::move(pre.eval_data));
  io::BatchSampler sampler(train_data->size(), batch, cfg.data.shuffle, cfg.train.seed);
  const int64_t total_steps = cfg.train.steps ? *cfg.train.steps : *cfg.train.epochs * sampler.batches_per_epoch();
  Checkpoints ckpt(cfg, *engine, store, opt, sampler);
  if (!pre.resume_path.empty()) ckpt.resume(pre.resume_path, total_steps, out);
  engine->scatter(store, &opt);  // loaded weights or a checkpoint: every device takes its shards of them
  ckpt.open(rank0);
  const int64_t first_step = ckpt.state().step;
  TrainLog log(cfg, rank0, out, opts.progress, total_steps, first_step);
  StopSignals signals;
  print_banner(out, cfg, run, *engine, store.num_trainable(), total_steps, *train_data);
  const MemoryReport memory{engine->memory(), engine->local_devices()};
  trace.count_memory(memory);
  print_memory(out, memory);
  std::fflush(out);  // the header now, not with the first step line when stdout is a pipe

  // 3. Steps.
  const auto train_start = TrainClock::now();
  log.start(train_start);
  ckpt.start(train_start);
  ClosedLoop loop;
  const bool closed_loop = run && !engine->backend().accelerator();  // a plan's predicted step against its measurement
  for (int64_t step = first_step; step < total_steps; ++step) {
    std::span<const int64_t> batch_idx = sampler.next_view();
    const double lr = lr_at(cfg.lr_schedule, cfg.optimizer.lr, step, total_steps);
    const auto t0 = TrainClock::now();
    const StepResult r = engine->step(*train_data, batch_idx, step, lr, cfg.optimizer.clip_grad_norm.value_or(0.0));
    if (closed_loop)
      log.closed_loop(loop, step, first_step, total_steps,
                      std::chrono::duration<double>(TrainClock::now() - t0).count(), *run, *engine);
    check_finite(cfg, r, step);
    res.losses.push_back(r.loss);
    log.step(step, r.loss, lr);
    const bool evaluated = eval.due(step, total_steps, sampler);
    Scores scores;
    if (evaluated) {
      scores = eval.during_training(*engine, store, rank0, trace.lane0());
      log.eval_line(step, scores);
    }
    log.record(step, r, lr, sampler.epoch(), *engine, scores, evaluated, memory);
    ckpt.step_done(step + 1);
    // Between processes a signal reaches the ranks at different steps: any rank's stops them all.
    const bool stop = engine->any(StopSignals::stop_requested() ||
                                  (opts.stop_after > 0 && step + 1 >= opts.stop_after && step + 1 < total_steps));
    if (ckpt.due(step + 1, total_steps, stop))
      if (std::string saved = ckpt.save(trace.lane0()); !saved.empty()) res.last_checkpoint = std::move(saved);
    if (stop) {
      res.stopped_early = true;
      res.stop_signal = StopSignals::signal_number();
      log.stopped(step + 1, res.last_checkpoint);
      break;
    }
  }
  log.finish();
  engine->gather(store, &opt);
  const double total_secs = std::chrono::duration<double>(TrainClock::now() - train_start).count();
  res.steps = ckpt.state().step;
  res.samples_per_s = total_secs > 0 ? static_cast<double>((res.steps - first_step) * batch) / total_secs : 0;
  if (res.stopped_early) {
    trace.write(out, rank0);
    return res;
  }

  // 4. Final evaluation and report.
  if (eval.enabled() && rank0) {
    res.eval = eval.run(*engine, store);
    log.final_eval(total_steps, eval.samples(), res.eval);
  }
  if (!opts.save_final.empty() && rank0) save_weights(opts.save_final, cfg, store);
  trace.write(out, rank0);
  log.summary(res.steps - first_step, total_secs, res.samples_per_s);
  return res;
}

}  // namespace braid::exec
