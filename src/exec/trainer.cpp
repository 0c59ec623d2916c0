// Training loop on one CPU device, or data parallel on `cpu:N` (exec/data_parallel.h: N replicas, replica 0's
// parameters, buffers and optimizer state are what checkpoints save and evaluation runs). Steps:
//   1. build the training graph (micro-batch size, with backward) and create/initialise parameters;
//   2. open the datasets bound to the model inputs;
//   3. per step: micro-batches through forward+backward, gradients accumulated (scaled 1/M), clipping,
//      learning rate from the schedule, optimizer update; log, evaluate when due;
//   4. final evaluation and report.
#include "exec/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>

#include "exec/data_parallel.h"
#include "exec/runner.h"
#include "exec/optimizer.h"
#include "exec/signals.h"
#include "exec/train_state.h"
#include "io/dataset.h"
#include "io/checkpoint.h"
#include "io/metrics.h"
#include "io/progress.h"
#include "io/trace.h"
#include "planner/plan.h"

namespace braid::exec {
namespace {

using Clock = std::chrono::steady_clock;

struct Evaluator {
  const io::RunConfig& cfg;
  ParamStore& store;
  io::Dataset* data;
  std::map<int64_t, std::unique_ptr<Runner>> runners;  // by batch size (the last batch may be smaller)

  std::vector<std::pair<std::string, double>> run(uint64_t seed) {
    int64_t batch = cfg.train.batch;
    int64_t n = data->size();
    if (cfg.eval.batches > 0) n = std::min(n, cfg.eval.batches * batch);
    std::vector<std::pair<std::string, double>> sums;
    std::vector<int64_t> idx;
    for (int64_t start = 0; start < n; start += batch) {
      int64_t b = std::min(batch, n - start);
      auto& r = runners[b];
      if (!r) r = make_runner(cfg.model, b, false, store, seed);
      idx.resize(static_cast<size_t>(b));
      for (int64_t i = 0; i < b; ++i) idx[static_cast<size_t>(i)] = start + i;
      data->read(idx, r->inputs);
      r->exec->run(false, seed, 0);
      std::vector<std::pair<std::string, double>> vals;
      vals.emplace_back("loss", scalar(r->exec->value(r->g.loss())));
      for (const auto& [name, v] : r->g.metrics) vals.emplace_back(name, scalar(r->exec->value(v)));
      if (sums.empty())
        for (const auto& [k, v] : vals) sums.emplace_back(k, 0.0);
      for (size_t k = 0; k < vals.size(); ++k) sums[k].second += vals[k].second * static_cast<double>(b);
    }
    for (auto& [k, v] : sums) v /= static_cast<double>(std::max<int64_t>(n, 1));
    return sums;
  }
};

}  // namespace

int data_parallel_degree(const io::RunConfig& cfg, int64_t micro) {
  planner::DeviceSpec dev;
  std::string err;
  if (!planner::parse_devices(cfg.devices, &dev, &err) || dev.kind != "cpu" || dev.count <= 1) return 1;
  if (cfg.parallel.plan != "auto")
    throw UserError(SourceLoc{cfg.path, 0, 0}, "parallel.plan '" + cfg.parallel.plan + "': running plan files is not implemented yet",
                    "remove parallel.plan (or set it to auto) for data parallelism on " + cfg.devices);
  if (micro % dev.count != 0)
    throw UserError(SourceLoc{cfg.path, 0, 0},
                    "devices " + cfg.devices + ": the micro-batch of " + std::to_string(micro) +
                        " samples does not split evenly over " + std::to_string(dev.count) + " data-parallel devices",
                    "make train.micro_batch (or train.batch) a multiple of " + std::to_string(dev.count));
  return dev.count;
}

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

}  // namespace

