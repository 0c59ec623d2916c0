// Checks of the norm, dropout, loss and shape families beyond the registry suites: hand-computed values,
// dropout's mask (rate, scale, eval identity, reproducibility under S(0) shards via KernelCtx::batch_offset), target
// bounds, argmax ties, and that every split signature is true: the kernel run on shards (S sliced, B whole)
// and recombined (S concatenated, B equal, P summed; a loss's P rescaled by N_k / N) equals the unsplit op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "op_harness.h"

using namespace braid;
using namespace braid::ops;
using namespace braid::testing;

namespace {

Tensor make(const Shape& s, std::vector<double> v, DType t = DType::f64) {
  Tensor x = Tensor::empty({s, t});
  for (int64_t i = 0; i < x.numel(); ++i) set_from_double(x, i, v[static_cast<size_t>(i)]);
  return x;
}

Instance instance(const std::string& op, Attrs attrs, std::vector<Tensor> data) {
  Instance inst;
  inst.def = &Registry::get().at(op);
  inst.label = op;
  inst.attrs = std::move(attrs);
  complete_attrs(*inst.def, inst.attrs);
  inst.num_data = static_cast<int>(data.size());
  std::vector<TensorDesc> descs;
  for (const auto& t : data) descs.push_back(t.desc());
  if (inst.def->params) inst.params = inst.def->params(inst.attrs, descs);
  inst.inputs = std::move(data);
  for (const auto& p : inst.params) {
    Tensor t = Tensor::empty(p.desc);
    for (int64_t i = 0; i < t.numel(); ++i) set_from_double(t, i, p.init.kind == InitSpec::Kind::Ones ? 1.0 : 0.0);
    inst.inputs.push_back(t);
  }
  return inst;
}

// Slices `t` along `axis` into [begin, end).
Tensor slice(const Tensor& t, int axis, int64_t begin, int64_t end) {
  Shape s = t.shape();
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
  int64_t n = s[axis];
  s[axis] = end - begin;
  Tensor out = Tensor::empty({s, t.dtype()});
  size_t es = dtype_size(t.dtype());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(static_cast<char*>(out.raw()) + o * (end - begin) * inner * es,
                static_cast<const char*>(t.raw()) + (o * n + begin) * inner * es, (end - begin) * inner * es);
  return out;
}

double at(const Tensor& t, int64_t i) { return get_as_double(t, i); }

}  // namespace

TEST(NormOps, LayerNormMatchesHandComputation) {
  auto inst = instance("layer_norm", {}, {make(Shape{1, 4}, {1, 2, 3, 4})});
  auto out = run_forward(inst);
  double m = 2.5, var = 1.25, rs = 1 / std::sqrt(var + 1e-5);
  EXPECT_NEAR(at(out[1], 0), m, 1e-12);
  EXPECT_NEAR(at(out[2], 0), rs, 1e-12);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(at(out[0], j), (j + 1 - m) * rs, 1e-12);
}

TEST(NormOps, SoftmaxIsStableAndSumsToOne) {
  auto inst = instance("softmax", {{"axis", int64_t{0}}}, {make(Shape{1, 3, 2}, {1000, 0, 1001, 0, 1002, 0})});
  auto y = run_forward(inst)[0];
  double e0 = std::exp(-2.0), e1 = std::exp(-1.0), s = e0 + e1 + 1;
  EXPECT_NEAR(at(y, 0), e0 / s, 1e-12);
  EXPECT_NEAR(at(y, 2), e1 / s, 1e-12);
  EXPECT_NEAR(at(y, 4), 1 / s, 1e-12);
  EXPECT_NEAR(at(y, 1) + at(y, 3) + at(y, 5), 1.0, 1e-12);
}

