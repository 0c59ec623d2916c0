// predict()'s processor-sharing pipeline simulation (docs/planner.md, "Pipelines on shared cores"): the
// speed rule, the simulation against the textbook makespan without sharing, its speed-up with idle devices,
// and that only pipelined plans on clusters with shared cores change; the runner's measured costs (per step,
// per micro-batch and stage) as predict() and the search add them; the final choice by predict() on shared cores.
#include <gtest/gtest.h>

#include <algorithm>

#include "ops/registry.h"
#include "planner/cluster.h"
#include "planner/evaluate.h"
#include "planner/search.h"
#include "plan_test_util.h"

using namespace braid;
using namespace braid::planner;
using namespace braid::planner::test;

namespace {

// The search's best plan with these summary fields pinned (0: left to the search).
SearchResult search_shape(const graph::Graph& g, const CostModel& m, const TrainSettings& ts, int dp, int pp,
                          int64_t micro_batches = 0) {
  Plan pins;
  if (dp > 0) pins.summary.data_parallel = dp, pins.summary.pinned.set("data_parallel", {});
  if (pp > 0) pins.summary.pipeline_stages = pp, pins.summary.pinned.set("pipeline_stages", {});
  if (micro_batches > 0) pins.summary.micro_batches = micro_batches, pins.summary.pinned.set("micro_batches", {});
  SearchOptions so;
  so.pins = &pins;
  return search(g, m, ts, so);
}

std::vector<StageWork> equal_stages(int n, double f, double b, int devices = 1) {
  StageWork w;
  w.forward_compute_s = f;
  w.backward_compute_s = b;
  w.devices = devices;
  return std::vector<StageWork>(static_cast<size_t>(n), w);
}

TEST(SharedCores, SpeedRule) {
  EXPECT_EQ(shared_speed(1, 4, 0), 1);    // cores not modelled
  EXPECT_EQ(shared_speed(1, 4, 2), 2);    // 4 one-thread devices on 2 cores: one alone runs at a full core
  EXPECT_EQ(shared_speed(2, 4, 2), 2);
  EXPECT_DOUBLE_EQ(shared_speed(3, 4, 2), 4.0 / 3);
  EXPECT_EQ(shared_speed(4, 4, 2), 1);    // all busy: the calibrated figures
  EXPECT_EQ(shared_speed(1, 2, 2), 1);    // one thread per device on its own core: nothing to gain
  EXPECT_EQ(shared_speed(1, 2, 4), 1);    // two threads per device, four cores
  EXPECT_EQ(shared_speed(0, 4, 2), 1);
}

TEST(SharedCores, SimulationWithoutSharingIsTheTextbookMakespan) {
  // Equal stages F = 1, B = 2: GPipe and 1F1B take (m + p - 1)(F + B).
  for (const char* sched : {"gpipe", "1f1b"})
    for (int p : {2, 4})
      for (int m : {1, 3, 8}) {
        SCOPED_TRACE(std::string(sched) + " p " + std::to_string(p) + " m " + std::to_string(m));
        EXPECT_NEAR(simulate_pipeline(sched, p, 1, m, equal_stages(p, 1, 2), p, 0), (m + p - 1) * 3.0, 1e-9);
        EXPECT_NEAR(simulate_pipeline(sched, p, 1, m, equal_stages(p, 1, 2), p, 0),
                    pipeline_step(3, 3.0 * p, 0, m, 1), 1e-9);
      }
  // Interleaved, 2 chunks of half the work: (m v - 1) T + (1/v) sum T.
  EXPECT_NEAR(simulate_pipeline("interleaved", 2, 2, 4, equal_stages(4, 0.5, 1), 2, 0), pipeline_step(1.5, 6, 0, 4, 2),
              1e-9);
  // Communication delays the next stage: one micro-batch through 2 stages, 0.25 s each way per stage.
  auto w = equal_stages(2, 1, 2);
  for (auto& s : w) s.forward_comm_s = s.backward_comm_s = 0.25;
  EXPECT_NEAR(simulate_pipeline("1f1b", 2, 1, 1, w, 2, 0), 2 * 3 + 4 * 0.25, 1e-9);
}

TEST(SharedCores, IdleDevicesSpeedUpTheBusyOnes) {
  // 2 one-thread devices on 1 core: one micro-batch runs F0 F1 B1 B0 one at a time, each at twice the
  // all-busy speed.
  EXPECT_NEAR(simulate_pipeline("1f1b", 2, 1, 1, equal_stages(2, 1, 2), 2, 1), 3.0, 1e-9);
  // 4 devices on 2 cores, many micro-batches: faster than without sharing, never below the work spread
  // over the 2 cores (each stage's work at full speed is half its all-busy figure).
  double shared = simulate_pipeline("1f1b", 4, 1, 8, equal_stages(4, 1, 2), 4, 2);
  double plain = simulate_pipeline("1f1b", 4, 1, 8, equal_stages(4, 1, 2), 4, 0);
  EXPECT_LT(shared, plain);
  EXPECT_GE(shared, 8 * 4 * 3 * 0.5 / 2 - 1e-9);
  // A stage run by 2 devices (data parallel 2) counts both: 2 positions x 2 devices on 2 cores, 4 devices.
  EXPECT_NEAR(simulate_pipeline("1f1b", 2, 1, 1, equal_stages(2, 1, 2, 2), 4, 2), 3.0, 1e-9);
  // Deterministic.
  EXPECT_EQ(shared, simulate_pipeline("1f1b", 4, 1, 8, equal_stages(4, 1, 2), 4, 2));
}

TEST(SharedCores, MeasuredSpeedsReplaceTheCoreRule) {
  // The rule's table reproduces the (devices, cores) form.
  auto w = equal_stages(4, 1, 2);
  std::vector<double> rule;
  for (int b = 0; b <= 4; ++b) rule.push_back(shared_speed(b, 4, 2));
  EXPECT_EQ(simulate_pipeline("1f1b", 4, 1, 8, w, rule), simulate_pipeline("1f1b", 4, 1, 8, w, 4, 2));
  // cpu:2 on 2 cores: the rule gains nothing (a core each); a measured table where a lone device runs at 1.6x
  // (two hyper-threads of one core) makes a 2-stage pipeline faster, and predict() uses it.
  CpuFigures f = fallback_cpu_figures(2, 2);
  f.cores = 2;
  Cluster rule2 = cluster_preset("cpu:2", f);
  EXPECT_TRUE(simulates(rule2));
  EXPECT_EQ(busy_speeds(rule2), (std::vector<double>{1, 1, 1}));
  f.busy_speed = {1.6, 1};
  Cluster measured = cluster_preset("cpu:2", f);
  EXPECT_EQ(busy_speeds(measured), (std::vector<double>{1, 1.6, 1}));
  EXPECT_TRUE(cluster_preset("cpu:4", f).busy_speed.empty());  // measured for 2 devices, not for 4
  // One micro-batch through 2 stages runs one stage at a time: every step at 1.6x.
  EXPECT_NEAR(simulate_pipeline("1f1b", 2, 1, 1, equal_stages(2, 1, 2), busy_speeds(measured)), 6 / 1.6, 1e-9);
  graph::Graph g = model_graph("tiny_gpt.yaml", 16);
  TrainSettings ts{16, 2};
  auto a = analytic_cost_model(rule2), b = analytic_cost_model(measured);
  SearchResult ra = search_shape(g, *a, ts, 0, 2);
  ASSERT_TRUE(ra.found);
  StepPrediction pa = predict(ra.plan, g, *a, ts), pb = predict(ra.plan, g, *b, ts);
  EXPECT_NEAR(pa.step_time_s, pa.formula_step_time_s, 1e-9 * pa.step_time_s);  // speeds of 1: the textbook
  EXPECT_LT(pb.step_time_s, pa.step_time_s);
  EXPECT_EQ(pb.formula_step_time_s, pa.formula_step_time_s);
}

TEST(SharedCores, OnlyPipelinesOnSharedCoresChange) {
  graph::Graph g = model_graph("tiny_gpt.yaml", 16);
  CpuFigures f = fallback_cpu_figures(4, 2);
  Cluster plain = cluster_preset("cpu:4", f);
  f.cores = 2;
  Cluster shared = cluster_preset("cpu:4", f);
  EXPECT_EQ(shared.host_cores, 2);
  EXPECT_EQ(plain.host_cores, 0);
  auto mp = analytic_cost_model(plain), ms = analytic_cost_model(shared);
  TrainSettings ts{16, 2};
  PureStrategies pp = pure_strategies(g, *mp, ts, {}), ps = pure_strategies(g, *ms, ts, {});
  ASSERT_TRUE(ps.data.found && ps.pipeline.found);
  // Data parallel: every device busy throughout, the formula.
  EXPECT_EQ(ps.data.prediction.step_time_s, pp.data.prediction.step_time_s);
  EXPECT_EQ(ps.data.prediction.step_time_s, ps.data.prediction.formula_step_time_s);
  // Pipeline: the search ranks by the formula; the prediction simulates and is faster.
  EXPECT_NEAR(ps.pipeline.searched_step_time_s, ps.pipeline.prediction.formula_step_time_s,
              1e-9 * ps.pipeline.searched_step_time_s);
  EXPECT_LT(ps.pipeline.prediction.step_time_s, ps.pipeline.prediction.formula_step_time_s);
  EXPECT_EQ(ps.pipeline.plan.summary.predicted.step_time_s, ps.pipeline.prediction.step_time_s);
  EXPECT_EQ(pp.pipeline.prediction.step_time_s, pp.pipeline.prediction.formula_step_time_s);
  StepPrediction again = predict(ps.pipeline.plan, g, *ms, ts);
  EXPECT_EQ(again.step_time_s, ps.pipeline.prediction.step_time_s);
}

// A profile measured on cpu:4 with these device figures and nothing else.
Profile cpu4_profile(const CpuFigures& f) {
  Profile p;
  p.devices = 4;
  p.cpu = f;
  return p;
}

// `p` written as YAML and read back; a diagnostic fails the test.
Profile round_trip(const Profile& p) {
  Diagnostics d;
  Profile back = parse_profile(to_yaml(p), "p.yaml", d);
  EXPECT_TRUE(d.empty()) << (d.empty() ? std::string() : d.all()[0].format());
  return back;
}

// A calibrated model of cpu:4 whose profile has only the runner figures given (the rest analytic).
std::unique_ptr<CostModel> runner_model(int cores, double step, double micro, double pipeline_micro) {
  CpuFigures f = fallback_cpu_figures(4, 2);
  f.cores = cores;
  Profile p = cpu4_profile(f);
  p.runner.step_overhead = step;
  p.runner.micro_batch_overhead = micro;
  p.runner.pipeline_micro_batch_overhead = pipeline_micro;
  return calibrated_cost_model(cluster_preset("cpu:4", f), p);
}

TEST(RunnerCosts, StepAndMicroBatchCostsAddToTheFormula) {
  graph::Graph g = model_graph("tiny_gpt.yaml", 16);
  TrainSettings ts{16, 2};
  auto bare = runner_model(0, 0, 0, 0), costs = runner_model(0, 1e-3, 2e-4, 5e-4);
  EXPECT_EQ(analytic_cost_model(cluster_preset("cpu:4", fallback_cpu_figures(4, 2)))->step_overhead(), 0);
  // A pipeline of 4 stages, 8 micro-batches, one device per stage (no data-parallel sync): every stage's
  // time grows by the pipelined hand-off, the step by (m + p - 1) of them plus the step's cost.
  SearchResult r = search_shape(g, *costs, ts, 1, 4, 8);
  ASSERT_TRUE(r.found) << r.why_none;
  StepPrediction with = predict(r.plan, g, *costs, ts), without = predict(r.plan, g, *bare, ts);
  EXPECT_NEAR(with.step_time_s - without.step_time_s, 1e-3 + (8 + 4 - 1) * 5e-4, 1e-12);
  // The search adds them as predict() does.
  EXPECT_NEAR(r.searched_step_time_s, with.formula_step_time_s, 1e-9 * with.formula_step_time_s);
  // One stage: the unpipelined hand-off, once per micro-batch.
  r = search_shape(g, *costs, ts, 4, 1, 2);
  ASSERT_TRUE(r.found) << r.why_none;
  with = predict(r.plan, g, *costs, ts), without = predict(r.plan, g, *bare, ts);
  // (tiny_gpt's gradients fill one bucket: its all-reduce is exposed whole, whatever the backward.)
  EXPECT_NEAR(with.step_time_s - without.step_time_s, 1e-3 + 2 * 2e-4, 1e-12);
  EXPECT_NEAR(r.searched_step_time_s, with.formula_step_time_s, 1e-9 * with.formula_step_time_s);
  // Clipping: its measured cost per gradient byte over the device's parameters joins the optimizer's, in the
  // search as in predict().
  CpuFigures f = fallback_cpu_figures(4, 2);
  Profile p = cpu4_profile(f);
  p.clip_s_per_byte = 1e-9;
  auto clipping = calibrated_cost_model(cluster_preset("cpu:4", f), p);
  TrainSettings clip = ts;
  clip.clip = true;
  StepPrediction c = predict(r.plan, g, *clipping, clip), n = predict(r.plan, g, *clipping, ts);
  EXPECT_NEAR(c.step_time_s - n.step_time_s, 1e-9 * c.stages[0].param_bytes, 1e-12);
  SearchResult rc = search_shape(g, *clipping, clip, 4, 1, 2);
  ASSERT_TRUE(rc.found);
  EXPECT_NEAR(rc.searched_step_time_s, rc.prediction.formula_step_time_s, 1e-9 * rc.searched_step_time_s);
  // Gradient accumulation: measured seconds per gradient byte replace the memory-bound figure, once per
  // micro-batch on every stage.
  EXPECT_NEAR(clipping->grad_accumulate_time(1e6), 3e6 / f.memory_bandwidth, 1e-15);
  p.clip_s_per_byte = 0;
  p.accumulate_s_per_byte = 2e-11;
  auto accumulating = calibrated_cost_model(cluster_preset("cpu:4", f), p);
  EXPECT_DOUBLE_EQ(accumulating->grad_accumulate_time(1e6), 2e-5);
  Profile back = round_trip(p);
  EXPECT_EQ(back.accumulate_s_per_byte, 2e-11);
}

// The optimizer's update: the warm figure for the part of the N devices' working set (parameter, gradient and
// states of each) that fits in half the shared cache, the cold figure for the rest; the cold figure alone
// where the profile has no warm one or no cache size.
TEST(RunnerCosts, OptimizerMixesWarmAndColdByTheWorkingSet) {
  CpuFigures f = fallback_cpu_figures(4, 2);
  Profile p = cpu4_profile(f);
  p.optimizer_s_per_byte = {{0, 4e-10}, {1, 5e-10}, {2, 6e-10}};
  auto cold_only = calibrated_cost_model(cluster_preset("cpu:4", f), p);
  EXPECT_DOUBLE_EQ(cold_only->optimizer_time(1e6, 1), 5e-4);
  p.optimizer_warm_s_per_byte = {{0, 1e-10}, {1, 2e-10}, {2, 3e-10}};
  EXPECT_DOUBLE_EQ(calibrated_cost_model(cluster_preset("cpu:4", f), p)->optimizer_time(1e6, 1), 5e-4);  // no cache
  p.cache_bytes = 32e6;
  auto mixed = calibrated_cost_model(cluster_preset("cpu:4", f), p);
  // 1 MB with momentum on 4 devices: 12 MB, inside half of 32 MB: all warm.
  EXPECT_DOUBLE_EQ(mixed->optimizer_time(1e6, 1), 2e-4);
  // 4 MB with AdamW on 4 devices: 64 MB, a quarter of it in the 16 MB: 1/4 warm, 3/4 cold.
  EXPECT_NEAR(mixed->optimizer_time(4e6, 2), 4e6 * (0.25 * 3e-10 + 0.75 * 6e-10), 1e-15);
  // Far beyond the cache: nearly the cold figure.
  EXPECT_NEAR(mixed->optimizer_time(1e9, 0), 1e9 * 4e-10, 1e9 * 4e-10 * 1e-2);
  Profile back = round_trip(p);
  EXPECT_EQ(back.optimizer_warm_s_per_byte, p.optimizer_warm_s_per_byte);
  EXPECT_EQ(back.optimizer_s_per_byte, p.optimizer_s_per_byte);
  EXPECT_EQ(back.cache_bytes, 32e6);
}

// The first forward of a step packs the weights back from memory for the part of the N devices' working set
// that half the cache does not hold: once per step and stage, with the optimizer's tail, in the search as in
// predict(); nothing without the profile's figure, without a cache size, or in the analytic model.
TEST(RunnerCosts, WeightsFromMemoryOncePerStepBeyondTheCache) {
  CpuFigures f = fallback_cpu_figures(4, 2);
  Profile p = cpu4_profile(f);
  p.cache_bytes = 32e6;
  EXPECT_EQ(calibrated_cost_model(cluster_preset("cpu:4", f), p)->weight_read_time(4e6, 2), 0);  // no figure
  EXPECT_EQ(analytic_cost_model(cluster_preset("cpu:4", f))->weight_read_time(4e6, 2), 0);
  p.weight_s_per_byte = 2e-10;
  auto m = calibrated_cost_model(cluster_preset("cpu:4", f), p);
  // 1 MB with momentum on 4 devices: 12 MB, inside half of 32 MB: nothing from memory.
  EXPECT_EQ(m->weight_read_time(1e6, 1), 0);
  // 4 MB with AdamW on 4 devices: 64 MB, a quarter of it in the 16 MB: three quarters from memory.
  EXPECT_NEAR(m->weight_read_time(4e6, 2), 0.75 * 4e6 * 2e-10, 1e-15);
  // The same profile planning cpu:2: the planned devices' data, 32 MB, half of it in the cache.
  EXPECT_NEAR(calibrated_cost_model(cluster_preset("cpu:2", fallback_cpu_figures(2, 2)), p)->weight_read_time(4e6, 2),
              0.5 * 4e6 * 2e-10, 1e-15);
  Profile no_cache = p;
  no_cache.cache_bytes = 0;
  EXPECT_EQ(calibrated_cost_model(cluster_preset("cpu:4", f), no_cache)->weight_read_time(4e6, 2), 0);

  // In a plan: a cache of 1 kB keeps nothing of tiny_gpt, so each stage's tail grows by its parameters'
  // figure, and the step (one stage, several micro-batches) by it once.
  graph::Graph g = model_graph("tiny_gpt.yaml", 16);
  TrainSettings ts{16, 2};
  Profile small = p, none = p;
  small.cache_bytes = 1e3;
  none.weight_s_per_byte = 0;
  auto cold = calibrated_cost_model(cluster_preset("cpu:4", f), small);
  auto bare = calibrated_cost_model(cluster_preset("cpu:4", f), none);
  SearchResult r = search_shape(g, *cold, ts, 4, 1, 2);
  ASSERT_TRUE(r.found) << r.why_none;
  StepPrediction with = predict(r.plan, g, *cold, ts), without = predict(r.plan, g, *bare, ts);
  ASSERT_EQ(with.stages.size(), 1u);
  const double bytes = with.stages[0].param_bytes;
  EXPECT_GT(bytes, 0);
  EXPECT_NEAR(with.stages[0].weight_read_s, cold->weight_read_time(bytes, 2), 1e-15);
  EXPECT_NEAR(with.stages[0].weight_read_s, bytes * 2e-10, bytes * 2e-10 * 1e-3);
  EXPECT_NEAR(with.step_time_s - without.step_time_s, with.stages[0].weight_read_s, 1e-12);
  EXPECT_NEAR(r.searched_step_time_s, with.formula_step_time_s, 1e-9 * with.formula_step_time_s);
  // Explained as compute (with the optimizer's update), not as communication.
  EXPECT_NEAR(with.compute_s - without.compute_s, with.stages[0].weight_read_s, 1e-12);
  EXPECT_NEAR(with.comm_s, without.comm_s, 1e-15);
  EXPECT_GE(with.compute_s, 2 * with.stages[0].compute_s + with.stages[0].optimizer_s - 1e-12);
  // A pipeline: the search's tail is predict()'s.
  SearchResult pr = search_shape(g, *cold, ts, 1, 4, 8);
  ASSERT_TRUE(pr.found) << pr.why_none;
  EXPECT_NEAR(pr.searched_step_time_s, pr.prediction.formula_step_time_s, 1e-9 * pr.searched_step_time_s);
  Profile back = round_trip(p);
  EXPECT_EQ(back.weight_s_per_byte, 2e-10);
}

// In a pipeline whose devices share cores, each micro-batch's forward and backward on a stage first refill
// the core's caches: 3 x the stage's parameter bytes at the profile's figure, half with each, as computation;
// nothing without a shared core, outside pipelines, or in the analytic model; the search adds it as predict().
TEST(RunnerCosts, TurnsOnASharedCoreCostPerMicroBatchInPipelines) {
  CpuFigures f = fallback_cpu_figures(4, 2);
  Profile p = cpu4_profile(f);
  p.switch_s_per_byte = 1e-11;
  f.cores = 2;
  auto shared = calibrated_cost_model(cluster_preset("cpu:4", f), p);
  EXPECT_DOUBLE_EQ(shared->switch_time(1e6), 3e-5);
  f.cores = 4;
  EXPECT_EQ(calibrated_cost_model(cluster_preset("cpu:4", f), p)->switch_time(1e6), 0);  // a core each
  f.cores = 0;
  EXPECT_EQ(calibrated_cost_model(cluster_preset("cpu:4", f), p)->switch_time(1e6), 0);  // not modelled
  EXPECT_EQ(analytic_cost_model(cluster_preset("cpu:4", fallback_cpu_figures(4, 2)))->switch_time(1e6), 0);
  Profile none = p;
  none.switch_s_per_byte = 0;
  f.cores = 2;
  auto bare = calibrated_cost_model(cluster_preset("cpu:4", f), none);

  graph::Graph g = model_graph("tiny_gpt.yaml", 16);
  TrainSettings ts{16, 2};
  SearchResult r = search_shape(g, *shared, ts, 1, 4, 8);
  ASSERT_TRUE(r.found) << r.why_none;
  StepPrediction with = predict(r.plan, g, *shared, ts), without = predict(r.plan, g, *bare, ts);
  ASSERT_EQ(with.stages.size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    const double turn = shared->switch_time(with.stages[s].param_bytes);
    EXPECT_GT(turn, 0);
    EXPECT_NEAR(with.stages[s].compute_s - without.stages[s].compute_s, turn, 1e-15) << s;
    EXPECT_NEAR(with.stages[s].forward_s - without.stages[s].forward_s, turn / 2, 1e-15) << s;
    EXPECT_NEAR(with.stages[s].backward_s - without.stages[s].backward_s, turn / 2, 1e-15) << s;
  }
  EXPECT_GT(with.step_time_s, without.step_time_s);
  EXPECT_NEAR(r.searched_step_time_s, with.formula_step_time_s, 1e-9 * with.formula_step_time_s);
  // One stage (data parallel): no turns between stages.
  SearchResult d = search_shape(g, *shared, ts, 4, 1, 2);
  ASSERT_TRUE(d.found) << d.why_none;
  EXPECT_DOUBLE_EQ(predict(d.plan, g, *shared, ts).step_time_s, predict(d.plan, g, *bare, ts).step_time_s);
  Profile back = round_trip(p);
  EXPECT_EQ(back.switch_s_per_byte, 1e-11);
}

TEST(RunnerCosts, SharedCoresChooseByThePrediction) {
  // cpu:4 on 2 cores: the search ranks shapes by its formula, keeps the best 8 and returns the one predict()
  // (which simulates the sharing) finds fastest; with one kept, the formula's best. The re-ranked choice is
  // never slower by predict(), and deterministic.
  graph::Graph g = model_graph("tiny_gpt.yaml", 16);
  TrainSettings ts{16, 2};
  auto m = runner_model(2, 1e-4, 1e-5, 2e-5);
  SearchOptions one;
  one.rerank = 1;
  SearchResult a = search(g, *m, ts), b = search(g, *m, ts), formula = search(g, *m, ts, one);
  ASSERT_TRUE(a.found && formula.found);
  EXPECT_GT(a.stats.reranked, 1);
  EXPECT_EQ(formula.stats.reranked, 1);
  EXPECT_LE(a.prediction.step_time_s, formula.prediction.step_time_s);
  EXPECT_LE(formula.searched_step_time_s, a.searched_step_time_s);  // the formula's best is the formula's least
  EXPECT_EQ(to_yaml(a.plan), to_yaml(b.plan));
  EXPECT_EQ(a.plan.summary.predicted.step_time_s, a.prediction.step_time_s);
  EXPECT_NEAR(a.searched_step_time_s, a.prediction.formula_step_time_s, 1e-9 * a.searched_step_time_s);
  // Without shared cores predict() is the formula: one candidate, nothing to re-rank.
  SearchResult plain = search(g, *runner_model(0, 1e-4, 1e-5, 2e-5), ts);
  EXPECT_EQ(plain.stats.reranked, 1);
}

}  // namespace

