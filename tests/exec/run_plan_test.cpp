// run_plan() for cuda devices: plan: auto plans several GPUs on the analytic model of an H200 node (with the
// run's precision: bf16 autocast at the tensor-core peak), one GPU gets no plan, and a plan file for cuda devices
// is read and validated against the run's device list (a GPU may be listed once per plan device).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "exec/run_setup.h"
#include "io/run_config.h"
#include "temp_dir.h"

using namespace braid;

namespace {

std::string write_run() {
  const auto dir = braid::testing::process_temp_dir();
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "run.yaml").string();
  std::ofstream f(file);
  f << "model: " << BRAID_SOURCE_DIR << "/models/tiny_gpt.yaml\n"
    << "data:\n  train: {format: synthetic, samples: 256}\n"
    << "train: {batch: 32, steps: 2}\n"
    << "optimizer: {type: adamw, lr: 1.0e-3}\n";
  return file;
}

}  // namespace

TEST(RunPlan, SeveralCudaDevicesArePlannedOnTheAnalyticH200Model) {
  const std::string run = write_run();
  io::RunConfig cfg = io::load_run_or_model(run, {"devices=cuda:0-3", "train.precision=bf16"});
  auto r = exec::run_plan(cfg);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->automatic);
  EXPECT_LE(r->plan.summary.devices, 4);
  EXPECT_EQ(r->plan.summary.data_parallel * r->plan.summary.micro_batch * r->plan.summary.micro_batches, 32);
  EXPECT_NE(r->cost_model.find("h200"), std::string::npos) << r->cost_model;
  EXPECT_NE(r->cost_model.find("bf16 tensor-core peak"), std::string::npos) << r->cost_model;
  EXPECT_GT(r->prediction.step_time_s, 0);
  io::RunConfig one = io::load_run_or_model(run, {"devices=cuda:0"});
  EXPECT_FALSE(exec::run_plan(one).has_value());
}

TEST(RunPlan, APlanFileForCudaDevicesIsValidatedAgainstTheDeviceList) {
  const std::string run = write_run();
  const std::string plan = std::string(BRAID_SOURCE_DIR) + "/tests/plans/tiny_gpt_dp2_pp2_1f1b.yaml";
  io::RunConfig cfg = io::load_run_or_model(run, {"devices=cuda:0,0,0,0", "parallel.plan=" + plan});
  auto r = exec::run_plan(cfg);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->automatic);
  EXPECT_EQ(r->plan.summary.devices, 4);
  // Predicted on the analytic H200 model braid plans cuda devices with (its memory is checked: below).
  EXPECT_NE(r->cost_model.find("h200"), std::string::npos) << r->cost_model;
  EXPECT_GT(r->prediction.step_time_s, 0);
  io::RunConfig two = io::load_run_or_model(run, {"devices=cuda:0,0", "parallel.plan=" + plan});
  try {
    exec::run_plan(two);
    ADD_FAILURE() << "a plan of 4 devices accepted for 2";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

// braid plan --devices cuda:N and braid train plan cuda devices on the same model: the same description and cluster.
TEST(RunPlan, GpuCostModelIsTheOneTrainPlansWith) {
  const std::string run = write_run();
  io::RunConfig cfg = io::load_run_or_model(run, {"devices=cuda:0-3", "train.precision=bf16"});
  std::string description;
  auto model = exec::gpu_cost_model(cfg, 4, &description);
  EXPECT_EQ(model->cluster().devices(), 4);
  // The cluster keeps the datasheet's peaks; the precision is the planner's TrainSettings (planner::apply_precision,
  // the one place that decides it for braid plan, plan: auto and braid train): bf16 products at the bf16 peak.
  EXPECT_LT(model->cluster().device.peak_flops.at("f32"), model->cluster().device.peak_flops.at("bf16") / 10);
  auto r = exec::run_plan(cfg);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->cost_model, description);
  io::RunConfig f32 = io::load_run_or_model(run, {"devices=cuda:0-3"});
  auto m32 = exec::gpu_cost_model(f32, 4, &description);
  EXPECT_EQ(description.find("tensor-core"), std::string::npos) << description;
  auto r32 = exec::run_plan(f32);
  ASSERT_TRUE(r32.has_value());
  EXPECT_LT(r->prediction.step_time_s, r32->prediction.step_time_s);  // 16-bit peak, half the bytes (a tiny model: op overheads dominate)
  planner::TrainSettings ts;
  planner::apply_precision(ts, "bf16", true);
  EXPECT_EQ(ts.compute, DType::bf16);
  EXPECT_EQ(ts.master_bytes, 4);
  planner::apply_precision(ts, "bf16", false);  // cpu devices train in f32
  EXPECT_EQ(ts.compute, DType::f32);
}

