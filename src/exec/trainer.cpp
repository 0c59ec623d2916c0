// The training loop around the one engine (exec/engine.h), whatever the devices: the engine runs each step (on
// `cpu`, `cpu:N`, `cuda:N`, under a plan file or the planner's plan, in one process or several); the loop here keeps
// the data order, the learning-rate schedule, checkpoints, evaluation, metrics and signals. The whole model's host
// tensors (`store`, `opt`) are plan device 0's own when it holds all of the model in host memory, else gathered
// from the devices when needed and scattered to them after loading. Steps:
//   0. preflight (exec/preflight.h, the checks braid check RUN makes too): graphs, plan, data, checkpoints;
//   1. the engine (lowering the plan, creating and initialising every device's parameters);
//   2. the datasets bound to the model inputs (opened by the preflight);
//   3. per step: the engine's step (micro-batches through forward+backward, gradients accumulated and all-reduced,
//      clipping, the update) at the learning rate of the schedule; log, evaluate when due, checkpoint;
//   4. final evaluation and report.
#include "exec/trainer.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "core/finite.h"
#include "exec/engine.h"
#include "exec/optimizer.h"
#include "exec/closed_loop.h"
#include "exec/preflight.h"
#include "exec/run_plan.h"
#include "exec/runner.h"
#include "exec/signals.h"
#include "exec/train_state.h"
#include "graph/build.h"
#include "io/checkpoint.h"
#include "io/dataset.h"
#include "io/metrics.h"
#include "io/progress.h"
#include "io/trace.h"
#include "planner/plan.h"

