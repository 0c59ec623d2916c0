// The checks `braid train` makes before its first step, in the one function `braid check RUN` calls too, so
// that a run check passes is a run train starts: the training graph at the run's micro-batch (with backward)
// and the evaluation graph, the split of the micro-batch over cpu:N, the plan (read and validated against the
// graph, or the planner's choice), the datasets opened and checked against the model's inputs (headers,
// contents, label ranges, sizes), checkpoint.dir and the metrics file's folder writable, and the checkpoints
// --resume and --init-from name. Every error found goes to the caller's Diagnostics, all in one pass.
// Not checked: whether the devices are present (a GPU run file may be checked on a CPU machine; train
// refuses it there), nor what only steps can find (device memory, a loss that diverges, a full disk).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "exec/run_setup.h"
#include "io/dataset.h"
#include "io/run_config.h"

namespace braid::exec {

struct PreflightOptions {
  std::string resume;     // braid train --resume: "latest" or a checkpoint (file, folder, latest file)
  std::string init_from;  // braid train --init-from: the same forms
};

// What the checks opened, chose or built, for train to use as they are (nothing is read, parsed, built or searched
// twice): `setup` holds the parsed devices, the backend's answers, the plan and the graphs (exec/run_setup.h).
struct Preflight {
  RunSetup setup;  // setup.plan is set when the run's devices, plan and graphs are whole
  std::vector<io::DatasetInput> inputs;
  std::unique_ptr<io::Dataset> train_data, eval_data;
  std::string resume_path, init_from_path;  // the checkpoint files they name
};

// `diags` may already hold the run file's errors (io::load_run_or_model's collecting form): then only the
// model is checked (its graph errors are independent of the run file's), since the rest of `cfg` is partial.
// For a bare model (cfg.is_model_only) only the graphs are built.
// `setup`: the run's devices already parsed (parse_run_devices), or an empty setup.
// One error per op of `g` that `b` cannot run (at the layer's place in the model file, exit status 2): the op, its
// layer, the dtype and the backend named, once per op and dtype. A node's dtype is its first floating output's
// (else its first floating input's, else f32). Preflight asks it of the run's graphs, braid plan of its graph.
void check_supported(const Backend& b, const graph::Graph& g, Diagnostics& diags);

Preflight preflight(const io::RunConfig& cfg, const PreflightOptions& opts, Diagnostics& diags, RunSetup setup = {});

}  // namespace braid::exec