// A plan file whose stage cannot fit even with the plan's strategies (full recomputation, ZeRO 3): refused before
// anything runs, at the stage's entry of the plan file, with what a device would hold and the levers left.
TEST(RunPlan, AStageThatDoesNotFitEvenWithItsStrategiesIsRefusedAtItsEntry) {
  const auto dir = braid::testing::process_temp_dir();
  std::filesystem::create_directories(dir);
  const std::string plan = (dir / "huge_plan.yaml").string();
  {
    std::ofstream f(plan);
    f << "summary:\n  devices: 2\n  data_parallel: 2\n  tensor_parallel: 1\n  pipeline_stages: 1\n"
      << "  micro_batch: 8\n  micro_batches: 2\n  schedule: 1f1b\n  recompute: full\n  zero: 3\n"
      << "stages:\n  - {devices: [0, 1], mesh: [2, 1], first_layer: fc1, last_layer: loss}\n";
  }
  const std::string run = (dir / "huge_run.yaml").string();
  {
    std::ofstream f(run);
    f << "model: " << BRAID_SOURCE_DIR << "/models/fashion_mlp.yaml\n"
      << "data:\n  train: {format: synthetic, samples: 256}\n"
      << "train: {batch: 32, steps: 2}\n"
      << "optimizer: {type: adamw, lr: 1.0e-3}\n"
      << "devices: cpu:2\n";
  }
  // fc1 with 784 x 2e9 weights: 1.6e12 parameters, terabytes of model states per replica even sharded over two.
  for (const char* devices : {"devices=cpu:2", "devices=cuda:0,0"}) {
    io::RunConfig cfg = io::load_run_or_model(run, {devices, "vars.hidden1=2000000000", "parallel.plan=" + plan});
    try {
      exec::run_plan(cfg);
      ADD_FAILURE() << "a plan of terabytes per device accepted on " << devices;
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.diagnostics().at(0).loc.line, 12) << what;  // the stage's entry
      EXPECT_NE(what.find("stage 0 needs"), std::string::npos) << what;
      EXPECT_NE(what.find("with recompute full and zero 3"), std::string::npos) << what;
      EXPECT_NE(e.diagnostics().at(0).hint.find("micro_batch"), std::string::npos) << e.diagnostics().at(0).hint;
      EXPECT_NE(e.diagnostics().at(0).hint.find("pipeline stages"), std::string::npos) << e.diagnostics().at(0).hint;
      EXPECT_EQ(e.diagnostics().at(0).hint.find("zero: 3"), std::string::npos) << e.diagnostics().at(0).hint;  // already pulled
      EXPECT_EQ(e.diagnostics().at(0).hint.find("recompute: full"), std::string::npos) << e.diagnostics().at(0).hint;
    }
  }
  // The same plan without the strategies names them.
  io::RunConfig cfg = io::load_run_or_model(run, {"vars.hidden1=2000000000", "parallel.plan=" + plan});
  std::ofstream(plan) << "summary:\n  devices: 2\n  data_parallel: 2\n  tensor_parallel: 1\n  pipeline_stages: 1\n"
                      << "  micro_batch: 8\n  micro_batches: 2\n  schedule: 1f1b\n"
                      << "stages:\n  - {devices: [0, 1], mesh: [2, 1], first_layer: fc1, last_layer: loss}\n";
  try {
    exec::run_plan(cfg);
    ADD_FAILURE() << "accepted";
  } catch (const UserError& e) {
    EXPECT_NE(e.diagnostics().at(0).hint.find("zero: 3"), std::string::npos) << e.diagnostics().at(0).hint;
    EXPECT_NE(e.diagnostics().at(0).hint.find("recompute: full"), std::string::npos) << e.diagnostics().at(0).hint;
  }
}
