// Executor fusion: a linear node followed by its activation runs as one kernel (the activation as the GEMM's
// epilogue), and so does a linear_dw followed by the linear_db of the same gradient. The fused run must give the same bits as the unfused one for every value callers read (loss,
// gradients, the activations), on the split-GEMM path (2 threads, shapes large enough to split) and alone,
// every time (each comparison is repeated: a race shows only now and then).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <utility>

#include "backends/cpu/executor.h"
#include "graph/build.h"
#include "io/model_spec.h"
#include "ops/cpu/onednn_spatial.h"
#include "training_graph.h"

using namespace braid;

namespace {
// Every model input: floats in [-1, 1), integers (labels, tokens) in [0, 10).
void fill_inputs(const exec::Executor& ex, const io::ModelSpec& m) {
  for (const auto& in : m.inputs) {
    const Tensor& t = ex.input(in.name);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (t.dtype() == DType::f32) t.data<float>()[i] = static_cast<float>((i * 7919 % 1000) / 500.0 - 1.0);
      else if (t.dtype() == DType::i64) t.data<int64_t>()[i] = i * 31 % 10;
      else if (t.dtype() == DType::i32) t.data<int32_t>()[i] = static_cast<int32_t>(i * 31 % 10);
    }
  }
}

struct Run {
  std::vector<std::vector<char>> bytes;  // per kept value
  size_t fused = 0;
};

Run run(const std::string& model_file, int64_t batch, bool fuse, int threads) {
  test::TrainingGraph t;
  test::load_training_graph(t, model_file, batch, 7);
  const graph::Graph& g = t.g;
  std::vector<ValueId> keep = t.keep;
  for (const auto& n : g.nodes())  // every forward activation's output too
    if (!n.backward && (n.op->name == "relu" || n.op->name == "gelu" || n.op->name == "conv2d"))
      keep.push_back(n.outputs[0]);
  exec::ExecutorOptions eo;
  eo.fuse = fuse;
  exec::Executor ex(g, t.store, keep, eo);
  fill_inputs(ex, t.model);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  ex.run(true, 1, 0);
  omp_set_num_threads(saved);
  Run r;
  r.fused = ex.fused().size();
  for (ValueId v : keep) {
    const Tensor& t = ex.value(v);
    r.bytes.emplace_back(static_cast<const char*>(t.raw()), static_cast<const char*>(t.raw()) + t.bytes());
  }
  return r;
}

void expect_same_bits(const std::string& model, int64_t batch, size_t want_fused) {
  for (int threads : {1, 2, 2, 2, 2, 2, 2, 2, 2, 2}) {
    Run fused = run(model, batch, true, threads), plain = run(model, batch, false, threads);
    EXPECT_EQ(fused.fused, want_fused) << model;
    EXPECT_EQ(plain.fused, 0u);
    ASSERT_EQ(fused.bytes.size(), plain.bytes.size());
    for (size_t i = 0; i < fused.bytes.size(); ++i)
      EXPECT_TRUE(fused.bytes[i] == plain.bytes[i]) << model << ": kept value " << i << " differs, " << threads
                                                    << " threads";
  }
}
}  // namespace

TEST(Fusion, LinearReluSameBitsAsUnfused) {
  // fc1+act1, fc2+act2; dW+db of fc1 and fc2 (the logits' db output shares bytes with a value its dW reads,
  // so that pair is left unfused: see the overlap rule in the executor); dx of fc2 and of the logits with the
  // relu gradient after each (act1's, act2's: written over dx, the in-place gradient)
  expect_same_bits(std::string(BRAID_SOURCE_DIR) + "/models/fashion_mlp.yaml", 64, 6);
}

TEST(Fusion, LinearGeluAndAttentionSameBitsAsUnfused) {
  // tiny_gpt (2 blocks): each block's fc + gelu; dW+db of the blocks' fc, proj and attention projections
  // where the memory plan lets them (9 of the 10 pairs with attention saving lse rows instead of its (B, h, T, T)
  // probabilities; 8 before. Fusing the others raced: db was written into the bytes of the dW GEMM's input while
  // other threads still read them); each block's proj dx with the gelu gradient after it
  expect_same_bits(std::string(BRAID_SOURCE_DIR) + "/models/tiny_gpt.yaml", 4, 11);
}

