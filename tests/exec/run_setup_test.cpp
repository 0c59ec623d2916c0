// A run is set up once (issue 38, item 3): one `train` parses the device string once and builds the training
// graph once and the evaluation graph once, whatever reads them after preflight (the plan, the lowering, the
// engine's stores, the evaluator), on one device, data parallel and under a plan file.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "exec/trainer.h"
#include "graph/build.h"
#include "io/run_config.h"
#include "planner/plan.h"
#include "temp_dir.h"

using namespace braid;

namespace {

struct Counts {
  int64_t parses = 0, training = 0, evaluation = 0;
};

Counts now() {
  return {planner::parse_count(), graph::build_count() - graph::evaluation_build_count(),
          graph::evaluation_build_count()};
}

// Trains tiny_gpt for two steps with `sets`, evaluating 32 samples (two full batches of 16) after each step.
Counts train_counting(const std::vector<std::string>& sets) {
  const auto dir = braid::testing::process_temp_dir() / "run_setup";
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "run.yaml").string();
  std::ofstream(file) << "model: " << BRAID_SOURCE_DIR << "/models/tiny_gpt.yaml\n"
                      << "vars: {n_layer: 2, d: 16, seq: 8}\n"
                      << "data:\n  train: {format: synthetic, samples: 64}\n"
                      << "  eval: {format: synthetic, samples: 32}\n"
                      << "train: {batch: 16, steps: 2, seed: 3}\n"
                      << "eval: {every_steps: 1}\n"
                      << "optimizer: {type: adamw, lr: 1.0e-3}\n";
  const io::RunConfig cfg = io::load_run_or_model(file, sets);
  exec::TrainOptions o;
  o.progress = false;
  FILE* out = std::fopen("/dev/null", "w");
  o.out = out;
  const Counts before = now();
  exec::train(cfg, o);
  std::fclose(out);
  const Counts after = now();
  return {after.parses - before.parses, after.training - before.training, after.evaluation - before.evaluation};
}

void expect_once(const std::vector<std::string>& sets) {
  const Counts c = train_counting(sets);
  EXPECT_EQ(c.parses, 1) << "device string parses";
  EXPECT_EQ(c.training, 1) << "training graph builds";
  EXPECT_EQ(c.evaluation, 1) << "evaluation graph builds";
}

}  // namespace

TEST(RunSetup, OneDeviceParsesTheDevicesOnceAndBuildsEachGraphOnce) { expect_once({"devices=cpu"}); }

TEST(RunSetup, DataParallelParsesTheDevicesOnceAndBuildsEachGraphOnce) {
  expect_once({"devices=cpu:2", "parallel.plan=auto"});
}

TEST(RunSetup, APlanFileParsesTheDevicesOnceAndBuildsEachGraphOnce) {
  expect_once({"devices=cpu:4", "train.batch=32",
               "parallel.plan=" + std::string(BRAID_SOURCE_DIR) + "/tests/plans/tiny_gpt_dp2_pp2_1f1b.yaml"});
}