// The data-parallel gradient all-reduce is charged by the profile's cold figure ("grad_all_reduce", measured
// after the ranks rewrote their gradients and displaced the caches), every other all-reduce by the hot one;
// without the cold figure both are the all-reduce's.
TEST(RunnerCosts, GradientSyncUsesTheColdAllReduce) {
  CpuFigures f = fallback_cpu_figures(4, 2);
  Profile p = cpu4_profile(f);
  p.collectives["all_reduce"] = {1e-5, 1e-10};
  p.collectives["all_reduce@2"] = {4e-5, 5e-10};
  auto hot = calibrated_cost_model(cluster_preset("cpu:4", f), p);
  p.collectives["grad_all_reduce"] = {2e-5, 3e-10};
  auto cold = calibrated_cost_model(cluster_preset("cpu:4", f), p);
  const Group four{4, 1}, two{2, 1};
  EXPECT_DOUBLE_EQ(cold->collective_time(Collective::AllReduce, 1e6, four), 6 * 1e-5 + 1.5e6 * 1e-10);
  EXPECT_DOUBLE_EQ(cold->grad_sync_time(1e6, four), 6 * 2e-5 + 1.5e6 * 3e-10);
  EXPECT_DOUBLE_EQ(hot->grad_sync_time(1e6, four), hot->collective_time(Collective::AllReduce, 1e6, four));
  EXPECT_DOUBLE_EQ(hot->grad_sync_time(1e6, two), 2 * 4e-5 + 1e6 * 5e-10);
  // predict() charges the data-parallel sync by it; the tensor-parallel collectives are unchanged.
  graph::Graph g = model_graph("tiny_gpt.yaml", 16);
  TrainSettings ts{16, 2};
  SearchResult r = search_shape(g, *cold, ts, 4, 0);
  ASSERT_TRUE(r.found) << r.why_none;
  r.plan.summary.zero = 0;  // the all-reduce alone (ZeRO 1 adds the parameters' broadcast)
  StepPrediction c = predict(r.plan, g, *cold, ts), h = predict(r.plan, g, *hot, ts);
  EXPECT_DOUBLE_EQ(c.stages[0].dp_sync_s, cold->grad_sync_time(c.stages[0].param_bytes, four));
  EXPECT_GT(c.stages[0].dp_sync_s, h.stages[0].dp_sync_s);
  EXPECT_DOUBLE_EQ(c.stages[0].comm_s, h.stages[0].comm_s);
  EXPECT_NEAR(r.searched_step_time_s, predict(search_shape(g, *cold, ts, 4, 0).plan, g, *cold, ts).formula_step_time_s,
              1e-9 * c.formula_step_time_s);
  Profile back = round_trip(p);
  EXPECT_EQ(back.collectives.at("grad_all_reduce"), (std::pair<double, double>{2e-5, 3e-10}));
}

