// `braid train` on one GPU (exec::train with devices cuda:0: the engine over the CUDA backend) against the same run on the
// CPU: tiny_gpt (dropout on, two micro-batches a step, AdamW with clip_grad_norm, a cosine schedule) for 10 steps,
// every step's loss and the final evaluation within 1e-4; a run stopped after step 3 and resumed from its
// checkpoint gives the straight run's later losses; bf16 autocast trains within 1e-2 of the fp32 CPU run, and so
// does fp16 with dynamic loss scaling, whose scale travels in checkpoints and whose overflows skip steps.
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "exec/bench.h"
#include "backends/cuda/cuda_backend.h"
#include "exec/engine.h"
#include "exec/run_setup.h"
#include "exec/run_data.h"
#include "graph/build.h"
#include "io/dataset.h"
#include "exec/trainer.h"
#include "io/checkpoint.h"
#include "gpu_util.h"
#include "io/run_config.h"
#include "temp_dir.h"

using namespace braid;

namespace {

struct TrainCase {
  std::filesystem::path dir;
  std::string run_file;
};

// tiny_gpt (2 layers, d 64, seq 32, dropout 0.1) on synthetic data; `train` is the run file's train mapping.
TrainCase write_run(const std::string& name, const std::string& train = "{batch: 8, micro_batch: 4, steps: 10, seed: 3}") {
  TrainCase c;
  c.dir = braid::testing::process_temp_dir() / ("train_gpu_" + name);
  std::filesystem::remove_all(c.dir);
  std::filesystem::create_directories(c.dir);
  c.run_file = (c.dir / "run.yaml").string();
  std::ofstream f(c.run_file);
  f << "model: " << braid::testing::source_dir() << "/models/tiny_gpt.yaml\n"
    << "vars: {n_layer: 2, d: 64, seq: 32, dropout: 0.1}\n"
    << "data:\n  train: {format: synthetic, samples: 256}\n  eval: {format: synthetic, samples: 32}\n"
    << "train: " << train << "\n"
    << "optimizer: {type: adamw, lr: 3.0e-3, weight_decay: 0.1, clip_grad_norm: 0.5}\n"
    << "lr_schedule: {type: cosine, warmup_steps: 3}\n"
    << "eval: {batches: 2}\n";
  return c;
}

// Each (devices, label) run keeps its checkpoints in a folder of its own.
exec::TrainResult train_on(const TrainCase& c, const std::string& devices, std::vector<std::string> sets = {},
                           const exec::TrainOptions& base = {}, const std::string& label = "") {
  sets.push_back("devices=" + devices);
  sets.push_back("checkpoint.dir=" + (c.dir / ("ckpt_" + devices + label)).string());
  io::RunConfig cfg = io::load_run_or_model(c.run_file, sets);
  exec::TrainOptions o = base;
  o.progress = false;
  FILE* null = std::fopen("/dev/null", "w");
  o.out = null;
  exec::TrainResult r = exec::train(cfg, o);
  std::fclose(null);
  return r;
}

// A plan file of one stage over plan devices 0 and 1 (`groups`: its data / tensor parallel degrees, the mesh
// following them), two micro-batches of `micro` samples, with `extra` summary fields; the --set that selects it.
std::string two_device_plan(const TrainCase& c, const std::string& groups, int micro, const std::string& extra) {
  const std::string path = (c.dir / ("plan" + std::to_string(std::hash<std::string>{}(groups + extra)) + ".yaml")).string();
  const bool dp = groups.find("data_parallel: 2") != std::string::npos;
  std::ofstream(path) << "summary: {devices: 2, " << groups << ", pipeline_stages: 1, micro_batch: " << micro
                      << ", micro_batches: 2, schedule: 1f1b" << extra << "}\n"
                      << "stages:\n  - {devices: [0, 1], mesh: [" << (dp ? "2, 1" : "1, 2")
                      << "], first_layer: tok, last_layer: loss}\n";
  return "parallel.plan=" + path;
}

}  // namespace

