// braid check / train / ops.
#include "core/format.h"
#include "cli/commands.h"

#include <fstream>

#include "exec/memory_plan.h"
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

std::string attr_json(const ops::AttrValue& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) return io::json_number(*d);
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto* s = std::get_if<std::string>(&v)) return io::json_quote(*s);
  std::string out = "[";
  for (auto x : std::get<std::vector<int64_t>>(v)) out += (out.size() > 1 ? "," : "") + std::to_string(x);
  return out + "]";
}

void print_json(const graph::Graph& g, const io::RunConfig& cfg, FILE* out) {
  auto bounds = graph::integer_input_bounds(g);
  std::string s = "{\"model\":" + io::json_quote(cfg.model.name) + ",\"batch\":" + std::to_string(g.batch()) + ",\"inputs\":[";
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const auto& v = g.value(g.inputs()[i]);
    s += std::string(i ? "," : "") + "{\"name\":" + io::json_quote(v.name) + ",\"dtype\":\"" +
         std::string(dtype_name(v.desc.dtype)) + "\",\"shape\":" + attr_json(v.desc.shape.dims()) +
         ",\"int_bound\":" + std::to_string(bounds.count(v.name) ? bounds[v.name] : 0) + "}";
  }
  s += "],\"layers\":[";
  bool first = true;
  for (const auto& n : g.nodes()) {
    if (n.backward) continue;
    s += std::string(first ? "" : ",") + "{\"name\":" + io::json_quote(n.name) + ",\"op\":" + io::json_quote(n.op->name) +
         ",\"from\":[";
    first = false;
    for (int k = 0; k < n.num_data_inputs; ++k) {
      const auto& v = g.value(n.inputs[static_cast<size_t>(k)]);
      std::string src = v.kind == graph::ValueKind::Input ? v.name : g.node(v.producer).name;
      s += std::string(k ? "," : "") + io::json_quote(src);
    }
    s += "],\"attrs\":{";
    bool fa = true;
    for (const auto& [k, v] : n.attrs.all()) {
      s += std::string(fa ? "" : ",") + io::json_quote(k) + ":" + attr_json(v);
      fa = false;
    }
    s += "},\"params\":[";
    for (size_t k = static_cast<size_t>(n.num_data_inputs); k < n.inputs.size(); ++k)
      s += std::string(k > static_cast<size_t>(n.num_data_inputs) ? "," : "") + io::json_quote(g.value(n.inputs[k]).name);
    s += "],\"shape\":" + attr_json(g.value(n.outputs[0]).desc.shape.dims()) + "}";
  }
  s += "],\"outputs\":[";
  for (size_t i = 0; i < g.outputs.size(); ++i) s += std::string(i ? "," : "") + io::json_quote(g.outputs[i].first);
  s += "],\"metrics\":[";
  for (size_t i = 0; i < g.metrics.size(); ++i) {
    const auto& n = g.node(g.value(g.metrics[i].second).producer);
    s += std::string(i ? "," : "") + "{\"name\":" + io::json_quote(g.metrics[i].first) + ",\"op\":" + io::json_quote(n.op->name) + "}";
  }
  // Every parameter and buffer with its PyTorch shape (what a checkpoint's /params and /buffers hold).
  s += "],\"param_specs\":[";
  for (size_t i = 0; i < g.params().size(); ++i) {
    const auto& p = g.params()[i];
    s += std::string(i ? "," : "") + "{\"name\":" + io::json_quote(p.name) + ",\"shape\":" + attr_json(p.spec.desc.shape.dims()) +
         ",\"dtype\":\"" + std::string(dtype_name(p.spec.desc.dtype)) + "\",\"buffer\":" + (p.spec.buffer ? "true" : "false") + "}";
  }
  s += "]}\n";
  std::fputs(s.c_str(), out);
}

}  // namespace

int check(const CheckArgs& a, FILE* out) {
  io::RunConfig cfg = io::load_run_or_model(a.path, a.sets);
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
  std::fprintf(out, "total: %zu layers, %lld parameters (%s), forward %s FLOPs per batch of %lld (training ~3x)\n",
               rows.size(), static_cast<long long>(total_params), human_bytes(param_bytes).c_str(),
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
  io::RunConfig cfg = io::load_run_or_model(a.path, a.sets);
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
  exec::TrainResult r = exec::train(cfg, o);
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
