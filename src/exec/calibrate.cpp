// `braid calibrate` (calibrate.h): op efficiencies from per-node timing of small training graphs on N
// concurrent workers, the plan runner's own costs, and the profile from them and from the machine's figures
// (calibrate_machine.cpp: bandwidth, collectives, optimizer, sharing, turns). The profile's cache:
// profile_cache.cpp. Formulas: docs/planner.md ("Calibration").
#include "exec/calibrate.h"

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <map>

#include "exec/calibrate_parts.h"
#include "exec/engine.h"
#include "backends/cpu/cpu_graph.h"
#include "graph/build.h"
#include "io/dataset.h"
#include "planner/cluster.h"
#include "planner/layer_cost.h"
#include "planner/search.h"

namespace braid::exec {

double host_memory_share(int n) {
  return 0.8 * static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE)) /
         std::max(1, n);
}
namespace calib {
namespace {

// ---- op efficiencies ---------------------------------------------------------------------------------------------
struct Workload {
  std::string name, text;
  int64_t batch;
};

}  // namespace

std::string gpt(int d, int seq, int heads) {
  return "name: gpt\nvars: {vocab: 256, seq: " + std::to_string(seq) + ", d: " + std::to_string(d) +
         ", heads: " + std::to_string(heads) +
         "}\ninputs:\n  tokens: {shape: [seq], dtype: i32}\n  targets: {shape: [seq], dtype: i32}\nlayers:\n"
         "  - {name: tok, op: embedding, from: tokens, num: vocab, dim: d}\n"
         "  - {name: pos, op: position_embedding, max_len: seq}\n"
         "  - {name: ln1, op: layer_norm}\n  - {name: attn, op: attention, heads: heads, causal: true, dropout: 0.1}\n"
         "  - {name: res1, op: add, from: [attn, pos]}\n  - {name: ln2, op: layer_norm}\n"
         "  - {name: fc, op: linear, out: 4 * d}\n  - {name: act, op: gelu, approximate: tanh}\n"
         "  - {name: proj, op: linear, out: d}\n  - {name: drop, op: dropout, p: 0.1}\n"
         "  - {name: res2, op: add, from: [drop, res1]}\n  - {name: ln_f, op: layer_norm}\n"
         "  - {name: logits, op: linear, out: vocab, bias: false}\n"
         "  - {name: loss, op: cross_entropy, from: [logits, targets]}\noutputs: [loss]\n";
}

std::string mlp(int in, int h1, int h2) {
  return "name: mlp\ninputs:\n  image: {shape: [" + std::to_string(in) +
         "]}\n  label: {shape: [], dtype: i32}\nlayers:\n  - {name: fc1, op: linear, from: image, out: " +
         std::to_string(h1) + "}\n  - {name: act1, op: relu}\n  - {name: fc2, op: linear, out: " + std::to_string(h2) +
         "}\n  - {name: act2, op: relu}\n  - {name: logits, op: linear, out: 10}\n"
         "  - {name: loss, op: cross_entropy, from: [logits, label]}\noutputs: [loss]\n";
}

namespace {

std::string lenet(int c1, int c2, int hidden) {
  return "name: lenet\ninputs:\n  image: {shape: [1, 28, 28]}\n  label: {shape: [], dtype: i32}\nlayers:\n"
         "  - {name: conv1, op: conv2d, from: image, out: " + std::to_string(c1) + ", kernel: 5}\n"
         "  - {name: bn1, op: batch_norm}\n  - {name: act1, op: relu}\n  - {name: pool1, op: max_pool2d, kernel: 2}\n"
         "  - {name: conv2, op: conv2d, out: " + std::to_string(c2) + ", kernel: 5}\n"
         "  - {name: bn2, op: batch_norm}\n  - {name: act2, op: relu}\n  - {name: pool2, op: max_pool2d, kernel: 2}\n"
         "  - {name: flat, op: flatten}\n  - {name: fc1, op: linear, out: " + std::to_string(hidden) + "}\n"
         "  - {name: act3, op: relu}\n  - {name: logits, op: linear, out: 10}\n"
         "  - {name: loss, op: cross_entropy, from: [logits, label]}\noutputs: [loss]\n";
}

// Small to large, so that a tight budget still covers every op family at some size.
std::vector<Workload> workloads() {
  return {{"overhead", mlp(4, 4, 4), 1},
          {"gpt d32", gpt(32, 16, 2), 4},   {"mlp 64", mlp(784, 64, 32), 8},   {"lenet 4/8", lenet(4, 8, 32), 4},
          {"gpt d64", gpt(64, 32, 4), 4},   {"mlp 256", mlp(784, 256, 128), 32}, {"gpt d128", gpt(128, 64, 4), 4},
          {"lenet 8/16", lenet(8, 16, 128), 16}, {"mlp 1024", mlp(784, 1024, 1024), 64},
          {"gpt d256", gpt(256, 128, 4), 4}, {"gpt d128 b16", gpt(128, 64, 4), 16}};
}

struct LayerSample {
  std::string op;
  double flops = 0, bytes = 0;
  double param_bytes = 0;                // trainable parameters the layer reads (CostModel::weight_read_time)
  double forward_s = 0, backward_s = 0;  // per run, averaged over workers and runs
  bool input_grad = true;  // false: planner::weight_gradients_only (not counted in the op's backward ratio)
};

// Per forward layer of the workload's training graph: its cost and measured forward / backward seconds.
std::vector<LayerSample> measure_workload(const Workload& w, int n, double target_s) {
  Diagnostics diags;
  io::ModelSpec spec = io::parse_model(w.text, "<calibrate " + w.name + ">", {}, diags);
  diags.throw_if_any();
  std::vector<std::vector<double>> node_s(static_cast<size_t>(n));
  std::vector<int> runs(static_cast<size_t>(n), 0);
  std::vector<LayerSample> out;
  std::map<std::string, size_t> row;
  std::vector<std::pair<int, bool>> node_row;  // per node: its layer's row (-1: none), backward
  std::vector<double> warm_s(static_cast<size_t>(n));
  std::barrier sync(n);
  on_workers(n, [&](int r) {
    ParamStore store;
    auto runner = make_cpu_graph(spec, w.batch, true, store, 1, CpuGraphOptions{.fuse = false});
    // Refilled before every run: the memory plan reuses an input's bytes after its last reader.
    auto fill = [&]() {
      for (Tensor& t : runner->inputs) {
        if (is_float(t.dtype())) {
          float* p = t.data<float>();
          for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>((i * 7919 % 1000) / 1000.0 - 0.5);
        } else {
          t.zero();  // token 0, class 0: valid for every integer input
        }
      }
    };
    fill();
    auto& ns = node_s[static_cast<size_t>(r)];
    ns.assign(runner->g.nodes().size(), 0.0);
    auto t0 = Clock::now();
    runner->exec->run(true, 1, 0);  // warm-up: caches, page faults
    warm_s[static_cast<size_t>(r)] = std::max(1e-5, seconds_since(t0));
    // Every worker runs the same number of runs, starting together, so that all N compute throughout: a
    // worker left alone runs faster where devices share cores (the figures are those of all N busy).
    sync.arrive_and_wait();
    const double once = *std::max_element(warm_s.begin(), warm_s.end());
    const int iters = static_cast<int>(std::clamp(target_s / once, 2.0, 200.0));
    sync.arrive_and_wait();
    // The mean over the runs, not the median: with more devices than cores the OS time-slices the workers
    // (slices of milliseconds, nodes of microseconds), so most node runs see a whole core and the slices a
    // device waits land on a few; only the mean carries the device's share of the core.
    runner->exec->set_node_timing(ns.data());
    std::fill(ns.begin(), ns.end(), 0.0);
    for (int i = 0; i < iters; ++i) {
      fill();
      runner->exec->run(true, 1, static_cast<uint64_t>(i + 1));
    }
    runner->exec->set_node_timing(nullptr);
    runs[static_cast<size_t>(r)] = iters;
    if (r != 0) return;
    const graph::Graph& g = runner->g;
    for (const auto& node : g.nodes()) {
      if (node.backward) continue;
      std::vector<TensorDesc> in, o;
      for (ValueId v : node.inputs) in.push_back(g.value(v).desc);
      for (ValueId v : node.outputs) o.push_back(g.value(v).desc);
      ops::Cost c = ops::op_cost(*node.op, node.attrs, in, o);
      row.emplace(node.layer, out.size());
      out.push_back(LayerSample{node.op->name, c.flops, c.bytes});
      for (ValueId v : node.inputs)
        if (const graph::ParamInfo* pi = g.value(v).kind == graph::ValueKind::Param ? g.find_param(g.value(v).name) : nullptr;
            pi && !pi->spec.buffer)
          out.back().param_bytes += static_cast<double>(g.value(v).desc.bytes());
      out.back().input_grad = !planner::weight_gradients_only(g, node);
    }
    for (const auto& node : g.nodes()) {
      auto it = row.find(node.layer);
      node_row.emplace_back(it == row.end() ? -1 : static_cast<int>(it->second), node.backward);
    }
  });
  // Averaged over workers: every worker built the same graph, so node indices agree.
  for (size_t i = 0; i < node_row.size(); ++i) {
    auto [k, backward] = node_row[i];
    if (k < 0) continue;
    double s = 0;
    for (int r = 0; r < n; ++r) s += node_s[static_cast<size_t>(r)][i] / runs[static_cast<size_t>(r)];
    s /= n;
    (backward ? out[static_cast<size_t>(k)].backward_s : out[static_cast<size_t>(k)].forward_s) += s;
  }
  return out;
}

// ---- the plan runner's own costs ----------------------------------------------------------------------------------
// Engine's median step time over `steps` steps (after 5 untimed) of `plan`.
double runner_step_s(const io::ModelSpec& spec, const io::OptimizerSpec& os, const planner::Plan& plan,
                     io::Dataset& data, int64_t batch, int steps) {
  Engine pr(spec, os, plan, 1);
  io::BatchSampler sampler(data.size(), batch, true, 1);
  std::vector<double> ts;
  for (int i = 0; i < 5 + steps; ++i) {
    auto t0 = Clock::now();
    pr.step(data, sampler.next_view(), i, 1e-3, 1.0);
    if (i >= 5) ts.push_back(seconds_since(t0));
  }
  return median(ts);
}

// What Engine's steps take beyond the model's prediction without runner costs, on a small MLP whose
// compute is short: dp N with 1 and 4 micro-batches, a pipeline of N stages with N and 4N micro-batches.
// Residual r = measured - predicted; per-micro-batch cost (one stage) = (r(dp, 4) - r(dp, 1)) / 3; in a
// pipeline = (r(pp, 4N) - r(pp, N)) / 3N (each micro-batch more adds one micro-batch's time of the slowest
// stage); per step = r(dp, 1) - the per-micro-batch cost. Clamped at >= 0.
planner::Profile::Runner measure_runner(int n, const planner::Profile& p, Quiet& quiet) {
  FILE* log = quiet.log;
  planner::Profile::Runner out;
  if (n < 2) return out;
  Diagnostics diags;
  io::ModelSpec spec = io::parse_model(mlp(64, 64, 64), "<calibrate runner>", {}, diags);
  diags.throw_if_any();
  const int64_t batch = 8 * n;
  io::OptimizerSpec os;
  os.type = "sgd";
  os.lr = 1e-3;
  os.momentum = 0.9;
  planner::CpuFigures f = p.cpu;
  f.cores = machine_cores();
  f.busy_speed = p.busy_speed;
  planner::Profile bare = p;
  bare.runner = {};
  auto model = planner::calibrated_cost_model(planner::cluster_preset("cpu:" + std::to_string(n), f), bare);
  const graph::Graph fwd = graph::build_graph(spec, batch, {});
  graph::BuildOptions bo;
  bo.with_backward = true;
  const graph::Graph g = graph::build_graph(spec, 1, bo);
  io::DataSourceSpec ds;
  ds.format = "synthetic";
  ds.samples = 16 * batch;
  auto data = io::open_dataset(ds, dataset_inputs(spec, g), 1);
  planner::TrainSettings ts;
  ts.batch = batch;
  ts.optimizer_states = 1;
  auto residual = [&](int dp, int pp, int64_t m) {
    planner::Plan pins;
    pins.summary.data_parallel = dp;
    pins.summary.pinned.set("data_parallel", {});
    pins.summary.pipeline_stages = pp;
    pins.summary.pinned.set("pipeline_stages", {});
    pins.summary.tensor_parallel = 1;
    pins.summary.pinned.set("tensor_parallel", {});
    pins.summary.micro_batches = m;
    pins.summary.pinned.set("micro_batches", {});
    pins.summary.schedule = "1f1b";
    pins.summary.pinned.set("schedule", {});
    planner::SearchOptions so;
    so.pins = &pins;
    planner::SearchResult r = planner::search(fwd, *model, ts, so);
    if (!r.found) throw InternalError("calibrate: no plan for the runner workload: " + r.why_none);
    double measured = quietly(quiet, "runner dp " + std::to_string(dp) + " x pp " + std::to_string(pp),
                              [&]() { return runner_step_s(spec, os, r.plan, *data, batch, 40); });
    if (log)
      std::fprintf(log, "  runner dp %d x pp %d, %lld micro-batches: %.3f ms, predicted %.3f ms without runner costs\n",
                   dp, pp, static_cast<long long>(m), measured * 1e3, r.prediction.step_time_s * 1e3);
    return measured - r.prediction.step_time_s;
  };
  const double dp1 = residual(n, 1, 1), dp4 = residual(n, 1, 4);
  const double pp1 = residual(1, n, n), pp4 = residual(1, n, 4 * n);
  out.micro_batch_overhead = std::max(0.0, (dp4 - dp1) / 3);
  out.pipeline_micro_batch_overhead = std::max(0.0, (pp4 - pp1) / (3.0 * n));
  out.step_overhead = std::max(0.0, dp1 - out.micro_batch_overhead);
  return out;
}

// Each layer's forward and backward: the median over a workload's passes of the passes' means.
std::vector<LayerSample> median_of_passes(const std::vector<std::vector<LayerSample>>& passes, const Workload& w) {
  std::vector<LayerSample> out = passes.at(0);
  for (size_t i = 0; i < out.size(); ++i) {
    std::vector<double> f, b;
    for (const auto& pass : passes) {
      BRAID_ASSERT(pass.size() == out.size() && pass[i].op == out[i].op, "calibration workload ", w.name, " changed");
      f.push_back(pass[i].forward_s);
      b.push_back(pass[i].backward_s);
    }
    out[i].forward_s = median(f);
    out[i].backward_s = median(b);
  }
  return out;
}

// Every workload in kPasses passes of 0.2 s, each layer's times the median of the passes' means, the passes
// taken in turn over all workloads: a time slice of several milliseconds that a worker waits lands on one node
// of one pass, and a slow spell of the host (this VM's neighbours slow everything by 20-60% for seconds at a
// time, unseen by other_cores) on one pass of several workloads, moving those passes' means, not the medians.
// With one pass of 0.4 s two calibrations minutes apart differed by up to 5x in some (op, class) figures and
// backward ratios (cross_entropy 1e6: 0.64 and 0.13; embedding's ratio 0.32 and 5.6); with three passes of a
// workload back to back, the prediction of mlp tp 2 on cpu:2 ranged over 2.3-3.5 ms in six calibrations.
constexpr int kPasses = 3;

struct OpPasses {
  std::vector<Workload> all = workloads();
  std::vector<std::vector<std::vector<LayerSample>>> passes;  // [workload][pass]; none for the overhead
  std::vector<double> spent;                                  // seconds per workload
  size_t measured = 0;                                        // workloads measured (the budget skips the rest)
  double overhead = 5e-6;                                     // the per-op overhead, median of the passes
};

// The workloads' passes within the budget (counted from `start`) and the per-op overhead.
OpPasses measure_op_passes(const CalibrateOptions& o, Quiet& quiet, Clock::time_point start) {
  const int n = o.devices;
  OpPasses m;
  m.passes.resize(m.all.size());
  m.spent.resize(m.all.size());
  m.measured = m.all.size();
  std::vector<double> overhead_passes;  // the overhead workload's median node time, per pass
  for (int k = 0; k < kPasses; ++k)
    for (size_t i = 0; i < m.measured; ++i) {
      const Workload& w = m.all[i];
      if (w.name == "overhead") {
        // In every pass like the workloads, the median pass kept: measured once, it came out 0.45, 1.47, 2.13
        // and 0.45 us in four calibrations of one hour, and tiny_gpt's pipelines (hundreds of small ops a step)
        // were predicted 8.0-9.2 ms with it.
        std::vector<double> ts;
        for (const auto& r : quietly(quiet, w.name, [&]() { return measure_workload(w, n, 0.05); }))
          ts.push_back(r.forward_s);
        overhead_passes.push_back(std::max(1e-7, median(ts)));
        m.overhead = median(overhead_passes);
        if (o.log && k + 1 == kPasses) std::fprintf(o.log, "  %-15s %.2f us per op\n", "op overhead", m.overhead * 1e6);
        continue;
      }
      // The budget skips larger sizes, never an op family: until each model (gpt, mlp, lenet: the names' first
      // word) has one workload measured, the next one starts however long those before took (under a load of
      // 10 on 2 cores a 2 s budget had run out before lenet's, and conv2d had no efficiency at all).
      const std::string kind = w.name.substr(0, w.name.find(' '));
      bool kind_seen = false;
      for (size_t j = 0; j < i; ++j) kind_seen = kind_seen || m.all[j].name.substr(0, m.all[j].name.find(' ')) == kind;
      if (k == 0 && kind_seen && seconds_since(start) * kPasses > o.budget_s) {
        if (o.log) std::fprintf(o.log, "  (budget of %.0f s: later workloads skipped)\n", o.budget_s);
        m.measured = i;
        break;
      }
      auto t0 = Clock::now();
      m.passes[i].push_back(quietly(quiet, w.name, [&]() { return measure_workload(w, n, 0.2); }));
      m.spent[i] += seconds_since(t0);
    }
  return m;
}

// Per (op, shape class) the roofline time over the measured time less the per-op overhead, and per op the
// backward's ratio to its forward, into `p` (its device figures, weight_s_per_byte and the cache's set).
void fit_ops(planner::Profile& p, const OpPasses& m, int n, FILE* log) {
  std::map<std::string, std::map<std::string, std::pair<double, double>>> eff;  // op -> class -> (roof, time)
  std::map<std::string, std::pair<double, double>> ratio;                     // op -> (backward, forward)
  const double peak = p.cpu.peak_flops_f32, bw = p.cpu.memory_bandwidth, overhead = m.overhead;
  const double cache_share = p.cache_bytes / 2 / n;
  for (size_t i = 0; i < m.measured; ++i) {
    const Workload& w = m.all[i];
    if (m.passes[i].empty()) continue;  // the overhead
    const std::vector<LayerSample> rows = median_of_passes(m.passes[i], w);
    // The workload's runs follow one another: its weights come from memory for the part of the N workers'
    // weights and gradients that does not fit in half the cache (as CostModel::weight_read_time, no states).
    double workload_params = 0;
    for (const auto& r : rows) workload_params += r.param_bytes;
    const double cold = 1 - planner::cache_fraction(p.cache_bytes, 2 * workload_params, n);
    for (const auto& r : rows) {
      if (r.forward_s <= 0) continue;
      const double roof = planner::roofline(r.flops, r.bytes, peak, bw, p.cache_bandwidth, cache_share);
      // The model's forward: overhead + roof / efficiency, plus weight_read_time once per step; its backward:
      // the ratio x that forward. The fit inverts both.
      const double weights = cold * r.param_bytes * p.weight_s_per_byte;
      const double forward = std::max(r.forward_s - weights, 0.05 * r.forward_s);
      auto& e = eff[r.op][planner::shape_class(r.flops)];
      e.first += roof;
      e.second += std::max(forward - overhead, 0.05 * r.forward_s);
      if (r.backward_s > 0 && r.input_grad) ratio[r.op].first += r.backward_s, ratio[r.op].second += forward;
    }
    if (log)
      std::fprintf(log, "  %-15s batch %-4lld %.1f s\n", w.name.c_str(), static_cast<long long>(w.batch), m.spent[i]);
  }
  p.cpu.op_overhead = overhead;
  for (const auto& [op, classes] : eff)
    for (const auto& [cls, rt] : classes)
      if (rt.second > 0) p.efficiency[op][cls] = std::min(100.0, rt.first / rt.second);  // > 1: OpDef::cost overcounts
  for (const auto& [op, bf] : ratio)
    if (bf.second > 0) p.backward_ratio[op] = bf.first / bf.second;
}

// Collectives and point to point on the in-process backend; the link from send_recv (else the fallback figures).
void measure_links(planner::Profile& p, int n, int cores, Quiet& quiet) {
  // A collective's bytes are read and written at least once: no faster than the cache bandwidth's copy.
  p.collectives = measure_collectives(n, quiet, p.cache_bandwidth > 0 ? 2 / p.cache_bandwidth : 0);
  if (auto it = p.collectives.find("send_recv"); it != p.collectives.end()) {
    p.cpu.link_latency = it->second.first;
    p.cpu.link_bandwidth = it->second.second > 0 ? 1 / it->second.second : 5e9;
  } else {
    planner::CpuFigures f = planner::fallback_cpu_figures(n, cores);
    p.cpu.link_latency = f.link_latency;
    p.cpu.link_bandwidth = f.link_bandwidth;
  }
}

// The optimizer's update per parameter byte, clipping, accumulation, sharing and turns, then the plan runner's own
// costs (with the figures before them).
void measure_step_costs(planner::Profile& p, int n, Quiet& quiet, FILE* log) {
  p.optimizer_s_per_byte = quietly(quiet, "optimizer", [&]() { return measure_optimizer(n, false); });
  p.optimizer_warm_s_per_byte = quietly(quiet, "optimizer (warm)", [&]() { return measure_optimizer(n, true); });
  if (log)
    for (const auto& [k, v] : p.optimizer_s_per_byte)
      std::fprintf(log, "  optimizer, %d states: %.3f ns per parameter byte from memory, %.3f from cache\n", k,
                   v * 1e9, p.optimizer_warm_s_per_byte[k] * 1e9);
  p.clip_s_per_byte = quietly(quiet, "gradient clipping", [&]() { return measure_clip(n); });
  if (log) std::fprintf(log, "  gradient clipping: %.3f ns per gradient byte\n", p.clip_s_per_byte * 1e9);
  p.accumulate_s_per_byte = quietly(quiet, "gradient accumulation", [&]() { return measure_accumulate(n); });
  if (log)
    std::fprintf(log, "  gradient accumulation: %.3f ns per gradient byte\n", p.accumulate_s_per_byte * 1e9);
  p.busy_speed = quietly(quiet, "busy speed", [&]() { return measure_busy_speed(n); });
  double turn_bytes = 0;
  p.switch_s_per_byte = quietly(quiet, "turns on a core", [&]() { return measure_turns(n, &turn_bytes); });
  if (log && p.switch_s_per_byte > 0)
    std::fprintf(log, "  devices taking turns on a core: %.3f ns per byte (%.3f ms per micro-batch of the %.1f MB MLP)\n",
                 p.switch_s_per_byte * 1e9, p.switch_s_per_byte * turn_bytes * 1e3, turn_bytes / 1e6);
  if (log) {
    std::fprintf(log, "  speed with 1..%d devices busy, relative to all:", n);
    for (double x : p.busy_speed) std::fprintf(log, " %.2f", x);
    std::fprintf(log, "\n");
  }
  p.runner = measure_runner(n, p, quiet);
  if (log && n > 1)
    std::fprintf(log, "  runner: %.1f us per step, %.1f us per micro-batch and stage (%.1f us in a pipeline)\n",
                 p.runner.step_overhead * 1e6, p.runner.micro_batch_overhead * 1e6,
                 p.runner.pipeline_micro_batch_overhead * 1e6);
}

}  // namespace
}  // namespace calib

