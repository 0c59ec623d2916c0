// Checks of the norm, dropout, loss and shape families beyond the registry suites (split consistency is
// SplitConsistency's): hand-computed values, dropout's mask (rate, scale, eval identity, reproducibility
// under S(0) shards via KernelCtx::batch_offset), target bounds, argmax ties.
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

double at(const Tensor& t, int64_t i) { return get_as_double(t, i); }

std::vector<Tensor> run_op(const std::string& op, const Attrs& attrs, const std::vector<Tensor>& in) {
  Eager e;
  std::vector<ValueId> ids;
  for (const auto& t : in) ids.push_back(e.add(t));
  std::vector<Tensor> out;
  for (auto v : e.emit(op, attrs, ids)) out.push_back(e.val(v));
  return out;
}

Tensor random_f32(const Shape& s, Rng& rng) {
  Tensor t = Tensor::empty({s, DType::f32});
  for (int64_t i = 0; i < t.numel(); ++i) set_from_double(t, i, rng.uniform(-2, 2));
  return t;
}

}  // namespace

TEST(NormOps, LayerNormMatchesHandComputation) {
  auto inst = instance("layer_norm", {}, {make(Shape{1, 4}, {1, 2, 3, 4})});
  auto out = run_forward(inst);
  double m = 2.5, var = 1.25, rs = 1 / std::sqrt(var + 1e-5);
  EXPECT_NEAR(at(out[1], 0), m, 1e-12);
  EXPECT_NEAR(at(out[2], 0), rs, 1e-12);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(at(out[0], j), (j + 1 - m) * rs, 1e-12);
}

// Llama's RMSNorm by hand: mean square 7.5, rstd = 1 / sqrt(7.5 + eps); the weight is all ones.
TEST(NormOps, RmsNormMatchesHandComputation) {
  auto inst = instance("rms_norm", {}, {make(Shape{1, 4}, {1, 2, 3, 4})});
  ASSERT_EQ(inst.params.size(), 1u);
  EXPECT_EQ(inst.params[0].name, "weight");
  EXPECT_EQ(inst.params[0].init.kind, InitSpec::Kind::Ones);
  auto out = run_forward(inst);
  ASSERT_EQ(out.size(), 2u) << "y and the saved rstd";
  const double rs = 1 / std::sqrt(7.5 + 1e-6);
  EXPECT_NEAR(at(out[1], 0), rs, 1e-12);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(at(out[0], j), (j + 1) * rs, 1e-12);
}