// A run's measurements fed back (Profile::Feedback): every busy figure scaled by busy_scale, every tail figure by
// tail_scale, so a prediction becomes busy_scale x (step - tail) + tail_scale x tail, in the formula and in the
// shared-core simulation alike; the scales compound over a model already fed back; the profile keeps them.
TEST(Feedback, ScalesTheBusyAndTheTailFiguresOfAPrediction) {
  graph::Graph g = model_graph("tiny_gpt.yaml", 16);
  TrainSettings ts{16, 2};
  ts.clip = true;
  for (int cores : {0, 2}) {
    CpuFigures f = fallback_cpu_figures(4, 2);
    f.cores = cores;
    Profile p = cpu4_profile(f);
    p.runner = {1e-3, 2e-4, 5e-4};
    p.clip_s_per_byte = 1e-10;
    p.switch_s_per_byte = 1e-11;
    auto base = calibrated_cost_model(cluster_preset("cpu:4", f), p);
    auto fed = fed_back_cost_model(calibrated_cost_model(cluster_preset("cpu:4", f), p), 1.5, 3);
    EXPECT_EQ(fed->busy_scale(), 1.5);
    EXPECT_EQ(fed->tail_scale(), 3);
    EXPECT_EQ(base->busy_scale(), 1);
    EXPECT_DOUBLE_EQ(fed->optimizer_time(1e6, 2), 3 * base->optimizer_time(1e6, 2));
    EXPECT_DOUBLE_EQ(fed->p2p_time(1e6, false), 1.5 * base->p2p_time(1e6, false));
    EXPECT_DOUBLE_EQ(fed->step_overhead(), 3e-3);
    // A pipeline without data parallelism (no exposed sync): exactly linear in the two scales.
    SearchResult r = search_shape(g, *base, ts, 1, 4, 8);
    ASSERT_TRUE(r.found) << r.why_none;
    StepPrediction b = predict(r.plan, g, *base, ts), x = predict(r.plan, g, *fed, ts);
    ASSERT_GT(b.tail_s, 0);
    EXPECT_NEAR(x.tail_s, 3 * b.tail_s, 1e-12) << cores;
    EXPECT_NEAR(x.step_time_s, 1.5 * (b.step_time_s - b.tail_s) + 3 * b.tail_s, 1e-9 * b.step_time_s) << cores;
    // Compounded: a model fed back twice reports the product of the scales.
    auto twice = fed_back_cost_model(std::move(fed), 2, 0.5);
    EXPECT_EQ(twice->busy_scale(), 3);
    EXPECT_EQ(twice->tail_scale(), 1.5);
    EXPECT_NEAR(predict(r.plan, g, *twice, ts).step_time_s, 3 * (b.step_time_s - b.tail_s) + 1.5 * b.tail_s,
                1e-9 * b.step_time_s);
  }
  Profile p = cpu4_profile(fallback_cpu_figures(4, 2));
  p.feedback.push_back({2, 3, 1.25, 0.8});
  p.feedback.push_back({4, 1, 0.9, 2.5});
  Profile back = round_trip(p);
  ASSERT_EQ(back.feedback.size(), 2u);
  ASSERT_NE(back.feedback_for(4), nullptr);
  EXPECT_EQ(back.feedback_for(4)->records, 1);
  EXPECT_EQ(back.feedback_for(4)->busy_scale, 0.9);
  EXPECT_EQ(back.feedback_for(2)->tail_scale, 0.8);
  EXPECT_EQ(back.feedback_for(8), nullptr);
}

