// The planner's search: for a graph, a cluster's cost model and the run's batch, the plan with the least
// predicted step time that fits in memory. Enumerates mesh shapes [dp, tp] (the same on every stage; tp
// divides the devices of a node), stage counts, micro-batch sizes and schedules (gpipe, 1f1b, interleaved with
// 2 chunks), pruned by a compute lower bound and a memory lower bound (no shape that fits is dropped); inside each, a dynamic program over stage cuts at unit
// boundaries (a unit is one layer, or one instance of a repeated block `name.<i>.*`) whose stages come from a
// dynamic program over layers in topological order, with the layouts of the live values as state (DAGs:
// residual adds and branches), keeping the Pareto front of (time, backward time, parameter, activation and
// buffer bytes) per state. Exact for the space described (tests compare with brute force) while no front
// exceeds its cap. Where predict() simulates the schedule (cores shared between devices), the best plans of
// the 8 best shapes are re-ranked by predict() (SearchOptions::rerank). Deterministic: the same inputs give
// the same plan byte for byte. Pure: no devices touched.
#pragma once
#include <string>
#include <vector>

#include "graph/ir.h"
#include "planner/cost_model.h"
#include "planner/evaluate.h"
#include "planner/plan.h"

namespace braid::planner {

struct SearchOptions {
  int devices = 0;            // 0: every device of the cluster
  // Constraints: a plan read from a file; its pinned fields (Pins) are kept. nullptr: none.
  const Plan* pins = nullptr;
  int front_cap = 32;         // Pareto entries kept per live-value state, and per cut-DP cell
  bool tp_within_node = true; // tensor groups no larger than a node
  // Where predict() simulates the schedule (Cluster::host_cores > 0), the best plans of this many shapes by
  // the search's formula are re-ranked by predict()'s step time, and the best of those is returned.
  // Elsewhere predict() is the formula, and one is kept.
  int rerank = 8;
  // ZeRO stages the search may choose, 0 .. max_zero, per plan (one stage for every data-parallel group; only with
  // data_parallel > 1). The executor runs 0 and 1 on cpu devices; `braid plan --cluster` models up to 3.
  int max_zero = 1;
  // Per repeated block (`name.<i>.*`), activation recomputation none | selective | full (docs/planner.md).
  bool recompute = true;
};

struct SearchStats {
  int configs = 0;            // (dp, tp, stages, micro-batch, schedule) shapes considered
  int configs_searched = 0;   // not pruned by the lower bound
  bool capped = false;        // some front hit its cap (the result may be short of the optimum)
  int reranked = 0;           // candidate plans whose predict() chose among them (1: no re-ranking)
  double seconds = 0;
};

struct SearchResult {
  bool found = false;
  Plan plan;                  // complete (validated), predictions filled in
  StepPrediction prediction;
  // What the search's DP computed for `plan`: prediction.formula_step_time_s (and prediction.step_time_s
  // unless the cluster's devices share cores, where the plan is the best of the re-ranked candidates).
  double searched_step_time_s = 0;
  SearchStats stats;
  std::string why_none;       // when !found: what ruled every shape out
};

// Searches; `g` is the forward graph (at any batch: shapes are rescaled to the micro-batch).
SearchResult search(const graph::Graph& g, const CostModel& model, const TrainSettings& ts, const SearchOptions& o = {});

// The pure strategies for --explain: all data parallel, all tensor parallel, all pipeline (each the best
// plan of that shape, or found == false with the reason).
struct PureStrategies {
  SearchResult data, tensor, pipeline;
};
PureStrategies pure_strategies(const graph::Graph& g, const CostModel& model, const TrainSettings& ts,
                               const SearchOptions& o = {});

// Per layer whose choice is not the default: the best other option (same plan otherwise) and its predicted
// step time difference (> 0: slower); "" when no other option fits.
struct LayerAlternative {
  std::string layer, chosen, runner_up;  // "column x2", "replicated"
  double delta_s = 0;
  bool runner_up_fits = true;
};
std::vector<LayerAlternative> layer_alternatives(const Plan& plan, const graph::Graph& g, const CostModel& model,
                                                 const TrainSettings& ts);

}  // namespace braid::planner
