// preflight(): every check braid train makes before its first step, shared with braid check (preflight.h).
#include "exec/preflight.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "exec/backend.h"
#include "exec/run_data.h"
#include "exec/trainer.h"
#include "graph/build.h"
#include "io/checkpoint.h"

namespace braid::exec {
namespace {

namespace fs = std::filesystem;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// A folder braid will create and write in (checkpoint.dir, the metrics file's): the nearest part of the path
// that exists must be a folder this process may write in. As cheap as a few stat calls; a full disk is not
// foreseen here (docs/checkpoints.md).
void check_writable_folder(const std::string& dir, const std::string& what, const SourceLoc& at, Diagnostics& diags) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  if (ec) return;
  while (!p.empty() && !fs::exists(fs::symlink_status(p, ec)) && p != p.parent_path()) p = p.parent_path();
  if (!fs::is_directory(p, ec)) {
    diags.error(at, what + " '" + dir + "' cannot be created: '" + p.string() + "' is not a folder");
    return;
  }
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    diags.error(at, what + " '" + dir + "' cannot be written: '" + p.string() + "': " + std::strerror(errno),
                "choose a folder you may write in, or change its permissions");
}

std::string resolve_checkpoint(const io::RunConfig& cfg, const std::string& spec, const std::string& flag) {
  if (spec == "latest" && cfg.checkpoint.dir.empty())
    throw UserError(SourceLoc{cfg.path, 0, 0}, flag + " latest needs checkpoint.dir in the run file",
                    "or name a checkpoint file or folder");
  return io::CheckpointDir::resolve(cfg.checkpoint.dir, spec);
}

// Every op of the graphs on the backend of the run's devices, before anything runs: a GPU run file checked on a
// machine without a GPU too (the module loads without one). Where the devices do not parse or their backend
// cannot load, run_plan and make_engine say why.
void check_backend_ops(const RunSetup& s, std::initializer_list<const graph::Graph*> graphs, Diagnostics& diags) {
  if (!s.devices_error.empty()) return;
  const Backend* b = backend(s.devices.kind);
  if (b == nullptr) return;
  for (const graph::Graph* g : graphs) check_supported(*b, *g, diags);
}

}  // namespace

void check_supported(const Backend& b, const graph::Graph& g, Diagnostics& diags) {
  std::set<std::pair<const ops::OpDef*, DType>> told;
  for (const auto& n : g.nodes()) {
    DType t = DType::f32;
    bool found = false;
    for (const auto* list : {&n.outputs, &n.inputs})
      for (ValueId v : *list)
        if (!found && is_float(g.value(v).desc.dtype)) t = g.value(v).desc.dtype, found = true;
    if (b.supports(*n.op, t) || !told.insert({n.op, t}).second) continue;
    diags.error(n.loc, "layer " + quoted(n.layer) + ": op " + quoted(n.op->name) + (n.op->internal ? " (part of its gradient)" : "") +
                           " has no " + b.name() + " kernel for " + std::string(dtype_name(t)) + " values",
                "run it on a device kind that has the op (braid ops lists them), or add the kernel to the " + b.name() +
                    " backend (docs/architecture.md, \"Adding an op\")");
  }
}

Preflight preflight(const io::RunConfig& cfg, const PreflightOptions& opts, Diagnostics& diags, RunSetup setup) {
  Preflight p;
  p.setup = std::move(setup);
  RunSetup& s = p.setup;
  const bool run_whole = diags.empty();  // the run file (and its model) read without a mistake
  auto guard = [&diags](auto&& f) {
    try {
      f();
    } catch (const UserError& e) {
      diags.merge(e);
    }
  };
  // 1. The graphs train builds: the training step's (the micro-batch, with backward) and evaluation's (train.batch).
  const int64_t micro = std::max<int64_t>(1, cfg.is_model_only ? 1 : cfg.train.micro_batch.value_or(cfg.train.batch));
  if (cfg.is_model_only || !run_whole) {  // the model's mistakes only
    graph::BuildOptions bo;
    bo.with_backward = true;
    graph::build_graph(cfg.model, micro, bo, diags);
    graph::BuildOptions eo;
    eo.with_metrics = true;
    graph::build_graph(cfg.model, micro, eo, diags);
    return p;
  }
  // The training graph at the micro-batch its plan will run (set_up_devices: one replica's), once for every use;
  // its backward is checked on a copy (the lowering derives each stage's own).
  set_up_devices(cfg, s);
  const graph::Graph& fwd = s.forward(cfg.model, s.graph_batch, DType::f32, diags);
  graph::Graph with_backward;
  if (diags.empty()) {
    with_backward = fwd;
    graph::add_backward(with_backward, diags);
  }
  graph::BuildOptions eo;
  eo.with_metrics = true;
  graph::Graph eval = graph::build_graph(cfg.model, cfg.train.batch, eo, diags);
  const bool graph_whole = diags.empty();
  if (graph_whole) check_backend_ops(s, {&with_backward, &eval}, diags);
  // 2. Devices and plan (the plan is read and validated against the graph, or searched for).
  if (graph_whole) {
    s.eval = std::move(eval);
    guard([&] { set_up_plan(cfg, s); });
  } else if (cfg.parallel.plan == "auto" && s.devices_error.empty() && s.devices.count > 1) {
    guard([&] { check_data_parallel_split(cfg, s.devices.count); });
  }
  // 3. Data: opened as train opens it (headers, contents, shapes, label ranges against the model's inputs).
  if (cfg.model.inputs_known) {
    p.inputs = dataset_inputs(cfg.model, s.eval ? *s.eval : eval);
    guard([&] { p.train_data = open_train_data(cfg, p.inputs); });
    if (cfg.data.eval) guard([&] { p.eval_data = io::open_dataset(*cfg.data.eval, p.inputs, cfg.train.seed + 1); });
  }
  // 4. Where the run writes, and the checkpoints it starts from.
  const SourceLoc at{cfg.path, 0, 0};
  if (!cfg.checkpoint.dir.empty()) check_writable_folder(cfg.checkpoint.dir, "checkpoint.dir", at, diags);
  if (!cfg.log.metrics.empty()) {
    std::string parent = fs::path(cfg.log.metrics).parent_path().string();
    check_writable_folder(parent.empty() ? "." : parent, "the folder of log.metrics", at, diags);
  }
  if (!opts.resume.empty()) guard([&] { p.resume_path = resolve_checkpoint(cfg, opts.resume, "--resume"); });
  if (!opts.init_from.empty()) guard([&] { p.init_from_path = resolve_checkpoint(cfg, opts.init_from, "--init-from"); });
  return p;
}

}  // namespace braid::exec
