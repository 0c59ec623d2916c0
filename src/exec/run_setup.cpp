// run_plan(): the run's plan file or the planner's choice, with its prediction (run_setup.h).
#include "exec/run_setup.h"

#include <cstdlib>
#include <filesystem>
#include <set>

#include "core/format.h"
#include "backends/builtin.h"
#include "exec/calibrate.h"
#include "graph/build.h"
#include "planner/search.h"

namespace braid::exec {

std::unique_ptr<planner::CostModel> gpu_cost_model(const io::RunConfig& cfg, int count, std::string* description) {
  // The planner's preset (datasheet peaks, NVLink) sized to the run's devices; the prediction is the datasheet's.
  planner::Cluster cl = planner::cluster_preset("h200x8", {}, SourceLoc{cfg.path, 0, 0});
  cl.devices_per_node = count;
  cl.nodes = 1;
  cl.name = "cuda:" + std::to_string(count) + " (as h200)";
  // bf16 / f16: the planner's TrainSettings (planner::apply_precision) put the products on the 16-bit peak.
  const bool autocast = cfg.train.precision != "f32";
  *description = "analytic, " + std::to_string(count) + " x " + cl.device.name + " in one node" +
                 (autocast ? ", " + cfg.train.precision + " tensor-core peak" : std::string()) +
                 " (assumed for every cuda device: no GPU calibration yet)";
  return planner::analytic_cost_model(cl);
}

namespace {

// A plan file with a stage that the cost model says cannot fit in its devices' memory even with the plan's
// recomputation and ZeRO stage: refused before anything is allocated, at the stage's entry, naming what the
// device would hold and the levers the plan does not pull yet (the planner's prediction is within a few percent
// of the measured peak on cpu devices: docs/benchmarks.md).
void refuse_short_of_memory(const planner::Plan& plan, const graph::Graph& g, const planner::StepPrediction& p,
                            const std::string& devices) {
  if (p.fits) return;
  size_t worst = 0;
  for (size_t s = 0; s < p.stages.size(); ++s)
    if (p.stages[s].memory_bytes > p.stages[worst].memory_bytes) worst = s;
  const planner::StagePrediction& sp = p.stages.at(worst);
  const planner::Summary& sum = plan.summary;
  SourceLoc at = worst < plan.stages.size() ? plan.stages[worst].loc : SourceLoc{};
  if (at.line == 0) at = sum.loc.line ? sum.loc : plan.loc;
  // Recomputation of the stage's layers as the plan gives them (a layer's own mode, else the summary's).
  std::set<std::string> modes;
  bool inside = false;
  const planner::StagePlan& st = plan.stages.at(worst);
  for (const graph::Node* n : planner::forward_layers(g)) {
    if (n->layer == st.first_layer) inside = true;
    if (inside) modes.insert(planner::recompute_of(plan, n->layer));
    if (n->layer == st.last_layer) break;
  }
  if (modes.empty()) modes.insert(sum.recompute);
  std::string recompute;
  for (const auto& m : modes) recompute += (recompute.empty() ? "" : "/") + m;
  char what[512];
  std::snprintf(what, sizeof what,
                "stage %zu needs %s per device (parameters %s, gradients %s, optimizer state %s, activations %s for "
                "%d micro-batch%s in flight), more than the %s a device of %s has, with recompute %s and zero %d",
                worst, human_bytes(sp.memory_bytes).c_str(), human_bytes(sp.states.weights).c_str(),
                human_bytes(sp.states.grads).c_str(), human_bytes(sp.states.optimizer).c_str(),
                human_bytes(sp.activation_bytes).c_str(), sp.in_flight, sp.in_flight == 1 ? "" : "es", human_bytes(p.memory_limit_bytes).c_str(),
                devices.c_str(), recompute.c_str(), sum.zero);
  std::vector<std::string> levers;
  if (modes.count("none") || modes.count("selective"))
    levers.push_back("recompute: full (each layer keeps only its input for backward)");
  if (sum.zero < 3 && sum.data_parallel > 1)
    levers.push_back("zero: 3 (parameters, gradients and optimizer state sharded over the " +
                     std::to_string(sum.data_parallel) + " replicas)");
  if (sum.zero < 3 && sum.data_parallel == 1)
    levers.push_back("data_parallel > 1 with zero: 3 (the model states sharded over the replicas)");
  if (sum.micro_batch > 1) levers.push_back("a smaller micro_batch (with more micro_batches)");
  levers.push_back("more pipeline stages or a larger tensor_parallel");
  std::string hint = "try ";
  for (size_t i = 0; i < levers.size(); ++i)
    hint += (i == 0 ? "" : i + 1 == levers.size() ? ", or " : ", ") + levers[i];
  hint += "; `braid plan RUN` searches them all";
  throw UserError(at, what, hint);
}

}  // namespace

const graph::Graph& RunSetup::forward(const io::ModelSpec& m, int64_t batch, DType half) {
  auto it = forward_.find({batch, half});
  if (it != forward_.end()) return it->second;
  graph::BuildOptions bo;
  bo.half = half;
  return forward_.emplace(std::make_pair(batch, half), graph::build_graph(m, batch, bo)).first->second;
}

const graph::Graph& RunSetup::forward(const io::ModelSpec& m, int64_t batch, DType half, Diagnostics& diags) {
  auto it = forward_.find({batch, half});
  if (it != forward_.end()) return it->second;
  graph::BuildOptions bo;
  bo.half = half;
  const size_t before = diags.size();
  graph::Graph g = graph::build_graph(m, batch, bo, diags);
  if (diags.size() != before) {  // not whole: not kept for later askers
    scratch_ = std::move(g);
    return scratch_;
  }
  return forward_.emplace(std::make_pair(batch, half), std::move(g)).first->second;
}

void parse_run_devices(const io::RunConfig& cfg, RunSetup& s) {
  if (s.parsed) return;
  s.parsed = true;
  if (planner::parse_devices(cfg.devices, &s.devices, &s.devices_error)) s.planning = planning_backend(s.devices.kind);
}

void set_up_devices(const io::RunConfig& cfg, RunSetup& s) {
  parse_run_devices(cfg, s);
  const int64_t micro = std::max<int64_t>(1, cfg.train.micro_batch.value_or(cfg.train.batch));
  s.graph_batch = micro;
  if (cfg.parallel.plan != "auto") {
    Diagnostics diags;
    planner::Plan plan = planner::read_plan(cfg.parallel.plan, diags);
    if (!diags.empty()) return;  // run_plan reads it again and reports its mistakes
    s.plan_file = std::move(plan);
    if (s.plan_file->summary.micro_batch > 0) s.graph_batch = s.plan_file->summary.micro_batch;
  } else if (s.planning && s.devices.count > 1 && micro % s.devices.count == 0) {
    s.graph_batch = micro / s.devices.count;  // the data-parallel replica's, plan: auto's likeliest choice
  }
}

std::optional<RunPlan> run_plan(const io::RunConfig& cfg) {
  RunSetup s;
  set_up_devices(cfg, s);
  return run_plan(cfg, s);
}

std::optional<RunPlan> run_plan(const io::RunConfig& cfg, RunSetup& setup) {
  const SourceLoc at{cfg.path, 0, 0};
  const planner::DeviceSpec& dev = setup.devices;
  const bool automatic = cfg.parallel.plan == "auto";
  if (!setup.devices_error.empty()) {
    if (automatic) return std::nullopt;  // the caller reports the devices as before
    throw UserError(at, "devices '" + cfg.devices + "': " + setup.devices_error);
  }
  if (automatic && dev.count <= 1) return std::nullopt;
  const Backend& b = *setup.planning;
  // The planner's graph at any batch (its shapes are rescaled to each micro-batch: planner/search.h).
  const graph::Graph& fwd = setup.forward(cfg.model, setup.graph_batch);
  planner::TrainSettings ts;
  ts.batch = cfg.train.batch;
  ts.optimizer_states = planner::optimizer_states(cfg.optimizer.type, cfg.optimizer.momentum);
  ts.clip = cfg.optimizer.clip_grad_norm.value_or(0.0) > 0;
  planner::apply_precision(ts, cfg.train.precision, b.mixed_precision());
  RunPlan r;
  r.automatic = automatic;
  if (automatic) {
    // The run's micro-batch is the user's word: the plan streams the same micro-batches (so that random
    // masks, batch statistics and the loss curve are those of one device), however it splits them.
    planner::Plan pins;
    planner::SearchOptions so;
    so.max_zero = b.max_zero_stage();
    if (cfg.train.micro_batch) {
      pins.summary.micro_batches = cfg.train.batch / *cfg.train.micro_batch;
      pins.summary.pinned.set("micro_batches", at);
      so.pins = &pins;
    }
    const std::unique_ptr<planner::CostModel> model = b.cost_model(cfg, dev.count, &r.cost_model);
    planner::SearchResult s = planner::search(fwd, *model, ts, so);
    if (!s.found) return std::nullopt;  // the caller runs data parallel over the devices
    r.plan = std::move(s.plan);
    r.prediction = s.prediction;
    r.busy_scale = model->busy_scale();
    r.tail_scale = model->tail_scale();
    r.search_s = s.stats.seconds;
  } else {
    Diagnostics diags;
    r.plan = setup.plan_file ? *setup.plan_file : planner::read_plan(cfg.parallel.plan, diags);
    diags.throw_if_any();
    const graph::Graph& g = setup.forward(cfg.model, r.plan.summary.micro_batch);
    planner::add_default_layers(r.plan, g);
    planner::validate_plan(r.plan, g, cfg.train.batch, dev, diags);
    diags.throw_if_any();
    const std::unique_ptr<planner::CostModel> model = b.cost_model(cfg, r.plan.summary.devices, &r.cost_model);
    r.prediction = planner::predict(r.plan, g, *model, ts);
    r.busy_scale = model->busy_scale();
    r.tail_scale = model->tail_scale();
    refuse_short_of_memory(r.plan, g, r.prediction, cfg.devices);
  }
  const planner::Summary& s = r.plan.summary;
  char buf[512];
  std::snprintf(buf, sizeof buf, "dp %d x tp %d x pp %d%s, %lld micro-batches of %lld, %s; predicted step %.1f ms (%s)",
                s.data_parallel, s.tensor_parallel, s.pipeline_stages,
                s.virtual_stages > 1 ? (" (x" + std::to_string(s.virtual_stages) + " chunks)").c_str() : "",
                static_cast<long long>(s.micro_batches), static_cast<long long>(s.micro_batch), s.schedule.c_str(),
                r.prediction.step_time_s * 1e3, r.cost_model.c_str());
  r.summary = buf;
  return r;
}

DType device_value_dtype(const io::RunConfig& cfg, bool split) {
  const char* env = std::getenv("BRAID_BF16_VALUES");
  const bool off = env != nullptr && std::string(env) == "0";
  return cfg.train.precision == "bf16" && !split && !off ? DType::bf16 : DType::f32;
}

void set_up_plan(const io::RunConfig& cfg, RunSetup& s) {
  if (!s.run) s.run = run_plan(cfg, s);
  if (!s.devices_error.empty()) return;  // make_engine reports them (a cluster file is checked, not trained on)
  s.plan = s.run ? s.run->plan : data_parallel_plan(cfg, s.devices.count, &s.forward(cfg.model, s.graph_batch));
  const bool split = s.plan->stages.size() > 1 || s.plan->summary.tensor_parallel > 1;
  s.values = s.planning->value_dtype(cfg, split);
}

std::unique_ptr<Engine> make_engine(const io::RunConfig& cfg, const std::optional<RunPlan>& run, Communicator* world,
                                    int rank) {
  RunSetup s;
  set_up_devices(cfg, s);
  if (!s.devices_error.empty()) return make_engine(cfg, s, world, rank);  // refuses them
  s.run = run;
  s.plan = run ? run->plan : data_parallel_plan(cfg, s.devices.count);
  return make_engine(cfg, s, world, rank);
}

std::unique_ptr<Engine> make_engine(const io::RunConfig& cfg, RunSetup& s, Communicator* world, int rank) {
  const SourceLoc at{cfg.path, 0, 0};
  if (!s.devices_error.empty()) throw UserError(at, "devices '" + cfg.devices + "': " + s.devices_error);
  const planner::DeviceSpec& dev = s.devices;
  std::string why_not;
  Backend* b = backend(dev.kind, &why_not);
  if (!b) {
    const bool built = backend_module_present(dev.kind);
    throw UserError(at, "devices " + cfg.devices + ": " + why_not,
                    built ? "install the CUDA runtime, cuBLAS, cuDNN and NCCL this braid was built with (or put "
                            "them on LD_LIBRARY_PATH), or train on cpu"
                          : "configure with -DBRAID_WITH_CUDA=ON where the CUDA toolkit, cuDNN and NCCL are "
                            "installed (README, \"Building by hand\"), or train on cpu");
  }
  const planner::Plan& plan = *s.plan;
  std::vector<int> where;
  if (b->numbered_devices()) {
    where = dev.ids.empty() ? std::vector<int>(static_cast<size_t>(dev.count), 0) : dev.ids;
    if (static_cast<int>(where.size()) < plan.summary.devices)
      throw UserError(at, "the plan uses " + std::to_string(plan.summary.devices) + " devices but devices " +
                              cfg.devices + " lists " + std::to_string(where.size()),
                      "list one GPU per device of the plan (a GPU may be listed more than once)");
  }
  EngineOptions eo;
  eo.sync_batch_norm = cfg.parallel.sync_batch_norm;
  const bool split = plan.stages.size() > 1 || plan.summary.tensor_parallel > 1;
  eo.half = b->value_dtype(cfg, split);
  eo.model = &s.forward(cfg.model, plan.summary.micro_batch, eo.half);
  if (s.eval && eo.half == DType::f32) eo.eval = &*s.eval;
  PlanWorld pw;
  if (world) {
    pw.local = {rank};
    pw.host = world;
  }
  return std::make_unique<Engine>(cfg, plan, *b, where, eo, world ? &pw : nullptr);
}

void check_data_parallel_split(const io::RunConfig& cfg, int devices) {
  const int64_t micro = cfg.train.micro_batch.value_or(cfg.train.batch);
  if (micro % devices != 0)
    throw UserError(SourceLoc{cfg.path, 0, 0},
                    "devices " + cfg.devices + ": the micro-batch of " + std::to_string(micro) +
                        " samples does not split evenly over " + std::to_string(devices) + " data-parallel devices",
                    "make train.micro_batch (or train.batch) a multiple of " + std::to_string(devices));
}

planner::Plan data_parallel_plan(const io::RunConfig& cfg, int devices, const graph::Graph* fwd) {
  check_data_parallel_split(cfg, devices);
  const int64_t batch = cfg.train.batch;
  const int64_t micro = cfg.train.micro_batch.value_or(batch);
  std::optional<graph::Graph> own;
  if (!fwd) fwd = &own.emplace(graph::build_graph(cfg.model, micro / devices, {}));
  planner::Plan p = planner::single_device_plan(*fwd, batch, micro);
  p.summary.micro_batch = micro / devices;
  p.summary.devices = devices;
  p.summary.data_parallel = devices;
  if (!p.stages.empty()) {
    p.stages[0].devices.clear();
    for (int d = 0; d < devices; ++d) p.stages[0].devices.push_back(d);
    p.stages[0].mesh = {devices, 1};
  }
  return p;
}

}  // namespace braid::exec