TEST(TrainGpu, TinyGptTenStepsMatchCpu) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("match");
  exec::TrainResult cpu = train_on(c, "cpu"), gpu = train_on(c, "cuda:0");
  ASSERT_EQ(cpu.losses.size(), 10u);
  ASSERT_EQ(gpu.losses.size(), 10u);
  for (size_t k = 0; k < cpu.losses.size(); ++k) EXPECT_NEAR(gpu.losses[k], cpu.losses[k], 1e-4) << "step " << k;
  ASSERT_EQ(gpu.eval.size(), cpu.eval.size());
  for (size_t k = 0; k < cpu.eval.size(); ++k) {
    EXPECT_EQ(gpu.eval[k].first, cpu.eval[k].first);
    EXPECT_NEAR(gpu.eval[k].second, cpu.eval[k].second, 1e-4) << cpu.eval[k].first;
  }
}

TEST(TrainGpu, ResumeGivesTheStraightRunsLosses) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("resume");
  exec::TrainResult straight = train_on(c, "cuda:0", {}, {}, "_straight");
  exec::TrainOptions stop;
  stop.stop_after = 3;
  exec::TrainResult first = train_on(c, "cuda:0", {}, stop);
  ASSERT_TRUE(first.stopped_early);
  ASSERT_FALSE(first.last_checkpoint.empty());
  exec::TrainOptions resume;
  resume.resume = "latest";
  exec::TrainResult rest = train_on(c, "cuda:0", {}, resume);
  ASSERT_EQ(rest.losses.size(), 7u);
  for (size_t k = 0; k < rest.losses.size(); ++k)
    EXPECT_NEAR(rest.losses[k], straight.losses[k + 3], 1e-5) << "step " << k + 3;
}

TEST(TrainGpu, Bf16CloseToCpu) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("bf16");
  exec::TrainResult cpu = train_on(c, "cpu"), gpu = train_on(c, "cuda:0", {"train.precision=bf16"});
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t k = 0; k < cpu.losses.size(); ++k)
    EXPECT_NEAR(gpu.losses[k], cpu.losses[k], 1e-2 * std::abs(cpu.losses[k])) << "step " << k;
}

// fp16 autocast with dynamic loss scaling: within 1e-2 of the CPU's f32 run; the metrics file carries the loss
// scale (2^16 at the start, no overflow in these steps) and the skipped steps.
TEST(TrainGpu, F16WithLossScalingCloseToCpu) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("f16");
  const std::string metrics = (c.dir / "metrics.jsonl").string();
  exec::TrainResult cpu = train_on(c, "cpu"),
                    gpu = train_on(c, "cuda:0", {"train.precision=f16", "log.metrics=" + metrics});
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t k = 0; k < cpu.losses.size(); ++k) {
    std::printf("f16 step %zu: %.6f, cpu f32 %.6f\n", k, gpu.losses[k], cpu.losses[k]);
    EXPECT_NEAR(gpu.losses[k], cpu.losses[k], 1e-2 * std::abs(cpu.losses[k])) << "step " << k;
  }
  std::ifstream in(metrics);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find("\"loss\"") != std::string::npos) last = line;
  EXPECT_NE(last.find("\"loss_scale\":65536"), std::string::npos) << last;
  EXPECT_NE(last.find("\"skipped_steps\":0"), std::string::npos) << last;
}