// A malformed feedback section is an error at its place, the profile otherwise read.
TEST(Feedback, MalformedEntriesAreLocated) {
  const std::string head = to_yaml(cpu4_profile(fallback_cpu_figures(4, 2)));
  const int line = static_cast<int>(std::count(head.begin(), head.end(), '\n')) + 2;
  struct Case {
    std::string text, says;
  } cases[] = {
      {"feedback: {devices: 2}\n", "must be a list"},
      {"feedback:\n  - {devices: 2, records: 1, busy_scale: 0, tail_scale: 1}\n", "busy_scale must be > 0"},
      {"feedback:\n  - {devices: 2, records: 1, busy_scale: 1}\n", "needs 'tail_scale'"},
      {"feedback:\n  - {devices: 0, records: 1, busy_scale: 1, tail_scale: 1}\n", "devices must be between"},
      {"feedback:\n  - {devices: 2, records: 1, busy_scale: 1, tail_scale: 1, bias: 3}\n", "bias"},
      {"feedback:\n  - {devices: 2, records: 1, busy_scale: 1, tail_scale: 1}\n"
       "  - {devices: 2, records: 4, busy_scale: 1, tail_scale: 1}\n",
       "second feedback entry for devices 2"},
  };
  for (const Case& c : cases) {
    Diagnostics d;
    parse_profile(head + c.text, "p.yaml", d);
    ASSERT_FALSE(d.empty()) << c.text;
    const std::string all = dump(d);
    EXPECT_NE(all.find(c.says), std::string::npos) << all;
    EXPECT_GE(d.all()[0].loc.line, line - 1) << all;
  }
}

