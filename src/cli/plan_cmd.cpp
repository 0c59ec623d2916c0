// `braid plan`: loads a run, picks the cluster (--cluster file or preset, --devices cpu:N, or the run's devices),
// searches (planner/search.h) keeping the pins of the run's plan file, writes the plan file, and with --explain
// prints the runner-up of every non-default layer, the pure strategies and what bound the choice.
// A cpu:N cluster takes its figures from the calibration profile when one is cached (exec/calibrate.h).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "exec/calibrate.h"
#include "exec/preflight.h"
#include "graph/build.h"
#include "io/run_config.h"
#include "exec/run_setup.h"
#include "planner/cluster.h"
#include "planner/search.h"
#include "planner/search_intervals.h"

namespace braid::cli {
namespace {

namespace fs = std::filesystem;
using namespace planner;

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  return buf;
}

std::string secs(double s) {
  char buf[32];
  if (s >= 1) std::snprintf(buf, sizeof buf, "%.3f s", s);
  else std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  return buf;
}

std::string shape(const Plan& p) {
  const Summary& s = p.summary;
  return "dp " + std::to_string(s.data_parallel) + " x tp " + std::to_string(s.tensor_parallel) + " x pp " +
         std::to_string(s.pipeline_stages) + (s.virtual_stages > 1 ? " (x" + std::to_string(s.virtual_stages) + " chunks)" : "") +
         ", " + std::to_string(s.micro_batches) + " micro-batches of " + std::to_string(s.micro_batch) + ", " + s.schedule;
}

void write_dot(const Plan& plan, const graph::Graph& g, const std::string& path) {
  std::ofstream f(path);
  if (!f) throw UserError(SourceLoc{path, 0, 0}, "cannot write '" + path + "'");
  std::map<std::string, const LayerPlan*> entry;
  for (const auto& l : plan.layers) entry[l.layer] = &l;
  auto fwd = forward_layers(g);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < fwd.size(); ++i) index[fwd[i]->layer] = i;
  f << "digraph plan {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n";
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const StagePlan& st = plan.stages[s];
    f << "  subgraph cluster_" << s << " {\n    label=\"stage " << s << " mesh [" << st.mesh[0] << ", " << st.mesh[1]
      << "]\";\n";
    for (size_t i = index.at(st.first_layer); i <= index.at(st.last_layer); ++i) {
      auto it = entry.find(fwd[i]->layer);
      std::string sig = it == entry.end() ? "replicated" : it->second->signature + " x" + std::to_string(it->second->tensor_parallel);
      f << "    \"" << fwd[i]->layer << "\" [label=\"" << fwd[i]->layer << "\\n" << fwd[i]->op->name << ": " << sig << "\"];\n";
    }
    f << "  }\n";
  }
  for (const graph::Node* n : fwd)
    for (ValueId v : n->inputs) {
      const graph::Value& val = g.value(v);
      if (val.producer.valid()) f << "  \"" << g.node(val.producer).layer << "\" -> \"" << n->layer << "\";\n";
    }
  f << "}\n";
}

// A trial of `plan` with one choice changed: its predicted step time, or "does not fit".
std::string trial(const Plan& plan, const graph::Graph& g, const CostModel& model, const TrainSettings& ts, double base) {
  StepPrediction t = predict(plan, g, model, ts);
  if (!t.fits) return "does not fit in memory (peak " + gib(t.peak_memory_bytes) + ")";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.1f%%, %s", 100 * (t.step_time_s / base - 1), secs(t.step_time_s).c_str());
  return buf;
}

