// Tests of the dense families (linear, embedding, position_embedding, attention) beyond the registry suites
// (split consistency is SplitConsistency's):
//  - eval-mode forward writes every output (outputs poisoned with NaN first);
//  - attention over several row blocks (T > 64, causal, dropout) against a naive double reference and
//    finite differences; token ids outside the table; PyTorch parameter names and inits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/parallel.h"
#include "core/rng.h"
#include "op_harness.h"

using namespace braid;
using namespace braid::ops;
using namespace braid::testing;

namespace {

const std::vector<std::string> kDensePublic = {"linear", "embedding", "position_embedding", "attention"};

}  // namespace

TEST(DenseOps, EvalModeForwardWritesEveryOutput) {
  Rng rng(4, 4);
  for (const auto& name : kDensePublic) {
    const OpDef& def = Registry::get().at(name);
    for (const auto& s : def.samples()) {
      SCOPED_TRACE(name + "/" + s.name);
      Instance inst = instantiate(def, s, DType::f32, rng);
      std::vector<TensorDesc> descs;
      for (const auto& t : inst.inputs) descs.push_back(t.desc());
      KernelCtx eval;
      eval.training = false;
      auto out = run_poisoned(def, inst.attrs, inst.inputs, def.infer(inst.attrs, descs), eval);
      for (const auto& t : out)
        for (int64_t i = 0; i < t.numel(); ++i) ASSERT_FALSE(std::isnan(get_as_double(t, i))) << "element " << i;
    }
  }
}

// ---- attention over several row blocks against a naive reference -------------------------------------------
namespace {

// Direct transcription of nn.MultiheadAttention (batch_first, self-attention), double precision, with grouped
// key/value heads (q head h reads kv head h / (H / KV), Hugging Face's repeat_kv) and rotate-half rotary
// embeddings on q and k (HF Llama's apply_rotary_pos_emb).
std::vector<double> naive_attention(const Instance& inst, bool training, uint64_t key) {
  const auto& a = inst.attrs;
  bool bias = a.b("bias"), causal = a.b("causal");
  double p = training ? a.f("dropout") : 0, theta = a.f("rope_theta");
  const Tensor& x = inst.inputs[0];
  int64_t B = x.shape()[0], T = x.shape()[1], d = x.shape()[2], H = a.i("heads"), dh = d / H, KV = a.i("kv_heads");
  int64_t ld = (H + 2 * KV) * dh, kofs = H * dh, vofs = (H + KV) * dh;
  auto at = [&](int i, int64_t k) { return get_as_double(inst.inputs[static_cast<size_t>(i)], k); };
  int w_in = 1, b_in = bias ? 2 : -1, w_out = bias ? 3 : 2, b_out = bias ? 4 : -1;
  std::vector<double> qkv(static_cast<size_t>(B * T * ld)), ctx(static_cast<size_t>(B * T * d)),
      y(static_cast<size_t>(B * T * d));
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t o = 0; o < ld; ++o) {
      double s = b_in >= 0 ? at(b_in, o) : 0;
      for (int64_t i = 0; i < d; ++i) s += at(0, r * d + i) * at(w_in, o * d + i);
      qkv[static_cast<size_t>(r * ld + o)] = s;
    }
  if (theta > 0)
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t h = 0; h < H + KV; ++h)  // q heads, then k heads
        for (int64_t i = 0; i < dh / 2; ++i) {
          double ang = double(r % T) * std::pow(theta, -2.0 * double(i) / double(dh));
          double& u = qkv[static_cast<size_t>(r * ld + h * dh + i)];
          double& w = qkv[static_cast<size_t>(r * ld + h * dh + dh / 2 + i)];
          const double u0 = u, w0 = w;
          u = u0 * std::cos(ang) - w0 * std::sin(ang);
          w = w0 * std::cos(ang) + u0 * std::sin(ang);
        }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t g = h / (H / KV);
        std::vector<double> s(static_cast<size_t>(T), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          if (causal && j > i) continue;
          double acc = 0;
          for (int64_t e = 0; e < dh; ++e)
            acc += qkv[static_cast<size_t>((b * T + i) * ld + h * dh + e)] / std::sqrt(double(dh)) *
                   qkv[static_cast<size_t>((b * T + j) * ld + kofs + g * dh + e)];
          s[static_cast<size_t>(j)] = acc;
          mx = std::max(mx, acc);
        }
        double sum = 0;
        for (auto& v : s) sum += (v = std::exp(v - mx));
        for (int64_t j = 0; j < T; ++j) {
          double pr = s[static_cast<size_t>(j)] / sum;
          if (p > 0) pr = uniform_at(key, static_cast<uint64_t>(((b * H + h) * T + i) * T + j)) >= p ? pr / (1 - p) : 0;
          for (int64_t e = 0; e < dh; ++e)
            ctx[static_cast<size_t>((b * T + i) * d + h * dh + e)] +=
                pr * qkv[static_cast<size_t>((b * T + j) * ld + vofs + g * dh + e)];
        }
      }
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t o = 0; o < d; ++o) {
      double s = b_out >= 0 ? at(b_out, o) : 0;
      for (int64_t i = 0; i < d; ++i) s += ctx[static_cast<size_t>(r * d + i)] * at(w_out, o * d + i);
      y[static_cast<size_t>(r * d + o)] = s;
    }
  return y;
}

}  // namespace

