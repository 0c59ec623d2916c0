// Activation recomputation (plan `recompute`, exec/lower.cpp, graph/autodiff.h): full and selective reproduce the
// run without it bit for bit (the recomputed nodes run the same kernels on the same inputs and draw the same
// random numbers), alone and with data, tensor and pipeline parallelism, on tiny_gpt with dropout, fashion_mlp and
// fashion_lenet (batch norm, whose running statistics are never updated twice), and they shrink the static arena.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "exec/engine.h"
#include "exec/runner.h"
#include "exec/trainer.h"
#include "graph/build.h"
#include "io/run_config.h"

using namespace braid;
using namespace braid::exec;

namespace {

io::RunConfig run_of(const std::string& model, const std::string& vars) {
  const auto dir = std::filesystem::temp_directory_path() / "braid_recompute_test";
  std::filesystem::create_directories(dir);
  const std::string file = (dir / (model + ".yaml")).string();
  std::ofstream f(file);
  f << "model: " << BRAID_SOURCE_DIR << "/models/" << model << ".yaml\n"
    << "vars: " << vars << "\n"
    << "data:\n  train: {format: synthetic, samples: 64}\n"
    << "train: {batch: 8, micro_batch: 4, steps: 10, seed: 3}\n"
    << "optimizer: {type: adamw, lr: 3.0e-3, weight_decay: 0.1, clip_grad_norm: 0.5}\n";
  f.close();
  return io::load_run_or_model(file, {});
}

struct Result {
  std::vector<double> losses;
  ParamStore weights;
  size_t arena = 0;
};

Result train(const io::RunConfig& cfg, planner::Plan plan, const std::string& mode, int steps = 10) {
  plan.summary.recompute = mode;
  Engine e(cfg, plan, *backend("cpu"));
  graph::BuildOptions bo;
  bo.with_backward = true;
  const graph::Graph g = graph::build_graph(cfg.model, 4, bo);
  auto data = open_train_data(cfg, dataset_inputs(cfg.model, g));
  io::BatchSampler sampler(data->size(), cfg.train.batch, true, cfg.train.seed);
  Result r;
  for (int i = 0; i < steps; ++i) r.losses.push_back(e.step(*data, sampler.next_view(), i, 3e-3, 0.5).loss);
  r.weights.create(g, 1);
  e.gather(r.weights, nullptr);
  for (size_t b : e.arena_bytes()) r.arena = std::max(r.arena, b);
  return r;
}

void expect_same(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << what << ", step " << i + 1;
  for (size_t i = 0; i < a.weights.entries().size(); ++i) {
    const Tensor& x = a.weights.entries()[i].value;
    const Tensor& y = b.weights.entries()[i].value;
    EXPECT_EQ(std::memcmp(x.raw(), y.raw(), x.bytes()), 0) << what << ": " << a.weights.entries()[i].name;
  }
}

// Two devices: a tensor group of 2 over the MLPs of tiny_gpt's blocks (column then row), or two pipeline stages.
planner::Plan tensor_plan(const io::RunConfig& cfg) {
  planner::Plan p = data_parallel_plan(cfg, 1);
  p.summary.devices = 2;
  p.summary.tensor_parallel = 2;
  p.stages[0].devices = {0, 1};
  p.stages[0].mesh = {1, 2};
  for (auto& l : p.layers)
    if (l.layer.ends_with(".fc") || l.layer.ends_with(".proj")) {
      l.signature = l.layer.ends_with(".fc") ? "column" : "row";
      l.tensor_parallel = 2;
    }
  return p;
}

planner::Plan pipeline_plan(const io::RunConfig& cfg, const std::string& cut_after) {
  planner::Plan p = data_parallel_plan(cfg, 1);
  p.summary.devices = 2;
  p.summary.pipeline_stages = 2;
  planner::StagePlan second = p.stages[0];
  size_t at = 0;
  while (p.layers[at].layer != cut_after) ++at;
  p.stages[0].last_layer = cut_after;
  second.first_layer = p.layers[at + 1].layer;
  second.devices = {1};
  p.stages.push_back(second);
  return p;
}

}  // namespace

TEST(Recompute, TinyGptFullAndSelectiveAreBitIdenticalOnEveryPlan) {
  const io::RunConfig cfg = run_of("tiny_gpt", "{n_layer: 2, d: 32, seq: 16, dropout: 0.1}");
  const std::pair<const char*, planner::Plan> plans[] = {
      {"one device", data_parallel_plan(cfg, 1)},
      {"dp 2", data_parallel_plan(cfg, 2)},
      {"tp 2", tensor_plan(cfg)},
      {"pp 2", pipeline_plan(cfg, "h.0.res2")},
  };
  for (const auto& [name, plan] : plans) {
    const Result none = train(cfg, plan, "none");
    const Result full = train(cfg, plan, "full"), selective = train(cfg, plan, "selective");
    expect_same(none, full, std::string(name) + " full");
    expect_same(none, selective, std::string(name) + " selective");
    EXPECT_LT(full.arena, none.arena) << name;
    EXPECT_LT(selective.arena, none.arena) << name;
  }
}

