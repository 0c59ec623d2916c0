// Tests of the conv, pool and batch_norm families beyond the registry suites (split consistency is
// SplitConsistency's): kernels against slow, obvious loops; batch_norm's running statistics and eval mode;
// error wording the bad samples cannot reach (a weight that does not fit its input); results independent of
// the thread count; conv2d's gradients as adjoints.
#include <gtest/gtest.h>

#include <cmath>

#include "core/parallel.h"
#include "op_harness.h"

using namespace braid;
using namespace braid::ops;
using namespace braid::testing;

namespace {

std::vector<Tensor> run_op(const std::string& op, const Attrs& attrs, const std::vector<Tensor>& in, bool training) {
  Eager e;
  e.ctx.training = training;
  std::vector<ValueId> ids;
  for (const auto& t : in) ids.push_back(e.add(t));  // not cloned: in-place updates stay visible
  std::vector<Tensor> out;
  for (auto v : e.emit(op, attrs, ids)) out.push_back(e.val(v));
  return out;
}

Tensor random_like(const TensorDesc& d, Rng& rng) {
  Tensor t = Tensor::empty(d);
  for (int64_t i = 0; i < t.numel(); ++i) set_from_double(t, i, rng.uniform(-1, 1));
  return t;
}

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.desc(), want.desc()) << what;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = get_as_double(got, i), w = get_as_double(want, i);
    ASSERT_NEAR(g, w, tol * std::max(1.0, std::abs(w))) << what << " element " << i;
  }
}

const Sample& sample_named(const OpDef& d, const std::string& name) {
  static std::vector<Sample> keep;
  keep = d.samples();
  for (const auto& s : keep)
    if (s.name == name) return s;
  throw std::runtime_error("no sample " + name);
}

// x [B, C, H, W] at (b, c, h, w), or `pad` outside.
double pixel(const Tensor& x, int64_t b, int64_t c, int64_t h, int64_t w, double pad) {
  const Shape& s = x.shape();
  if (h < 0 || h >= s[2] || w < 0 || w >= s[3]) return pad;
  return get_as_double(x, ((b * s[1] + c) * s[2] + h) * s[3] + w);
}

// conv2d's samples plus strides beyond the kernel and padding beyond it.
std::vector<Sample> conv_cases() {
  auto cases = Registry::get().at("conv2d").samples();
  cases.push_back({"stride_over_kernel",
                   {{"out", int64_t{3}},
                    {"kernel", std::vector<int64_t>{3, 2}},
                    {"stride", std::vector<int64_t>{4, 3}},
                    {"padding", std::vector<int64_t>{1, 2}}},
                   {{TensorDesc{Shape{2, 2, 9, 8}}}}});
  cases.push_back({"big_pad",
                   {{"out", int64_t{2}}, {"kernel", int64_t{2}}, {"padding", int64_t{3}}},
                   {{TensorDesc{Shape{1, 3, 2, 3}}}}});
  // Big enough planes that the kernels cut the batch of 5 into groups of 2, 2 and 1 samples (in double:
  // (K + O) P 8 bytes = 22 x 5184 x 8 per sample against conv.cpp's 2 MiB per group).
  cases.push_back({"several_groups",
                   {{"out", int64_t{4}}, {"kernel", int64_t{3}}, {"padding", int64_t{1}}},
                   {{TensorDesc{Shape{5, 2, 72, 72}}}}});
  return cases;
}

}  // namespace

