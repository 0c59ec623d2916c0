// A graph with its CPU executor for one batch size (calibration and tests time and run whole graphs with it), and
// gradient accumulation on the CPU. Training steps are the engine's (exec/engine.h); evaluation is exec/evaluator.h's.
#pragma once
#include <memory>
#include <vector>

#include "backends/cpu/executor.h"
#include "exec/run_data.h"
#include "graph/ir.h"
#include "io/model_spec.h"

namespace braid::exec {

struct CpuGraph {
  graph::Graph g;
  std::unique_ptr<Executor> exec;
  std::vector<Tensor> inputs;  // arena views of the model inputs, in model order
};

// Builds the graph (with backward when training, with metrics otherwise), creates missing parameters in
// `store` (initialised from `seed`) and the executor.
struct CpuGraphOptions {
  // ExecutorOptions::fuse. Calibration turns it off: it times every op kind on its own.
  bool fuse = true;
};
std::unique_ptr<CpuGraph> make_cpu_graph(const io::ModelSpec& m, int64_t batch, bool training, ParamStore& store,
                                        uint64_t seed, const CpuGraphOptions& options = {});
// The same over a graph already built from `m` (copied).
std::unique_ptr<CpuGraph> make_cpu_graph(const graph::Graph& g, const io::ModelSpec& m, ParamStore& store, uint64_t seed,
                                    const CpuGraphOptions& options = {});
// dst = scale * src (first) or dst += scale * src: gradient accumulation over micro-batches (same desc).
void accumulate(Tensor& dst, const Tensor& src, double scale, bool first);

}  // namespace braid::exec
