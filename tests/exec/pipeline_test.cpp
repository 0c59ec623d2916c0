// Engine and lowering on small models: the static memory plan bounds in-flight activations as each
// schedule promises (GPipe: every micro-batch; 1F1B: at most as many as there are stages),
// a lowered tensor-parallel program holds the reshards its signatures imply, and every device's programs
// hold only its shards of the parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "exec/lower.h"
#include "exec/run_data.h"
#include "io/dataset.h"
#include "exec/comm/inproc.h"
#include "exec/engine.h"
#include "graph/build.h"
#include "io/run_config.h"

using namespace braid;
using namespace braid::exec;

namespace {

io::RunConfig tiny_gpt() {
  return io::load_run_or_model(std::string(BRAID_SOURCE_DIR) + "/configs/tiny_gpt.yaml",
                               {"vars.d=32", "vars.seq=16", "vars.n_layer=2", "vars.dropout=0.0", "data.train.seq=16"});
}

// A pipeline of `stages` single-device stages over the model's forward layers, cut evenly.
planner::Plan pipeline_plan(const io::ModelSpec& m, int stages, int micro_batches, const std::string& schedule) {
  graph::Graph g = graph::build_graph(m, 2, {});
  auto fwd = planner::forward_layers(g);
  planner::Plan p;
  p.summary.devices = stages;
  p.summary.pipeline_stages = stages;
  p.summary.micro_batch = 2;
  p.summary.micro_batches = micro_batches;
  p.summary.schedule = schedule;
  const size_t n = fwd.size();
  for (int s = 0; s < stages; ++s) {
    planner::StagePlan sp;
    sp.devices = {s};
    sp.mesh = {1, 1};
    sp.first_layer = fwd[n * static_cast<size_t>(s) / static_cast<size_t>(stages)]->layer;
    sp.last_layer = fwd[n * static_cast<size_t>(s + 1) / static_cast<size_t>(stages) - 1]->layer;
    p.stages.push_back(sp);
  }
  planner::add_default_layers(p, g);
  return p;
}

TEST(PipelineMemory, GPipeHoldsEveryMicroBatchAndOneFOneBAtMostTheStagesAhead) {
  auto cfg = tiny_gpt();
  const int P = 4, M = 8;
  Engine gp(cfg.model, cfg.optimizer, pipeline_plan(cfg.model, P, M, "gpipe"), 1);
  Engine fb(cfg.model, cfg.optimizer, pipeline_plan(cfg.model, P, M, "1f1b"), 1);
  auto g_arena = gp.arena_bytes(), f_arena = fb.arena_bytes();
  for (int s = 0; s < P; ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    EXPECT_EQ(gp.stage_slots()[static_cast<size_t>(s)], M);
    // 1F1B: stage s has P - s forwards in flight, plus (after the first stage) the next micro-batch's input,
    // received while the current one's gradient is still to be sent: never more than P.
    EXPECT_EQ(fb.stage_slots()[static_cast<size_t>(s)], P - s + (s > 0 ? 1 : 0));
    EXPECT_LE(fb.stage_slots()[static_cast<size_t>(s)], P);
    EXPECT_GE(fb.stage_slots()[static_cast<size_t>(s)], 1);
    // The static plan: activations kept from forward to backward take one slot region per micro-batch in
    // flight; the rest is shared. Same programs, so the slot regions are equal and only the counts differ.
    EXPECT_LT(f_arena[static_cast<size_t>(s)], g_arena[static_cast<size_t>(s)]);
    std::printf("stage %d: gpipe %d slots, %zu bytes; 1f1b %d slots, %zu bytes\n", s,
                gp.stage_slots()[static_cast<size_t>(s)], g_arena[static_cast<size_t>(s)],
                fb.stage_slots()[static_cast<size_t>(s)], f_arena[static_cast<size_t>(s)]);
  }
}

// Data-parallel gradients go in buckets that start during the last backward; how they are bucketed does not
// change a bit of the result (the all-reduce is element-wise), and small buckets make several.
TEST(PipelineBuckets, BucketSizeChangesNothingButTheNumberOfBuckets) {
  auto cfg = tiny_gpt();
  graph::Graph g = graph::build_graph(cfg.model, 2, {});
  auto plan = [&]() {
    planner::Plan p = pipeline_plan(cfg.model, 2, 2, "1f1b");
    p.summary.devices = 4;
    p.summary.data_parallel = 2;
    p.stages[0].devices = {0, 1};
    p.stages[1].devices = {2, 3};
    for (auto& st : p.stages) st.mesh = {2, 1};
    return p;
  }();
  EngineOptions small;
  small.bucket_bytes = 4096;
  Engine a(cfg.model, cfg.optimizer, plan, 1), b(cfg.model, cfg.optimizer, plan, 1, small);
  EXPECT_EQ(a.bucket_bytes(0).at(0).size(), 1u);
  EXPECT_GT(b.bucket_bytes(0).at(0).size(), 3u);
  auto data = io::open_dataset(cfg.data.train, dataset_inputs(cfg.model, g), 1);
  io::BatchSampler sa(data->size(), 8, true, 1), sb(data->size(), 8, true, 1);
  for (int step = 0; step < 3; ++step) {
    auto ra = a.step(*data, sa.next_view(), step, 1e-3, 1.0);
    auto rb = b.step(*data, sb.next_view(), step, 1e-3, 1.0);
    EXPECT_EQ(ra.loss, rb.loss) << "step " << step;
    EXPECT_EQ(ra.grad_norm, rb.grad_norm) << "step " << step;
  }
  ParamStore wa, wb;
  graph::Graph train = graph::build_graph(cfg.model, 2, {});
  wa.create(train, 1);
  wb.create(train, 1);
  a.gather(wa, nullptr);
  b.gather(wb, nullptr);
  for (size_t i = 0; i < wa.entries().size(); ++i)
    EXPECT_EQ(std::memcmp(wa.entries()[i].value.raw(), wb.entries()[i].value.raw(), wa.entries()[i].value.bytes()), 0)
        << wa.entries()[i].name;
}

// A plan split over two "processes": two Engines in one process, each running half the devices and talking
// only through world communicators (here from one InProcWorld; between processes, TCP). Their steps and
// their collective gather equal one runner holding every device, bit for bit.
TEST(PipelineWorld, DevicesSplitOverRunnersTrainAndGatherAsOne) {
  auto cfg = tiny_gpt();
  graph::Graph g = graph::build_graph(cfg.model, 2, {});
  planner::Plan plan = pipeline_plan(cfg.model, 2, 2, "1f1b");
  plan.summary.devices = 4;
  plan.summary.data_parallel = 2;
  plan.stages[0].devices = {0, 1};
  plan.stages[1].devices = {2, 3};
  for (auto& st : plan.stages) st.mesh = {2, 1};
  Engine whole(cfg.model, cfg.optimizer, plan, 1);
  InProcWorld world(4);
  PlanWorld wa{{0, 1}, [&](int d) { return world.communicator(d); }};
  PlanWorld wb{{2, 3}, [&](int d) { return world.communicator(d); }};
  Engine a(cfg.model, cfg.optimizer, plan, 1, {}, &wa), b(cfg.model, cfg.optimizer, plan, 1, {}, &wb);
  EXPECT_EQ(a.local_devices(), (std::vector<int>{0, 1}));
  auto data = io::open_dataset(cfg.data.train, dataset_inputs(cfg.model, g), 1);
  io::BatchSampler s0(data->size(), 8, true, 1), s1(data->size(), 8, true, 1), s2(data->size(), 8, true, 1);
  // Each "process" reads its own Dataset, as processes would.
  auto data_b = io::open_dataset(cfg.data.train, dataset_inputs(cfg.model, g), 1);
  for (int step = 0; step < 3; ++step) {
    auto rw = whole.step(*data, s0.next_view(), step, 1e-3, 1.0);
    StepResult ra, rb;
    auto ia = s1.next_view();
    auto vb = s2.next_view();
    std::vector<int64_t> ib(vb.begin(), vb.end());
    std::thread tb([&]() { rb = b.step(*data_b, ib, step, 1e-3, 1.0); });
    ra = a.step(*data, ia, step, 1e-3, 1.0);
    tb.join();
    EXPECT_EQ(ra.loss, rw.loss) << "step " << step;
    EXPECT_EQ(rb.loss, rw.loss) << "step " << step;
    EXPECT_EQ(ra.grad_norm, rw.grad_norm) << "step " << step;
  }
  graph::Graph train = graph::build_graph(cfg.model, 2, {});
  ParamStore fw, fa, fb;
  fw.create(train, 1);
  fa.create(train, 1);
  fb.create(train, 1);
  Optimizer ow(cfg.optimizer, fw), oa(cfg.optimizer, fa), ob(cfg.optimizer, fb);
  whole.gather(fw, &ow);
  std::thread tb([&]() { b.gather(fb, &ob); });
  a.gather(fa, &oa);
  tb.join();
  for (size_t i = 0; i < fw.entries().size(); ++i)
    EXPECT_EQ(std::memcmp(fw.entries()[i].value.raw(), fa.entries()[i].value.raw(), fw.entries()[i].value.bytes()), 0)
        << fw.entries()[i].name;
  for (auto& [name, st] : ow.state())
    for (auto& [key, t] : st)
      EXPECT_EQ(std::memcmp(t.raw(), oa.state().at(name).at(key).raw(), t.bytes()), 0) << name << "/" << key;
  EXPECT_EQ(oa.steps_taken(), 3);
}

TEST(Lowering, TensorParallelMlpHoldsShardsAndExplicitReshards) {
  auto cfg = tiny_gpt();
  graph::Graph g = graph::build_graph(cfg.model, 4, {});
  planner::Plan p;
  p.summary.devices = 2;
  p.summary.tensor_parallel = 2;
  p.summary.micro_batch = 4;
  p.summary.micro_batches = 1;
  planner::StagePlan sp;
  sp.devices = {0, 1};
  sp.mesh = {1, 2};
  sp.first_layer = "tok";
  sp.last_layer = "loss";
  p.stages.push_back(sp);
  for (auto [layer, sig] : {std::pair{"h.0.fc", "column"}, {"h.0.proj", "row"}}) {
    planner::LayerPlan l;
    l.layer = layer;
    l.signature = sig;
    l.tensor_parallel = 2;
    p.layers.push_back(l);
  }
  planner::add_default_layers(p, g);
  auto progs = lower_plan(cfg.model, p);
  ASSERT_EQ(progs.size(), 1u);
  const StageProgram& prog = progs[0];
  // Column: the weight's output rows are split; row: its input columns; the row bias is whole (held by
  // rank 0 through comm_to_partial).
  auto shard = [&](const std::string& name) {
    for (const auto& s : prog.params)
      if (s.name == name) return s;
    ADD_FAILURE() << "no parameter " << name;
    return prog.params.front();
  };
  EXPECT_EQ(shard("h.0.fc.weight").layout, ops::Sbp::S(0));
  EXPECT_EQ(shard("h.0.proj.weight").layout, ops::Sbp::S(1));
  EXPECT_EQ(shard("h.0.proj.bias").layout, ops::Sbp::B());
  EXPECT_EQ(prog.g.find_param("h.0.fc.weight")->spec.desc.shape, (Shape{64, 32}));
  std::map<std::string, int> comm;
  for (const auto& n : prog.g.nodes())
    if (n.op->collective) ++comm[n.op->name + (n.backward ? " (backward)" : "")];
  // Forward: the block input enters the column split through comm_copy, the row output's partial sums are
  // all-reduced, the row bias enters as a partial; backward: comm_copy's all-reduce.
  EXPECT_EQ(comm["comm_copy"], 1);
  EXPECT_EQ(comm["comm_all_reduce"], 1);
  EXPECT_EQ(comm["comm_to_partial"], 1);
  EXPECT_EQ(comm["comm_all_reduce (backward)"], 1);
}

}  // namespace