// A loss scale far past fp16's range (a checkpoint's, here written so): every step overflows, is skipped (the
// weights stay the checkpoint's) and halves the scale; the next checkpoint holds the halved scale.
TEST(TrainGpu, F16OverflowSkipsStepsAndHalvesTheScale) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("f16_overflow");
  exec::TrainOptions stop;
  stop.stop_after = 3;
  exec::TrainResult first = train_on(c, "cuda:0", {"train.precision=f16"}, stop);
  ASSERT_FALSE(first.last_checkpoint.empty());
  io::Checkpoint ck = io::read_checkpoint(first.last_checkpoint);
  EXPECT_EQ(ck.loss_scale, 65536.0);
  EXPECT_EQ(ck.loss_scale_growth_tracker, 3);
  ck.loss_scale = std::ldexp(1.0, 60);
  ck.loss_scale_growth_tracker = 0;
  const std::string huge = (c.dir / "huge_scale.h5").string();
  io::write_checkpoint(huge, ck);
  exec::TrainOptions resume;
  resume.resume = huge;
  exec::TrainResult rest = train_on(c, "cuda:0", {"train.precision=f16"}, resume, "_rest");
  ASSERT_EQ(rest.losses.size(), 7u);
  io::Checkpoint after = io::read_checkpoint(rest.last_checkpoint);
  EXPECT_EQ(after.loss_scale, std::ldexp(1.0, 53));  // seven overflows
  EXPECT_EQ(after.optimizer_steps, ck.optimizer_steps);  // no update taken
  ASSERT_EQ(after.params.size(), ck.params.size());
  for (size_t i = 0; i < ck.params.size(); ++i) {
    const Tensor& a = ck.params[i].second;
    const Tensor& b = after.params[i].second;
    ASSERT_EQ(a.bytes(), b.bytes());
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.bytes()), 0) << ck.params[i].first << " changed in a skipped step";
  }
}

// braid bench on the GPU times the engine's step (waited for on the device) and reports the device and its peak.
TEST(TrainGpu, BenchTimesTheDeviceStep) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("bench");
  io::RunConfig cfg = io::load_run_or_model(c.run_file, {"devices=cuda:0"});
  exec::BenchOptions o;
  o.steps = 5;
  o.warmup = 2;
  exec::BenchResult r = exec::bench(cfg, o);
  EXPECT_EQ(r.step_s.size(), 5u);
  for (double t : r.step_s) EXPECT_GT(t, 0);
  EXPECT_NE(r.device.find("cuda:0"), std::string::npos) << r.device;
  EXPECT_GT(r.train_flops_per_step, 0);
  std::printf("bench on %s: step %.3f ms, peak %.1f TFLOP/s\n", r.device.c_str(), 1e3 * r.step_s[2],
              r.device_peak_flops / 1e12);
}

// A batch whose activations the GPU cannot hold: a user error naming the device memory and what to lower (exit
// status 2), not an internal error.
TEST(TrainGpu, BatchTooLargeForTheGpuIsAUserError) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("oom");
  try {
    train_on(c, "cuda:0", {"vars.d=1024", "vars.n_layer=8", "vars.seq=1024", "train.batch=4096",
                           "train.micro_batch=4096", "data.train.samples=4096"});
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    const std::string text = e.format();
    EXPECT_NE(text.find("cannot allocate"), std::string::npos) << text;
    EXPECT_NE(text.find("micro_batch"), std::string::npos) << text;
  }
}

// Several GPUs (devices: cuda:0-3 on a machine with several): the planner chooses the plan (an analytic H200
// model) and the plan engine runs it. Listed twice, one GPU holds both devices (their communication through host
// memory), which proves the path on a machine with one GPU: the losses and evaluation equal the one-GPU run's
// within 1e-5 relative (the dropout masks are the whole micro-batch's either way), and the CPU's cpu:2 run's
// within 1e-4; bf16 (with the fused attention) within 1e-2 of the one-GPU bf16 run.
TEST(TrainGpu, TwoDevicesOnOneGpuMatchOneGpu) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("dp");
  exec::TrainResult one = train_on(c, "cuda:0"), two = train_on(c, "cuda:0,0"), cpu = train_on(c, "cpu:2");
  ASSERT_EQ(one.losses.size(), 10u);
  ASSERT_EQ(two.losses.size(), 10u);
  for (size_t k = 0; k < one.losses.size(); ++k) {
    EXPECT_NEAR(two.losses[k], one.losses[k], 1e-5 * std::abs(one.losses[k])) << "step " << k;
    EXPECT_NEAR(two.losses[k], cpu.losses[k], 1e-4) << "step " << k;
  }
  ASSERT_EQ(two.eval.size(), one.eval.size());
  for (size_t k = 0; k < one.eval.size(); ++k) EXPECT_NEAR(two.eval[k].second, one.eval[k].second, 1e-4) << one.eval[k].first;
  exec::TrainResult one16 = train_on(c, "cuda:0", {"train.precision=bf16"}, {}, "bf16"),
                    two16 = train_on(c, "cuda:0,0", {"train.precision=bf16"}, {}, "bf16");
  for (size_t k = 0; k < one16.losses.size(); ++k)
    EXPECT_NEAR(two16.losses[k], one16.losses[k], 1e-2 * std::abs(one16.losses[k])) << "bf16 step " << k;
}