TEST(DropoutOp, TrainingMaskRateScaleAndEval) {
  const int64_t n = 20000;
  auto inst = instance("dropout", {{"p", 0.25}}, {make(Shape{4, n / 4}, std::vector<double>(n, 2.0))});
  auto out = run_forward(inst, true, 11);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    double m = at(out[1], i);
    ASSERT_TRUE(m == 0.0 || std::abs(m - 1 / 0.75) < 1e-12) << m;
    EXPECT_EQ(at(out[0], i), 2.0 * m);
    kept += m != 0;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.75, 0.02);
  auto other = run_forward(inst, true, 12);  // another key, another mask
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += at(other[1], i) == at(out[1], i);
  EXPECT_LT(same, n);
  for (bool training : {false, true}) {
    auto eval = run_forward(training ? instance("dropout", {{"p", 0.0}}, {inst.inputs[0]}) : inst, training, 11);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(at(eval[0], i), 2.0);
      ASSERT_EQ(at(eval[1], i), 1.0);
    }
  }
}

TEST(DropoutOp, ShardsWithBatchOffsetReproduceTheMask) {
  Rng rng(3, 3);
  std::vector<double> v(6 * 10);
  for (auto& x : v) x = rng.uniform(-1, 1);
  Tensor x = make(Shape{6, 2, 5}, v);
  auto whole = run_forward(instance("dropout", {}, {x}), true, 5);
  for (int64_t b0 : {0, 2, 5}) {
    auto part_inst = instance("dropout", {}, {slice(x, 0, b0, 6)});
    part_inst.batch_offset = b0;
    auto part = run_forward(part_inst, true, 5);
    for (int64_t i = 0; i < part[0].numel(); ++i) ASSERT_EQ(at(part[1], i), at(whole[1], b0 * 10 + i));
  }
}

TEST(LossOps, CrossEntropyValueAndGradient) {
  Tensor logits = make(Shape{2, 3}, {1, 2, 3, 0, 0, 0});
  Tensor targets = make(Shape{2}, {2, 0}, DType::i64);
  auto inst = instance("cross_entropy", {}, {logits, targets});
  auto loss = run_forward(inst)[0];
  ASSERT_EQ(loss.shape(), Shape{});
  double l0 = std::log(std::exp(1) + std::exp(2) + std::exp(3)) - 3, l1 = std::log(3.0);
  EXPECT_NEAR(at(loss, 0), (l0 + l1) / 2, 1e-12);
  auto g = run_backward(inst, make(Shape{}, {2.0}));
  EXPECT_NEAR(at(g[0], 3), (1.0 / 3 - 1) * 2 / 2, 1e-12);
  EXPECT_NEAR(at(g[0], 4), (1.0 / 3) * 2 / 2, 1e-12);
  EXPECT_FALSE(g[1].defined());  // targets get no gradient
  EXPECT_EQ(inst.def->int_bound(inst.attrs, std::vector<TensorDesc>{logits.desc(), targets.desc()}, 1), 3);
}

TEST(LossOps, CrossEntropyRejectsTargetsOutOfRange) {
  for (double bad : {3.0, -1.0}) {
    auto inst = instance("cross_entropy", {},
                         {make(Shape{2, 3}, {1, 2, 3, 0, 0, 0}), make(Shape{2}, {0, bad}, DType::i32)});
    try {
      run_forward(inst);
      FAIL() << "expected a UserError";
    } catch (const UserError& e) {
      std::string msg = e.format();
      EXPECT_NE(msg.find("target " + std::to_string(static_cast<int>(bad))), std::string::npos) << msg;
      EXPECT_NE(msg.find("C = 3"), std::string::npos) << msg;
    }
  }
}

TEST(LossOps, MseValue) {
  auto inst = instance("mse_loss", {}, {make(Shape{2, 2}, {1, 2, 3, 4}), make(Shape{2, 2}, {0, 0, 3, 2})});
  EXPECT_NEAR(at(run_forward(inst)[0], 0), (1 + 4 + 0 + 4) / 4.0, 1e-12);
}

