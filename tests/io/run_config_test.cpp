// Tests of run files: every section with its defaults, paths relative to the run file, data files checked,
// --set overrides (values, new keys, and errors located on the command line), bare model files, and
// errors in the model reached through a run file.
#include <gtest/gtest.h>

#include "io/run_config.h"
#include "yaml_test_util.h"

using namespace braid;
using namespace braid::io;

namespace {

const char* kMlp = R"(name: mlp
vars: {hidden: 16, classes: 10}
inputs:
  image: {shape: [784]}
  label: {shape: [], dtype: i64}
layers:
  - {name: fc1, op: linear, out: hidden}
  - {name: act, op: relu}
  - {name: fc2, op: linear, out: classes}
  - {name: loss, op: cross_entropy, from: [fc2, label]}
outputs: [loss]
)";

const char* kMinimalRun = R"(model: ../models/mlp.yaml
vars: {hidden: 32}
data:
  train: {format: idx, images: ../data/train-images, labels: ../data/train-labels}
train: {batch: 64, steps: 100}
optimizer: {type: adamw, lr: 3.0e-4}
)";

class Run : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = t_.write("models/mlp.yaml", kMlp);
    t_.write("data/train-images", "");
    t_.write("data/train-labels", "");
    t_.write("data/corpus.txt", "hello");
    t_.write("data/mnist.h5", "");
  }
  // Writes runs/<name> and loads it; fails the test on error.
  RunConfig load(const std::string& text, const std::vector<std::string>& sets = {}) {
    std::string path = t_.write("runs/run.yaml", text);
    try {
      return load_run_or_model(path, sets);
    } catch (const UserError& e) {
      ADD_FAILURE() << e.format();
    }
    return {};
  }
  // Writes runs/run.yaml, expects a UserError and returns its diagnostics.
  std::vector<Diagnostic> fail(const std::string& text, const std::vector<std::string>& sets = {}) {
    std::string path = t_.write("runs/run.yaml", text);
    try {
      load_run_or_model(path, sets);
      ADD_FAILURE() << "no error for:\n" << text;
    } catch (const UserError& e) {
      return e.diagnostics();
    }
    return {};
  }
  std::string run_path() const { return t_.path() + "/runs/run.yaml"; }

  iotest::TempDir t_;
  std::string model_;
};