TrainResult train(const io::RunConfig& cfg, const TrainOptions& opts) {
  TrainResult res;
  const uint64_t seed = cfg.train.seed;
  const int64_t batch = cfg.train.batch;
  const int64_t micro = cfg.train.micro_batch.value_or(batch);
  const int64_t num_micro = batch / micro;

  // 1. Graph and parameters: one runner, or N data-parallel replicas (replica 0 is `store` and `opt`).
  const int dp_degree = data_parallel_degree(cfg, micro);
  std::unique_ptr<DataParallel> dp;
  ParamStore own_store;
  std::unique_ptr<Runner> own_runner;
  if (dp_degree > 1) {
    dp = std::make_unique<DataParallel>(cfg.model, cfg.optimizer, micro, seed, DataParallelOptions{dp_degree});
  } else {
    own_runner = make_runner(cfg.model, micro, true, own_store, seed);
  }
  ParamStore& store = dp ? dp->store(0) : own_store;
  Runner* train_runner = dp ? &dp->runner(0) : own_runner.get();
  // Tracing: a lane per device; forward/backward per micro-batch, all-reduce, optimizer, eval, checkpoints.
  std::unique_ptr<io::TraceRecorder> tracer;
  io::TraceLane* lane0 = nullptr;
  if (!opts.trace.empty()) {
    tracer = std::make_unique<io::TraceRecorder>(io::device_lanes(std::max(1, dp_degree), "cpu"));
    lane0 = &tracer->lane(0);
    if (dp)
      for (int r = 0; r < dp_degree; ++r) dp->set_trace(r, &tracer->lane(r));
    else
      train_runner->exec->set_trace(lane0);
  }
  auto write_trace = [&] {
    if (!tracer) return;
    tracer->write(opts.trace);
    std::fprintf(opts.out, "braid: trace written to %s (open it in ui.perfetto.dev)\n", opts.trace.c_str());
  };
  const graph::Graph& g = train_runner->g;
  if (!opts.init_from.empty()) load_weights(opts.init_from, store, opts.init_partial, opts.out);
  if (!opts.save_init.empty()) save_weights(opts.save_init, cfg, store);
  res.arena_bytes = train_runner->exec->plan().arena_bytes;

  // 2. Data.
  auto inputs = dataset_inputs(cfg.model, g);
  auto train_data = io::open_dataset(cfg.data.train, inputs, seed);
  std::unique_ptr<io::Dataset> eval_data;
  if (cfg.data.eval) eval_data = io::open_dataset(*cfg.data.eval, inputs, seed + 1);
  if (train_data->size() < batch)
    throw UserError(cfg.data.train.loc, "the training set has " + std::to_string(train_data->size()) +
                                            " samples, fewer than one batch of " + std::to_string(batch));
  io::BatchSampler sampler(train_data->size(), batch, cfg.data.shuffle, seed);
  const int64_t total_steps = cfg.train.steps ? *cfg.train.steps : *cfg.train.epochs * sampler.batches_per_epoch();

  std::unique_ptr<Optimizer> own_opt;
  if (!dp) own_opt = std::make_unique<Optimizer>(cfg.optimizer, store);
  Optimizer& opt = dp ? dp->optimizer(0) : *own_opt;
  StepState state;
  state.micro_batches = num_micro;
  if (!opts.resume.empty()) {
    if (cfg.checkpoint.dir.empty() && opts.resume == "latest")
      throw UserError(SourceLoc{cfg.path, 0, 0}, "--resume latest needs checkpoint.dir in the run file");
    std::string path = io::CheckpointDir::resolve(cfg.checkpoint.dir, opts.resume);
    state = restore(io::read_checkpoint(path), path, cfg, store, opt, sampler);
    state.micro_batches = num_micro;
    std::fprintf(opts.out, "braid: resuming from %s at step %lld (epoch %lld)\n", path.c_str(),
                 static_cast<long long>(state.step), static_cast<long long>(sampler.epoch()));
    if (state.step >= total_steps)
      std::fprintf(opts.out, "braid: the checkpoint is already at step %lld of %lld; nothing to train\n",
                   static_cast<long long>(state.step), static_cast<long long>(total_steps));
  }
  if (dp) dp->broadcast_from_replica0();  // loaded weights or a checkpoint: every replica starts from them
  std::unique_ptr<io::CheckpointDir> ckpt_dir;
  if (!cfg.checkpoint.dir.empty()) ckpt_dir = std::make_unique<io::CheckpointDir>(cfg.checkpoint.dir, cfg.checkpoint.keep);
  auto save_checkpoint = [&]() {
    if (!ckpt_dir) return;
    res.last_checkpoint = ckpt_dir->save(capture(cfg, store, opt, sampler, state));
  };
  Evaluator evaluator{cfg, store, eval_data.get(), {}};
  std::unique_ptr<io::MetricsWriter> metrics;
  if (!cfg.log.metrics.empty()) {
    std::error_code ec;
    auto parent = std::filesystem::path(cfg.log.metrics).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    metrics = std::make_unique<io::MetricsWriter>(cfg.log.metrics, /*append=*/state.step > 0);
  }
  io::Progress progress(opts.out, opts.progress && io::Progress::is_tty(opts.out), total_steps,
                        std::max<int64_t>(1, cfg.log.every_steps), state.step);
  StopSignals signals;

  std::fprintf(opts.out, "braid: training %s: %lld parameters, %lld steps of batch %lld (%lld micro-batch(es) of %lld), %s\n",
               cfg.model.name.c_str(), static_cast<long long>(store.num_trainable()), static_cast<long long>(total_steps),
               static_cast<long long>(batch), static_cast<long long>(num_micro), static_cast<long long>(micro),
               train_data->describe().c_str());
  if (dp)
    std::fprintf(opts.out, "braid: data parallel on %s: %d replicas of %lld samples per micro-batch, %zu gradient bucket(s)\n",
                 cfg.devices.c_str(), dp_degree, static_cast<long long>(micro / dp_degree), dp->bucket_bytes().size());

  // 3. Steps.
  std::vector<int64_t> indices(static_cast<size_t>(micro));
  auto window_start = Clock::now();
  auto train_start = window_start;
  auto step_start = window_start;
  int64_t window_samples = 0;
  const int64_t first_step = state.step;
  for (int64_t step = first_step; step < total_steps; ++step) {
    std::span<const int64_t> batch_idx = sampler.next_view();
    double lr = lr_at(cfg.lr_schedule, cfg.optimizer.lr, step, total_steps);
    double loss = 0, norm = -1;
    if (dp) {
      // Forward, backward, gradient all-reduce, clipping and the update on every replica.
      auto r = dp->step(*train_data, batch_idx, step, lr, cfg.optimizer.clip_grad_norm.value_or(0.0));
      loss = r.loss;
      norm = r.grad_norm;
    } else {
      loss = forward_backward(*train_runner, store, *train_data, batch_idx, micro, seed, step, indices);
    }
    if (!std::isfinite(loss))
      throw UserError(SourceLoc{cfg.path, 0, 0}, "the loss became " + std::to_string(loss) + " at step " +
                                                    std::to_string(step + 1), "lower the learning rate or enable clip_grad_norm");
    if (!dp) {
      io::TraceScope scope(lane0, io::TraceLabel{io::TraceKind::Optimizer, {}, {}, "step"});
      norm = cfg.optimizer.clip_grad_norm ? clip_grad_norm(store, *cfg.optimizer.clip_grad_norm) : -1;
      opt.step(lr);
    }
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
      ev = evaluator.run(seed);
      progress.message("step " + std::to_string(step + 1) + " eval: " + eval_str(ev));
    }
    if (metrics && (log_now || eval_now)) {
      io::MetricsRecord rec;
      rec.step = step + 1;
      rec.loss = loss;
      rec.lr = lr;
      rec.samples_per_s = sps;
      rec.extra.emplace_back("epoch", static_cast<double>(sampler.epoch()));
      if (norm >= 0) rec.extra.emplace_back("grad_norm", norm);
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
  if (dp) dp->check_replicas_identical();
  double total_secs = std::chrono::duration<double>(Clock::now() - train_start).count();
  res.steps = state.step;
  res.samples_per_s = total_secs > 0 ? static_cast<double>((state.step - first_step) * batch) / total_secs : 0;
  if (res.stopped_early) {
    write_trace();
    return res;
  }

  // 4. Final evaluation.
  if (eval_data) {
    res.eval = evaluator.run(seed);
    std::fprintf(opts.out, "braid: final eval on %lld samples: %s\n",
                 static_cast<long long>(cfg.eval.batches > 0 ? std::min(eval_data->size(), cfg.eval.batches * batch)
                                                             : eval_data->size()),
                 eval_str(res.eval).c_str());
    if (metrics) {
      io::MetricsRecord rec;
      rec.step = total_steps;
      for (const auto& [k, v] : res.eval) rec.extra.emplace_back("eval_" + k, v);
      metrics->write(rec);
    }
  }
  if (!opts.save_final.empty()) save_weights(opts.save_final, cfg, store);
  write_trace();
  std::fprintf(opts.out, "braid: %lld steps in %.1f s (%.0f samples/s)\n", static_cast<long long>(state.step - first_step),
               total_secs, res.samples_per_s);
  return res;
}

}  // namespace braid::exec
