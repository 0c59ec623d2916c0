// Optimizer arithmetic against hand-computed PyTorch updates, gradient clipping and schedules.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cpu/optimizer.h"
#include "graph/ir.h"

using namespace braid;
using namespace braid::exec;

namespace {
ParamStore one_param(double value, double grad) {
  graph::Graph g(1);
  g.add_param("l", ops::ParamSpec{"w", TensorDesc{Shape{1}, DType::f64}, ops::InitSpec{ops::InitSpec::Kind::Constant, value, 0}, false});
  ParamStore s;
  s.create(g, 1);
  s.entries()[0].has_grad = true;
  s.entries()[0].grad.data<double>()[0] = grad;
  return s;
}
}  // namespace

TEST(Optimizer, SgdMomentumNesterovWeightDecay) {
  ParamStore s = one_param(1.0, 0.5);
  io::OptimizerSpec spec;
  spec.type = "sgd";
  spec.lr = 0.1;
  spec.momentum = 0.9;
  spec.nesterov = true;
  spec.weight_decay = 0.01;
  Optimizer opt(spec, s);
  opt.step(0.1);
  // d = 0.5 + 0.01*1 = 0.51; buf = 0.51; nesterov d = 0.51 + 0.9*0.51 = 0.969; p = 1 - 0.0969
  EXPECT_NEAR(s.entries()[0].value.data<double>()[0], 1 - 0.1 * 0.969, 1e-15);
  opt.step(0.1);
  double p1 = 1 - 0.0969, d = 0.5 + 0.01 * p1, buf = 0.9 * 0.51 + d;
  EXPECT_NEAR(s.entries()[0].value.data<double>()[0], p1 - 0.1 * (d + 0.9 * buf), 1e-15);
}

TEST(Optimizer, AdamWFirstStep) {
  ParamStore s = one_param(1.0, 0.5);
  io::OptimizerSpec spec;
  spec.type = "adamw";
  spec.lr = 1e-2;
  spec.weight_decay = 0.1;
  Optimizer opt(spec, s);
  opt.step(1e-2);
  // First AdamW step moves by lr * m_hat / (sqrt(v_hat) + eps) = lr * sign(g) (almost), after decay.
  double p = 1.0 * (1 - 1e-2 * 0.1);
  double m = 0.1 * 0.5, v = 0.001 * 0.25;
  double expect = p - (1e-2 / 0.1) * m / (std::sqrt(v) / std::sqrt(0.001) + 1e-8);
  EXPECT_NEAR(s.entries()[0].value.data<double>()[0], expect, 1e-15);
}

TEST(Optimizer, ClipGradNorm) {
  ParamStore s = one_param(1.0, 3.0);
  double n = clip_grad_norm(s, 1.0);
  EXPECT_DOUBLE_EQ(n, 3.0);
  EXPECT_NEAR(s.entries()[0].grad.data<double>()[0], 3.0 / (3.0 + 1e-6), 1e-12);
}

TEST(Optimizer, Schedules) {
  io::LrScheduleSpec c;
  c.type = "cosine";
  c.warmup_steps = 10;
  c.min_lr = 0.1;
  EXPECT_DOUBLE_EQ(lr_at(c, 1.0, 0, 110), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(c, 1.0, 9, 110), 1.0);
  EXPECT_NEAR(lr_at(c, 1.0, 60, 110), 0.55, 1e-12);
  EXPECT_NEAR(lr_at(c, 1.0, 110, 110), 0.1, 1e-12);
  io::LrScheduleSpec st;
  st.type = "step";
  st.step_size = 10;
  st.gamma = 0.5;
  EXPECT_DOUBLE_EQ(lr_at(st, 1.0, 25, 100), 0.25);
}

// Dynamic loss scaling (exec/loss_scale.h), torch.cuda.amp.GradScaler's rule: starts at 2^16, an overflow skips
// the step and halves the scale, 2000 finite steps in a row double it; a saved state continues as it was.
TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  exec::LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 16384.0);
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_EQ(s.state().growth_tracker, 1999);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.state().growth_tracker, 0);
  for (int i = 0; i < 500; ++i) s.update(true);
  EXPECT_FALSE(s.update(false));  // an overflow resets the count
  EXPECT_EQ(s.scale(), 16384.0);
  EXPECT_EQ(s.state().growth_tracker, 0);
  exec::LossScaler resumed(exec::LossScaleState{256.0, 1999});
  EXPECT_TRUE(resumed.update(true));
  EXPECT_EQ(resumed.scale(), 512.0);
  EXPECT_EQ(exec::LossScaler(exec::LossScaleState{}).scale(), 65536.0);  // never scaled: a fresh start
}

// Every update's bits at 1 and at 3 OpenMP threads. 98,328 elements split into three chunks of 32,776 at 3 threads:
// each chunk's vector loop ends in a remainder of 8, which a compiler's epilogue may round differently from the body
// (GCC 12 contracted a * b + c into a fused multiply-add in the AVX-512 clones' body but not in their 8-wide
// epilogue, so the same element got other bits by where a chunk ended; braid now builds with -ffp-contract=off).
TEST(Optimizer, UpdatesDoNotDependOnThreads) {
  constexpr int64_t n = 3 * 32776;
  auto run = [&](const io::OptimizerSpec& spec, int threads) {
    graph::Graph g(1);
    g.add_param("l", ops::ParamSpec{"w", TensorDesc{Shape{n}, DType::f32}, ops::InitSpec::normal(0, 1), false});
    ParamStore s;
    s.create(g, 7);
    s.entries()[0].has_grad = true;
    Optimizer opt(spec, s);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    for (int step = 0; step < 3; ++step) {
      float* gr = s.entries()[0].grad.data<float>();
      for (int64_t i = 0; i < n; ++i) gr[i] = std::sin(0.37 * static_cast<double>(i) + step) * 1.7f;
      opt.step(0.05);
    }
    omp_set_num_threads(saved);
    std::vector<std::vector<float>> out;
    auto grab = [&](const Tensor& t) { out.emplace_back(t.data<float>(), t.data<float>() + t.numel()); };
    grab(s.entries()[0].value);
    for (const auto& [name, st] : std::as_const(opt).state())
      for (const auto& [key, t] : st) grab(t);
    return out;
  };
  io::OptimizerSpec sgd;
  sgd.type = "sgd";
  sgd.momentum = 0.9;
  io::OptimizerSpec nesterov = sgd;
  nesterov.nesterov = true;
  nesterov.weight_decay = 0.01;
  nesterov.dampening = 0;
  io::OptimizerSpec damped = sgd;
  damped.dampening = 0.1;
  io::OptimizerSpec adamw;
  adamw.type = "adamw";
  adamw.weight_decay = 0.1;
  for (const auto& [name, spec] : {std::pair{"sgd momentum", sgd}, std::pair{"sgd nesterov decay", nesterov},
                                   std::pair{"sgd dampening", damped}, std::pair{"adamw", adamw}}) {
    const auto one = run(spec, 1), three = run(spec, 3);
    ASSERT_EQ(one.size(), three.size()) << name;
    for (size_t k = 0; k < one.size(); ++k) {
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i)
        if (std::memcmp(&one[k][i], &three[k][i], sizeof(float)) != 0) ++differ;
      EXPECT_EQ(differ, 0) << name << ", tensor " << k << ": elements with other bits at 3 threads than at 1";
    }
  }
}