// rms_norm and rms_norm_grad in f32 on 1 and 3 threads give the same bits (rows of 96 and of 77, which leaves a
// tail past the 8 lanes; 300 and 7 rows: the weight gradient's 32 chunks of partials and a single one), and the
// weight gradient equals the sum over rows of dy * x * rstd taken in double.
TEST(NormOps, RmsNormSameBitsOnAnyThreadCountAndWeightGradientIsTheRowSum) {
  Rng rng(39, 1);
  std::vector<std::vector<Tensor>> cases;  // x, weight, dy
  for (const Shape& s : {Shape{6, 50, 96}, Shape{3, 100, 77}, Shape{7, 33}})
    cases.push_back({random_f32(s, rng), random_f32(Shape{s.back()}, rng), random_f32(s, rng)});
  auto run_all = [&] {
    std::vector<Tensor> r;
    for (const auto& c : cases) {
      auto fwd = run_op("rms_norm", {{"eps", 1e-6}}, {c[0], c[1]});
      auto bwd = run_op("rms_norm_grad", {}, {c[2], c[0], c[1], fwd[1]});
      r.insert(r.end(), fwd.begin(), fwd.end());
      r.insert(r.end(), bwd.begin(), bwd.end());
    }
    return r;
  };
  const int saved = num_threads();
  set_num_threads(1);
  const auto one = run_all();
  set_num_threads(std::max(3, saved));
  const auto many = run_all();
  set_num_threads(saved);
  ASSERT_EQ(one.size(), many.size());
  for (size_t k = 0; k < one.size(); ++k) {
    ASSERT_EQ(one[k].desc(), many[k].desc());
    EXPECT_EQ(std::memcmp(one[k].raw(), many[k].raw(), one[k].bytes()), 0) << "result " << k;
  }
  for (size_t c = 0; c < cases.size(); ++c) {
    const Tensor &x = cases[c][0], &dy = cases[c][2], &rstd = one[4 * c + 1], &dw = one[4 * c + 3];
    const int64_t d = x.shape().back(), rows = x.numel() / d;
    for (int64_t j = 0; j < d; ++j) {
      double want = 0;
      for (int64_t r = 0; r < rows; ++r) want += at(dy, r * d + j) * (at(x, r * d + j) * at(rstd, r));
      ASSERT_NEAR(at(dw, j), want, 1e-5 * std::max(1.0, std::abs(want))) << "case " << c << " column " << j;
    }
  }
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

// x = 2 everywhere, so y / 2 is the scaled mask (dropout keeps none: its gradient draws it again).
TEST(DropoutOp, TrainingMaskRateScaleAndEval) {
  const int64_t n = 20000;
  auto inst = instance("dropout", {{"p", 0.25}}, {make(Shape{4, n / 4}, std::vector<double>(n, 2.0))});
  auto out = run_forward(inst, true, 11);
  ASSERT_EQ(out.size(), 1u);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    double m = at(out[0], i) / 2.0;
    ASSERT_TRUE(m == 0.0 || std::abs(m - 1 / 0.75) < 1e-12) << m;
    kept += m != 0;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.75, 0.02);
  auto other = run_forward(inst, true, 12);  // another key, another mask
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += at(other[0], i) == at(out[0], i);
  EXPECT_LT(same, n);
  // The gradient is dy times the same mask, drawn again from the same key.
  auto grad = run_backward(inst, make(Shape{4, n / 4}, std::vector<double>(n, 3.0)), 11);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(at(grad[0], i), 3.0 * (at(out[0], i) / 2.0)) << i;
  for (bool training : {false, true}) {
    auto eval = run_forward(training ? instance("dropout", {{"p", 0.0}}, {inst.inputs[0]}) : inst, training, 11);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(at(eval[0], i), 2.0);
  }
}

TEST(DropoutOp, ShardsWithBatchOffsetReproduceTheMask) {
  Rng rng(3, 3);
  std::vector<double> v(6 * 10);
  for (auto& x : v) x = rng.uniform(-1, 1);
  Tensor x = make(Shape{6, 2, 5}, v);
  auto whole = run_forward(instance("dropout", {}, {x}), true, 5);
  for (int64_t b0 : {0, 2, 5}) {
    auto part_inst = instance("dropout", {}, {slice_along(x, 0, b0, 6)});
    part_inst.batch_offset = b0;
    auto part = run_forward(part_inst, true, 5);
    for (int64_t i = 0; i < part[0].numel(); ++i) ASSERT_EQ(at(part[0], i), at(whole[0], b0 * 10 + i));
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

// relu follows PyTorch on the values where "max(x, 0)" is ambiguous: NaN stays NaN (so NaN inputs are not
// trained on silently), -0 stays -0, and the gradient at NaN passes dy (threshold_backward: x <= 0 ? 0 : dy).
TEST(ActivationOps, ReluKeepsNaNAndNegativeZeroAsPyTorch) {
  const double nan = std::nan("");
  for (DType t : {DType::f32, DType::f64}) {
    auto inst = instance("relu", {}, {make(Shape{1, 4}, {-0.0, nan, -1.0, 2.0}, t)});
    auto y = run_forward(inst)[0];
    EXPECT_EQ(at(y, 0), 0.0);
    EXPECT_TRUE(std::signbit(at(y, 0)));
    EXPECT_TRUE(std::isnan(at(y, 1)));
    EXPECT_EQ(at(y, 2), 0.0);
    EXPECT_EQ(at(y, 3), 2.0);
    auto dx = run_backward(inst, make(Shape{1, 4}, {1, 1, 1, 1}, t))[0];
    EXPECT_EQ(at(dx, 0), 0.0);
    EXPECT_EQ(at(dx, 1), 1.0);
    EXPECT_EQ(at(dx, 2), 0.0);
    EXPECT_EQ(at(dx, 3), 1.0);
  }
}
