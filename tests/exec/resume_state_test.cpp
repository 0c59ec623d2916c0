// A resumed checkpoint's state is complete and belongs to the run (issue 42): a checkpoint altered in its
// random streams, its optimizer state or its data cursor is refused with a UserError naming the checkpoint
// and what is missing or foreign, and the unaltered one resumes. Each altered file is written by braid's own
// writer, so its checksums are valid: only the content is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "exec/trainer.h"
#include "io/checkpoint.h"
#include "io/run_config.h"
#include "temp_dir.h"

using namespace braid;
using namespace braid::exec;

namespace {

io::RunConfig run_in(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "run.yaml").string();
  std::ofstream f(file);
  f << "model: " << BRAID_SOURCE_DIR << "/models/tiny_gpt.yaml\n"
    << "vars: {n_layer: 1, d: 16, seq: 8, dropout: 0.1}\n"
    << "data:\n  train: {format: synthetic, samples: 32}\n"
    << "train: {batch: 4, steps: 3, seed: 5}\n"
    << "optimizer: {type: adamw, lr: 1.0e-3}\n"
    << "checkpoint: {dir: " << (dir / "ckpt").string() << ", every_steps: 2}\n";
  f.close();
  return io::load_run_or_model(file, {});
}

// The UserError of resuming `cfg` from `path` ("" when it resumes).
std::string resume_error(const io::RunConfig& cfg, const std::string& path) {
  TrainOptions o;
  o.progress = false;
  o.resume = path;
  FILE* out = std::fopen("/dev/null", "w");
  o.out = out;
  std::string e;
  try {
    train(cfg, o);
  } catch (const UserError& err) {
    e = err.format();
  }
  std::fclose(out);
  return e;
}

}  // namespace

TEST(ResumeState, AlteredStreamsOptimizerStateAndCursorAreRefusedNamingThem) {
  const auto dir = braid::testing::process_temp_dir() / "resume_state";
  std::filesystem::remove_all(dir);
  io::RunConfig cfg = run_in(dir);
  TrainOptions o;
  o.progress = false;
  FILE* out = std::fopen("/dev/null", "w");
  o.out = out;
  train(cfg, o);  // checkpoints at steps 2 and 3
  std::fclose(out);
  const std::string good = (dir / "ckpt" / io::CheckpointDir::file_name(2)).string();
  const io::Checkpoint c = io::read_checkpoint(good);
  ASSERT_EQ(c.meta.step, 2);

  const std::string bad = (dir / "altered.h5").string();
  auto refused = [&](const std::string& what, const std::function<void(io::Checkpoint&)>& alter,
                     const std::string& expected) {
    SCOPED_TRACE(what);
    io::Checkpoint a = c;
    a.optimizer = c.optimizer;  // the entries are copied; their tensors are not changed here
    alter(a);
    io::write_checkpoint(bad, a);
    const std::string e = resume_error(cfg, bad);
    EXPECT_NE(e.find(bad), std::string::npos) << e;
    EXPECT_NE(e.find(expected), std::string::npos) << e;
  };
  auto stream = [](io::Checkpoint& a, const std::string& name) -> io::RngStream& {
    for (auto& r : a.rng)
      if (r.name == name) return r;
    throw std::runtime_error("no stream " + name);
  };
  refused("dropout key", [&](io::Checkpoint& a) { stream(a, "dropout").key ^= 1; },
          "random stream 'dropout' (key ");
  refused("dropout counter", [&](io::Checkpoint& a) { stream(a, "dropout").counter += 1; },
          "is not the run's: seed 5 at step 2");
  refused("shuffle counter", [&](io::Checkpoint& a) { stream(a, "shuffle").counter += 1; },
          "random stream 'shuffle'");
  refused("init stream missing", [&](io::Checkpoint& a) { std::erase_if(a.rng, [](auto& r) { return r.name == "init"; }); },
          "random stream 'init' is missing");
  refused("a foreign stream", [&](io::Checkpoint& a) { a.rng.push_back({"noise", 1, 2}); },
          "random stream 'noise' belongs to no part of a run");
  refused("optimizer state of no parameter",
          [&](io::Checkpoint& a) { a.optimizer.push_back({"ghost.weight", "exp_avg", c.optimizer[0].value}); },
          "optimizer state 'ghost.weight/exp_avg' (");
  refused("an optimizer state the optimizer does not keep",
          [&](io::Checkpoint& a) { a.optimizer.push_back({c.optimizer[0].param, "momentum_buffer", c.optimizer[0].value}); },
          "belongs to no parameter of the run's adamw optimizer");
  refused("more optimizer steps than steps", [&](io::Checkpoint& a) { a.optimizer_steps = 9; },
          "its optimizer has taken 9 steps at step 2");
  refused("a data cursor past the dataset", [&](io::Checkpoint& a) { a.data.position = 1000; },
          "its data cursor: cannot resume the data order at epoch 0, sample 1000: the dataset has 32 samples");
  // The unaltered checkpoint resumes (and finishes the run's third step).
  EXPECT_EQ(resume_error(cfg, good), "");
}