TEST(LossOps, AccuracyTakesTheFirstMaximumOnTies) {
  Tensor logits = make(Shape{3, 3}, {1, 1, 0, 0, 2, 2, 5, 1, 5});
  auto inst = instance("accuracy", {}, {logits, make(Shape{3}, {0, 2, 0}, DType::i64)});
  auto y = run_forward(inst)[0];
  ASSERT_EQ(y.dtype(), DType::f32);
  EXPECT_NEAR(at(y, 0), 2.0 / 3, 1e-7);
}

TEST(ShapeOps, TransposeAndItsGradient) {
  std::vector<double> v(24);
  for (int i = 0; i < 24; ++i) v[static_cast<size_t>(i)] = i;
  auto inst = instance("transpose", {{"perm", std::vector<int64_t>{2, 0, 1}}}, {make(Shape{1, 2, 3, 4}, v)});
  auto y = run_forward(inst)[0];
  ASSERT_EQ(y.shape(), (Shape{1, 4, 2, 3}));
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) ASSERT_EQ(at(y, (c * 2 + a) * 3 + b), (a * 3 + b) * 4 + c);
  auto g = run_backward(inst, y);
  for (int i = 0; i < 24; ++i) ASSERT_EQ(at(g[0], i), i);
}

TEST(ShapeOps, ConcatOfIntegersAndSliceBack) {
  auto inst = instance("concat", {{"axis", int64_t{0}}},
                       {make(Shape{2, 1}, {1, 2}, DType::i32), make(Shape{2, 2}, {3, 4, 5, 6}, DType::i32)});
  auto y = run_forward(inst)[0];
  std::vector<double> want{1, 3, 4, 2, 5, 6};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(at(y, i), want[static_cast<size_t>(i)]);
}

namespace {

// How shards combine beyond plain S/B/P (the rules the executor follows, documented in loss.cpp/dropout.cpp).
enum class Rescale { None, MeanOutput, GradInput0 };

// Runs `inst` whole and on 2 shards (uneven where the axis allows) for every split signature and checks the
// recombined outputs. Returns the number of signatures checked.
int check_splits(const Instance& inst, Rescale rescale) {
  const OpDef& d = *inst.def;
  std::vector<TensorDesc> descs;
  for (const auto& t : inst.inputs) descs.push_back(t.desc());
  auto full = run_forward(inst);
  std::vector<TensorDesc> out_descs;
  for (const auto& t : full) out_descs.push_back(t.desc());
  int checked = 0;
  for (const auto& sig : d.splits(inst.attrs, descs, out_descs)) {
    SCOPED_TRACE(inst.label + " " + sig.name);
    int64_t n = 0;
    for (size_t k = 0; k < descs.size(); ++k)
      if (sig.inputs[k].kind == Sbp::Kind::Split) n = descs[k].shape[sig.inputs[k].axis];
    if (n < 2) continue;  // replicated, or nothing to split
    int64_t cut = n / 2 + (n % 2);
    std::vector<std::vector<Tensor>> outs;
    std::vector<double> weight;
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, cut}, {cut, n}}) {
      Instance part = inst;
      double w = static_cast<double>(e - b) / static_cast<double>(n);
      for (size_t k = 0; k < descs.size(); ++k)
        if (sig.inputs[k].kind == Sbp::Kind::Split) part.inputs[k] = slice(inst.inputs[k], sig.inputs[k].axis, b, e);
      // A shard of the batch axis starts at sample b of the whole batch (random masks index globally).
      if (sig.inputs[0].kind == Sbp::Kind::Split && sig.inputs[0].axis == 0) part.batch_offset = inst.batch_offset + b;
      if (rescale == Rescale::GradInput0) {
        part.inputs[0] = inst.inputs[0].clone();
        set_from_double(part.inputs[0], 0, at(inst.inputs[0], 0) * w);
      }
      outs.push_back(run_forward(part));
      weight.push_back(rescale == Rescale::MeanOutput ? w : 1.0);
    }
    for (size_t o = 0; o < full.size(); ++o) {
      const Sbp& sb = sig.outputs[o];
      for (int64_t i = 0; i < full[o].numel(); ++i) {
        double got;
        if (sb.kind == Sbp::Kind::Partial) {
          got = weight[0] * at(outs[0][o], i) + weight[1] * at(outs[1][o], i);
        } else {
          EXPECT_EQ(sb.kind, Sbp::Kind::Split);
          // Element i of the full output: find its shard along sb.axis.
          const Shape& fs = full[o].shape();
          int64_t inner = 1;
          for (int a = sb.axis + 1; a < fs.rank(); ++a) inner *= fs[a];
          int64_t len = fs[sb.axis], outer_i = i / (len * inner), ax_i = (i / inner) % len, in_i = i % inner;
          int64_t len0 = outs[0][o].shape()[sb.axis];
          size_t sh = ax_i < len0 ? 0 : 1;
          int64_t li = ax_i - (sh ? len0 : 0), ln = outs[sh][o].shape()[sb.axis];
          got = at(outs[sh][o], (outer_i * ln + li) * inner + in_i);
        }
        EXPECT_NEAR(got, at(full[o], i), 1e-12) << "output " << o << " element " << i;
        if (std::abs(got - at(full[o], i)) > 1e-12) return checked;
      }
    }
    ++checked;
  }
  return checked;
}