// The roofline against the cache's bandwidth for ops whose bytes fit in a device's half share of the last-level
// cache, against memory's for the rest, and against memory's throughout where the profile has no cache
// bandwidth (profiles written before it); the calibrated model uses it, the profile keeps it.
TEST(Roofline, SmallOpsAgainstTheCacheBandwidth) {
  EXPECT_DOUBLE_EQ(roofline(1e6, 1e5, 1e10, 1e9, 1e11, 1e6), 1e-4);   // fits: compute-bound at the cache's speed
  EXPECT_DOUBLE_EQ(roofline(1e6, 2e6, 1e10, 1e9, 1e11, 1e6), 2e-3);   // beyond the share: memory-bound
  EXPECT_DOUBLE_EQ(roofline(1e6, 1e5, 1e10, 1e9, 0, 1e6), 1e-4);      // no cache figure: memory's
  EXPECT_DOUBLE_EQ(roofline(1e3, 1e5, 1e10, 1e9, 0, 1e6), 1e-4);
  EXPECT_DOUBLE_EQ(roofline(1e3, 1e5, 1e10, 1e9, 1e11, 1e6), 1e-6);

  CpuFigures f = fallback_cpu_figures(4, 2);
  Profile p = cpu4_profile(f);
  p.efficiency["linear"]["1e5"] = 0.5;
  p.cache_bytes = 32e6;  // a device's half share on cpu:4: 4 MB
  Profile cached = p;
  cached.cache_bandwidth = 100 * f.memory_bandwidth;
  auto plain = calibrated_cost_model(cluster_preset("cpu:4", f), p);
  auto with_cache = calibrated_cost_model(cluster_preset("cpu:4", f), cached);
  const ops::OpDef& linear = ops::Registry::get().at("linear");
  ops::Attrs attrs;
  attrs.set("out", int64_t{1});
  attrs.set("bias", true);
  // x [64, 32] (f32), weight [1, 32], bias [1] -> y [64, 1]: 4 KFLOP over 8.5 KB, memory-bound against memory.
  std::vector<TensorDesc> in{{Shape{64, 32}, DType::f32}, {Shape{1, 32}, DType::f32}, {Shape{1}, DType::f32}};
  std::vector<TensorDesc> out{{Shape{64, 1}, DType::f32}};
  const ops::Cost k = ops::op_cost(linear, attrs, in, out);
  const double overhead = AnalyticFigures{}.op_overhead_s;
  EXPECT_NEAR(with_cache->forward_time(linear, attrs, in, out) - overhead,
              roofline(k.flops, k.bytes, f.peak_flops_f32, f.memory_bandwidth, cached.cache_bandwidth, 4e6) / 0.5, 1e-15);
  EXPECT_NEAR(plain->forward_time(linear, attrs, in, out) - overhead,
              std::max(k.flops / f.peak_flops_f32, k.bytes / f.memory_bandwidth) / 0.5, 1e-15);
  EXPECT_LT(with_cache->forward_time(linear, attrs, in, out), plain->forward_time(linear, attrs, in, out));
  EXPECT_EQ(round_trip(cached).cache_bandwidth, cached.cache_bandwidth);
  EXPECT_EQ(round_trip(p).cache_bandwidth, 0);
}

