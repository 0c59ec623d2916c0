// bench(): train()'s steps 1-3 (graph, data, optimizer step) in a timed loop; see bench.h.
// The step is the engine's (exec/engine.h), as train() runs it, over the same plan, sampler and learning rates.
// Per-node timing is switched on only when asked (plan device 0's program: one stage; on cpu:N replica 0's).
#include "exec/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "core/parallel.h"
#include "exec/engine.h"
#include "backends/cpu/optimizer.h"
#include "exec/run_setup.h"
#include "graph/build.h"
#include "exec/run_data.h"
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
    if (fresh) rows.push_back(LayerTime{n.layer, n.backward ? "" : n.op->name, {}, {}, 0, 0});
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
    if (tail.layer != g.nodes()[h].layer) (tail.backward ? row(tail).backward_fused_into : row(tail).fused_into) = g.nodes()[h].layer;
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

}  // namespace

BenchResult bench(const io::RunConfig& cfg, const BenchOptions& opts) {
  BenchResult res;
  const uint64_t seed = cfg.train.seed;
  const int64_t batch = cfg.train.batch;
  const std::optional<RunPlan> rp = run_plan(cfg);  // a plan file, plan auto's choice, or nothing (trivial plan)
  std::unique_ptr<Engine> engine = make_engine(cfg, rp);
  const planner::Summary& s = engine->plan().summary;
  std::vector<double> node_s(engine->programs().front().g.nodes().size(), 0.0);
  PhaseTimes phases;
  if (opts.per_node && !engine->set_node_timing(nullptr, nullptr))
    throw UserError(SourceLoc{cfg.path, 0, 0},
                    "braid time times the nodes of one stage; this run's plan for " + cfg.devices + " has " +
                        std::to_string(engine->programs().size()) + " stages",
                    "use --set parallel.plan=auto with fewer devices, or braid bench");
  graph::BuildOptions bo;
  bo.with_backward = true;
  const graph::Graph g = graph::build_graph(cfg.model, s.micro_batch, bo);  // one replica's micro-batch, whole
  auto inputs = dataset_inputs(cfg.model, g);
  auto data = open_train_data(cfg, inputs);
  io::BatchSampler sampler(data->size(), batch, cfg.data.shuffle, seed);
  const int64_t total_steps = cfg.train.steps ? *cfg.train.steps : *cfg.train.epochs * sampler.batches_per_epoch();
  res.model = cfg.model.name;
  res.batch = batch;
  res.micro_batch = rp ? s.micro_batch : cfg.train.micro_batch.value_or(batch);
  res.threads = num_threads();
  res.devices = cfg.devices;
  res.data_parallel = s.data_parallel;
  for (const auto& pi : g.params())
    if (!pi.spec.buffer) res.params += pi.spec.desc.numel();
  if (engine->backend().host_memory()) {
    for (size_t b : engine->arena_bytes()) res.arena_bytes = std::max(res.arena_bytes, b);
  } else {
    res.arena_bytes = engine->device_bytes();
    res.device = engine->describe();
    res.device_peak_flops = engine->peak_flops();
  }
  res.workspace_bytes = engine->workspace_bytes();
  for (const auto& n : g.nodes()) res.train_flops_per_step += graph::node_flops(g, n);
  res.train_flops_per_step *= static_cast<double>(s.micro_batches * s.data_parallel);
  res.tokens_per_sample = tokens_per_sample(inputs);
  if (rp) {
    res.plan = rp->summary;
    res.predicted_step_s = rp->prediction.step_time_s;
  }
  res.step_s.reserve(static_cast<size_t>(opts.steps));
  for (int64_t i = 0; i < opts.warmup + opts.steps; ++i) {
    // `braid time`: the timed steps' nodes, each waited for on an accelerator (so that its time is its own).
    if (opts.per_node && i == opts.warmup) engine->set_node_timing(node_s.data(), &phases);
    auto t0 = Clock::now();
    std::span<const int64_t> batch_idx = sampler.next_view();
    // The schedule and dropout streams advance as in train().
    const double lr = lr_at(cfg.lr_schedule, cfg.optimizer.lr, i % std::max<int64_t>(total_steps, 1), total_steps);
    const StepResult r = engine->step(*data, batch_idx, i, lr, cfg.optimizer.clip_grad_norm.value_or(0.0));
    engine->synchronize();
    if (!std::isfinite(r.loss))
      throw UserError(SourceLoc{cfg.path, 0, 0}, "the loss became " + std::to_string(r.loss) + " at step " +
                                                    std::to_string(i + 1), "lower the learning rate or enable clip_grad_norm");
    if (i >= opts.warmup) res.step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (opts.per_node) {
    engine->set_node_timing(nullptr, nullptr);
    const graph::Graph& pg = engine->programs().front().g;
    res.layers = by_layer(pg, node_s, engine->fused());
    res.ops = by_op(pg, node_s);
    res.data_s = phases.data_s;
    res.accumulate_s = phases.accumulate_s;
    res.optimizer_s = phases.optimizer_s;
  }
  return res;
}

}  // namespace braid::exec
