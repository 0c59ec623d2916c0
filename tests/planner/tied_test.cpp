// A parameter two layers use (linear's `tie`, tests/ckpt/tied_gpt_model.yaml's head tied to its token embedding):
// validation keeps it on one pipeline stage and held alike by both users, with an error at the plan's place
// otherwise; the search never cuts between its users nor splits it, and counts its bytes once.
#include <gtest/gtest.h>

#include "planner/cluster.h"
#include "planner/layer_cost.h"
#include "planner/search.h"
#include "plan_test_util.h"

using namespace braid;
using namespace braid::planner;
using namespace braid::planner::test;

namespace {

graph::Graph tied_graph(int64_t batch) {
  Diagnostics diags;
  io::ModelSpec m = io::load_model(source_dir() + "/tests/ckpt/tied_gpt_model.yaml", {}, diags);
  diags.throw_if_any();
  return graph::build_graph(m, batch);
}

DeviceSpec cpus(int n) {
  DeviceSpec d;
  std::string err;
  EXPECT_TRUE(parse_devices("cpu:" + std::to_string(n), &d, &err)) << err;
  return d;
}

std::vector<Diagnostic> errors_of(const std::string& plan_text, const graph::Graph& g, int devices) {
  Diagnostics d;
  Plan p = parse_plan(plan_text, "plan.yaml", d);
  EXPECT_TRUE(d.empty()) << dump(d);
  validate_plan(p, g, 8, cpus(devices), d);
  return d.all();
}

const char* kTwo = "summary: {devices: 2, data_parallel: 1, tensor_parallel: 2, pipeline_stages: 1, virtual_stages: 1, "
                   "micro_batch: 8, micro_batches: 1, schedule: 1f1b}\n"
                   "stages:\n  - {devices: [0, 1], mesh: [1, 2], first_layer: tok, last_layer: loss}\n";

}  // namespace

TEST(TiedParameter, ValidationKeepsItOnOneStageHeldAlike) {
  const graph::Graph g = tied_graph(8);
  auto pp = errors_of("summary: {devices: 2, data_parallel: 1, tensor_parallel: 1, pipeline_stages: 2, virtual_stages: 1, "
                      "micro_batch: 4, micro_batches: 2, schedule: 1f1b}\nstages:\n"
                      "  - {devices: [0], mesh: [1, 1], first_layer: tok, last_layer: h.0.res2}\n"
                      "  - {devices: [1], mesh: [1, 1], first_layer: h.1.ln1, last_layer: loss}\n",
                      g, 2);
  ASSERT_EQ(pp.size(), 1u);
  EXPECT_EQ(pp[0].loc.str(), "plan.yaml:4:47");
  EXPECT_NE(pp[0].message.find("layers 'tok' (stage 0) and 'logits' (stage 1) share the parameter 'tok.weight'"),
            std::string::npos)
      << pp[0].format();
  // The head split by vocabulary holds rows of the table (S(0)); the embedding holds it whole.
  auto column = errors_of(std::string(kTwo) + "layers:\n  - {layer: logits, signature: column, tensor_parallel: 2}\n", g, 2);
  ASSERT_EQ(column.size(), 1u);
  EXPECT_EQ(column[0].loc.str(), "plan.yaml:5:32");
  EXPECT_NE(column[0].message.find("hold it differently (B and S(0))"), std::string::npos) << column[0].format();
  // The embedding's column split and the head's row split both hold columns of it: valid.
  EXPECT_TRUE(errors_of(std::string(kTwo) + "layers:\n  - {layer: tok, signature: column, tensor_parallel: 2}\n"
                                            "  - {layer: logits, signature: row, tensor_parallel: 2}\n",
                        g, 2)
                  .empty());
}

TEST(TiedParameter, SearchKeepsItWholeOnOneStageAndCountsItOnce) {
  const graph::Graph g = tied_graph(8);
  // The bytes of every layer's replicated option: the tied table once.
  const auto m = fake_cost_model(cluster_preset("cpu:4", fallback_cpu_figures(4, 4)), FakeFigures{});
  LayerCosts lc(g, *m, 8, 1, Group{});
  double bytes = 0, model = 0;
  for (int l = 0; l < lc.layers(); ++l) bytes += lc.options(l)[0].param_bytes;
  for (const auto& p : g.params()) model += static_cast<double>(p.spec.desc.bytes());
  EXPECT_EQ(bytes, model);
  // Figures that favour pipelines (slow collectives, fast point-to-point) and tensor parallelism (fast links), with
  // memory to spare and with too little for one device (the search then splits the blocks over tensor groups of 2):
  // each found plan is valid, so the head and the table are on one stage and held alike.
  for (double memory : {1e9, 5e6})
    for (const FakeFigures& f : {FakeFigures{1e10, 1e6, 1e11, 0}, FakeFigures{1e8, 1e12, 1e12, 0}}) {
      Cluster c = cluster_preset("cpu:4", fallback_cpu_figures(4, 4));
      c.device.memory_bytes = memory;
      SearchResult r = search(g, *fake_cost_model(c, f), TrainSettings{32, 2});
      ASSERT_TRUE(r.found) << r.why_none;
      Diagnostics d;
      validate_plan(r.plan, g, 32, cpus(r.plan.summary.devices), d);
      EXPECT_TRUE(d.empty()) << dump(d) << to_yaml(r.plan);
    }
}