// The im2col + GEMM convolution against the textbook sum.
TEST(ConvFamily, Conv2dMatchesDirectSum) {
  Rng rng(4, 4);
  const OpDef& d = Registry::get().at("conv2d");
  for (const auto& s : conv_cases()) {
    SCOPED_TRACE(s.name);
    Instance inst = instantiate(d, s, DType::f64, rng);
    Tensor y = run_forward(inst)[0];
    const Tensor &x = inst.inputs[0], &w = inst.inputs[1];
    const auto &st = inst.attrs.ints("stride"), &pd = inst.attrs.ints("padding");
    const Shape& ws = w.shape();
    const Shape& ys = y.shape();
    for (int64_t b = 0; b < ys[0]; ++b)
      for (int64_t o = 0; o < ys[1]; ++o)
        for (int64_t oh = 0; oh < ys[2]; ++oh)
          for (int64_t ow = 0; ow < ys[3]; ++ow) {
            double acc = inst.inputs.size() > 2 ? get_as_double(inst.inputs[2], o) : 0.0;
            for (int64_t c = 0; c < ws[1]; ++c)
              for (int64_t i = 0; i < ws[2]; ++i)
                for (int64_t j = 0; j < ws[3]; ++j)
                  acc += get_as_double(w, ((o * ws[1] + c) * ws[2] + i) * ws[3] + j) *
                         pixel(x, b, c, oh * st[0] - pd[0] + i, ow * st[1] - pd[1] + j, 0.0);
            ASSERT_NEAR(get_as_double(y, ((b * ys[1] + o) * ys[2] + oh) * ys[3] + ow), acc, 1e-12);
          }
  }
}

// Pools against loops over each window: max with -inf padding and its argmax, average dividing by kh kw.
TEST(ConvFamily, PoolsMatchWindowLoops) {
  Rng rng(6, 6);
  for (const std::string op : {"max_pool2d", "avg_pool2d"}) {
    const OpDef& d = Registry::get().at(op);
    for (const auto& s : d.samples()) {
      SCOPED_TRACE(op + "/" + s.name);
      Instance inst = instantiate(d, s, DType::f64, rng);
      auto out = run_forward(inst);
      const Tensor& x = inst.inputs[0];
      const auto &k = inst.attrs.ints("kernel"), &st = inst.attrs.ints("stride"), &pd = inst.attrs.ints("padding");
      const Shape& ys = out[0].shape();
      for (int64_t p = 0; p < ys[0] * ys[1]; ++p)
        for (int64_t oh = 0; oh < ys[2]; ++oh)
          for (int64_t ow = 0; ow < ys[3]; ++ow) {
            double best = -INFINITY, sum = 0;
            int64_t arg = -1;
            for (int64_t i = 0; i < k[0]; ++i)
              for (int64_t j = 0; j < k[1]; ++j) {
                int64_t h = oh * st[0] - pd[0] + i, w = ow * st[1] - pd[1] + j;
                double v = pixel(x, p / ys[1], p % ys[1], h, w, -INFINITY);
                if (v > best) best = v, arg = h * x.shape()[3] + w;
                if (std::isfinite(v)) sum += v;
              }
            int64_t o = (p * ys[2] + oh) * ys[3] + ow;
            if (op == "max_pool2d") {
              ASSERT_EQ(get_as_double(out[0], o), best);
              ASSERT_EQ(get_as_double(out[1], o), static_cast<double>(arg));
            } else {
              ASSERT_NEAR(get_as_double(out[0], o), sum / static_cast<double>(k[0] * k[1]), 1e-14);
            }
          }
    }
  }
}