TEST(DenseOps, AttentionOverSeveralRowBlocksMatchesNaiveReference) {
  Rng rng(5, 5);
  const OpDef& def = Registry::get().at("attention");
  struct Case {
    int64_t heads;
    bool causal, bias;
    double dropout;
    int64_t t, d, kv_heads = 0;  // 0: heads
    double rope_theta = 0;
  };
  // Row blocks of 64 (d = 8: 64+64+2, 64+6, 64+1) and, with d = 64 (T dh > 2^12), blocks of 31 rows; grouped
  // key/value heads (several q heads summing into one dK, dV) and rotary embeddings over several blocks.
  for (const Case& cs : {Case{2, true, true, 0.2, 130, 8}, Case{1, false, false, 0.0, 70, 8},
                         Case{4, true, false, 0.0, 65, 8}, Case{1, true, true, 0.1, 130, 64},
                         Case{4, true, true, 0.1, 130, 16, 2, 10000.0}, Case{4, false, false, 0.0, 70, 8, 1, 10.0},
                         Case{2, true, true, 0.0, 65, 64, 1, 0.0}, Case{2, false, true, 0.0, 66, 8, 2, 100.0}}) {
    Sample s{"long", {{"heads", cs.heads}, {"causal", cs.causal}, {"bias", cs.bias}, {"dropout", cs.dropout}},
             {{TensorDesc{Shape{2, cs.t, cs.d}}}}};
    if (cs.kv_heads > 0) s.attrs.set("kv_heads", cs.kv_heads);
    if (cs.rope_theta > 0) s.attrs.set("rope_theta", cs.rope_theta);
    SCOPED_TRACE("T=" + std::to_string(cs.t) + " " + s.attrs.str());
    Instance inst = instantiate(def, s, DType::f64, rng);
    // The harness draws weights in [-1, 1]; scaled as an init would for wide d, so that the softmax stays
    // smooth enough for finite differences.
    for (size_t k = 1; k < inst.inputs.size(); ++k)
      if (inst.inputs[k].shape().rank() == 2)
        for (int64_t i = 0; i < inst.inputs[k].numel(); ++i)
          set_from_double(inst.inputs[k], i, get_as_double(inst.inputs[k], i) * std::sqrt(8.0 / double(cs.d)));
    for (bool training : {true, false}) {
      auto y = run_forward(inst, training, 11)[0];
      auto ref = naive_attention(inst, training, 11);
      for (int64_t i = 0; i < y.numel(); ++i) ASSERT_NEAR(get_as_double(y, i), ref[static_cast<size_t>(i)], 1e-12);
    }
    // Gradients at a few probes of every input (the backward's row blocks and slots).
    Tensor r = Tensor::empty(run_forward(inst)[0].desc());
    for (int64_t i = 0; i < r.numel(); ++i) set_from_double(r, i, rng.uniform(-1, 1));
    auto grads = run_backward(inst, r);
    auto objective = [&](const Instance& v) {
      auto y = run_forward(v)[0];
      double acc = 0;
      for (int64_t i = 0; i < y.numel(); ++i) acc += get_as_double(y, i) * get_as_double(r, i);
      return acc;
    };
    for (size_t k = 0; k < inst.inputs.size(); ++k) {
      int64_t n = inst.inputs[k].numel();
      for (int64_t i = n / 13; i < n; i += std::max<int64_t>(1, n / 7)) {
        Instance plus = inst, minus = inst;
        plus.inputs[k] = inst.inputs[k].clone();
        minus.inputs[k] = inst.inputs[k].clone();
        double x0 = get_as_double(inst.inputs[k], i), h = 1e-6;
        set_from_double(plus.inputs[k], i, x0 + h);
        set_from_double(minus.inputs[k], i, x0 - h);
        double numeric = (objective(plus) - objective(minus)) / (2 * h);
        ASSERT_NEAR(get_as_double(grads[k], i), numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
            << "input " << k << " element " << i;
      }
    }
  }
}

// Grouped-query attention with rotary embeddings in f32, over several row blocks and more units than slots: the
// forward's every output and the backward's dqkv (whose dk, dv sum several q heads) are the same bits at 1 and 3
// threads.
TEST(DenseOps, AttentionWithKvHeadsAndRopeSameBitsOnAnyThreadCount) {
  Rng rng(8, 8);
  const OpDef& def = Registry::get().at("attention");
  Sample s{"gqa_rope",
           {{"heads", int64_t{4}}, {"kv_heads", int64_t{2}}, {"rope_theta", 10000.0}, {"causal", true}, {"dropout", 0.1}},
           {{TensorDesc{Shape{20, 70, 16}}}}};  // backward units (sample, kv head): 40 > 32 slots
  Instance inst = instantiate(def, s, DType::f32, rng);
  Tensor dy = Tensor::empty(run_forward(inst)[0].desc());
  for (int64_t i = 0; i < dy.numel(); ++i) set_from_double(dy, i, rng.uniform(-1, 1));
  auto run_all = [&] {
    std::vector<Tensor> r = run_forward(inst, true, 3);
    for (Tensor& g : run_backward(inst, dy, 3)) r.push_back(g);
    return r;
  };
  const int saved = num_threads();
  set_num_threads(1);
  auto one = run_all();
  set_num_threads(std::max(3, saved));
  auto many = run_all();
  set_num_threads(saved);
  ASSERT_EQ(many.size(), one.size());
  for (size_t k = 0; k < one.size(); ++k) {
    ASSERT_EQ(many[k].bytes(), one[k].bytes());
    EXPECT_EQ(std::memcmp(many[k].raw(), one[k].raw(), one[k].bytes()), 0) << "result " << k;
  }
}

TEST(DenseOps, AttentionDropoutOnlyInTrainingAndAtRoughlyRateP) {
  Rng rng(6, 6);
  const OpDef& def = Registry::get().at("attention");
  Sample s{"drop", {{"heads", int64_t{2}}, {"dropout", 0.25}}, {{TensorDesc{Shape{2, 40, 8}}}}};
  Instance inst = instantiate(def, s, DType::f32, rng);
  Instance plain = inst;
  plain.attrs.set("dropout", 0.0);
  auto train = run_forward(inst, true, 5), eval = run_forward(inst, false, 5), nodrop = run_forward(plain, true, 5);
  EXPECT_EQ(max_rel_diff(eval[0], nodrop[0]), 0);   // eval: no dropout
  EXPECT_EQ(max_rel_diff(train[3], nodrop[3]), 0);  // the log-sum-exp rows are taken before dropout
  EXPECT_GT(max_rel_diff(train[0], eval[0]), 1e-3);
  auto again = run_forward(inst, true, 5), other = run_forward(inst, true, 6);
  EXPECT_EQ(max_rel_diff(again[0], train[0]), 0);  // the mask is a function of the key
  EXPECT_GT(max_rel_diff(other[0], train[0]), 0);
  // The mask the kernel draws (key 5, element (b, head, i, j) at its flat index) keeps about 1 - p.
  int64_t kept = 0, n = 2 * 2 * 40 * 40;
  for (int64_t i = 0; i < n; ++i) kept += uniform_at(5, static_cast<uint64_t>(i)) >= 0.25;
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(n), 0.75, 0.02);
}