// ---- the memory formulas of docs/planner.md (issue 22) ---------------------------------------------------------

// ZeRO (Rajbhandari et al. 2020, section 5): mixed-precision AdamW holds 2 + 2 + K bytes per parameter, K = 12 (fp32
// master copy, momentum, variance); stage 1 shards K, stage 2 also the gradients, stage 3 also the weights over Nd.
TEST(Memory, ModelStatesFollowZero) {
  TrainSettings ts{64, 2};
  apply_precision(ts, "bf16", true);
  EXPECT_EQ(ts.compute, DType::bf16);
  const double psi = 1e9, nd = 64, bytes = 2 * psi;  // parameter bytes in bf16
  EXPECT_DOUBLE_EQ(model_states(bytes, ts, 0, 64).total(), (2 + 2 + 12) * psi);
  EXPECT_DOUBLE_EQ(model_states(bytes, ts, 1, 64).total(), (2 + 2) * psi + 12 * psi / nd);
  EXPECT_DOUBLE_EQ(model_states(bytes, ts, 2, 64).total(), 2 * psi + (2 + 12) * psi / nd);
  EXPECT_DOUBLE_EQ(model_states(bytes, ts, 3, 64).total(), (2 + 2 + 12) * psi / nd);
  // f32 (and every precision on cpu devices): 4 + 4 + 8, as before.
  TrainSettings f{64, 2};
  apply_precision(f, "bf16", false);
  EXPECT_EQ(f.compute, DType::f32);
  EXPECT_DOUBLE_EQ(model_states(4 * psi, f, 0, 64).total(), 16 * psi);
}