// The clones in the lowered program: one block's nodes again (named r/<node>, drawing the node's random numbers),
// the second block only when only its layers ask; a layer's own `none` wins over the summary's `full`.
TEST(Recompute, PerLayerEntriesOverrideTheSummaryAndClonesAreBackwardNodes) {
  const io::RunConfig cfg = run_of("tiny_gpt", "{n_layer: 2, d: 32, seq: 16, dropout: 0.1}");
  auto clones = [&](const planner::Plan& plan) {
    std::vector<std::string> names;
    for (const auto& n : lower_plan(cfg.model, plan)[0].g.nodes())
      if (n.name.starts_with("r/")) {
        EXPECT_TRUE(n.backward) << n.name;
        EXPECT_EQ(n.rng_as, n.name.substr(2)) << n.name;
        names.push_back(n.name);
      }
    return names;
  };
  planner::Plan plan = data_parallel_plan(cfg, 1);
  EXPECT_TRUE(clones(plan).empty());
  for (auto& l : plan.layers)
    if (l.layer.starts_with("h.1.")) l.recompute = "full";  // the second block only
  const auto second = clones(plan);
  ASSERT_FALSE(second.empty());
  for (const auto& n : second) EXPECT_TRUE(n.starts_with("r/h.1.")) << n;
  EXPECT_NE(std::find(second.begin(), second.end(), "r/h.1.drop"), second.end());  // dropout again: same mask
  const Result none = train(cfg, data_parallel_plan(cfg, 1), "none");
  const Result one_block = train(cfg, plan, "none");
  expect_same(none, one_block, "h.1 full");
  EXPECT_LT(one_block.arena, none.arena);
  planner::Plan off = data_parallel_plan(cfg, 1);
  off.summary.recompute = "full";
  for (auto& l : off.layers) l.recompute = "none";
  EXPECT_TRUE(clones(off).empty());
  planner::Plan sel = data_parallel_plan(cfg, 1);
  sel.summary.recompute = "selective";
  for (const auto& n : clones(sel)) {  // the blocks' layer norms and gelus, nothing else
    const std::string layer = n.substr(2), base = layer.substr(layer.rfind('.') + 1);
    EXPECT_TRUE(base == "ln1" || base == "ln2" || base == "act" || base == "ln_f") << n;
  }
}

TEST(Recompute, MlpAndLeNetWithBatchNormAreBitIdentical) {
  for (const auto& [model, vars] : {std::pair<std::string, std::string>{"fashion_mlp", "{}"},
                                    {"fashion_lenet", "{}"}}) {
    const io::RunConfig cfg = run_of(model, vars);
    for (const planner::Plan& plan : {data_parallel_plan(cfg, 1), data_parallel_plan(cfg, 2)}) {
      planner::Plan full = plan;
      full.summary.recompute = "full";
      for (const auto& n : lower_plan(cfg.model, full)[0].g.nodes())
        EXPECT_FALSE(n.name.starts_with("r/") && n.op->batch_statistics) << n.name << ": batch norm run twice";
      const Result none = train(cfg, plan, "none", 5);
      expect_same(none, train(cfg, plan, "full", 5), model + " full");
      expect_same(none, train(cfg, plan, "selective", 5), model + " selective");
    }
  }
}

// braid train says what each device holds (the memory plan's arena, parameters, gradients, optimizer state) in its
// banner and in the metrics file's first record, per device.
TEST(Memory, TrainReportsWhatEachDeviceHolds) {
  io::RunConfig cfg = run_of("tiny_gpt", "{n_layer: 2, d: 32, seq: 16, dropout: 0.1}");
  cfg.devices = "cpu:2";
  cfg.train.steps = 2;
  cfg.log.every_steps = 1;
  const auto metrics = std::filesystem::temp_directory_path() / "braid_recompute_test" / "metrics.jsonl";
  std::filesystem::remove(metrics);
  cfg.log.metrics = metrics.string();
  TrainOptions o;
  o.progress = false;
  const auto banner = std::filesystem::temp_directory_path() / "braid_recompute_test" / "banner.txt";
  FILE* out = std::fopen(banner.string().c_str(), "w");
  o.out = out;
  train(cfg, o);
  std::fclose(out);
  std::ifstream b(banner), m(metrics);
  const std::string said((std::istreambuf_iterator<char>(b)), {}), first_line = [&] {
    std::string l;
    std::getline(m, l);
    return l;
  }();
  EXPECT_NE(said.find("braid: memory (MiB) device 0: arena "), std::string::npos) << said;
  EXPECT_NE(said.find("; device 1: arena "), std::string::npos) << said;
  for (const char* key : {"\"mem_arena_bytes_d0\":", "\"mem_param_bytes_d0\":", "\"mem_grad_bytes_d1\":",
                          "\"mem_optimizer_bytes_d1\":"})
    EXPECT_NE(first_line.find(key), std::string::npos) << key << " in " << first_line;
  std::string second;
  std::getline(m, second);
  EXPECT_EQ(second.find("mem_arena_bytes"), std::string::npos) << "only the first record: " << second;
}