// Every run is a plan: the trivial plans lower to the graph one device has always run (the same nodes, names and
// ops in the same order, forward and backward, so the same kernels, masks and bits), with bf16 values when asked
// (LowerOptions::half, GPU runs of one stage), and the data-parallel plan splits the micro-batch over its replicas.
TEST(Lowering, TrivialPlansAreTheSingleDeviceGraph) {
  auto cfg = tiny_gpt();
  cfg.train.batch = 8;
  cfg.train.micro_batch = 4;
  for (DType half : {DType::f32, DType::bf16}) {
    graph::BuildOptions bo;
    bo.with_backward = true;
    bo.half = half;
    const graph::Graph g = graph::build_graph(cfg.model, 4, bo);
    const auto programs = lower_plan(cfg.model, data_parallel_plan(cfg, 1), LowerOptions{false, half});
    ASSERT_EQ(programs.size(), 1u);
    const graph::Graph& p = programs[0].g;
    ASSERT_EQ(p.nodes().size(), g.nodes().size()) << dtype_name(half);
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      EXPECT_EQ(p.nodes()[i].name, g.nodes()[i].name) << i;
      EXPECT_EQ(p.nodes()[i].op, g.nodes()[i].op) << g.nodes()[i].name;
      EXPECT_EQ(p.nodes()[i].backward, g.nodes()[i].backward) << g.nodes()[i].name;
      ASSERT_EQ(p.nodes()[i].outputs.size(), g.nodes()[i].outputs.size());
      for (size_t k = 0; k < g.nodes()[i].outputs.size(); ++k)
        EXPECT_EQ(p.value(p.nodes()[i].outputs[k]).desc, g.value(g.nodes()[i].outputs[k]).desc) << g.nodes()[i].name;
    }
  }
  const planner::Plan dp = data_parallel_plan(cfg, 2);
  EXPECT_EQ(dp.summary.devices, 2);
  EXPECT_EQ(dp.summary.data_parallel, 2);
  EXPECT_EQ(dp.summary.micro_batch, 2);
  EXPECT_EQ(dp.summary.micro_batches, 2);
  ASSERT_EQ(dp.stages.size(), 1u);
  EXPECT_EQ(dp.stages[0].devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(dp.stages[0].mesh, (std::vector<int64_t>{2, 1}));
  try {
    data_parallel_plan(cfg, 3);
    ADD_FAILURE() << "a micro-batch of 4 over 3 replicas was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("does not split evenly over 3"), std::string::npos) << e.what();
  }
}
