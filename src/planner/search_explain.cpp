// What `braid plan --explain` sets beside the search's choice (planner/search.h): the pure strategies (data,
// tensor, pipeline parallel alone, each searched with its shape pinned) and each layer's runner-up signature.
#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "planner/layer_cost.h"
#include "planner/search.h"

namespace braid::planner {

PureStrategies pure_strategies(const graph::Graph& g, const CostModel& model, const TrainSettings& ts,
                               const SearchOptions& o) {
  PureStrategies out;
  int n = o.devices > 0 ? o.devices : model.cluster().devices();
  auto one = [&](int dp, int p, bool tensor) {
    Plan pins;
    pins.summary.data_parallel = dp;
    pins.summary.pinned.set("data_parallel", {});
    pins.summary.pipeline_stages = p;
    pins.summary.pinned.set("pipeline_stages", {});
    SearchOptions so = o;
    so.pins = &pins;
    so.tp_within_node = !tensor;
    SearchResult r = search(g, model, ts, so);
    if (!r.found) r.why_none = tensor ? "no layer split fits all " + std::to_string(n) + " devices in memory" : r.why_none;
    return r;
  };
  out.data = one(n, 1, false);
  out.tensor = one(1, 1, true);
  out.pipeline = one(1, n, false);
  return out;
}

std::vector<LayerAlternative> layer_alternatives(const Plan& plan_in, const graph::Graph& g, const CostModel& model,
                                                 const TrainSettings& ts) {
  std::vector<LayerAlternative> out;
  Plan plan = plan_in;
  add_default_layers(plan, g);
  double base = predict_step_time(plan, g, model, ts);
  auto fwd = forward_layers(g);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < fwd.size(); ++i) index[fwd[i]->layer] = i;
  std::vector<int> tp_of(fwd.size(), 1);
  for (const auto& st : plan.stages)
    for (size_t i = index.at(st.first_layer); i <= index.at(st.last_layer); ++i)
      tp_of[i] = static_cast<int>(st.devices.size()) / std::max<int>(1, static_cast<int>(st.mesh[0]));
  std::map<int, std::unique_ptr<LayerCosts>> lcs;
  for (size_t li = 0; li < plan.layers.size(); ++li) {
    LayerPlan& l = plan.layers[li];
    if (l.signature == "replicated" && l.tensor_parallel == 1) continue;
    size_t i = index.at(l.layer);
    auto& lc = lcs[tp_of[i]];
    if (!lc)
      lc = std::make_unique<LayerCosts>(g, model, plan.summary.micro_batch, tp_of[i], Group{tp_of[i], 1}, ts.compute,
                                        ts.head_parallel_attention);
    LayerAlternative a;
    a.layer = l.layer;
    a.chosen = l.signature + (l.tensor_parallel > 1 ? " x" + std::to_string(l.tensor_parallel) : "");
    LayerPlan saved = l;
    double best = kInfeasible;
    for (const auto& o : lc->options(static_cast<int>(i))) {
      if (o.signature == saved.signature && o.tensor_parallel == saved.tensor_parallel) continue;
      l.signature = o.signature;
      l.tensor_parallel = o.tensor_parallel;
      Plan trial = plan;
      int max_tp = 1;
      for (const auto& x : trial.layers) max_tp = std::max(max_tp, x.tensor_parallel);
      trial.summary.tensor_parallel = max_tp;
      StepPrediction p = predict(trial, g, model, ts);
      double t = p.fits ? p.step_time_s : kInfeasible;
      if (t < best || a.runner_up.empty()) {  // the fastest that fits, else the first option
        best = t;
        a.runner_up = o.signature + (o.tensor_parallel > 1 ? " x" + std::to_string(o.tensor_parallel) : "");
        a.runner_up_fits = p.fits;
        a.delta_s = p.step_time_s - base;
      }
    }
    l = saved;
    out.push_back(a);
  }
  return out;
}

}  // namespace braid::planner