// ---- embedding: ids outside the table ----------------------------------------------------------------------
TEST(DenseOps, EmbeddingRejectsIdsOutsideTheTable) {
  Rng rng(7, 7);
  const OpDef& def = Registry::get().at("embedding");
  Sample s{"oob", {{"num", int64_t{7}}, {"dim", int64_t{3}}}, {{TensorDesc{Shape{2, 4}, DType::i32}, 7}}};
  Instance inst = instantiate(def, s, DType::f32, rng);
  EXPECT_EQ(def.int_bound(inst.attrs, {}, 0), 7);
  for (int32_t bad : {7, -1, 1000}) {
    inst.inputs[0].data<int32_t>()[5] = bad;
    try {
      run_forward(inst);
      ADD_FAILURE() << "id " << bad << " accepted";
    } catch (const UserError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("token id " + std::to_string(bad) + " (sample 1, position 1) is outside [0, 7)"),
                std::string::npos)
          << msg;
    }
  }
}

// ---- parameters: PyTorch names, shapes and default inits ---------------------------------------------------
TEST(DenseOps, ParametersFollowPyTorch) {
  auto params = [](const std::string& op, Attrs a, TensorDesc x) {
    const OpDef& def = Registry::get().at(op);
    complete_attrs(def, a);
    std::vector<TensorDesc> in{x};
    return def.params(a, in);
  };
  auto lin = params("linear", {{"out", int64_t{3}}}, {Shape{2, 16}});
  ASSERT_EQ(lin.size(), 2u);
  EXPECT_EQ(lin[0].name, "weight");
  EXPECT_EQ(lin[0].desc.shape, (Shape{3, 16}));
  EXPECT_EQ(lin[0].init.str(), "uniform(-0.25, 0.25)");
  EXPECT_EQ(lin[1].name, "bias");
  EXPECT_EQ(lin[1].init.str(), "uniform(-0.25, 0.25)");
  EXPECT_EQ(params("linear", {{"out", int64_t{3}}, {"bias", false}}, {Shape{2, 16}}).size(), 1u);

  auto att = params("attention", {{"heads", int64_t{2}}}, {Shape{2, 5, 6}});
  ASSERT_EQ(att.size(), 4u);
  EXPECT_EQ(att[0].name, "in_proj_weight");
  EXPECT_EQ(att[0].desc.shape, (Shape{18, 6}));
  EXPECT_EQ(att[0].init.str(), "uniform(-0.5, 0.5)");  // xavier: sqrt(6 / (6 + 18))
  EXPECT_EQ(att[1].name, "in_proj_bias");
  EXPECT_EQ(att[1].init.str(), "zeros");
  EXPECT_EQ(att[2].name, "out_proj.weight");
  EXPECT_EQ(att[2].desc.shape, (Shape{6, 6}));
  EXPECT_NEAR(att[2].init.b, 1 / std::sqrt(6.0), 1e-15);
  EXPECT_EQ(att[3].name, "out_proj.bias");
  auto att_nb = params("attention", {{"heads", int64_t{2}}, {"bias", false}}, {Shape{2, 5, 6}});
  ASSERT_EQ(att_nb.size(), 2u);
  EXPECT_EQ(att_nb[0].name, "in_proj_weight");
  EXPECT_EQ(att_nb[1].name, "out_proj.weight");
  // Grouped-query: (heads + 2 kv_heads) * head_dim rows, [q | k | v]; xavier over those rows; bias false drops both.
  auto gqa = params("attention", {{"heads", int64_t{4}}, {"kv_heads", int64_t{2}}}, {Shape{2, 5, 8}});
  ASSERT_EQ(gqa.size(), 4u);
  EXPECT_EQ(gqa[0].desc.shape, (Shape{16, 8}));
  EXPECT_EQ(gqa[0].init.str(), "uniform(-0.5, 0.5)");  // sqrt(6 / (8 + 16))
  EXPECT_EQ(gqa[1].desc.shape, (Shape{16}));
  EXPECT_EQ(gqa[2].desc.shape, (Shape{8, 8}));
  auto mqa = params("attention", {{"heads", int64_t{4}}, {"kv_heads", int64_t{1}}, {"bias", false}}, {Shape{2, 5, 8}});
  ASSERT_EQ(mqa.size(), 2u);
  EXPECT_EQ(mqa[0].desc.shape, (Shape{12, 8}));
  EXPECT_EQ(mqa[1].name, "out_proj.weight");

  auto emb = params("embedding", {{"num", int64_t{10}}, {"dim", int64_t{4}}}, {Shape{2, 3}, DType::i32});
  EXPECT_EQ(emb[0].desc.shape, (Shape{10, 4}));
  EXPECT_EQ(emb[0].init.str(), "normal(0, 1)");
  auto pos = params("position_embedding", {{"max_len", int64_t{9}}}, {Shape{2, 3, 4}});
  EXPECT_EQ(pos[0].desc.shape, (Shape{9, 4}));
  EXPECT_EQ(pos[0].init.str(), "normal(0, 1)");
}

// kept_at (the integer compare the CPU dropout loops use) draws uniform_at's mask bit for bit.
TEST(DenseOps, KeptAtAgreesWithUniformAt) {
  for (double p : {0.1, 0.25, 1.0 / 3.0, 0.5, 0.9, 1e-300, 0.999999}) {
    const uint64_t thr = keep_threshold(p);
    for (uint64_t key : {uint64_t{5}, uint64_t{0x9e3779b97f4a7c15ULL}})
      for (uint64_t i = 0; i < 200000; ++i)
        ASSERT_EQ(kept_at(key, i, thr), uniform_at(key, i) >= p) << "p " << p << " key " << key << " index " << i;
  }
  // At the boundary itself: u 2^-53 == p keeps (>=), one below does not.
  const double p = 12345.0 / 9007199254740992.0;
  EXPECT_EQ(keep_threshold(p), 12345u);
}
