// Graphs with 16-bit values (graph::BuildOptions::half, precision bf16 on GPUs): the casts the builder inserts
// (torch.autocast's op lists), the conversions' rounding, and the CPU run of such a graph (each node on f32
// copies of its 16-bit values, outputs rounded back: the reference of the GPU run) against the f32 graph.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/half.h"
#include "backends/cpu/executor.h"
#include "exec/memory_plan.h"
#include "graph/verify.h"
#include "training_graph.h"

using namespace braid;

namespace {

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }
float round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

test::TrainingGraph half_graph(const std::string& file, int64_t batch, DType half) {
  test::TrainingGraph t;
  Diagnostics d;
  t.model = io::load_model(file, {}, d);
  d.throw_if_any();
  graph::BuildOptions bo;
  bo.with_backward = true;
  bo.half = half;
  t.g = graph::build_graph(t.model, batch, bo);
  t.store.create(t.g, 7);
  t.keep = {t.g.loss()};
  for (const auto& p : t.g.params())
    if (p.grad.valid()) t.keep.push_back(p.grad);
  return t;
}

void fill_tokens(exec::Executor& ex, const io::ModelSpec& m) {
  for (const auto& in : m.inputs) {
    const Tensor& t = ex.input(in.name);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>((i * 37 + 11) % 256);
  }
}