TEST(ConvFamily, PoolStrideDefaultsToKernel) {
  const OpDef& d = Registry::get().at("max_pool2d");
  Attrs a{{"kernel", std::vector<int64_t>{3, 2}}};
  complete_attrs(d, a);
  EXPECT_EQ(a.ints("stride"), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(a.ints("padding"), (std::vector<int64_t>{0, 0}));
  auto out = d.infer(a, std::vector<TensorDesc>{{Shape{2, 4, 9, 9}}});
  EXPECT_EQ(out[0].shape, (Shape{2, 4, 3, 4}));
  EXPECT_EQ(out[1].dtype, DType::i64);
}

TEST(ConvFamily, MaxPoolFirstMaximumWinsAndNanPropagates) {
  Tensor x = Tensor::empty({Shape{1, 1, 2, 2}, DType::f32});
  for (int i = 0; i < 4; ++i) set_from_double(x, i, 1.0);
  auto out = run_op("max_pool2d", {{"kernel", int64_t{2}}}, {x}, true);
  EXPECT_EQ(get_as_double(out[1], 0), 0.0);  // ties: the first maximum, as PyTorch's CPU kernel
  set_from_double(x, 2, NAN);
  out = run_op("max_pool2d", {{"kernel", int64_t{2}}}, {x}, true);
  EXPECT_TRUE(std::isnan(get_as_double(out[0], 0)));
  EXPECT_EQ(get_as_double(out[1], 0), 2.0);
  set_from_double(x, 0, NAN);  // two NaNs: the last one's index, as PyTorch's CPU kernel
  set_from_double(x, 3, 5.0);
  out = run_op("max_pool2d", {{"kernel", int64_t{2}}}, {x}, true);
  EXPECT_TRUE(std::isnan(get_as_double(out[0], 0)));
  EXPECT_EQ(get_as_double(out[1], 0), 2.0);
}

// The float 2x2 / stride 2 max pool has a fast path of its own: it must choose what the generic window loop
// (run here in double on the same values) chooses, with ties, NaN, -inf and odd sizes.
TEST(ConvFamily, MaxPool2x2FastPathAgreesWithTheWindowLoop) {
  // 130 x 133: planes of 65 x 66 outputs, run in blocks of rows; 2 x 8196: rows too wide for a block, the generic
  // loop.
  for (const Shape& shape :
       {Shape{3, 5, 8, 10}, Shape{2, 3, 9, 11}, Shape{64, 3, 4, 4}, Shape{1, 2, 130, 133}, Shape{1, 1, 2, 8196}}) {
    Tensor xf = Tensor::empty({shape, DType::f32}), xd = Tensor::empty({shape, DType::f64});
    for (int64_t i = 0; i < xf.numel(); ++i) {
      double v = static_cast<double>(i * 7919 % 13) - 6.0;  // many ties
      if (i % 97 == 5) v = NAN;
      if (i % 89 == 3) v = -INFINITY;
      set_from_double(xf, i, v);
      set_from_double(xd, i, v);
    }
    auto f = run_op("max_pool2d", {{"kernel", int64_t{2}}}, {xf}, true);
    auto d = run_op("max_pool2d", {{"kernel", int64_t{2}}}, {xd}, true);
    ASSERT_EQ(f[0].numel(), d[0].numel());
    for (int64_t o = 0; o < f[0].numel(); ++o) {
      const double a = get_as_double(f[0], o), b = get_as_double(d[0], o);
      EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << o << ": " << a << " vs " << b;
      EXPECT_EQ(get_as_double(f[1], o), get_as_double(d[1], o)) << o;
    }
  }
}

TEST(ConvFamily, Conv2dParamsFollowPyTorch) {
  const OpDef& d = Registry::get().at("conv2d");
  Attrs a{{"out", int64_t{8}}, {"kernel", std::vector<int64_t>{3, 5}}};
  complete_attrs(d, a);
  std::vector<TensorDesc> x{{Shape{2, 3, 10, 10}}};
  auto ps = d.params(a, x);
  ASSERT_EQ(ps.size(), 2u);
  EXPECT_EQ(ps[0].name, "weight");
  EXPECT_EQ(ps[0].desc.shape, (Shape{8, 3, 3, 5}));
  EXPECT_EQ(ps[1].name, "bias");
  EXPECT_EQ(ps[1].desc.shape, (Shape{8}));
  const double bound = 1.0 / std::sqrt(45.0);
  for (const auto& p : ps) {
    EXPECT_EQ(p.init.kind, InitSpec::Kind::Uniform);
    EXPECT_DOUBLE_EQ(p.init.a, -bound);
    EXPECT_DOUBLE_EQ(p.init.b, bound);
  }
  a.set("bias", false);
  EXPECT_EQ(d.params(a, x).size(), 1u);
}

TEST(ConvFamily, BatchNormParamsAndBuffersHavePyTorchNames) {
  const OpDef& d = Registry::get().at("batch_norm");
  Attrs a;
  complete_attrs(d, a);
  auto ps = d.params(a, std::vector<TensorDesc>{{Shape{4, 16, 5, 5}}});
  std::vector<std::string> names;
  for (const auto& p : ps) names.push_back(p.name + (p.buffer ? "*" : ""));
  EXPECT_EQ(names,
            (std::vector<std::string>{"weight", "bias", "running_mean*", "running_var*", "num_batches_tracked*"}));
  EXPECT_EQ(ps[4].desc, (TensorDesc{Shape{}, DType::i64}));
  EXPECT_EQ(ps[3].init.kind, InitSpec::Kind::Ones);
  EXPECT_EQ(d.mutated_inputs, (std::vector<int>{3, 4, 5}));
}

// Training: batch statistics (biased variance) normalise; the buffers move by momentum towards the batch
// mean and the UNBIASED variance; num_batches_tracked counts. Eval: running statistics, nothing changes.
TEST(ConvFamily, BatchNormRunningStatistics) {
  const OpDef& d = Registry::get().at("batch_norm");
  Rng rng(8, 8);
  Instance inst = instantiate(d, sample_named(d, "4d"), DType::f64, rng);
  const double eps = inst.attrs.f("eps"), mom = inst.attrs.f("momentum");
  const Shape& s = inst.inputs[0].shape();
  const int64_t B = s[0], C = s[1], S = s[2] * s[3], n = B * S;
  std::vector<Tensor> in;
  for (const auto& t : inst.inputs) in.push_back(t.clone());
  auto out = run_op("batch_norm", inst.attrs, in, true);
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, sq = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t e = 0; e < S; ++e) sum += get_as_double(inst.inputs[0], (b * C + c) * S + e);
    double m = sum / n;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t e = 0; e < S; ++e) sq += std::pow(get_as_double(inst.inputs[0], (b * C + c) * S + e) - m, 2);
    EXPECT_NEAR(get_as_double(out[1], c), m, 1e-12);
    EXPECT_NEAR(get_as_double(out[2], c), 1 / std::sqrt(sq / n + eps), 1e-12);
    EXPECT_NEAR(get_as_double(in[3], c), (1 - mom) * get_as_double(inst.inputs[3], c) + mom * m, 1e-12);
    EXPECT_NEAR(get_as_double(in[4], c), (1 - mom) * get_as_double(inst.inputs[4], c) + mom * sq / (n - 1), 1e-12);
    double x0 = get_as_double(inst.inputs[0], c * S);
    EXPECT_NEAR(
        get_as_double(out[0], c * S),
        (x0 - m) / std::sqrt(sq / n + eps) * get_as_double(inst.inputs[1], c) + get_as_double(inst.inputs[2], c),
        1e-12);
  }
  EXPECT_EQ(get_as_double(in[5], 0), get_as_double(inst.inputs[5], 0) + 1);

  std::vector<Tensor> ev;
  for (const auto& t : inst.inputs) ev.push_back(t.clone());
  out = run_op("batch_norm", inst.attrs, ev, false);
  for (size_t k = 3; k < 6; ++k) expect_close(ev[k], inst.inputs[k], 0, "buffer " + std::to_string(k));
  for (int64_t c = 0; c < C; ++c) {
    double x0 = get_as_double(inst.inputs[0], c * S);
    double want = (x0 - get_as_double(inst.inputs[3], c)) / std::sqrt(get_as_double(inst.inputs[4], c) + eps) *
                      get_as_double(inst.inputs[1], c) +
                  get_as_double(inst.inputs[2], c);
    EXPECT_NEAR(get_as_double(out[0], c * S), want, 1e-12);
  }
}