// Per transformer layer, activation bytes kept for backward (Korthikanti et al. 2022, section 4): braid's figures for
// a GPT block of the 175B shape (s 2048, b 1, h 12288, a 96) in bf16, one device: 38 sbh without recomputation
// (34 sbh + 5 a s^2 b in the paper, whose attention keeps its s x s probabilities; braid keeps every layer's
// outputs: layer norms 2, q k v 6, context 2, attention output 2, residuals 4, fc 8, GELU 8, proj 2, dropout 2 (no
// mask: its backward draws it again), and a log-sum-exp row, flash-style); selective 26 sbh (layer norms and GELU
// dropped; the paper's selective, which recomputes the attention core: 34 sbh); full 2 sbh (the block's input), as in the paper.
TEST(Memory, ActivationsPerLayerFollowKorthikanti) {
  auto gpt = [](int layers) {
    Diagnostics diags;
    io::VarOverride o;
    o.name = "n_layer";
    o.value.kind = io::YNode::Kind::Scalar;
    o.value.scalar = std::to_string(layers);
    io::ModelSpec spec = io::load_model(source_dir() + "/models/bench/gpt3_175b.yaml", {o}, diags);
    diags.throw_if_any();
    return graph::build_graph(spec, 1);
  };
  const graph::Graph g2 = gpt(2), g1 = gpt(1);
  auto m = analytic_cost_model(cluster_preset("dgx-a100-80gb", {}));
  // Activations of one micro-batch on one device, every block under `mode`; one block = two blocks less one.
  auto act = [&](const graph::Graph& g, const std::string& mode) {
    Plan plan = single_device_plan(g, 1, 1);
    for (auto& l : plan.layers)
      if (l.layer.rfind("h.", 0) == 0) l.recompute = mode;
    TrainSettings ts{1, 2};
    apply_precision(ts, "bf16", true);
    return predict(plan, g, *m, ts).stages[0].act_bytes;
  };
  const double sbh = 2048.0 * 12288;
  for (auto [mode, want] : {std::pair<const char*, double>{"none", 38}, {"selective", 26}, {"full", 2}}) {
    const double per_layer = (act(g2, mode) - act(g1, mode)) / sbh;
    std::printf("activations per layer, %s: %.3f sbh bytes\n", mode, per_layer);
    EXPECT_NEAR(per_layer, want, 0.05) << mode;  // + 0.016: the log-sum-exp rows and layer norms' statistics
  }
}