double rel_l2(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = get_as_double(a, i), y = get_as_double(b, i);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

TEST(HalfValues, ConversionsRoundToNearestEven) {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (ties to the even 1), 1 + 3 2^-8
  // halfway between 1 + 2^-7 and 1 + 2^-6 (ties to the even 1 + 2^-6); just above a tie rounds up.
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(round_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(round_bf16(-2.5f), -2.5f);
  EXPECT_TRUE(std::isinf(round_bf16(std::numeric_limits<float>::max())));  // past bf16's largest + half an ulp
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(round_bf16(1e-40f), bf16_to_f32(f32_to_bf16(1e-40f)));  // subnormals pass (same exponent range)
  // fp16: 11 significant bits, largest 65504, subnormals down to 2^-24.
  EXPECT_EQ(round_f16(1.0f + 0x1p-11f), 1.0f);
  EXPECT_EQ(round_f16(65504.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_f16(65520.0f)));
  EXPECT_EQ(round_f16(0x1p-24f), 0x1p-24f);
  EXPECT_EQ(round_f16(0x1p-26f), 0.0f);
  // convert_float: a tensor at a time, both ways.
  Tensor x = Tensor::empty({Shape{4}, DType::f32}), h = Tensor::empty({Shape{4}, DType::bf16}),
         y = Tensor::empty({Shape{4}, DType::f32});
  const float v[4] = {1.0f + 3 * 0x1p-8f, -0.1f, 3e38f, 0.0f};
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = v[i];
  convert_float(x, h);
  convert_float(h, y);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<float>()[i], round_bf16(v[i])) << i;
}

TEST(HalfValues, BuilderCastsAsAutocast) {
  test::TrainingGraph t = half_graph(std::string(BRAID_SOURCE_DIR) + "/models/tiny_gpt.yaml", 2, DType::bf16);
  graph::verify(t.g);
  int casts = 0;
  for (const auto& n : t.g.nodes()) {
    if (n.op->name == "cast") {
      ++casts;
      continue;
    }
    if (n.backward) continue;
    const DType in0 = t.g.value(n.inputs[0]).desc.dtype;
    if (n.op->name == "linear" || n.op->name == "attention") {
      EXPECT_EQ(in0, DType::bf16) << n.name;  // GEMM ops read 16-bit values
      EXPECT_EQ(t.g.value(n.outputs[0]).desc.dtype, DType::bf16) << n.name;
    }
    if (n.op->name == "layer_norm") {
      EXPECT_EQ(in0, DType::f32) << n.name;
    }
    if (n.op->name == "cross_entropy") {  // bf16 logits read as they are, an f32 loss
      EXPECT_EQ(in0, DType::bf16) << n.name;
      EXPECT_EQ(t.g.value(n.outputs[0]).desc.dtype, DType::f32) << n.name;
    }
    if (n.op->name == "gelu" || n.op->name == "dropout") {  // follow
      EXPECT_EQ(in0, DType::bf16) << n.name;
    }
    if (n.op->name == "add") {  // the residual stream stays f32: the 16-bit branch is cast up
      for (ValueId v : n.inputs) EXPECT_EQ(t.g.value(v).desc.dtype, DType::f32) << n.name;
    }
  }
  // Per block: ln1 -> attention, attention -> res1, ln2 -> fc, drop -> res2; then ln_f -> logits; each with its
  // backward cast. The dropout's backward draws its mask again and scales the 16-bit dy as the forward scaled x.
  EXPECT_EQ(casts, 2 * (2 * 4 + 1));
  for (const auto& n : t.g.nodes())
    if (n.op->name == "dropout" || n.op->name == "dropout_grad") {
      EXPECT_EQ(n.outputs.size(), 1u) << n.name << ": no mask is kept";
      EXPECT_EQ(t.g.value(n.inputs[0]).desc.dtype, DType::bf16) << n.name;
    }
  bool named = false;
  for (const auto& n : t.g.nodes()) named = named || (n.name == "h.0.fc/cast0" && n.layer == "h.0.fc");
  EXPECT_TRUE(named) << "the cast before h.0.fc is h.0.fc/cast0, of that layer";
  // Master weights: every parameter and its gradient f32, the loss f32.
  for (const auto& p : t.g.params()) {
    EXPECT_EQ(t.g.value(p.value).desc.dtype, DType::f32) << p.name;
    if (p.grad.valid()) {
      EXPECT_EQ(t.g.value(p.grad).desc.dtype, DType::f32) << p.name;
    }
  }
  EXPECT_EQ(t.g.value(t.g.loss()).desc.dtype, DType::f32);
  // The point: the activations take less memory than in the f32 graph.
  test::TrainingGraph f;
  test::load_training_graph(f, std::string(BRAID_SOURCE_DIR) + "/models/tiny_gpt.yaml", 2, 7);
  const size_t half_bytes = exec::plan_memory(t.g, t.keep).arena_bytes;
  const size_t f32_bytes = exec::plan_memory(f.g, f.keep).arena_bytes;
  EXPECT_LT(half_bytes, f32_bytes * 9 / 10) << half_bytes << " vs " << f32_bytes;
}

TEST(HalfValues, CpuRunOfABf16GraphIsCloseToTheF32Graph) {
  const std::string file = std::string(BRAID_SOURCE_DIR) + "/models/tiny_gpt.yaml";
  test::TrainingGraph h = half_graph(file, 4, DType::bf16);
  test::TrainingGraph f;
  test::load_training_graph(f, file, 4, 7);
  exec::Executor eh(h.g, h.store, h.keep), ef(f.g, f.store, f.keep);
  fill_tokens(eh, h.model);
  fill_tokens(ef, f.model);
  eh.run(true, 3, 0);
  ef.run(true, 3, 0);
  const double lh = get_as_double(eh.value(h.g.loss()), 0), lf = get_as_double(ef.value(f.g.loss()), 0);
  EXPECT_NEAR(lh, lf, 1e-2 * std::abs(lf)) << "bf16 values " << lh << ", f32 " << lf;
  double worst = 0;
  std::string worst_name;
  for (size_t k = 0; k < h.g.params().size(); ++k) {
    const auto &ph = h.g.params()[k], &pf = f.g.params()[k];
    ASSERT_EQ(ph.name, pf.name);
    if (!ph.grad.valid()) continue;
    const double e = rel_l2(eh.value(ph.grad), ef.value(pf.grad));
    if (e > worst) worst = e, worst_name = ph.name;
    EXPECT_LT(e, 5e-2) << ph.name;  // activations rounded to 8 significant bits along the way
  }
  std::printf("bf16 values on the CPU: loss %.6f (f32 %.6f), worst gradient %s at %.2e L2 relative\n", lh, lf,
              worst_name.c_str(), worst);
  EXPECT_GT(worst, 0.0);  // the graph does round: it is not the f32 graph in disguise
}

// The GPU benchmark's model (GPT-2-124M shapes, batch 4 x 1024): the training graph's activation memory (the
// memory plan's peak, parameters and gradients of parameters apart) with bf16 values against f32 values.
TEST(HalfValues, Gpt2ActivationMemoryFalls) {
  const std::string file = std::string(BRAID_SOURCE_DIR) + "/models/bench/gpt2_124m.yaml";
  Diagnostics d;
  io::ModelSpec m = io::load_model(file, {}, d);
  d.throw_if_any();
  size_t bytes[2] = {0, 0};
  for (int half = 0; half < 2; ++half) {
    graph::BuildOptions bo;
    bo.with_backward = true;
    bo.half = half ? DType::bf16 : DType::f32;
    graph::Graph g = graph::build_graph(m, 4, bo);
    std::vector<ValueId> keep{g.loss()};
    for (const auto& p : g.params())
      if (p.grad.valid()) keep.push_back(p.grad);
    bytes[half] = exec::plan_memory(g, keep).arena_bytes;
  }
  std::printf("gpt2-124m batch 4 x 1024 training graph: activations %.2f GiB with f32 values, %.2f GiB with bf16 "
              "values (%.2fx)\n", bytes[0] / 1073741824.0, bytes[1] / 1073741824.0,
              static_cast<double>(bytes[1]) / static_cast<double>(bytes[0]));
  EXPECT_LT(bytes[1], bytes[0] * 8 / 10);
}