// In eval the statistics are constants: dx = weight * invstd * dy. Finite differences in eval mode.
TEST(ConvFamily, BatchNormEvalGradient) {
  const OpDef& d = Registry::get().at("batch_norm");
  Rng rng(9, 9);
  Instance inst = instantiate(d, sample_named(d, "3d_eps_momentum"), DType::f64, rng);
  auto fwd = run_op("batch_norm", inst.attrs, inst.inputs, false);
  Tensor dy = random_like(fwd[0].desc(), rng);
  Eager e;
  e.ctx.training = false;
  auto g = e.emit("batch_norm_grad", {},
                  {e.add(dy), e.add(inst.inputs[0]), e.add(inst.inputs[1]), e.add(fwd[1]), e.add(fwd[2])});
  for (int k = 0; k < 3; ++k) {
    for (int64_t i = 0; i < inst.inputs[k].numel(); ++i) {
      auto objective = [&](double delta) {
        std::vector<Tensor> in;
        for (const auto& t : inst.inputs) in.push_back(t.clone());
        set_from_double(in[k], i, get_as_double(in[k], i) + delta);
        Tensor y = run_op("batch_norm", inst.attrs, in, false)[0];
        double acc = 0;
        for (int64_t j = 0; j < y.numel(); ++j) acc += get_as_double(y, j) * get_as_double(dy, j);
        return acc;
      };
      double numeric = (objective(1e-6) - objective(-1e-6)) / 2e-6;
      ASSERT_NEAR(get_as_double(e.val(g[static_cast<size_t>(k)]), i), numeric, 1e-7)
          << "input " << k << " element " << i;
    }
  }
}