// The benchmark LeNet: each conv2d + its relu (the relu per chunk of samples right after oneDNN's convolution wrote
// it; after im2col's whole convolution), fc1 + relu, the dW+db pairs the memory plan allows and the logits' dx with
// act3's gradient. Both convolution implementations; the convolutions' outputs are kept and compared too.
TEST(Fusion, ConvReluSameBitsAsUnfused) {
  const std::string lenet = std::string(BRAID_SOURCE_DIR) + "/models/bench/lenet.yaml";
  {
    ops::cpu::ScopedSpatialImpl im2col(ops::cpu::ConvImpl::Im2col, ops::cpu::PoolImpl::Loops);
    expect_same_bits(lenet, 32, 6);
  }
  if (ops::cpu::onednn_built()) {
    ops::cpu::ScopedSpatialImpl onednn(ops::cpu::ConvImpl::OneDnn, ops::cpu::PoolImpl::Loops);
    expect_same_bits(lenet, 32, 6);
  }
}

// An evaluation graph (no backward): a linear's input dies at the linear, so the memory plan may give the
// activation's output its bytes; fusing there would write them while other threads still read them. The
// executor checks and leaves such pairs unfused; the outputs must be the unfused ones, every time.
TEST(Fusion, EvalGraphSameBitsAsUnfused) {
  Diagnostics d;
  io::ModelSpec m = io::load_model(std::string(BRAID_SOURCE_DIR) + "/models/fashion_mlp.yaml", {}, d);
  d.throw_if_any();
  graph::BuildOptions bo;
  bo.with_backward = false;
  bo.with_metrics = true;
  graph::Graph g = graph::build_graph(m, 64, bo);
  exec::ParamStore store;
  store.create(g, 3);
  std::vector<ValueId> keep;
  for (const auto& [n, v] : g.outputs) keep.push_back(v);
  for (const auto& [n, v] : g.metrics) keep.push_back(v);
  auto run_eval = [&](bool fuse) {
    exec::ExecutorOptions eo;
    eo.fuse = fuse;
    exec::Executor ex(g, store, keep, eo);
    fill_inputs(ex, m);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    ex.run(false, 1, 0);
    omp_set_num_threads(saved);
    std::vector<std::vector<char>> out;
    for (ValueId v : keep) {
      const Tensor& t = ex.value(v);
      out.emplace_back(static_cast<const char*>(t.raw()), static_cast<const char*>(t.raw()) + t.bytes());
    }
    return out;
  };
  const auto plain = run_eval(false);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(run_eval(true) == plain) << "run " << i;
}

// A whole training graph (forward, loss, backward: every kept value and every gradient) gives the same bits at 1,
// 2 and 3 threads, for each shipped model family: every kernel's split over threads is fixed by the shape
// alone, or sums in a fixed order. 3 threads end chunks where 1 and 2 do not (vector epilogues, panel edges).
TEST(Threads, TrainingGraphsDoNotDependOnThreads) {
  const std::string dir = std::string(BRAID_SOURCE_DIR) + "/models/";
  for (const auto& [model, batch] : {std::pair{std::string("fashion_mlp.yaml"), int64_t{64}},
                                     std::pair{std::string("tiny_gpt.yaml"), int64_t{4}},
                                     std::pair{std::string("bench/lenet.yaml"), int64_t{16}},
                                     std::pair{std::string("fashion_resnet.yaml"), int64_t{6}}}) {
    const auto one = run(dir + model, batch, true, 1);
    for (int threads : {2, 3}) {
      const auto many = run(dir + model, batch, true, threads);
      ASSERT_EQ(one.bytes.size(), many.bytes.size()) << model;
      for (size_t i = 0; i < one.bytes.size(); ++i)
        EXPECT_TRUE(one.bytes[i] == many.bytes[i]) << model << ": kept value " << i << " differs at " << threads
                                                   << " threads from 1";
    }
  }
}
