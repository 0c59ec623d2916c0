// bench(): train()'s steps 1-3 (graph, data, optimizer step) in a timed loop; see bench.h.
// The step below must stay the same as trainer.cpp's: forward_backward, the finite-loss check, clipping,
// lr_at, Optimizer::step; on `cpu:N`, DataParallel::step. Per-node timing is switched on in the executor
// only when asked (on `cpu:N`: replica 0's nodes; the data and accumulate phases are then not split out).
#include "exec/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "core/parallel.h"
#include "exec/data_parallel.h"
#include "exec/device_engine.h"
#include "exec/optimizer.h"
#include "exec/pipeline.h"
#include "exec/run_plan.h"
#include "graph/build.h"
#include "exec/runner.h"
#include "exec/trainer.h"
#include "graph/print.h"
#include "io/dataset.h"

namespace braid::exec {
namespace {

using Clock = std::chrono::steady_clock;

// Per-node seconds summed by model layer: forward nodes in graph order define the layer order; a layer
// reached only by backward nodes (none today) is appended where it first appears.
std::vector<LayerTime> by_layer(const graph::Graph& g, const std::vector<double>& node_s,
                                const std::vector<size_t>& fused_heads) {
  std::vector<LayerTime> rows;
  std::map<std::string, size_t> index;
  auto row = [&](const graph::Node& n) -> LayerTime& {
    auto [it, fresh] = index.emplace(n.layer, rows.size());
    if (fresh) rows.push_back(LayerTime{n.layer, n.backward ? "" : n.op->name, {}, 0, 0});
    return rows[it->second];
  };
  for (const auto& n : g.nodes())
    if (!n.backward) row(n);
  for (const auto& n : g.nodes()) {
    LayerTime& r = row(n);
    (n.backward ? r.backward_s : r.forward_s) += node_s[n.id.idx()];
  }
  for (size_t h : fused_heads) {
    const graph::Node& tail = g.nodes()[h + 1];
    if (tail.layer != g.nodes()[h].layer) row(tail).fused_into = g.nodes()[h].layer;
  }
  return rows;
}

// Seconds by node op, the most first (ties by name).
std::vector<std::pair<std::string, double>> by_op(const graph::Graph& g, const std::vector<double>& node_s) {
  std::map<std::string, double> m;
  for (const auto& n : g.nodes()) m[n.op->name] += node_s[n.id.idx()];
  std::vector<std::pair<std::string, double>> out(m.begin(), m.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

// train()'s plan path: PlanRunner::step on the plan's devices, over the same sampler and dataset.
BenchResult bench_plan(const io::RunConfig& cfg, const RunPlan& rp, const BenchOptions& opts) {
  if (opts.per_node)
    throw UserError(SourceLoc{cfg.path, 0, 0}, "braid time times one device; this run has a plan for " + cfg.devices,
                    "use --set devices=cpu --set parallel.plan=auto, or braid bench");
  BenchResult res;
  const uint64_t seed = cfg.train.seed;
  const planner::Summary& s = rp.plan.summary;
  res.devices = cfg.devices;
  res.data_parallel = s.data_parallel;
  PlanRunner pr(cfg.model, cfg.optimizer, rp.plan, seed, PlanRunnerOptions{cfg.parallel.sync_batch_norm});
  graph::BuildOptions bo;
  bo.with_backward = true;
  const graph::Graph g = graph::build_graph(cfg.model, s.micro_batch, bo);
  auto inputs = dataset_inputs(cfg.model, g);
  auto data = open_train_data(cfg, inputs);
  const int64_t batch = cfg.train.batch;
  io::BatchSampler sampler(data->size(), batch, cfg.data.shuffle, seed);
  const int64_t total_steps = cfg.train.steps ? *cfg.train.steps : *cfg.train.epochs * sampler.batches_per_epoch();
  res.model = cfg.model.name;
  res.batch = batch;
  res.micro_batch = s.micro_batch;
  res.threads = num_threads();
  for (const auto& pi : g.params())
    if (!pi.spec.buffer) res.params += pi.spec.desc.numel();
  for (const auto& b : pr.arena_bytes()) res.arena_bytes = std::max(res.arena_bytes, b);
  for (const auto& n : g.nodes()) res.train_flops_per_step += graph::node_flops(g, n);
  res.train_flops_per_step *= static_cast<double>(s.micro_batches * s.data_parallel);
  res.tokens_per_sample = tokens_per_sample(inputs);
  res.plan = rp.summary;
  res.predicted_step_s = rp.prediction.step_time_s;
  for (int64_t i = 0; i < opts.warmup + opts.steps; ++i) {
    auto t0 = Clock::now();
    std::span<const int64_t> batch_idx = sampler.next_view();
    double lr = lr_at(cfg.lr_schedule, cfg.optimizer.lr, i % std::max<int64_t>(total_steps, 1), total_steps);
    auto r = pr.step(*data, batch_idx, i, lr, cfg.optimizer.clip_grad_norm.value_or(0.0));
    if (!std::isfinite(r.loss))
      throw UserError(SourceLoc{cfg.path, 0, 0}, "the loss became " + std::to_string(r.loss) + " at step " +
                                                    std::to_string(i + 1), "lower the learning rate or enable clip_grad_norm");
    if (i >= opts.warmup) res.step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return res;
}

// train()'s accelerator path: DeviceEngine::step (forward, backward, accumulation, clipping, the update on
// the device), each timed step waited for on the device. per_node (`braid time`): the engine waits for every
// node (DeviceEngine::set_node_timing), so each node's time is its own, launch and wait included.
BenchResult bench_device(const io::RunConfig& cfg, const planner::DeviceSpec& dev, const BenchOptions& opts) {
  BenchResult res;
  const int64_t batch = cfg.train.batch;
  const int64_t micro = cfg.train.micro_batch.value_or(batch);
  graph::Graph g;
  ParamStore store;
  const std::optional<RunPlan> rp = run_plan(cfg);  // a plan file over the GPUs, or nothing (data parallel)
  std::unique_ptr<DeviceEngine> engine = make_device_engine(cfg, dev, micro, false, &g, store, rp ? &rp->plan : nullptr);
  auto inputs = dataset_inputs(cfg.model, g);
  auto data = open_train_data(cfg, inputs);
  io::BatchSampler sampler(data->size(), batch, cfg.data.shuffle, cfg.train.seed);
  const int64_t total_steps = cfg.train.steps ? *cfg.train.steps : *cfg.train.epochs * sampler.batches_per_epoch();
  res.model = cfg.model.name;
  res.batch = batch;
  res.micro_batch = micro;
  res.threads = num_threads();
  res.devices = cfg.devices;
  res.device = engine->describe();
  res.device_peak_flops = engine->peak_flops();
  res.params = store.num_trainable();
  res.arena_bytes = engine->device_bytes();
  for (const auto& n : g.nodes()) res.train_flops_per_step += graph::node_flops(g, n);
  // g runs one replica's share of a micro-batch (under a plan, one replica's micro-batch of the whole model).
  res.train_flops_per_step *= static_cast<double>(batch) / static_cast<double>(rp ? rp->plan.summary.micro_batch : micro / dev.count);
  res.tokens_per_sample = tokens_per_sample(inputs);
  std::vector<double> node_s(g.nodes().size(), 0.0);
  if (opts.per_node && !engine->set_node_timing(nullptr))
    throw UserError(SourceLoc{cfg.path, 0, 0}, "braid time: " + engine->describe() + " cannot time its nodes",
                    "use braid bench (the step)");
  for (int64_t i = 0; i < opts.warmup + opts.steps; ++i) {
    if (opts.per_node && i == opts.warmup) engine->set_node_timing(node_s.data());
    auto t0 = Clock::now();
    std::span<const int64_t> batch_idx = sampler.next_view();
    const double lr = lr_at(cfg.lr_schedule, cfg.optimizer.lr, i % std::max<int64_t>(total_steps, 1), total_steps);
    double norm = -1;
    const double loss = engine->step(*data, batch_idx, i, lr, cfg.optimizer.clip_grad_norm.value_or(0.0), &norm);
    engine->synchronize();
    if (!std::isfinite(loss))
      throw UserError(SourceLoc{cfg.path, 0, 0}, "the loss became " + std::to_string(loss) + " at step " +
                                                    std::to_string(i + 1), "lower the learning rate or enable clip_grad_norm");
    if (i >= opts.warmup) res.step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (opts.per_node) {
    engine->set_node_timing(nullptr);
    // The data upload, the accumulation and the optimizer are the engine's, outside the nodes: "other" in the table.
    res.layers = by_layer(g, node_s, {});
    res.ops = by_op(g, node_s);
  }
  return res;
}

}  // namespace

BenchResult bench(const io::RunConfig& cfg, const BenchOptions& opts) {
  planner::DeviceSpec dev;
  if (accelerator_devices(cfg, &dev)) return bench_device(cfg, dev, opts);
  if (auto rp = run_plan(cfg)) return bench_plan(cfg, *rp, opts);
  BenchResult res;
  const uint64_t seed = cfg.train.seed;
  const int64_t batch = cfg.train.batch;
  const int64_t micro = cfg.train.micro_batch.value_or(batch);
  const int64_t num_micro = batch / micro;

  // One runner, or N data-parallel replicas on `cpu:N` (as train(): replica 0's graph, store and optimizer
  // are the ones reported; the step is DataParallel::step).
  const int dp_degree = data_parallel_degree(cfg, micro);
  std::unique_ptr<DataParallel> dp;
  ParamStore own_store;
  std::unique_ptr<Runner> own_runner;
  if (dp_degree > 1)
    dp = std::make_unique<DataParallel>(cfg.model, cfg.optimizer, micro, seed, DataParallelOptions{dp_degree});
  else
    own_runner = make_runner(cfg.model, micro, true, own_store, seed, RunnerOptions{.grads_in_store = num_micro == 1});
  ParamStore& store = dp ? dp->store(0) : own_store;
  Runner* runner = dp ? &dp->runner(0) : own_runner.get();
  const graph::Graph& g = runner->g;
  auto inputs = dataset_inputs(cfg.model, g);
  auto data = open_train_data(cfg, inputs);
  io::BatchSampler sampler(data->size(), batch, cfg.data.shuffle, seed);
  const int64_t total_steps = cfg.train.steps ? *cfg.train.steps : *cfg.train.epochs * sampler.batches_per_epoch();
  std::unique_ptr<Optimizer> own_opt;
  if (!dp) own_opt = std::make_unique<Optimizer>(cfg.optimizer, store);

  res.model = cfg.model.name;
  res.batch = batch;
  res.micro_batch = micro;
  res.threads = num_threads();
  res.devices = cfg.devices;
  res.data_parallel = dp_degree;
  res.params = store.num_trainable();
  res.arena_bytes = runner->exec->plan().arena_bytes;
  res.workspace_bytes = runner->exec->plan().workspace_bytes;
  for (const auto& n : g.nodes()) res.train_flops_per_step += graph::node_flops(g, n);
  res.train_flops_per_step *= static_cast<double>(num_micro * dp_degree);  // each replica runs micro / N
  res.tokens_per_sample = tokens_per_sample(inputs);

  std::vector<double> node_s(g.nodes().size(), 0.0);
  PhaseTimes phases;
  std::vector<int64_t> indices(static_cast<size_t>(micro));
  res.step_s.reserve(static_cast<size_t>(opts.steps));
  for (int64_t i = 0; i < opts.warmup + opts.steps; ++i) {
    const bool timed = i >= opts.warmup;
    const bool per_node = timed && opts.per_node;
    runner->exec->set_node_timing(per_node ? node_s.data() : nullptr);
    const int64_t step = i;  // the schedule and dropout streams advance as in train()
    auto t0 = Clock::now();
    std::span<const int64_t> batch_idx = sampler.next_view();
    const double lr = lr_at(cfg.lr_schedule, cfg.optimizer.lr, step % std::max<int64_t>(total_steps, 1), total_steps);
    double loss = 0;
    Clock::time_point t1;
    if (dp) {  // forward, backward, all-reduce, clipping and optimizer on every replica
      loss = dp->step(*data, batch_idx, step, lr, cfg.optimizer.clip_grad_norm.value_or(0.0)).loss;
      t1 = Clock::now();
    } else {
      loss = forward_backward(*runner, store, *data, batch_idx, micro, seed, step, indices, {},
                              per_node ? &phases : nullptr);
      t1 = Clock::now();
      if (std::isfinite(loss)) {
        if (cfg.optimizer.clip_grad_norm) clip_grad_norm(store, *cfg.optimizer.clip_grad_norm);
        own_opt->step(lr);
      }
    }
    if (!std::isfinite(loss))
      throw UserError(SourceLoc{cfg.path, 0, 0}, "the loss became " + std::to_string(loss) + " at step " +
                                                    std::to_string(step + 1), "lower the learning rate or enable clip_grad_norm");
    auto t2 = Clock::now();
    if (!timed) continue;
    res.step_s.push_back(std::chrono::duration<double>(t2 - t0).count());
    if (per_node) res.optimizer_s += std::chrono::duration<double>(t2 - t1).count();
  }
  runner->exec->set_node_timing(nullptr);
  if (opts.per_node) {
    res.layers = by_layer(g, node_s, runner->exec->fused());
    res.ops = by_op(g, node_s);
    res.data_s = phases.data_s;
    res.accumulate_s = phases.accumulate_s;
  }
  return res;
}

}  // namespace braid::exec