namespace braid::exec {
namespace {

using Clock = std::chrono::steady_clock;

// Loss and metrics over the evaluation set (eval.batches batches at most), on the engine's device 0, with the
// parameters in `store` (current: gathered before).
std::vector<std::pair<std::string, double>> evaluate(const io::RunConfig& cfg, Engine& engine, ParamStore& store,
                                                     io::Dataset& data) {
  const int64_t batch = cfg.train.batch;
  int64_t n = data.size();
  if (cfg.eval.batches > 0) n = std::min(n, cfg.eval.batches * batch);
  std::vector<std::pair<std::string, double>> sums;
  std::vector<int64_t> idx;
  for (int64_t start = 0; start < n; start += batch) {
    const int64_t b = std::min(batch, n - start);
    idx.resize(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) idx[static_cast<size_t>(i)] = start + i;
    const auto vals = engine.evaluate(store, data, idx);
    if (sums.empty())
      for (const auto& [k, v] : vals) sums.emplace_back(k, 0.0);
    for (size_t k = 0; k < vals.size(); ++k) sums[k].second += vals[k].second * static_cast<double>(b);
  }
  for (auto& [k, v] : sums) v /= static_cast<double>(std::max<int64_t>(n, 1));
  return sums;
}

}  // namespace

namespace {

std::string eval_str(const std::vector<std::pair<std::string, double>>& e) {
  std::string s;
  char buf[64];
  for (const auto& [k, v] : e) {
    if (k == "accuracy") std::snprintf(buf, sizeof buf, "%s %.2f%%", k.c_str(), 100 * v);
    else std::snprintf(buf, sizeof buf, "%s %.4f", k.c_str(), v);
    s += (s.empty() ? "" : ", ") + std::string(buf);
  }
  return s;
}

// One trace for a job of several processes. Each rank writes its part (`path`.rankN.json, atomically) and
// sends its text to rank 0, which writes the parts it does not see (ranks on other hosts), merges them into
// `path` on the job's reference clock (io::merge_into) and removes them; then every rank removes its own.
// Any failure (a rank gone, a write refused) throws before anything is removed: the parts stay for
// inspection and `path` is never half-written.
std::string trace_part_path(const std::string& path, int rank) { return path + ".rank" + std::to_string(rank) + ".json"; }

void write_merged_trace(const io::TraceRecorder& tracer, const std::string& path, Communicator& world) {
  constexpr int kTraceTag = 0x7ff00000;  // above every pipeline tag (exec/lower.h boundary_tag)
  const int rank = world.rank(), n = world.size();
  std::string text = tracer.json();
  io::write_trace_file(trace_part_path(path, rank), text);
  Tensor len = Tensor::empty(TensorDesc{Shape{1}, DType::i64});
  if (rank != 0) {
    len.data<int64_t>()[0] = static_cast<int64_t>(text.size());
    world.send(len, 0, kTraceTag);
    Tensor bytes = Tensor::empty(TensorDesc{Shape{static_cast<int64_t>(text.size() + 3) / 4}, DType::i32});
    std::memcpy(bytes.raw(), text.data(), text.size());
    world.send(bytes, 0, kTraceTag);
  } else {
    std::vector<std::string> parts{trace_part_path(path, 0)};
    for (int r = 1; r < n; ++r) {
      world.recv(len, r, kTraceTag);
      const auto size = static_cast<size_t>(len.data<int64_t>()[0]);
      Tensor bytes = Tensor::empty(TensorDesc{Shape{static_cast<int64_t>(size + 3) / 4}, DType::i32});
      world.recv(bytes, r, kTraceTag);
      parts.push_back(trace_part_path(path, r));
      io::write_trace_file(parts.back(), std::string(static_cast<const char*>(bytes.raw()), size));
    }
    io::merge_into(parts, path);
    for (const auto& p : parts) std::filesystem::remove(p);
  }
  world.barrier();  // the merge succeeded: every rank drops its own part (on another host's disk)
  std::error_code ec;
  std::filesystem::remove(trace_part_path(path, rank), ec);
}

}  // namespace

TrainResult train(const io::RunConfig& run_cfg, const TrainOptions& opts) {
  TrainResult res;
  // Between processes, rank 0 speaks, writes checkpoints, metrics and evaluations; the others train quietly.
  const bool multi = opts.world != nullptr;
  const bool rank0 = !multi || opts.rank == 0;
  std::unique_ptr<FILE, int (*)(FILE*)> devnull(rank0 ? nullptr : std::fopen("/dev/null", "w"), &std::fclose);
  FILE* out = rank0 ? opts.out : devnull.get();
  // A job of N processes on a run that names one cpu device (`devices: cpu`, also the default) trains N cpu
  // devices, one per process, planned as `devices: cpu:N` would be: what torchrun users expect of a run file
  // written for one process. An explicit count (cpu:1, cpu:3) is the user's word and must match.
  io::RunConfig cfg = run_cfg;
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
  const uint64_t seed = cfg.train.seed;
  const int64_t batch = cfg.train.batch;
  const int64_t micro = cfg.train.micro_batch.value_or(batch);
  const int64_t num_micro = batch / micro;
  Diagnostics diags;
  Preflight pre = preflight(cfg, PreflightOptions{opts.resume, opts.init_from}, diags, std::move(setup));
  diags.throw_if_any();

  // 1. The engine: the run's plan (a plan file, or the planner's choice for plan: auto), or the trivial one over
  // the run's devices (one device; data parallel over several). `store` and `opt` hold the whole model for
  // checkpoints, evaluation and initial weights: plan device 0's own when it holds all of it in host memory, else
  // whole host tensors gathered from the devices when needed and scattered to them after loading.
  const std::optional<RunPlan>& run = pre.setup.run;
  if ((!pre.setup.planning || !pre.setup.planning->mixed_precision()) && cfg.train.precision != "f32")  // said, not refused: a GPU run file may be tried on a CPU
    std::fprintf(stderr, "braid: warning: %s: train.precision %s is mixed precision on cuda devices; devices %s train in f32\n",
                 cfg.path.c_str(), cfg.train.precision.c_str(), cfg.devices.c_str());
  if (multi) {  // one device per process
    const int n = pre.setup.plan ? pre.setup.plan->summary.devices : 1;
    if (!run && n != opts.world->size())
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
  std::unique_ptr<Engine> engine = make_engine(cfg, pre.setup, multi ? opts.world : nullptr, opts.rank);
  const bool on_accelerator = engine->backend().accelerator();
  const planner::Plan& plan = engine->plan();
  ParamStore own_store;
  std::unique_ptr<Optimizer> own_opt;
  ParamStore* whole = engine->whole_store();
  if (!whole) {  // with the gradients' entries, so that the host optimizer keeps state for every trainable tensor
    graph::Graph g = pre.setup.forward(cfg.model, plan.summary.micro_batch);
    graph::add_backward(g, diags);
    own_store.create(g, seed);
  }
  ParamStore& store = whole ? *whole : own_store;
  if (!whole) own_opt = std::make_unique<Optimizer>(cfg.optimizer, store);
  Optimizer& opt = whole ? *engine->whole_optimizer() : *own_opt;
  // Tracing: a lane per device (and one for each device's gradient all-reduce thread under data parallelism);
  // forward/backward per micro-batch, sends, receives, all-reduces, optimizer, eval, checkpoints.
  std::unique_ptr<io::TraceRecorder> tracer;
  io::TraceLane* lane0 = nullptr;
  const std::string kind = engine->backend().name();
  if (!opts.trace.empty()) {
    const int n = engine->devices();
    const bool comm_lanes = plan.summary.data_parallel > 1;
    io::TraceOptions topts;
    std::vector<io::TraceLaneSpec> lanes;
    std::vector<int> traced;  // this process's devices
    if (multi) {  // this process's device only: pid = rank, lanes keep their device ids
      topts.rank = opts.rank;
      topts.process_name = "rank " + std::to_string(opts.rank) + (opts.trace_host.empty() ? "" : " (" + opts.trace_host + ")");
      topts.clock_offset_ns = opts.trace_clock_offset_ns;
      lanes.push_back({opts.rank, "device " + std::to_string(opts.rank) + " (" + kind + ")"});
      traced.push_back(opts.rank);
    } else {
      lanes = io::device_lanes(n, kind);
      for (int d = 0; d < n; ++d) traced.push_back(d);
    }
    if (comm_lanes)
      for (int d : traced) lanes.push_back({n + d, "device " + std::to_string(d) + " all-reduce"});
    tracer = std::make_unique<io::TraceRecorder>(lanes, topts);
    for (int d : traced) engine->set_trace(d, &tracer->lane(d), comm_lanes ? &tracer->lane(n + d) : nullptr);
    lane0 = &tracer->lane(traced.front());
  }
  auto write_trace = [&] {
    if (!tracer) return;
    if (multi) write_merged_trace(*tracer, opts.trace, *opts.world);
    else tracer->write(opts.trace);
    if (rank0) std::fprintf(out, "braid: trace written to %s (open it in ui.perfetto.dev)\n", opts.trace.c_str());
  };
  // A job that fails (a lost rank, a refused write, an error on any rank) leaves each surviving rank's part,
  // its events up to the failure, for inspection; the merged file is written only by a job that ends well.
  struct PartOnFailure {
    const io::TraceRecorder* tracer;
    std::string path;
    int uncaught = std::uncaught_exceptions();
    ~PartOnFailure() {
      if (!tracer || std::uncaught_exceptions() <= uncaught) return;
      try {
        tracer->write(path);
      } catch (...) {  // already failing: the first error is the one to report
      }
    }
  } part_on_failure{multi ? tracer.get() : nullptr, multi ? trace_part_path(opts.trace, opts.rank) : std::string()};
  if (!pre.init_from_path.empty()) load_weights(pre.init_from_path, store, opts.init_partial, out);
  if (!opts.save_init.empty() && rank0) save_weights(opts.save_init, cfg, store);
  if (engine->backend().host_memory()) {
    for (size_t b : engine->arena_bytes()) res.arena_bytes = std::max(res.arena_bytes, b);
  } else {
    res.arena_bytes = engine->device_bytes();
  }

  // 2. Data.
  std::unique_ptr<io::Dataset> train_data = std::move(pre.train_data);
  std::unique_ptr<io::Dataset> eval_data = std::move(pre.eval_data);
  io::BatchSampler sampler(train_data->size(), batch, cfg.data.shuffle, seed);
  const int64_t total_steps = cfg.train.steps ? *cfg.train.steps : *cfg.train.epochs * sampler.batches_per_epoch();

  StepState state;
  state.micro_batches = plan.summary.micro_batches;
  if (!pre.resume_path.empty()) {
    const std::string& path = pre.resume_path;
    state = restore(io::read_checkpoint(path), path, cfg, store, opt, sampler);
    state.micro_batches = plan.summary.micro_batches;
    std::fprintf(out, "braid: resuming from %s at step %lld (epoch %lld)\n", path.c_str(),
                 static_cast<long long>(state.step), static_cast<long long>(sampler.epoch()));
    if (state.step >= total_steps)
      std::fprintf(out, "braid: the checkpoint is already at step %lld of %lld; nothing to train\n",
                   static_cast<long long>(state.step), static_cast<long long>(total_steps));
  }
  engine->scatter(store, &opt);  // loaded weights or a checkpoint: every device takes its shards of them
  std::unique_ptr<io::CheckpointDir> ckpt_dir;
  if (!cfg.checkpoint.dir.empty() && rank0)
    ckpt_dir = std::make_unique<io::CheckpointDir>(cfg.checkpoint.dir, cfg.checkpoint.keep);
  auto save_checkpoint = [&]() {
    if (cfg.checkpoint.dir.empty()) return;
    engine->gather(store, &opt);  // a collective of every process
    if (!ckpt_dir) return;
    io::Checkpoint c = capture(cfg, store, opt, sampler, state);
    refuse_non_finite(c, cfg, state.step);  // a diverged state never replaces `latest`
    res.last_checkpoint = ckpt_dir->save(c);
  };
  std::unique_ptr<io::MetricsWriter> metrics;
  if (!cfg.log.metrics.empty() && rank0) {
    std::error_code ec;
    auto parent = std::filesystem::path(cfg.log.metrics).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    metrics = std::make_unique<io::MetricsWriter>(cfg.log.metrics, /*append=*/state.step > 0);
  }
  io::Progress progress(out, opts.progress && io::Progress::is_tty(out), total_steps,
                        std::max<int64_t>(1, cfg.log.every_steps), state.step);
  StopSignals::set_stop_message(cfg.checkpoint.dir.empty()
                                     ? "braid: stopping after this step (no checkpoint.dir: nothing will be saved); signal again to quit at once"
                                     : "braid: stopping after this step (saving a checkpoint); signal again to quit at once");
  StopSignals signals;

  // The micro-batching in force: the plan's under a plan (per data-parallel replica), else the run's.
  const std::string split =
      run ? BRAID_STR(plan.summary.data_parallel, " replica(s) x ", plan.summary.micro_batches, " micro-batch(es) of ",
                      plan.summary.micro_batch)
          : BRAID_STR(num_micro, " micro-batch(es) of ", micro);
  std::fprintf(out, "braid: training %s: %lld parameters, %lld steps of batch %lld (%s), %s\n",
               cfg.model.name.c_str(), static_cast<long long>(store.num_trainable()), static_cast<long long>(total_steps),
               static_cast<long long>(batch), split.c_str(), train_data->describe().c_str());
  if (run && !on_accelerator) {
    const std::string memory_strategies =
        (plan.summary.zero ? BRAID_STR("; ",
                                       plan.summary.zero == 1   ? "optimizer state"
                                       : plan.summary.zero == 2 ? "optimizer state and gradients"
                                                                : "optimizer state, gradients and parameters",
                                       " sharded (zero ", plan.summary.zero, ")")
                           : std::string()) +
        (plan.summary.sequence_parallel ? std::string("; sequence parallel") : std::string()) +
        (plan.summary.recompute != "none" ? "; recompute " + plan.summary.recompute : std::string());
    std::string slots;
    for (int sl : engine->stage_slots()) slots += (slots.empty() ? "" : ",") + std::to_string(sl);
    std::fprintf(out, "braid: plan %s on %s: %d stage(s), data parallel %d, tensor parallel %d, %s schedule, "
                 "%lld micro-batches of %lld per replica; in flight per stage: %s%s\n",
                 run->automatic ? "auto" : cfg.parallel.plan.c_str(), cfg.devices.c_str(),
                 static_cast<int>(engine->programs().size()), plan.summary.data_parallel, plan.summary.tensor_parallel,
                 plan.summary.schedule.c_str(), static_cast<long long>(plan.summary.micro_batches),
                 static_cast<long long>(plan.summary.micro_batch), slots.c_str(), memory_strategies.c_str());
  }
  if (on_accelerator) std::fprintf(out, "braid: training on %s\n", engine->describe().c_str());
  if (run && run->automatic)
    std::fprintf(out, "braid: planner chose %s; searched in %.2f s\n", run->summary.c_str(), run->search_s);
  if (!run && !on_accelerator && plan.summary.data_parallel > 1)
    std::fprintf(out, "braid: data parallel on %s: %d replicas of %lld samples per micro-batch, %zu gradient bucket(s)\n",
                 cfg.devices.c_str(), plan.summary.data_parallel, static_cast<long long>(plan.summary.micro_batch),
                 engine->bucket_bytes(0).empty() ? size_t{0} : engine->bucket_bytes(0)[0].size());
  // What each device holds (static: the memory plan's arenas and the shards; docs/parallel.md, "Memory").
  const std::vector<DeviceMemory> memory = engine->memory();
  const std::vector<int> local = engine->local_devices();
  if (tracer)  // the same in the trace: a counter track per device
    for (size_t i = 0; i < memory.size(); ++i) {
      auto mib = [](size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
      tracer->add_counter(local[i], "memory device " + std::to_string(local[i]) + " (MiB)",
                          {{"arena", mib(memory[i].arena)},
                           {"parameters", mib(memory[i].parameters)},
                           {"gradients", mib(memory[i].gradients)},
                           {"optimizer", mib(memory[i].optimizer)}});
    }
  bool memory_logged = false;
  {
    std::string line;
    auto mib = [](size_t b) { return BRAID_STR(std::lround(static_cast<double>(b) / 1048576.0 * 10) / 10.0); };
    for (size_t i = 0; i < memory.size() && i < 8; ++i)
      line += BRAID_STR(i ? "; " : "", "device ", local[i], ": arena ", mib(memory[i].arena), ", parameters ",
                        mib(memory[i].parameters), ", gradients ", mib(memory[i].gradients), ", optimizer ",
                        mib(memory[i].optimizer));
    if (memory.size() > 8) line += BRAID_STR("; ... (", memory.size(), " devices)");
    std::fprintf(out, "braid: memory (MiB) %s\n", line.c_str());
  }
  std::fflush(out);  // the header now, not with the first step line when stdout is a pipe

  // 3. Steps.
  auto window_start = Clock::now();
  auto train_start = window_start;
  auto step_start = window_start;
  int64_t window_samples = 0;
  const int64_t first_step = state.step;
  ClosedLoop loop;
  const std::string metrics_path = metrics ? metrics->path() : std::string();  // for the closed loop's advice
  const bool closed_loop = run && !on_accelerator;  // the prediction of a plan's step against its measurement
  for (int64_t step = first_step; step < total_steps; ++step) {
    std::span<const int64_t> batch_idx = sampler.next_view();
    double lr = lr_at(cfg.lr_schedule, cfg.optimizer.lr, step, total_steps);
    // The plan's schedule on every device: forward, backward, sends, all-reduces, clipping, the update.
    auto t0 = Clock::now();
    const StepResult r = engine->step(*train_data, batch_idx, step, lr, cfg.optimizer.clip_grad_norm.value_or(0.0));
    const double loss = r.loss, norm = r.grad_norm;
    if (closed_loop) {
      loop.record(step - first_step, std::chrono::duration<double>(Clock::now() - t0).count(), *engine);
      if (auto rec = loop.report(step - first_step, total_steps - first_step, *run, *engine, out, metrics_path);
          rec && metrics) {
        rec->step = step + 1;
        metrics->write(*rec);
      }
    }
    if (!std::isfinite(loss))
      throw UserError(SourceLoc{cfg.path, 0, 0}, "the loss became " + non_finite_name(loss) + " at step " +
                                                    std::to_string(step + 1) + " (nothing saved at this step)",
                      "lower the learning rate or enable optimizer.clip_grad_norm; resume from the last checkpoint");
    if (norm != -1 && !std::isfinite(norm))  // -1: not computed (no clipping)
      throw UserError(SourceLoc{cfg.path, 0, 0}, "the gradient norm became " + non_finite_name(norm) + " at step " +
                                                    std::to_string(step + 1) + " (nothing saved at this step)",
                      "lower the learning rate; resume from the last checkpoint");
    res.losses.push_back(loss);
    window_samples += batch;

    bool log_now = (step + 1) % std::max<int64_t>(1, cfg.log.every_steps) == 0 || step + 1 == total_steps;
    double secs = std::chrono::duration<double>(Clock::now() - window_start).count();
    double sps = secs > 0 ? static_cast<double>(window_samples) / secs : 0;
    progress.update(io::ProgressStats{step + 1, loss, lr, sps});
    // The epoch ends when the sampler has no full batch left in it.
    bool epoch_end = sampler.position() >= sampler.batches_per_epoch() * batch;
    bool eval_now = eval_data && ((cfg.eval.every_steps > 0 && (step + 1) % cfg.eval.every_steps == 0) ||
                                  (cfg.eval.every_steps == 0 && cfg.train.epochs && epoch_end && step + 1 < total_steps));
    std::vector<std::pair<std::string, double>> ev;
    if (eval_now) {
      io::TraceScope scope(lane0, io::TraceLabel{io::TraceKind::Eval, {}, {}, "eval"});
      engine->gather(store, nullptr);  // a collective: every process, then rank 0 evaluates
      if (rank0) ev = evaluate(cfg, *engine, store, *eval_data);
      progress.message("step " + std::to_string(step + 1) + " eval: " + eval_str(ev));
    }
    if (metrics && (log_now || eval_now)) {
      io::MetricsRecord rec;
      rec.step = step + 1;
      rec.kind = "train";
      rec.loss = loss;
      rec.lr = lr;
      rec.samples_per_s = sps;
      rec.extra.emplace_back("epoch", static_cast<double>(sampler.epoch()));
      if (norm >= 0) rec.extra.emplace_back("grad_norm", norm);
      for (const auto& kv : engine->step_metrics()) rec.extra.push_back(kv);
      if (!memory_logged)  // the run's first record: what each device holds
        for (size_t i = 0; i < memory.size(); ++i) {
          const std::string d = "_d" + std::to_string(local[i]);
          rec.extra.emplace_back("mem_arena_bytes" + d, static_cast<double>(memory[i].arena));
          rec.extra.emplace_back("mem_param_bytes" + d, static_cast<double>(memory[i].parameters));
          rec.extra.emplace_back("mem_grad_bytes" + d, static_cast<double>(memory[i].gradients));
          rec.extra.emplace_back("mem_optimizer_bytes" + d, static_cast<double>(memory[i].optimizer));
        }
      memory_logged = true;
      for (const auto& [k, v] : ev) rec.extra.emplace_back("eval_" + k, v);
      metrics->write(rec);
    }
    if (log_now) {
      window_start = Clock::now();
      window_samples = 0;
    }
    // Checkpoints: every N steps, at the end, and when asked to stop.
    state.step = step + 1;
    state.wall_time_s += std::chrono::duration<double>(Clock::now() - step_start).count();
    step_start = Clock::now();
    bool stop = StopSignals::stop_requested() || (opts.stop_after > 0 && step + 1 >= opts.stop_after && step + 1 < total_steps);
    stop = engine->any(stop);  // between processes a signal reaches the ranks at different steps
    bool due = cfg.checkpoint.every_steps > 0 && (step + 1) % cfg.checkpoint.every_steps == 0;
    if (due || stop || step + 1 == total_steps) {
      io::TraceScope scope(lane0, io::TraceLabel{io::TraceKind::Checkpoint, {}, {}, "save"});
      save_checkpoint();
    }
    if (stop) {
      res.stopped_early = true;
      res.stop_signal = StopSignals::signal_number();
      progress.message("stopped after step " + std::to_string(step + 1) +
                       (res.last_checkpoint.empty() ? " (no checkpoint.dir: nothing saved)"
                                                    : "; checkpoint " + res.last_checkpoint));
      break;
    }
  }
  progress.finish();
  engine->gather(store, &opt);
  double total_secs = std::chrono::duration<double>(Clock::now() - train_start).count();
  res.steps = state.step;
  res.samples_per_s = total_secs > 0 ? static_cast<double>((state.step - first_step) * batch) / total_secs : 0;
  if (res.stopped_early) {
    write_trace();
    return res;
  }

  // 4. Final evaluation.
  if (eval_data && rank0) {
    res.eval = evaluate(cfg, *engine, store, *eval_data);
    std::fprintf(out, "braid: final eval on %lld samples: %s\n",
                 static_cast<long long>(cfg.eval.batches > 0 ? std::min(eval_data->size(), cfg.eval.batches * batch)
                                                             : eval_data->size()),
                 eval_str(res.eval).c_str());
    if (metrics) {
      io::MetricsRecord rec;
      rec.step = total_steps;
      rec.kind = "eval";
      for (const auto& [k, v] : res.eval) rec.extra.emplace_back("eval_" + k, v);
      metrics->write(rec);
    }
  }
  if (!opts.save_final.empty() && rank0) save_weights(opts.save_final, cfg, store);
  write_trace();
  std::fprintf(out, "braid: %lld steps in %.1f s (%.0f samples/s)\n", static_cast<long long>(state.step - first_step),
               total_secs, res.samples_per_s);
  return res;
}

}  // namespace braid::exec