Tensor random_like(const Tensor& t, Rng& rng) {
  Tensor r = Tensor::empty(t.desc());
  for (int64_t i = 0; i < r.numel(); ++i) set_from_double(r, i, rng.uniform(-1, 1));
  return r;
}

}  // namespace

// Public ops: every split signature of every sample.
TEST(MiscOps, SplitSignaturesAreTrue) {
  const std::set<std::string> ops{"layer_norm", "softmax", "dropout", "cross_entropy", "mse_loss", "accuracy",
                                  "concat", "flatten", "reshape", "transpose"};
  Rng rng(4, 4);
  int checked = 0;
  for (const auto& name : ops) {
    const OpDef& d = Registry::get().at(name);
    bool mean = name == "cross_entropy" || name == "mse_loss" || name == "accuracy";
    for (const auto& s : d.samples())
      checked += check_splits(instantiate(d, s, DType::f64, rng), mean ? Rescale::MeanOutput : Rescale::None);
  }
  EXPECT_GT(checked, 30);
}

// Internal gradient ops, fed with the forward ops' samples and outputs.
TEST(MiscOps, GradientOpSplitSignaturesAreTrue) {
  Rng rng(5, 5);
  int checked = 0;
  auto fwd = [&](const std::string& op) {
    std::vector<std::pair<Instance, std::vector<Tensor>>> res;
    for (const auto& s : Registry::get().at(op).samples()) {
      Instance inst = instantiate(Registry::get().at(op), s, DType::f64, rng);
      res.emplace_back(inst, run_forward(inst));
    }
    return res;
  };
  for (auto& [f, out] : fwd("layer_norm")) {
    Tensor dy = random_like(out[0], rng);
    checked += check_splits(instance("layer_norm_grad", {}, {dy, f.inputs[0], f.inputs[1], out[1], out[2]}),
                            Rescale::None);
  }
  for (auto& [f, out] : fwd("softmax"))
    checked += check_splits(instance("softmax_grad", f.attrs, {random_like(out[0], rng), out[0]}), Rescale::None);
  for (auto& [f, out] : fwd("cross_entropy"))
    checked += check_splits(instance("cross_entropy_grad", {}, {make(Shape{}, {1.7}), f.inputs[0], f.inputs[1]}),
                            Rescale::GradInput0);
  for (auto& [f, out] : fwd("mse_loss"))
    checked += check_splits(instance("mse_loss_grad", {}, {make(Shape{}, {0.6}), f.inputs[0], f.inputs[1]}),
                            Rescale::GradInput0);
  for (auto& [f, out] : fwd("concat")) {
    Attrs a{{"axis", f.attrs.i("axis")}, {"start", int64_t{1}}, {"length", int64_t{1}}};
    checked += check_splits(instance("slice", a, {out[0]}), Rescale::None);
  }
  EXPECT_GT(checked, 15);
}