// Per device (the fullest stage) what it holds, and the ZeRO stage and recomputation chosen, each with its
// runner-up (the same plan with that choice changed).
void explain_memory(const Plan& plan_in, const graph::Graph& g, const CostModel& model, const TrainSettings& ts,
                    const SearchOptions& so, const StepPrediction& p, FILE* out) {
  const StagePrediction* full = nullptr;
  size_t at = 0;
  for (size_t k = 0; k < p.stages.size(); ++k)
    if (!full || p.stages[k].memory_bytes > full->memory_bytes) full = &p.stages[k], at = k;
  if (!full) return;
  const double temporaries = full->memory_bytes - full->states.total() - full->activation_bytes -
                             full->grad_transient_bytes;  // buffers, reshards, workspace, recompute
  std::fprintf(out,
               "  memory per device (stage %zu, the fullest): parameters %s, gradients %s, optimizer state %s, "
               "activations %s (%d micro-batches in flight x %s), backward's activation gradients %s, other %s\n",
               at, gib(full->states.weights).c_str(), gib(full->states.grads).c_str(), gib(full->states.optimizer).c_str(),
               gib(full->activation_bytes).c_str(), full->in_flight, gib(full->act_bytes).c_str(),
               gib(full->grad_transient_bytes).c_str(), gib(temporaries).c_str());
  Plan plan = plan_in;
  add_default_layers(plan, g);
  const double base = p.step_time_s;
  const Summary& s = plan.summary;
  if (s.data_parallel > 1 && so.max_zero > 0) {
    std::string alts;
    for (int z = 0; z <= so.max_zero; ++z) {
      if (z == s.zero) continue;
      Plan t = plan;
      t.summary.zero = z;
      alts += (alts.empty() ? "" : "; ") + std::string("stage ") + std::to_string(z) + " " + trial(t, g, model, ts, base);
    }
    std::fprintf(out, "  ZeRO stage %d over data-parallel groups of %d; the others: %s\n", s.zero, s.data_parallel,
                 alts.c_str());
  }
  // Recomputation: the blocks' modes as chosen, and every block under each other mode.
  std::map<std::string, int> count;
  int blocks = 0;
  std::string last;
  for (const auto& l : plan.layers) {
    std::string prefix = search_detail::instance_prefix(l.layer);
    if (prefix.empty() || prefix == last) continue;
    last = prefix;
    ++blocks;
    ++count[recompute_of(plan, l.layer)];
  }
  if (blocks == 0) return;
  std::string chosen;
  for (const auto& [m, n] : count) chosen += (chosen.empty() ? "" : ", ") + m + " on " + std::to_string(n);
  std::string alts;
  for (const char* m : {"none", "selective", "full"}) {
    if (count.size() == 1 && count.count(m)) continue;
    Plan t = plan;
    t.summary.recompute = "none";
    for (auto& l : t.layers) l.recompute = search_detail::instance_prefix(l.layer).empty() ? "" : m;
    alts += (alts.empty() ? "" : "; ") + std::string(m) + " everywhere " + trial(t, g, model, ts, base);
  }
  std::fprintf(out, "  recomputation of the %d blocks: %s; the others: %s\n", blocks, chosen.c_str(), alts.c_str());
}

}  // namespace

