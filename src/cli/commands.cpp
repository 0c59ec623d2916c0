// braid check / train / ops.
#include "cli/commands.h"

#include <unistd.h>

#include <fstream>
#include <memory>

#include "core/format.h"
#include "distributed/clock_sync.h"
#include "distributed/rendezvous.h"
#include "exec/memory_plan.h"
#include "exec/preflight.h"
#include "exec/trainer.h"
#include "graph/build.h"
#include "graph/print.h"
#include "graph/verify.h"
#include "io/json.h"
#include "io/run_config.h"
#include "ops/registry.h"

namespace braid::cli {
namespace {

// Per-sample shape text: the batch axis is dropped, except for scalars (the loss).
std::string sample_shape(const Shape& s) {
  if (s.rank() == 0) return "[] (scalar)";
  return Shape(std::vector<int64_t>(s.dims().begin() + 1, s.dims().end())).str();
}

void write_attr(io::JsonWriter& w, const ops::AttrValue& v) {
  if (auto* i = std::get_if<int64_t>(&v)) w.value(*i);
  else if (auto* d = std::get_if<double>(&v)) w.value(*d);
  else if (auto* b = std::get_if<bool>(&v)) w.value(*b);
  else if (auto* s = std::get_if<std::string>(&v)) w.value(*s);
  else {
    w.begin_array();
    for (auto x : std::get<std::vector<int64_t>>(v)) w.value(x);
    w.end_array();
  }
}

std::string attr_json(const ops::AttrValue& v) {
  io::JsonWriter w;
  write_attr(w, v);
  return w.str();
}

// The forward graph for tools (the PyTorch reference tests, ckpt_to_torch.py): inputs, layers with their
// sources, complete attributes and parameter names, outputs, metrics, and every parameter's PyTorch shape.
void print_json(const graph::Graph& g, const io::RunConfig& cfg, FILE* out) {
  auto bounds = graph::integer_input_bounds(g);
  auto dims = [](io::JsonWriter& w, const Shape& s) { write_attr(w, s.dims()); };
  io::JsonWriter w;
  w.begin_object().field("model", cfg.model.name).field("batch", g.batch());
  w.key("inputs").begin_array();
  for (ValueId id : g.inputs()) {
    const auto& v = g.value(id);
    w.begin_object().field("name", v.name).field("dtype", std::string(dtype_name(v.desc.dtype)));
    dims(w.key("shape"), v.desc.shape);
    w.field("int_bound", bounds.count(v.name) ? bounds[v.name] : int64_t{0}).end_object();
  }
  w.end_array().key("layers").begin_array();
  for (const auto& n : g.nodes()) {
    if (n.backward) continue;
    w.begin_object().field("name", n.name).field("op", n.op->name).key("from").begin_array();
    for (int k = 0; k < n.num_data_inputs; ++k) {
      const auto& v = g.value(n.inputs[static_cast<size_t>(k)]);
      w.value(v.kind == graph::ValueKind::Input ? v.name : g.node(v.producer).name);
    }
    w.end_array().key("attrs").begin_object();
    for (const auto& [k, v] : n.attrs.all()) write_attr(w.key(k), v);
    w.end_object().key("params").begin_array();
    for (size_t k = static_cast<size_t>(n.num_data_inputs); k < n.inputs.size(); ++k) w.value(g.value(n.inputs[k]).name);
    w.end_array();
    dims(w.key("shape"), g.value(n.outputs[0]).desc.shape);
    w.end_object();
  }
  w.end_array().key("outputs").begin_array();
  for (const auto& [name, v] : g.outputs) w.value(name);
  w.end_array().key("metrics").begin_array();
  for (const auto& [name, v] : g.metrics)
    w.begin_object().field("name", name).field("op", g.node(g.value(v).producer).op->name).end_object();
  // Every parameter and buffer with its PyTorch shape (what a checkpoint's /params and /buffers hold).
  w.end_array().key("param_specs").begin_array();
  for (const auto& p : g.params()) {
    w.begin_object().field("name", p.name);
    dims(w.key("shape"), p.spec.desc.shape);
    w.field("dtype", std::string(dtype_name(p.spec.desc.dtype))).field("buffer", p.spec.buffer).end_object();
  }
  w.end_array().end_object();
  std::fputs((w.str() + "\n").c_str(), out);
}

}  // namespace

int check(const CheckArgs& a, FILE* out) {
  // Every mistake in one pass: the run file's and its model's, then what train checks before its first step.
  Diagnostics diags;
  io::RunConfig cfg = io::load_run_or_model(a.path, a.sets, diags);
  exec::preflight(cfg, {}, diags);
  diags.throw_if_any();
  int64_t batch = a.batch > 0 ? a.batch : cfg.is_model_only ? 1 : cfg.train.micro_batch.value_or(cfg.train.batch);
  graph::BuildOptions bo;
  bo.with_backward = true;
  bo.with_metrics = false;
  graph::Graph g = graph::build_graph(cfg.model, batch, bo);
  graph::verify(g);
  // Metrics are checked too (an evaluation graph), though they are not part of the training table.
  graph::BuildOptions eo;
  eo.with_metrics = true;
  graph::Graph eval = graph::build_graph(cfg.model, batch, eo);
  if (a.json) {
    print_json(eval, cfg, out);
    return 0;
  }
  if (!a.dot.empty()) {
    std::ofstream f(a.dot);
    if (!f) throw UserError(SourceLoc{a.dot, 0, 0}, "cannot write the DOT file");
    f << graph::to_dot(g);
  }
  auto rows = graph::layer_table(g);
  size_t wn = 5, wo = 2, ws = 12;
  for (const auto& r : rows) {
    wn = std::max(wn, r.name.size());
    wo = std::max(wo, r.op.size());
    ws = std::max(ws, sample_shape(r.out_shape).size());
  }
  std::fprintf(out, "model %s (%s), batch %lld\n", cfg.model.name.c_str(), cfg.model.path.c_str(), static_cast<long long>(batch));
  std::fprintf(out, "%-*s  %-*s  %-*s  %12s  %12s\n", static_cast<int>(wn), "layer", static_cast<int>(wo), "op",
               static_cast<int>(ws), "output/sample", "params", "fwd FLOPs");
  int64_t total_params = 0;
  double total_flops = 0;
  for (const auto& r : rows) {
    std::fprintf(out, "%-*s  %-*s  %-*s  %12lld  %12s\n", static_cast<int>(wn), r.name.c_str(), static_cast<int>(wo),
                 r.op.c_str(), static_cast<int>(ws), sample_shape(r.out_shape).c_str(), static_cast<long long>(r.params),
                 human_count(r.flops).c_str());
    total_params += r.params;
    total_flops += r.flops;
  }
  std::vector<ValueId> keep;
  for (const auto& [n, v] : g.outputs) keep.push_back(v);
  for (const auto& p : g.params())
    if (p.grad.valid()) keep.push_back(p.grad);
  auto plan = exec::plan_memory(g, keep);
  double param_bytes = 0;
  for (const auto& p : g.params()) param_bytes += static_cast<double>(p.spec.desc.bytes());
  std::fprintf(out, "total: %zu layers, %lld parameters (%s, %s), forward %s FLOPs per batch of %lld (training ~3x)\n",
               rows.size(), static_cast<long long>(total_params), human_count(static_cast<double>(total_params)).c_str(),
               human_bytes(param_bytes).c_str(),
               human_count(total_flops).c_str(), static_cast<long long>(batch));
  std::fprintf(out, "predicted peak activation memory (forward + backward, batch %lld): %s (static plan; %s without reuse)\n",
               static_cast<long long>(batch), human_bytes(static_cast<double>(plan.arena_bytes)).c_str(),
               human_bytes(static_cast<double>(plan.naive_bytes)).c_str());
  if (!cfg.is_model_only) {
    double opt_state = cfg.optimizer.type == "adamw" ? 2 : cfg.optimizer.momentum != 0 ? 1 : 0;
    std::fprintf(out, "parameters + gradients + optimizer state: %s\n", human_bytes(param_bytes * (2 + opt_state)).c_str());
  }
  if (!a.dot.empty()) std::fprintf(out, "graph written to %s\n", a.dot.c_str());
  return 0;
}

int train(const TrainArgs& a, FILE* out) {
  Diagnostics diags;
  io::RunConfig cfg = io::load_run_or_model(a.path, a.sets, diags);
  if (!diags.empty()) {  // the model's mistakes beside the run file's, as braid check reports them
    exec::preflight(cfg, {}, diags);
    diags.throw_if_any();
  }
  if (cfg.is_model_only)
    throw UserError(SourceLoc{a.path, 1, 1}, "this is a model file; braid train needs a run file",
                    "write a run file with `model: " + a.path + "` and data, train and optimizer sections");
  exec::TrainOptions o;
  o.resume = a.resume;
  o.init_from = a.init_from;
  o.init_partial = a.init_partial;
  o.stop_after = a.stop_after;
  o.trace = a.trace;
  if (!a.resume.empty() && !a.init_from.empty())
    throw UserError(SourceLoc{"<command line>", 0, 0}, "--resume and --init-from exclude each other",
                    "--resume continues a run exactly; --init-from starts a new run from a checkpoint's weights");
  if (a.init_partial && a.init_from.empty())
    throw UserError(SourceLoc{"<command line>", 0, 0}, "--init-partial needs --init-from");
  o.save_init = a.save_init;
  o.save_final = a.save_final;
  o.progress = !a.no_progress;
  o.out = out;
  // Started by braid launch, torchrun, srun or mpirun: join the job (store, TCP world, heartbeat) and train
  // this process's device of the plan.
  const dist::DistEnv env = dist::detect_env();
  std::unique_ptr<dist::Job> job;
  if (env.distributed()) {
    job = std::make_unique<dist::Job>(dist::join_job(env));
    o.world = job->world.get();
    o.rank = env.rank;
    if (!o.trace.empty() && job->store) {  // one merged trace: each rank's clock against the store's
      o.trace_clock_offset_ns = dist::estimate_store_clock_offset(*job->store).offset_ns;
      char host[256] = {};
      if (::gethostname(host, sizeof host - 1) == 0) o.trace_host = host;
    }
  }
  exec::TrainResult r;
  try {
    r = exec::train(cfg, o);
  } catch (const CommError&) {
    throw;  // a peer's failure (or its abort) reaches this rank: nothing to tell the others
  } catch (const std::exception& e) {
    // This rank's own failure: tell the others why before unwinding closes the communicator (a peer would
    // otherwise see only "closed its communicator", and the launcher may stop this process before it prints).
    if (job) job->world->abort(e.what());
    throw;
  }
  if (r.stop_signal) return 128 + r.stop_signal;  // interrupted (after saving), as shells report it
  return 0;
}

int list_ops(FILE* out) {
  for (const auto* d : ops::Registry::get().all()) {
    if (d->internal) continue;
    std::string attrs;
    for (const auto& s : d->attrs) {
      std::string def;
      if (s.default_value) def = " (" + attr_json(*s.default_value) + ")";
      else if (s.optional) def = " (derived)";
      attrs += (attrs.empty() ? "" : ", ") + s.name + def;
    }
    std::fprintf(out, "%-20s %s%s%s\n", d->name.c_str(), d->doc.c_str(), attrs.empty() ? "" : "; attributes: ",
                 attrs.c_str());
  }
  return 0;
}

}  // namespace braid::cli
