// Executor fusion: a linear node followed by its activation runs as one kernel (the activation as the GEMM's
// epilogue), and so does a linear_dw followed by the linear_db of the same gradient. The fused run must give the same bits as the unfused one for every value callers read (loss,
// gradients, the activations), on the split-GEMM path (2 threads, shapes large enough to split) and alone.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>

#include "exec/executor.h"
#include "training_graph.h"

using namespace braid;

namespace {
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
    if (!n.backward && (n.op->name == "relu" || n.op->name == "gelu")) keep.push_back(n.outputs[0]);
  exec::ExecutorOptions eo;
  eo.fuse = fuse;
  exec::Executor ex(g, t.store, keep, eo);
  for (const auto& in : t.model.inputs) {
    const Tensor& t = ex.input(in.name);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (t.dtype() == DType::f32) t.data<float>()[i] = static_cast<float>((i * 7919 % 1000) / 500.0 - 1.0);
      else if (t.dtype() == DType::i64) t.data<int64_t>()[i] = i * 31 % 10;
      else if (t.dtype() == DType::i32) t.data<int32_t>()[i] = static_cast<int32_t>(i * 31 % 10);
    }
  }
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
  for (int threads : {1, 2}) {
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
  // fc1+act1, fc2+act2; dW+db of fc1, fc2, logits
  expect_same_bits(std::string(BRAID_SOURCE_DIR) + "/models/fashion_mlp.yaml", 64, 5);
}

TEST(Fusion, LinearGeluAndAttentionSameBitsAsUnfused) {
  // tiny_gpt (2 blocks): each block's fc + gelu; dW+db of each block's fc and proj and of attention's two
  // projections (the logits have no bias)
  expect_same_bits(std::string(BRAID_SOURCE_DIR) + "/models/tiny_gpt.yaml", 4, 10);
}