TEST(ConvFamily, ErrorsNamePerSampleShapes) {
  auto message = [](const std::string& op, Attrs a, std::vector<TensorDesc> in) -> std::pair<std::string, std::string> {
    const OpDef& d = Registry::get().at(op);
    try {
      complete_attrs(d, a);
      d.infer(a, in);
    } catch (const OpError& e) {
      return {e.what(), e.hint()};
    }
    return {"", ""};
  };
  Attrs conv{{"out", int64_t{8}}, {"kernel", int64_t{3}}};
  auto [m1, h1] = message("conv2d", conv, {{Shape{4, 784}}});
  EXPECT_EQ(m1, "conv2d needs [C, H, W] samples, got [784]");
  EXPECT_EQ(h1, "add a reshape: {op: reshape, shape: [1, 28, 28]}");
  EXPECT_EQ(message("conv2d", conv, {{Shape{4, 3072}}}).second, "add a reshape: {op: reshape, shape: [3, 32, 32]}");
  EXPECT_EQ(message("max_pool2d", {{"kernel", int64_t{2}}}, {{Shape{4, 28, 28}}}).second,
            "add a reshape: {op: reshape, shape: [1, 28, 28]}");
  // A weight that does not fit the input (a checkpoint of another model): channels are named.
  auto [m2, h2] = message("conv2d", conv, {{Shape{4, 3, 28, 28}}, {Shape{8, 1, 3, 3}}, {Shape{8}}});
  EXPECT_EQ(m2, "input has 3 channels but weight expects 1 (per-sample input [3, 28, 28], weight [8, 1, 3, 3])");
  EXPECT_NE(h2.find("[out, C, kh, kw]"), std::string::npos);
  EXPECT_NE(message("conv2d", conv, {{Shape{4, 3, 28, 28}}, {Shape{8, 3, 5, 5}}, {Shape{8}}})
                .first.find("does not fit kernel [3, 3]"),
            std::string::npos);
  TensorDesc c16{Shape{16}}, c32{Shape{32}}, nbt{Shape{}, DType::i64};
  auto [m3, h3] = message("batch_norm", {}, {{Shape{4, 16, 8, 8}}, c16, c16, c32, c16, nbt});
  EXPECT_EQ(m3, "input has 16 channels but running_mean is [32] (per-sample input [16, 8, 8])");
}

