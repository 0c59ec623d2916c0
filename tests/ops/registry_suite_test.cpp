// Registry-driven op suites: every public op, every sample, without per-op code.
//  - Definition: samples exist, kernels exist, attribute defaults complete.
//  - Inference: samples infer; bad samples fail with the promised message.
//  - Gradients: finite differences in double for every differentiable input (a random projection of
//    output 0 is the scalar; central differences with h = 1e-6).
//  - Splits: every signature names one layout per input and output.
#include <gtest/gtest.h>

#include <cmath>

#include "op_harness.h"

using namespace braid;
using namespace braid::ops;
using namespace braid::testing;

TEST(OpRegistry, EveryPublicOpIsComplete) {
  auto ops = public_ops();
  ASSERT_FALSE(ops.empty());
  for (const auto* d : ops) {
    SCOPED_TRACE(d->name);
    EXPECT_NE(d->infer, nullptr);
    EXPECT_NE(d->cpu, nullptr) << "no CPU kernel";
    ASSERT_NE(d->samples, nullptr) << "no test samples";
    EXPECT_FALSE(d->samples().empty());
    if (d->differentiable) {
      EXPECT_NE(d->grad, nullptr);
    }
  }
}

TEST(OpRegistry, InferenceOfSamples) {
  Rng rng(1, 1);
  for (const auto* d : public_ops()) {
    for (const auto& s : d->samples()) {
      SCOPED_TRACE(d->name + "/" + s.name);
      Instance inst = instantiate(*d, s, DType::f32, rng);
      std::vector<TensorDesc> descs;
      for (const auto& t : inst.inputs) descs.push_back(t.desc());
      auto out = d->infer(inst.attrs, descs);
      EXPECT_GE(static_cast<int>(out.size()), d->public_outputs);
      auto outs = run_forward(inst);
      ASSERT_EQ(outs.size(), out.size());
      for (size_t k = 0; k < out.size(); ++k) EXPECT_EQ(outs[k].desc(), out[k]);
      for (int64_t i = 0; i < outs[0].numel(); ++i)
        if (is_float(outs[0].dtype())) {
          ASSERT_TRUE(std::isfinite(get_as_double(outs[0], i))) << "at " << i;
        }
      if (d->splits) {
        for (const auto& sig : d->splits(inst.attrs, descs, out)) {
          EXPECT_EQ(sig.inputs.size(), descs.size()) << sig.name;
          EXPECT_EQ(sig.outputs.size(), out.size()) << sig.name;
        }
      }
      if (d->cost) {
        EXPECT_GE(d->cost(inst.attrs, descs, out).flops, 0);
      }
    }
  }
}

TEST(OpRegistry, InferenceErrors) {
  int checked = 0;
  for (const auto* d : public_ops()) {
    if (!d->bad_samples) continue;
    for (const auto& b : d->bad_samples()) {
      SCOPED_TRACE(d->name + "/" + b.name);
      try {
        Attrs a = b.attrs;
        complete_attrs(*d, a);
        std::vector<TensorDesc> descs = b.inputs;
        int ndata = static_cast<int>(descs.size());
        if (d->params) {
          auto ps = d->params(a, std::span<const TensorDesc>(descs.data(), static_cast<size_t>(ndata)));
          for (const auto& p : ps) descs.push_back(p.desc);
        }
        d->infer(a, descs);
        ADD_FAILURE() << "expected an OpError containing '" << b.error_contains << "'";
      } catch (const OpError& e) {
        EXPECT_NE(std::string(e.what()).find(b.error_contains), std::string::npos) << e.what();
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(OpRegistry, GradientsMatchFiniteDifferencesInDouble) {
  Rng rng(2, 2);
  for (const auto* d : public_ops()) {
    if (!d->differentiable) continue;
    for (const auto& s : d->samples()) {
      SCOPED_TRACE(d->name + "/" + s.name);
      Instance inst = instantiate(*d, s, DType::f64, rng);
      auto out0 = run_forward(inst)[0];
      Tensor r = Tensor::empty(out0.desc());
      for (int64_t i = 0; i < r.numel(); ++i) set_from_double(r, i, rng.uniform(-1, 1));
      auto grads = run_backward(inst, r);
      auto objective = [&](const Instance& x) {
        auto y = run_forward(x)[0];
        double acc = 0;
        for (int64_t i = 0; i < y.numel(); ++i) acc += get_as_double(y, i) * get_as_double(r, i);
        return acc;
      };
      for (size_t k = 0; k < inst.inputs.size(); ++k) {
        if (!inst.differentiable_input(static_cast<int>(k))) continue;
        SCOPED_TRACE("input " + std::to_string(k));
        ASSERT_TRUE(grads[k].defined() && grads[k].numel() == inst.inputs[k].numel()) << "no gradient";
        int64_t n = inst.inputs[k].numel();
        int64_t stride = std::max<int64_t>(1, n / 64);  // at most ~64 probes per input
        for (int64_t i = 0; i < n; i += stride) {
          Instance plus = inst, minus = inst;
          plus.inputs[k] = inst.inputs[k].clone();
          minus.inputs[k] = inst.inputs[k].clone();
          const double h = 1e-6, x0 = get_as_double(inst.inputs[k], i);
          set_from_double(plus.inputs[k], i, x0 + h);
          set_from_double(minus.inputs[k], i, x0 - h);
          double numeric = (objective(plus) - objective(minus)) / (2 * h);
          double analytic = get_as_double(grads[k], i);
          ASSERT_NEAR(analytic, numeric, d->gradcheck_tol * std::max(1.0, std::abs(numeric))) << "element " << i;
        }
      }
    }
  }
}