int plan(const PlanArgs& a, FILE* out) {
  io::RunConfig cfg = io::load_run_or_model(a.path, a.sets);
  SourceLoc cli{"<command line>", 0, 0};
  if (cfg.is_model_only)
    throw UserError(SourceLoc{a.path, 1, 1}, "this is a model file; braid plan needs a run file (for the batch)",
                    "write a run file with `model: " + a.path + "` and a train section");
  if (!a.devices.empty() && !a.cluster.empty())
    throw UserError(cli, "--devices and --cluster exclude each other", "--devices cpu:N plans for this machine");
  // 1. The cluster.
  Cluster cluster;
  std::unique_ptr<CostModel> model;
  std::string model_note = "analytic";
  std::string devices = a.devices.empty() ? cfg.devices : a.devices;
  std::string kind;  // the devices' kind when they are devices (not a modelled cluster)
  if (!a.cluster.empty()) {
    if (fs::exists(a.cluster)) {
      Diagnostics d;
      cluster = read_cluster(a.cluster, d);
      d.throw_if_any();
    } else {
      cluster = cluster_preset(a.cluster, {}, cli);
    }
    model = analytic_cost_model(cluster);
  } else {
    DeviceSpec spec;
    std::string err;
    if (!parse_devices(devices, &spec, &err)) throw UserError(cli, "--devices: " + err);
    kind = spec.kind;
    if (spec.kind == "cpu") {
      exec::CpuModel cm = exec::cpu_cost_model(spec.count);
      model = std::move(cm.model);
      model_note = cm.description;
    } else {  // the model `braid train` plans cuda devices with (exec/run_setup.h)
      model = exec::gpu_cost_model(cfg, spec.count, &model_note);
    }
    cluster = model->cluster();
  }
  // 2. The forward graph, the pins of the run's plan file, the search.
  graph::BuildOptions bo;
  bo.with_backward = false;
  bo.with_metrics = false;
  graph::Graph g = graph::build_graph(cfg.model, cfg.train.batch, bo);
  if (!kind.empty()) {  // the devices' backend must run every op (a modelled cluster runs nothing)
    Diagnostics d;
    if (const exec::Backend* b = exec::backend(kind)) exec::check_supported(*b, g, d);
    d.throw_if_any();
  }
  TrainSettings ts;
  ts.batch = cfg.train.batch;
  ts.optimizer_states = optimizer_states(cfg.optimizer.type, cfg.optimizer.momentum);
  ts.clip = cfg.optimizer.clip_grad_norm.value_or(0.0) > 0;
  // Accelerators: a cluster (file or preset) or cuda devices; cpu:N trains in f32 whatever the precision.
  const bool accelerator = !a.cluster.empty() ? cluster.device.name.rfind("cpu", 0) != 0 : devices.rfind("cpu", 0) != 0;
  apply_precision(ts, cfg.train.precision, accelerator);
  ts.head_parallel_attention = !a.cluster.empty() && accelerator;  // modelled: clusters are planned, not run
  Plan pins;
  SearchOptions so;
  so.max_zero = 3;  // ZeRO stages 0-3, on every backend
  if (cfg.parallel.plan != "auto" && !cfg.parallel.plan.empty()) {
    Diagnostics d;
    fs::path pp = fs::path(cfg.path).parent_path() / cfg.parallel.plan;
    pins = read_plan(pp.string(), d);
    d.throw_if_any();
    so.pins = &pins;
  }
  SearchResult r = search(g, *model, ts, so);
  if (!r.found)
    throw UserError(cli, "no plan for " + a.path + " on " + std::to_string(cluster.devices()) + " devices: " + r.why_none,
                    "more devices, a smaller micro-batch, or fewer pins");
  // 3. The plan file, the DOT, the explanation.
  std::string text = to_yaml(r.plan);
  if (a.out.empty()) {
    std::fputs(text.c_str(), out);
  } else {
    std::ofstream f(a.out);
    if (!f || !(f << text)) throw UserError(cli, "cannot write '" + a.out + "'");
  }
  if (!a.dot.empty()) write_dot(r.plan, g, a.dot);
  if (!a.explain) return 0;
  const StepPrediction& p = r.prediction;
  std::fprintf(out, "\nchosen: %s\n  predicted step %s, %.3g TFLOP/s per device, peak memory %s of %s, bound by %s\n",
               shape(r.plan).c_str(), secs(p.step_time_s).c_str(), p.tflops_per_device, gib(p.peak_memory_bytes).c_str(),
               gib(cluster.device.memory_bytes).c_str(), p.bound_by.c_str());
  std::fprintf(out, "  busiest stage: compute %s, communication %s, bubble %s per step\n", secs(p.compute_s).c_str(),
               secs(p.comm_s).c_str(), secs(p.bubble_s).c_str());
  explain_memory(r.plan, g, *model, ts, so, p, out);
  {
    // The step's tail (after the last backward) on the stage that sets it, and what shared cores add per micro-batch.
    const StagePrediction* tail = nullptr;
    double turns = 0;
    for (const auto& st : p.stages) {
      if (!tail || st.tail_s() > tail->tail_s()) tail = &st;
      turns = std::max(turns, st.turn_s);
    }
    if (tail)
      std::fprintf(out, "  after the last backward: gradient sync %s exposed, optimizer %s, weights from memory %s\n",
                   secs(tail->dp_exposed_s).c_str(), secs(tail->optimizer_s).c_str(), secs(tail->weight_read_s).c_str());
    if (turns > 0)
      std::fprintf(out, "  devices sharing a core take turns: up to %s per micro-batch and stage refilling its caches\n",
                   secs(turns).c_str());
  }
  std::fprintf(out, "  cost model %s on %s (%d devices); searched %d of %d shapes in %.2f s%s%s\n", model_note.c_str(),
               cluster.name.c_str(), cluster.devices(), r.stats.configs_searched, r.stats.configs, r.stats.seconds,
               r.stats.reranked > 1 ? ("; chose among the best " + std::to_string(r.stats.reranked) +
                                       " by the shared-cores simulation").c_str() : "",
               r.stats.capped ? " (a front hit its cap: the optimum may be missed)" : "");
  PureStrategies pure = pure_strategies(g, *model, ts, so);
  std::fprintf(out, "\npure strategies:\n");
  for (auto [name, res] : {std::pair<const char*, const SearchResult*>{"all data parallel", &pure.data},
                           {"all tensor parallel", &pure.tensor}, {"all pipeline", &pure.pipeline}}) {
    if (res->found)
      std::fprintf(out, "  %-20s %12s  (%+.1f%%)  %s\n", name, secs(res->prediction.step_time_s).c_str(),
                   100 * (res->prediction.step_time_s / p.step_time_s - 1), shape(res->plan).c_str());
    else
      std::fprintf(out, "  %-20s %12s  %s\n", name, "-", res->why_none.c_str());
  }
  std::fprintf(out, "  %-20s %12s\n", "chosen", secs(p.step_time_s).c_str());
  auto alts = layer_alternatives(r.plan, g, *model, ts);
  if (!alts.empty()) std::fprintf(out, "\nlayers not replicated (choice, runner-up, step time if the runner-up were used):\n");
  for (const auto& x : alts)
    std::fprintf(out, "  %-24s %-16s %-16s %s\n", x.layer.c_str(), x.chosen.c_str(),
                 x.runner_up.empty() ? "-" : x.runner_up.c_str(),
                 x.runner_up.empty() ? "" : !x.runner_up_fits ? "does not fit in memory" : ("+" + secs(x.delta_s)).c_str());
  return 0;
}

}  // namespace braid::cli