// Kernels split work by channels or planes only: results are bit-identical for any thread count.
TEST(ConvFamily, ResultsDoNotDependOnThreads) {
  Rng rng(10, 10);
  // Large enough that parallel_for cuts channels and planes into several chunks.
  Tensor x = random_like({Shape{2, 64, 40, 40}, DType::f32}, rng);
  Tensor w = random_like({Shape{8, 64, 3, 3}, DType::f32}, rng);
  Tensor dy = random_like({Shape{2, 8, 40, 40}, DType::f32}, rng);
  Tensor x8 = random_like({Shape{2, 8, 40, 40}, DType::f32}, rng);
  Attrs a{{"out", int64_t{8}}, {"kernel", int64_t{3}}, {"padding", int64_t{1}}, {"bias", false}};
  // Batch norm: channels of 7 x 7 planes (a tail after the 8 lanes of its sums) and of 40 x 40, its statistics, the
  // running buffers it updates (fresh copies per run) and all three gradients.
  const OpDef& bn = Registry::get().at("batch_norm");
  Attrs bn_attrs = instantiate(bn, sample_named(bn, "4d"), DType::f32, rng).attrs;
  auto bn_inputs = [&](const Shape& xs) {
    const int64_t C = xs[1];
    Tensor var = Tensor::empty(TensorDesc{Shape{C}, DType::f32});
    for (int64_t c = 0; c < C; ++c) var.data<float>()[c] = 1.0f;
    return std::vector<Tensor>{random_like({xs, DType::f32}, rng), random_like({Shape{C}, DType::f32}, rng),
                               random_like({Shape{C}, DType::f32}, rng), random_like({Shape{C}, DType::f32}, rng), var,
                               Tensor::empty(TensorDesc{Shape{}, DType::i64})};
  };
  const std::vector<std::vector<Tensor>> bn_cases{bn_inputs(Shape{16, 24, 7, 7}), bn_inputs(Shape{4, 6, 40, 40})};
  auto run_all = [&] {
    std::vector<Tensor> r = run_op("conv2d_grad_input", a, {dy, x, w}, true);
    r.push_back(run_op("avg_pool2d_grad", {{"kernel", int64_t{3}}, {"stride", int64_t{1}}, {"padding", int64_t{1}}},
                       {dy, x8}, true)[0]);
    for (const auto& base : bn_cases) {
      std::vector<Tensor> in;
      for (const auto& t : base) in.push_back(t.clone());
      std::vector<Tensor> out = run_op("batch_norm", bn_attrs, in, true);
      Tensor g = random_like(out[0].desc(), rng);
      for (const Tensor& t : run_op("batch_norm_grad", {}, {g, in[0], in[1], out[1], out[2]}, true)) r.push_back(t);
      r.insert(r.end(), out.begin(), out.end());
      r.push_back(in[3]);
      r.push_back(in[4]);
    }
    return r;
  };
  int saved = num_threads();
  set_num_threads(1);
  Rng at = rng;
  auto one = run_all();
  set_num_threads(std::max(3, saved));
  rng = at;  // the same incoming gradients
  auto many = run_all();
  set_num_threads(saved);
  ASSERT_EQ(many.size(), one.size());
  for (size_t k = 0; k < one.size(); ++k) expect_close(many[k], one[k], 0, "result " + std::to_string(k));
}

// conv2d is bilinear in (x, weight): <conv(x, w), dy> = <x, grad_input(dy)> = <w, grad_weight(dy, x)> over
// every element (checks col2im everywhere, where the finite differences probe at most 64 elements).
TEST(ConvFamily, Conv2dGradientsAreAdjoints) {
  Rng rng(11, 11);
  const OpDef& d = Registry::get().at("conv2d");
  auto dot = [](const Tensor& a, const Tensor& b) {
    double s = 0;
    for (int64_t i = 0; i < a.numel(); ++i) s += get_as_double(a, i) * get_as_double(b, i);
    return s;
  };
  for (const auto& s : conv_cases()) {
    SCOPED_TRACE(s.name);
    Instance inst = instantiate(d, s, DType::f64, rng);
    Attrs a = inst.attrs;
    a.set("bias", false);
    const Tensor &x = inst.inputs[0], &w = inst.inputs[1];
    Tensor y = run_op("conv2d", a, {x, w}, true)[0];
    Tensor dy = random_like(y.desc(), rng);
    double lhs = dot(y, dy);
    EXPECT_NEAR(dot(x, run_op("conv2d_grad_input", a, {dy, x, w}, true)[0]), lhs, 1e-12 * std::max(1.0, std::abs(lhs)));
    EXPECT_NEAR(dot(w, run_op("conv2d_grad_weight", a, {dy, x}, true)[0]), lhs, 1e-12 * std::max(1.0, std::abs(lhs)));
  }
}