// The data-parallel engine (no plan: what runs when the planner finds none), built directly: two replicas on one
// GPU against one, 5 steps of the run's batches, losses within 1e-5 relative.
std::vector<double> engine_losses(const TrainCase& c, const std::string& devices, int steps) {
  io::RunConfig cfg = io::load_run_or_model(c.run_file, {"devices=" + devices});
  auto engine = exec::make_engine(cfg, std::nullopt);
  const graph::Graph g = graph::build_graph(cfg.model, 1, {});
  auto data = exec::open_train_data(cfg, exec::dataset_inputs(cfg.model, g));
  io::BatchSampler sampler(data->size(), cfg.train.batch, cfg.data.shuffle, cfg.train.seed);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(engine->step(*data, sampler.next_view(), i, cfg.optimizer.lr, 0.5).loss);
  return losses;
}

TEST(TrainGpu, DataParallelEngineTwoReplicasMatchOne) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("dp_engine");
  std::vector<double> one = engine_losses(c, "cuda:0", 5), two = engine_losses(c, "cuda:0,0", 5);
  for (size_t k = 0; k < one.size(); ++k) EXPECT_NEAR(two[k], one[k], 1e-5 * std::abs(one[k])) << "step " << k;
}

// A micro-batch the replicas of the data-parallel engine do not divide is the user's error, said before anything
// runs (a plan file whose devices leave it without a plan; here three devices for a micro-batch of 4).
TEST(TrainGpu, DataParallelNeedsADivisibleMicroBatch) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("dp_odd");
  try {
    io::RunConfig cfg = io::load_run_or_model(c.run_file, {"devices=cuda:0,0,0", "train.batch=4", "train.micro_batch=4"});
    exec::make_engine(cfg, std::nullopt);
    ADD_FAILURE() << "a micro-batch of 4 over 3 replicas was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("does not split evenly over 3"), std::string::npos) << e.what();
  }
}

// Plans over GPUs (a plan file with devices cuda:...): the one engine runs the same lowered stages and schedule over
// the CUDA backend as over the CPU's. With the GPU listed once per plan device (cuda:0,0,0,0)
// every plan runs on one GPU, its communication through host memory: data and pipeline parallel with 1F1B, tensor
// and pipeline parallel with GPipe, interleaved 1F1B; each within 1e-5 relative of the same plan on cpu:4, step by
// step, and the evaluation after it within 1e-4.
TEST(TrainGpu, PlansOnOneGpuMatchTheSamePlansOnTheCpu) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("plans", "{batch: 32, steps: 4, seed: 5}");
  for (const char* plan : {"tiny_gpt_dp2_pp2_1f1b", "tiny_gpt_tp2_pp2_gpipe", "tiny_gpt_pp4_interleaved"}) {
    SCOPED_TRACE(plan);
    const std::string file = braid::testing::source_dir() + "/tests/plans/" + plan + ".yaml";
    exec::TrainResult cpu = train_on(c, "cpu:4", {"parallel.plan=" + file}, {}, plan),
                      gpu = train_on(c, "cuda:0,0,0,0", {"parallel.plan=" + file}, {}, plan);
    ASSERT_EQ(gpu.losses.size(), 4u);
    for (size_t k = 0; k < cpu.losses.size(); ++k)
      EXPECT_NEAR(gpu.losses[k], cpu.losses[k], 1e-5 * std::abs(cpu.losses[k])) << "step " << k;
    ASSERT_EQ(gpu.eval.size(), cpu.eval.size());
    for (size_t k = 0; k < cpu.eval.size(); ++k) EXPECT_NEAR(gpu.eval[k].second, cpu.eval[k].second, 1e-4);
  }
}

