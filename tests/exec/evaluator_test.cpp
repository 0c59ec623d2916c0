// The one evaluator (exec/evaluator.h) runs the evaluation graph in evaluation mode: with the weights unchanged
// (an lr below half an ulp of every weight), a model's evaluation does not depend on its dropout, which only training draws.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "exec/trainer.h"
#include "io/run_config.h"
#include "temp_dir.h"

using namespace braid;

namespace {

std::vector<std::pair<std::string, double>> eval_after_training(const std::string& dropout, const std::string& devices) {
  const auto dir = braid::testing::process_temp_dir() / "evaluator";
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "run.yaml").string();
  std::ofstream(file) << "model: " << BRAID_SOURCE_DIR << "/models/tiny_gpt.yaml\n"
                      << "vars: {n_layer: 2, d: 16, seq: 8, dropout: " << dropout << "}\n"
                      << "data:\n  train: {format: synthetic, samples: 64}\n"
                      << "  eval: {format: synthetic, samples: 40}\n"
                      << "train: {batch: 16, steps: 2, seed: 3}\n"
                      << "eval: {every_steps: 1}\n"
                      << "optimizer: {type: adamw, lr: 1.0e-30}\n"  // below half an ulp of every weight: none moves
                      << "devices: " << devices << "\n";
  const io::RunConfig cfg = io::load_run_or_model(file, {});
  exec::TrainOptions o;
  o.progress = false;
  FILE* out = std::fopen("/dev/null", "w");
  o.out = out;
  auto r = exec::train(cfg, o);
  std::fclose(out);
  return r.eval;
}

}  // namespace

TEST(Evaluator, EvaluationDoesNotDrawDropout) {
  for (const std::string devices : {"cpu", "cpu:2"}) {
    const auto with = eval_after_training("0.5", devices), without = eval_after_training("0.0", devices);
    ASSERT_FALSE(with.empty()) << devices;
    ASSERT_EQ(with.size(), without.size()) << devices;
    for (size_t k = 0; k < with.size(); ++k) {
      EXPECT_EQ(with[k].first, without[k].first);
      EXPECT_EQ(with[k].second, without[k].second) << devices << ": " << with[k].first;  // the same bits
    }
  }
}