using namespace calib;

planner::Profile calibrate(const CalibrateOptions& o) {
  if (o.devices < 1) throw UserError(SourceLoc{"<command line>", 0, 0}, "--devices must be cpu:N with N >= 1");
  const int n = o.devices, cores = machine_cores();
  Quiet quiet{o.log, o.quiet_tries};
  planner::Profile p;
  p.machine = cpu_model() + " x " + std::to_string(cores) + " cores";
  p.braid_version = kProfileVersion;
  p.devices = n;
  // 1. Device figures: the theoretical peak of the device's share of the cores; measured bandwidth.
  p.cpu.peak_flops_f32 = core_peak_flops() * cores / n;
  p.cpu.memory_bandwidth = quietly(quiet, "memory bandwidth", [&]() { return measure_bandwidth(n); });
  p.cpu.memory_bytes = host_memory_share(n);
  if (o.log)
    std::fprintf(o.log, "braid calibrate: cpu:%d on %s; peak %.1f GFLOP/s per device (theoretical), memory %.1f GB/s "
                 "per device (measured)\n", n, p.machine.c_str(), p.cpu.peak_flops_f32 / 1e9, p.cpu.memory_bandwidth / 1e9);
  // 2. Ops: per (op, shape class) the roofline time over the measured time less the per-op overhead.
  auto start = Clock::now();
  const double bw = p.cpu.memory_bandwidth;
  // A layer's forward packs its weights (the GEMM reads them and writes the packed copy); where the step before
  // left them in memory, not in cache, that is their bytes read and written at the bandwidth measured above
  // (which counts both): fc2 of the MLP 784-1024-1024-10 alone on one core forwards M rows in
  // 0.60 ms + M x 0.020 ms for M = 32..256, and 0.60 ms is its 4 MiB read and written at the 13.6 GB/s of one
  // core (cpu:4's 6.8 GB/s per device, two per core). The model charges it once per step and stage, for the
  // part of the weights the cache did not keep (CostModel::weight_read_time); the fit below takes it out of
  // the workloads' forward samples the same way. Without it plans of 32 rows per replica on the MLP
  // 784-1024-1024-10 were predicted 33-42% fast, of 128 rows 5% (docs/planner.md).
  p.weight_s_per_byte = bw > 0 ? 2 / bw : 0;
  p.cache_bytes = cache_bytes();
  // Never below the memory bandwidth: a copy in cache is not slower than one through memory, and a measurement
  // saying so (a VM reporting its host's last-level cache, of which this guest holds far less; a noisy spell)
  // would make the roofline charge small working sets more than large ones.
  p.cache_bandwidth = std::max(bw, quietly(quiet, "cache bandwidth", [&]() { return measure_cache_bandwidth(n); }));
  if (o.log) std::fprintf(o.log, "  cache bandwidth %.1f GB/s per device (read + write, %.0f KiB buffers)\n",
                          p.cache_bandwidth / 1e9, p.cache_bytes / 2 / n / 2 / 1024);
  fit_ops(p, measure_op_passes(o, quiet, start), n, o.log);
  if (o.log)
    std::fprintf(o.log, "  op measurements took %.1f s in all (--budget %.0f s); collectives, the optimizer and the "
                 "runner follow, outside the budget\n", seconds_since(start), o.budget_s);
  // 3. Collectives and point to point on the in-process backend.
  measure_links(p, n, cores, quiet);
  // 4. The optimizer's update per parameter byte; the plan runner's own costs (with the figures above).
  measure_step_costs(p, n, quiet, o.log);
  if (o.log && quiet.disturbed > 0)
    std::fprintf(o.log, "braid calibrate: warning: %d measurement%s ran beside other processes (up to %.1f cores' worth) "
                 "however often measured; figures from a busy machine make the planner's predictions slow: calibrate "
                 "again when the machine is quiet\n", quiet.disturbed, quiet.disturbed == 1 ? "" : "s", quiet.worst);
  return p;
}

}  // namespace braid::exec