// Autocast's activation copies (cast once after the producer, CudaExecutor's lookup) hold the values the GEMMs
// would cast themselves: bf16 training with them and without (BRAID_ACTIVATION_COPIES=0) gives the same losses
// (to 1e-4 relative: cuBLAS may pick another algorithm for other addresses, and AdamW magnifies rounding), with
// dropout and two micro-batches; a stale copy would be off by far more.
TEST(TrainGpu, ActivationCopiesChangeNoLoss) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("act_copies");
  ::setenv("BRAID_BF16_VALUES", "0", 1);  // copies are of f32 activations: graphs with bf16 values have none
  exec::TrainResult with = train_on(c, "cuda:0", {"train.precision=bf16"}, {}, "with");
  ::setenv("BRAID_ACTIVATION_COPIES", "0", 1);
  exec::TrainResult without = train_on(c, "cuda:0", {"train.precision=bf16"}, {}, "without");
  ::unsetenv("BRAID_ACTIVATION_COPIES");
  ::unsetenv("BRAID_BF16_VALUES");
  ASSERT_EQ(with.losses.size(), without.losses.size());
  for (size_t k = 0; k < with.losses.size(); ++k)
    EXPECT_NEAR(with.losses[k], without.losses[k], 1e-4 * std::abs(without.losses[k])) << "step " << k;
}

// The memory strategies through the one engine on the CUDA backend. Recomputation is graph structure (the lowering's
// clones), so a GPU runs it as any graph: full and selective give the run without them within 1e-6 relative (the
// same kernels on the same inputs; the dropout masks drawn again from the same counters), on one GPU and on two
// devices of one GPU.
TEST(TrainGpu, RecomputeMatchesTheRunWithoutIt) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("recompute");
  for (const std::string devices : {"cuda:0", "cuda:0,0"}) {
    const int n = devices == "cuda:0" ? 1 : 2;
    auto plan = [&](const std::string& extra) {
      const std::string path = (c.dir / ("plan_" + std::to_string(n) + extra + ".yaml")).string();
      std::ofstream(path) << "summary: {devices: " << n << ", data_parallel: " << n
                          << ", tensor_parallel: 1, pipeline_stages: 1, micro_batch: " << 4 / n
                          << ", micro_batches: 2, schedule: 1f1b" << extra << "}\n"
                          << "stages:\n  - {devices: [" << (n == 1 ? "0" : "0, 1") << "], mesh: [" << n
                          << ", 1], first_layer: tok, last_layer: loss}\n";
      return "parallel.plan=" + path;
    };
    const exec::TrainResult none = train_on(c, devices, {plan("")}, {}, "none");
    for (const std::string mode : {"full", "selective"}) {
      const exec::TrainResult r = train_on(c, devices, {plan(", recompute: " + mode)}, {}, mode);
      ASSERT_EQ(r.losses.size(), none.losses.size());
      for (size_t k = 0; k < r.losses.size(); ++k)
        EXPECT_NEAR(r.losses[k], none.losses[k], 1e-6 * std::abs(none.losses[k])) << devices << " " << mode << " step " << k;
    }
  }
}