TEST_F(Run, MinimalRunFileAndDefaults) {
  RunConfig rc = load(kMinimalRun);
  EXPECT_FALSE(rc.is_model_only);
  EXPECT_EQ(rc.path, run_path());
  EXPECT_EQ(rc.model_path, model_);
  EXPECT_EQ(rc.model.name, "mlp");
  EXPECT_EQ(rc.model.vars.at("hidden").i, 32);  // the run's vars override the model's
  EXPECT_EQ(rc.data.train.format, "idx");
  EXPECT_EQ(rc.data.train.images, t_.path() + "/data/train-images");
  EXPECT_EQ(rc.data.train.labels, t_.path() + "/data/train-labels");
  EXPECT_FALSE(rc.data.eval.has_value());
  EXPECT_TRUE(rc.data.shuffle);
  EXPECT_EQ(rc.train.batch, 64);
  EXPECT_EQ(rc.train.steps, 100);
  EXPECT_FALSE(rc.train.micro_batch.has_value());
  EXPECT_FALSE(rc.train.epochs.has_value());
  EXPECT_EQ(rc.train.seed, 1u);
  EXPECT_EQ(rc.train.precision, "f32");
  EXPECT_EQ(rc.optimizer.type, "adamw");
  EXPECT_DOUBLE_EQ(rc.optimizer.lr, 3.0e-4);
  EXPECT_DOUBLE_EQ(rc.optimizer.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(rc.optimizer.betas[0], 0.9);
  EXPECT_DOUBLE_EQ(rc.optimizer.betas[1], 0.999);
  EXPECT_DOUBLE_EQ(rc.optimizer.eps, 1e-8);
  EXPECT_FALSE(rc.optimizer.clip_grad_norm.has_value());
  EXPECT_EQ(rc.lr_schedule.type, "constant");
  EXPECT_EQ(rc.devices, "cpu");
  EXPECT_EQ(rc.parallel.plan, "auto");
  EXPECT_EQ(rc.parallel.schedule, "1f1b");
  EXPECT_EQ(rc.checkpoint.dir, "");
  EXPECT_EQ(rc.log.metrics, "");
  EXPECT_EQ(rc.checkpoint.keep, 3);
  EXPECT_EQ(rc.log.every_steps, 10);
  EXPECT_EQ(rc.eval.every_steps, 0);
}

TEST_F(Run, EverySection) {
  RunConfig rc = load(R"(model: ../models/mlp.yaml
data:
  train: {format: bytes, path: ../data/corpus.txt, seq: 4 * 16, limit: 1000}
  eval:  {format: hdf5, path: ../data/mnist.h5, fields: {image: /x, label: /y}, bind: {image: image, label: label}}
  shuffle: false
train:
  batch: 64
  micro_batch: 16
  epochs: 3
  seed: 7
  precision: bf16
optimizer: {type: adamw, lr: 3.0e-4, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 0.1, clip_grad_norm: 1.0}
lr_schedule: {type: cosine, warmup_steps: 100, min_lr: 3.0e-5}
devices: cuda:0-7
parallel: {plan: plan.yaml, schedule: interleaved}
checkpoint: {dir: ckpt, every_steps: 500, keep: 2}
log: {every_steps: 5, metrics: m.jsonl}
eval: {every_steps: 500, batches: 20}
)");
  EXPECT_EQ(rc.data.train.format, "bytes");
  EXPECT_EQ(rc.data.train.path, t_.path() + "/data/corpus.txt");
  EXPECT_EQ(rc.data.train.seq, 64);
  EXPECT_EQ(rc.data.train.limit, 1000);
  ASSERT_TRUE(rc.data.eval.has_value());
  EXPECT_EQ(rc.data.eval->format, "hdf5");
  EXPECT_EQ(rc.data.eval->fields, (std::vector<std::pair<std::string, std::string>>{{"image", "/x"}, {"label", "/y"}}));
  EXPECT_EQ(rc.data.eval->bind.size(), 2u);
  EXPECT_EQ(rc.data.eval->loc.line, 4);
  EXPECT_FALSE(rc.data.shuffle);
  EXPECT_EQ(rc.train.micro_batch, 16);
  EXPECT_EQ(rc.train.epochs, 3);
  EXPECT_EQ(rc.train.seed, 7u);
  EXPECT_EQ(rc.train.precision, "bf16");
  EXPECT_DOUBLE_EQ(rc.optimizer.betas[1], 0.95);
  EXPECT_DOUBLE_EQ(rc.optimizer.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(rc.optimizer.clip_grad_norm.value(), 1.0);
  EXPECT_EQ(rc.lr_schedule.type, "cosine");
  EXPECT_EQ(rc.lr_schedule.warmup_steps, 100);
  EXPECT_DOUBLE_EQ(rc.lr_schedule.min_lr, 3.0e-5);
  EXPECT_EQ(rc.devices, "cuda:0-7");
  EXPECT_EQ(rc.parallel.plan, t_.path() + "/runs/plan.yaml");
  EXPECT_EQ(rc.parallel.schedule, "interleaved");
  EXPECT_EQ(rc.checkpoint.dir, t_.path() + "/runs/ckpt");
  EXPECT_EQ(rc.checkpoint.every_steps, 500);
  EXPECT_EQ(rc.checkpoint.keep, 2);
  EXPECT_EQ(rc.log.every_steps, 5);
  EXPECT_EQ(rc.log.metrics, t_.path() + "/runs/m.jsonl");
  EXPECT_EQ(rc.eval.batches, 20);
}

TEST_F(Run, SgdDefaultsAndStepSchedule) {
  RunConfig rc = load(R"(model: ../models/mlp.yaml
data: {train: {format: synthetic}}
train: {batch: 8, steps: 1}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9, nesterov: true}
lr_schedule: {type: step, step_size: 10, gamma: 0.5}
)");
  EXPECT_EQ(rc.optimizer.type, "sgd");
  EXPECT_DOUBLE_EQ(rc.optimizer.weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(rc.optimizer.momentum, 0.9);
  EXPECT_TRUE(rc.optimizer.nesterov);
  EXPECT_EQ(rc.data.train.samples, 1024);
  EXPECT_EQ(rc.lr_schedule.step_size, 10);
  EXPECT_DOUBLE_EQ(rc.lr_schedule.gamma, 0.5);
}

TEST_F(Run, SetOverridesApplyBeforeReading) {
  RunConfig rc = load(kMinimalRun, {"optimizer.lr=1e-3", "optimizer.betas=[0.9,0.95]", "vars.hidden=64",
                                    "train.micro_batch=8", "checkpoint.dir=/tmp/ck", "devices=cuda:0,1",
                                    "data.eval.format=synthetic"});
  EXPECT_DOUBLE_EQ(rc.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(rc.optimizer.betas[1], 0.95);
  EXPECT_EQ(rc.model.vars.at("hidden").i, 64);
  EXPECT_EQ(rc.train.micro_batch, 8);
  EXPECT_EQ(rc.checkpoint.dir, "/tmp/ck");
  EXPECT_EQ(rc.log.metrics, "/tmp/ck/metrics.jsonl");  // the default follows the checkpoint folder
  EXPECT_EQ(rc.devices, "cuda:0,1");
  ASSERT_TRUE(rc.data.eval.has_value());
  EXPECT_EQ(rc.data.eval->format, "synthetic");
  // The text after overrides is YAML again, holding the overrides.
  Diagnostics d;
  YNode again = parse_yaml(rc.text, "text", d);
  ASSERT_TRUE(d.empty()) << iotest::dump(d) << rc.text;
  EXPECT_EQ(again.get("optimizer")->get("lr")->scalar, "1e-3");
  EXPECT_EQ(again.get("optimizer")->get("betas")->seq.size(), 2u);
  EXPECT_EQ(again.get("devices")->scalar, "cuda:0,1");
}

TEST_F(Run, SetErrorsPointAtTheCommandLine) {
  auto d = fail(kMinimalRun, {"optimizer.lr=1e-3", "optimizer.lr=abc"});
  ASSERT_EQ(d.size(), 1u) << iotest::dump(d);
  EXPECT_EQ(d[0].loc.str(), "<command line>:2:14");
  EXPECT_EQ(d[0].message.rfind("--set optimizer.lr=abc: ", 0), 0u) << d[0].message;

  d = fail(kMinimalRun, {"optimiser.lr=1"});
  EXPECT_DIAG(d, 1, 1, "unknown key 'optimiser'");
  EXPECT_DIAG(d, 1, 1, "did you mean 'optimizer'?");
  EXPECT_EQ(d[0].loc.file, "<command line>");

  EXPECT_DIAG(fail(kMinimalRun, {"train"}), 1, 1, "--set train: expected KEY=VALUE");
  EXPECT_DIAG(fail(kMinimalRun, {"train..batch=1"}), 1, 7, "empty part");
  EXPECT_DIAG(fail(kMinimalRun, {"train.batch="}), 1, 13, "no value");
  EXPECT_DIAG(fail(kMinimalRun, {"train.batch.x=1"}), 1, 13, "'train.batch' is a scalar, not a mapping");
  EXPECT_DIAG(fail(kMinimalRun, {"train.batch=[1"}), 1, 15, "invalid YAML");  // at the end, where ']' is missing
  EXPECT_DIAG(fail(kMinimalRun, {"train.batch=0"}), 1, 13, "--set train.batch=0: train.batch must be at least 1");
  EXPECT_DIAG(fail(kMinimalRun, {"optimizer.lr=-1"}), 1, 14, "optimizer.lr must be greater than 0, got -1");
  d = fail(kMinimalRun, {"vars.hiden=3"});
  EXPECT_DIAG(d, 1, 6, "unknown var 'hiden'");
  EXPECT_DIAG(d, 1, 6, "did you mean 'hidden'?");
}

TEST_F(Run, BareModelFile) {
  RunConfig rc = load_run_or_model(model_, {"vars.hidden=5"});
  EXPECT_TRUE(rc.is_model_only);
  EXPECT_EQ(rc.path, "");
  EXPECT_EQ(rc.model_path, model_);
  EXPECT_EQ(rc.model.vars.at("hidden").i, 5);
  try {
    load_run_or_model(model_, {"optimizer.lr=1", "vars.nope=1"});
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_DIAG(e.diagnostics(), 1, 1, "only vars.NAME may be set");
    EXPECT_DIAG(e.diagnostics(), 2, 6, "unknown var 'nope'");
  }
}

TEST_F(Run, ModelErrorsNameTheModelFile) {
  t_.write("models/bad.yaml", "inputs: {x: {shape: [4]}}\nlayers:\n  - {name: out, op: relu, from: nope}\noutputs: [out]\n");
  auto d = fail("model: ../models/bad.yaml\ndata: {train: {format: synthetic}}\ntrain: {batch: 8, steps: 1}\n"
                "optimizer: {type: sgd, lr: 0.1}\n");
  ASSERT_EQ(d.size(), 1u) << iotest::dump(d);
  EXPECT_EQ(d[0].loc.str(), t_.path() + "/models/bad.yaml:3:33");
  auto d2 = fail("model: ../models/none.yaml\ndata: {train: {format: synthetic}}\ntrain: {batch: 8, steps: 1}\n"
                 "optimizer: {type: sgd, lr: 0.1}\n");
  EXPECT_DIAG(d2, 1, 8, "no such file");
  EXPECT_EQ(d2[0].loc.file, run_path());
}

TEST_F(Run, MissingDataFileIsReportedAtItsPath) {
  auto d = fail("model: ../models/mlp.yaml\ndata:\n  train: {format: idx, images: ../data/train-images, labels: nolabels}\n"
                "train: {batch: 8, steps: 1}\noptimizer: {type: sgd, lr: 0.1}\n");
  ASSERT_EQ(d.size(), 1u) << iotest::dump(d);
  EXPECT_DIAG(d, 3, 62, "data file not found: " + t_.path() + "/runs/nolabels");
}

TEST_F(Run, RequiredKeys) {
  auto d = fail("model: ../models/mlp.yaml\n");
  EXPECT_DIAG(d, 1, 1, "missing required key 'data'");
  EXPECT_DIAG(d, 1, 1, "missing required key 'train'");
  EXPECT_DIAG(d, 1, 1, "missing required key 'optimizer'");
  d = fail("data: {train: {format: synthetic}}\ntrain: {batch: 8, steps: 1}\noptimizer: {type: sgd, lr: 0.1}\n");
  EXPECT_DIAG(d, 1, 1, "missing required key 'model'");
  d = fail("model: ../models/mlp.yaml\ndata: {eval: {format: synthetic}}\ntrain: {steps: 1}\noptimizer: {type: sgd}\n");
  EXPECT_DIAG(d, 2, 7, "'data' needs 'train'");
  EXPECT_DIAG(d, 3, 8, "'train' needs 'batch'");
  EXPECT_DIAG(d, 4, 12, "'optimizer' needs 'lr'");
}

TEST_F(Run, TrainChecks) {
  const std::string head = "model: ../models/mlp.yaml\ndata: {train: {format: synthetic}}\noptimizer: {type: sgd, lr: 0.1}\n";
  EXPECT_DIAG(fail(head + "train: {batch: 8}\n"), 4, 8, "needs 'steps' or 'epochs'");
  EXPECT_DIAG(fail(head + "train: {batch: 8, steps: 1, epochs: 2}\n"), 4, 29, "both 'steps' and 'epochs'");
  EXPECT_DIAG(fail(head + "train: {batch: 64, micro_batch: 24, steps: 1}\n"), 4, 33, "does not divide train.batch 64");
  EXPECT_DIAG(fail(head + "train: {batch: 0, steps: 1}\n"), 4, 16, "train.batch must be at least 1, got 0");
  EXPECT_DIAG(fail(head + "train: {batch: 8, steps: 1, precision: fp16}\n"), 4, 40, "unknown precision 'fp16'");
  EXPECT_DIAG(fail(head + "train: {batch: 8, steps: 1, sed: 3}\n"), 4, 29, "did you mean 'seed'?");
  EXPECT_DIAG(fail(head + "train: {batch: eight, steps: 1}\n"), 4, 16, "unknown var 'eight'");
  EXPECT_DIAG(fail(head + "train: {batch: \"8\", steps: 1}\n"), 4, 16, "got the string \"8\"");
  RunConfig rc = load(head + "train: {batch: hidden * 2, steps: 1}\n");  // numbers may use the model's vars
  EXPECT_EQ(rc.train.batch, 32);
}

TEST_F(Run, OptimizerChecks) {
  const std::string head = "model: ../models/mlp.yaml\ndata: {train: {format: synthetic}}\ntrain: {batch: 8, steps: 1}\n";
  auto d = fail(head + "optimizer: {type: adam, lr: 0.1}\n");
  EXPECT_DIAG(d, 4, 19, "unknown optimizer type 'adam'");
  EXPECT_DIAG(d, 4, 19, "did you mean 'adamw'?");
  EXPECT_DIAG(fail(head + "optimizer: {type: sgd, lr: 0.1, betas: [0.9, 0.9]}\n"), 4, 33, "unknown key 'betas'");
  EXPECT_DIAG(fail(head + "optimizer: {type: adamw, lr: 0.1, betas: [0.9, 1.0]}\n"), 4, 48, "betas[1] must be at least 0 and below 1");
  EXPECT_DIAG(fail(head + "optimizer: {type: adamw, lr: 0.1, betas: [0.9]}\n"), 4, 42, "expected two numbers");
  EXPECT_DIAG(fail(head + "optimizer: {type: sgd, lr: 0.1, nesterov: true}\n"), 4, 43, "nesterov needs momentum");
  EXPECT_DIAG(fail(head + "optimizer: {type: sgd, lr: 0}\n"), 4, 28, "must be greater than 0");
  EXPECT_DIAG(fail(head + "optimizer: {lr: 0.1}\n"), 4, 12, "'optimizer' needs 'type'");
  EXPECT_DIAG(fail(head + "optimizer: {type: sgd, lr: 0.1, weight_decay: -1}\n"), 4, 47, "at least 0");
  EXPECT_DIAG(fail(head + "optimizer: sgd\n"), 4, 12, "expected a mapping for 'optimizer'");
}

TEST_F(Run, Devices) {
  const std::string head = "model: ../models/mlp.yaml\ndata: {train: {format: synthetic}}\ntrain: {batch: 8, steps: 1}\n"
                           "optimizer: {type: sgd, lr: 0.1}\n";
  for (const char* ok : {"cpu", "cpu:4", "cuda", "cuda:0", "cuda:0-7", "cuda:0,1", "cuda:0-3,6"})
    EXPECT_EQ(load(head + "devices: " + ok + "\n").devices, ok);
  for (const char* bad : {"gpu:0", "cpu:0", "'cuda:'", "cuda:3-1", "cuda:0,,1", "cpu:x", "4", "cuda:-1"})
    EXPECT_DIAG(fail(head + "devices: " + bad + "\n"), 5, 10, "bad devices");
  t_.write("runs/cluster.yaml", "name: c\n");
  EXPECT_EQ(load(head + "devices: cluster.yaml\n").devices, t_.path() + "/runs/cluster.yaml");
  EXPECT_DIAG(fail(head + "devices: nocluster.yaml\n"), 5, 10, "cluster file not found");
}

TEST_F(Run, DataSources) {
  const std::string tail = "train: {batch: 8, steps: 1}\noptimizer: {type: sgd, lr: 0.1}\n";
  auto d = fail("model: ../models/mlp.yaml\ndata: {train: {format: idxx}}\n" + tail);
  EXPECT_DIAG(d, 2, 24, "did you mean 'idx'?");
  d = fail("model: ../models/mlp.yaml\ndata: {train: {format: idx, images: ../data/train-images, labels: ../data/train-labels, seq: 4}}\n" + tail);
  EXPECT_DIAG(d, 2, 89, "unknown key 'seq' in data.train (format idx)");
  d = fail("model: ../models/mlp.yaml\ndata: {train: {format: synthetic, bind: {a: imag}}}\n" + tail);
  EXPECT_DIAG(d, 2, 45, "did you mean 'image'?");
  d = fail("model: ../models/mlp.yaml\ndata: {train: {format: hdf5, path: ../data/mnist.h5}}\n" + tail);
  EXPECT_DIAG(d, 2, 15, "needs 'fields'");
  d = fail("model: ../models/mlp.yaml\ndata: {train: {format: bytes, path: ../data/corpus.txt, seq: 0}}\n" + tail);
  EXPECT_DIAG(d, 2, 62, "data.train.seq must be at least 1");
  d = fail("model: ../models/mlp.yaml\ndata: {train: {path: x}}\n" + tail);
  EXPECT_DIAG(d, 2, 15, "needs 'format'");
  d = fail("model: ../models/mlp.yaml\ndata: {train: [a]}\n" + tail);
  EXPECT_DIAG(d, 2, 15, "expected a mapping");
}

TEST_F(Run, Schedules) {
  const std::string head = "model: ../models/mlp.yaml\ndata: {train: {format: synthetic}}\ntrain: {batch: 8, steps: 1}\n"
                           "optimizer: {type: sgd, lr: 0.1}\n";
  EXPECT_DIAG(fail(head + "lr_schedule: {type: cosin}\n"), 5, 21, "did you mean 'cosine'?");
  EXPECT_DIAG(fail(head + "lr_schedule: {type: cosine, gamma: 0.5}\n"), 5, 29, "unknown key 'gamma'");
  EXPECT_DIAG(fail(head + "lr_schedule: {type: cosine, min_lr: 1}\n"), 5, 37, "above optimizer.lr");
  EXPECT_DIAG(fail(head + "parallel: {schedule: 1f1f}\n"), 5, 22, "did you mean '1f1b'?");
  EXPECT_DIAG(fail(head + "checkpoint: {keep: 0}\n"), 5, 20, "checkpoint.keep must be at least 1");
  EXPECT_DIAG(fail(head + "log: {every_step: 3}\n"), 5, 7, "did you mean 'every_steps'?");
  EXPECT_DIAG(fail(head + "evaluate: {}\n"), 5, 1, "unknown key 'evaluate' in the run file");
}

TEST_F(Run, UnreadableOrBrokenRunFile) {
  try {
    load_run_or_model(t_.path() + "/nothing.yaml", {});
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(e.format().find("no such file"), std::string::npos);
  }
  auto d = fail("model: a\nmodel: b\n");
  EXPECT_DIAG(d, 2, 1, "duplicate key 'model'");
  EXPECT_DIAG(fail(""), 1, 1, "empty file");
}

}  // namespace

// A long --set is cut in its message (the error and its location stay readable): 10,000 parentheses printed
// whole buried the message.
TEST_F(Run, LongSetIsCutInMessages) {
  const std::string v = "vars.hidden=" + std::string(10000, '(');
  try {
    load_run_or_model(model_, {v});
    ADD_FAILURE();
  } catch (const UserError& e) {
    const std::string msg = e.diagnostics()[0].message;
    EXPECT_LT(msg.size(), 300u) << msg.substr(0, 300);
    EXPECT_NE(msg.find("(10012 characters)"), std::string::npos) << msg.substr(0, 300);
    EXPECT_NE(msg.find("nests deeper than"), std::string::npos) << msg.substr(0, 300);
  }
}