// ZeRO 1, 2 and 3 on two devices of one GPU (communication through host memory), dp 2 with two micro-batches and
// clipping: each reproduces the run without sharding within 1e-5 relative step by step (ZeRO-1 broadcasts the
// updated parameters, ZeRO-2 reduces each gradient to its owner after the node that makes it, ZeRO-3 gathers each
// parameter before use; the same kernels on the same values otherwise), and each device's optimizer memory (AdamW's
// states and the gradient accumulators) shrinks: ZeRO-1 to about 2/3 of the unsharded one's, ZeRO-2/3 to about 1/2.
TEST(TrainGpu, ZeroOneTwoThreeMatchTheUnshardedRun) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("zero");
  auto plan = [&](const std::string& extra) { return two_device_plan(c, "data_parallel: 2, tensor_parallel: 1", 2, extra); };
  // The larger of the two devices' optimizer bytes after the first step (the metrics file's first record).
  auto optimizer_bytes = [&](const std::string& metrics) {
    std::ifstream f(metrics);
    std::string line;
    std::getline(f, line);
    double most = 0;
    for (const char* key : {"\"mem_optimizer_bytes_d0\":", "\"mem_optimizer_bytes_d1\":"}) {
      const size_t at = line.find(key);
      EXPECT_NE(at, std::string::npos) << key << " in " << line;
      if (at != std::string::npos) most = std::max(most, std::stod(line.substr(at + std::strlen(key))));
    }
    return most;
  };
  auto metrics_of = [&](const std::string& z) {
    const std::string m = (c.dir / ("metrics" + z + ".jsonl")).string();
    return std::vector<std::string>{"log.metrics=" + m, "log.every_steps=1"};
  };
  std::vector<std::string> sets = metrics_of("0");
  sets.push_back(plan(""));
  const exec::TrainResult base = train_on(c, "cuda:0,0", sets, {}, "zero0");
  ASSERT_EQ(base.losses.size(), 10u);
  const double unsharded = optimizer_bytes((c.dir / "metrics0.jsonl").string());
  for (const std::string z : {"1", "2", "3"}) {
    sets = metrics_of(z);
    sets.push_back(plan(", zero: " + z));
    const exec::TrainResult r = train_on(c, "cuda:0,0", sets, {}, "zero" + z);
    // AdamW's two states and the accumulators: ZeRO-1 halves the states (2/3 of the whole), ZeRO-2/3 all (1/2).
    EXPECT_LT(optimizer_bytes((c.dir / ("metrics" + z + ".jsonl")).string()), (z == "1" ? 0.8 : 0.62) * unsharded)
        << "zero " << z;
    ASSERT_EQ(r.losses.size(), base.losses.size()) << "zero " << z;
    for (size_t k = 0; k < r.losses.size(); ++k)
      EXPECT_NEAR(r.losses[k], base.losses[k], 1e-5 * std::abs(base.losses[k])) << "zero " << z << " step " << k;
    ASSERT_EQ(r.eval.size(), base.eval.size());
    for (size_t k = 0; k < r.eval.size(); ++k) EXPECT_NEAR(r.eval[k].second, base.eval[k].second, 1e-4) << "zero " << z;
  }
}

// Sequence parallelism on two devices of one GPU (tp 2): the layer norms, dropouts and residual adds on half the
// sequence each (dropout drawing the unsplit mask from cuda::Ctx::shard_*), the run within 1e-5 relative of tp 2
// without it.
TEST(TrainGpu, SequenceParallelMatchesTheTensorParallelRun) {
  BRAID_REQUIRE_GPU();
  exec::install_cuda_backend();
  TrainCase c = write_run("sp");
  auto plan = [&](const std::string& extra) { return two_device_plan(c, "data_parallel: 1, tensor_parallel: 2", 4, extra); };
  const exec::TrainResult tp = train_on(c, "cuda:0,0", {plan("")}, {}, "tp"),
                          sp = train_on(c, "cuda:0,0", {plan(", sequence_parallel: true")}, {}, "sp");
  ASSERT_EQ(sp.losses.size(), tp.losses.size());
  for (size_t k = 0; k < tp.losses.size(); ++k)
    EXPECT_NEAR(sp.losses[k], tp.losses[k], 1e-5 * std::abs(tp.losses[k])) << "step " << k;
}
