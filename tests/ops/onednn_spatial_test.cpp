// conv2d, its gradients and avg_pool2d on oneDNN's primitives against braid's own kernels (im2col + GEMM,
// the window loops) in float on odd shapes: strides and padding, non-square windows, 1x1, channel counts that
// are not multiples of 8 or 16, batch 1 and batches that leave a short last chunk. Also: the same bits on any
// thread count, every output element written (workspace and outputs poisoned with NaN), and primitives
// created once per shape. Skipped where braid is built without oneDNN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "core/parallel.h"
#include "op_harness.h"
#include "ops/cpu/onednn_spatial.h"

using namespace braid;
using namespace braid::ops;
using namespace braid::testing;

namespace {

struct ConvCase {
  std::string name;
  Shape x;  // [B, C, H, W]
  int64_t out;
  std::vector<int64_t> kernel, stride, padding;
  bool bias;
};

std::vector<ConvCase> conv_cases() {
  return {
      {"stride2_pad1", Shape{4, 3, 9, 9}, 5, {3, 3}, {2, 2}, {1, 1}, true},
      {"nonsquare", Shape{3, 10, 7, 11}, 13, {2, 5}, {1, 2}, {1, 0}, false},
      {"pointwise", Shape{5, 17, 6, 5}, 9, {1, 1}, {1, 1}, {0, 0}, true},
      {"batch1", Shape{1, 8, 12, 10}, 6, {3, 3}, {1, 1}, {1, 1}, true},
      {"short_last_chunk", Shape{19, 6, 8, 8}, 7, {3, 3}, {1, 1}, {0, 0}, true},   // chunks of 2, the last 1
      {"lenet_conv1", Shape{37, 1, 28, 28}, 32, {5, 5}, {1, 1}, {0, 0}, true},     // chunks of 3, the last 1
      {"blocked_grad_input", Shape{18, 32, 12, 12}, 64, {5, 5}, {1, 1}, {0, 0}, true},
      {"stride_over_kernel_pad", Shape{2, 12, 9, 8}, 20, {3, 2}, {4, 3}, {1, 2}, false},
  };
}

Attrs conv_attrs(const ConvCase& c) {
  Attrs a{{"out", c.out}, {"kernel", c.kernel}, {"stride", c.stride}, {"padding", c.padding}, {"bias", c.bias}};
  complete_attrs(Registry::get().at("conv2d"), a);
  return a;
}

Tensor random_f32(const Shape& s, Rng& rng) {
  Tensor t = Tensor::empty({s, DType::f32});
  for (int64_t i = 0; i < t.numel(); ++i) set_from_double(t, i, rng.uniform(-1, 1));
  return t;
}

// One op on `in` under the given implementations, outputs and workspace poisoned with NaN (run_poisoned).
std::vector<Tensor> run(cpu::ConvImpl conv, cpu::PoolImpl pool, const std::string& op, const Attrs& a,
                        const std::vector<Tensor>& in) {
  cpu::ScopedSpatialImpl impl(conv, pool);
  const OpDef& d = Registry::get().at(op);
  std::vector<TensorDesc> descs;
  for (const auto& t : in) descs.push_back(t.desc());
  return run_poisoned(d, a, in, d.infer(a, descs));
}

// |a - b| <= tol (1 + |b|) everywhere; NaN (an element left unwritten) fails.
void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.desc(), b.desc()) << what;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = get_as_double(a, i), y = get_as_double(b, i);
    ASSERT_TRUE(std::abs(x - y) <= tol * (1 + std::abs(y))) << what << " element " << i << ": " << x << " vs " << y;
  }
}

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.desc(), b.desc()) << what;
  ASSERT_EQ(std::memcmp(a.raw(), b.raw(), a.bytes()), 0) << what;
}

// The three conv passes of case c under one implementation: y, dx, dw.
std::vector<Tensor> conv_passes(cpu::ConvImpl impl, const ConvCase& c, const std::vector<Tensor>& xwb,
                                const Tensor& dy) {
  const Attrs a = conv_attrs(c);
  std::vector<Tensor> r;
  r.push_back(run(impl, cpu::PoolImpl::Loops, "conv2d", a, xwb)[0]);
  r.push_back(run(impl, cpu::PoolImpl::Loops, "conv2d_grad_input", a, {dy, xwb[0], xwb[1]})[0]);
  r.push_back(run(impl, cpu::PoolImpl::Loops, "conv2d_grad_weight", a, {dy, xwb[0]})[0]);
  return r;
}

struct ConvInputs {
  std::vector<Tensor> xwb;
  Tensor dy;
};
ConvInputs conv_inputs(const ConvCase& c, Rng& rng) {
  ConvInputs in;
  const Attrs a = conv_attrs(c);
  in.xwb.push_back(random_f32(c.x, rng));
  in.xwb.push_back(random_f32(Shape{c.out, c.x[1], c.kernel[0], c.kernel[1]}, rng));
  if (c.bias) in.xwb.push_back(random_f32(Shape{c.out}, rng));
  std::vector<TensorDesc> descs;
  for (const auto& t : in.xwb) descs.push_back(t.desc());
  in.dy = random_f32(Registry::get().at("conv2d").infer(a, descs)[0].shape, rng);
  return in;
}

const char* kPass[] = {"conv2d", "conv2d_grad_input", "conv2d_grad_weight"};

}  // namespace

// oneDNN's results against im2col + GEMM's: sums of n float products in other orders, within n float
// epsilons (relative to 1 + |value|: the worst-case bound of a recursive sum of n terms of magnitude <= 1),
// n = C kh kw for y, O kh kw for dx, B Ho Wo for dw.
TEST(OneDnnSpatial, ConvMatchesIm2col) {
  if (!cpu::onednn_built()) GTEST_SKIP() << "built without oneDNN";
  Rng rng(21, 21);
  for (const auto& c : conv_cases()) {
    SCOPED_TRACE(c.name);
    ConvInputs in = conv_inputs(c, rng);
    auto ref = conv_passes(cpu::ConvImpl::Im2col, c, in.xwb, in.dy);
    auto got = conv_passes(cpu::ConvImpl::OneDnn, c, in.xwb, in.dy);
    const double eps = std::numeric_limits<float>::epsilon(), taps = static_cast<double>(c.kernel[0] * c.kernel[1]);
    const double n[] = {static_cast<double>(c.x[1]) * taps, static_cast<double>(c.out) * taps,
                        static_cast<double>(in.dy.shape()[0] * in.dy.shape()[2] * in.dy.shape()[3])};
    for (int k = 0; k < 3; ++k) expect_close(got[k], ref[k], n[k] * eps, kPass[k]);
  }
}

TEST(OneDnnSpatial, AvgPoolMatchesLoops) {
  if (!cpu::onednn_built()) GTEST_SKIP() << "built without oneDNN";
  Rng rng(22, 22);
  struct PoolCase {
    std::string name;
    Shape x;
    std::vector<int64_t> kernel, stride, padding;
  };
  const std::vector<PoolCase> cases{
      {"k2", Shape{3, 5, 8, 8}, {2, 2}, {2, 2}, {0, 0}},
      {"k3_stride2_pad1", Shape{1, 3, 9, 7}, {3, 3}, {2, 2}, {1, 1}},
      {"nonsquare_stride1_pad", Shape{19, 2, 5, 6}, {2, 3}, {1, 1}, {1, 1}},
      {"stride_over_kernel", Shape{2, 17, 7, 8}, {2, 2}, {3, 3}, {0, 0}},
      {"k1", Shape{4, 3, 4, 5}, {1, 1}, {1, 1}, {0, 0}},
  };
  const OpDef& d = Registry::get().at("avg_pool2d");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Attrs a{{"kernel", c.kernel}, {"stride", c.stride}, {"padding", c.padding}};
    complete_attrs(d, a);
    Tensor x = random_f32(c.x, rng);
    auto ref = run(cpu::ConvImpl::Im2col, cpu::PoolImpl::Loops, "avg_pool2d", a, {x});
    auto got = run(cpu::ConvImpl::Im2col, cpu::PoolImpl::OneDnn, "avg_pool2d", a, {x});
    expect_close(got[0], ref[0], 1e-6, "avg_pool2d");
    Tensor dy = random_f32(ref[0].shape(), rng);
    auto dref = run(cpu::ConvImpl::Im2col, cpu::PoolImpl::Loops, "avg_pool2d_grad", a, {dy, x});
    auto dgot = run(cpu::ConvImpl::Im2col, cpu::PoolImpl::OneDnn, "avg_pool2d_grad", a, {dy, x});
    expect_close(dgot[0], dref[0], 1e-6, "avg_pool2d_grad");
  }
}

// Every chunk runs single-threaded primitives of a shape fixed by the batch: the same bits on 1, 2 and 3
// threads (the weight gradient's partials are added in chunk order).
TEST(OneDnnSpatial, SameBitsOnAnyThreadCount) {
  if (!cpu::onednn_built()) GTEST_SKIP() << "built without oneDNN";
  Rng rng(23, 23);
  const int saved = num_threads();
  for (const auto& c : {conv_cases()[4], conv_cases()[6]}) {
    SCOPED_TRACE(c.name);
    ConvInputs in = conv_inputs(c, rng);
    Attrs pool{{"kernel", std::vector<int64_t>{3, 3}}, {"stride", std::vector<int64_t>{1, 1}},
               {"padding", std::vector<int64_t>{1, 1}}};
    complete_attrs(Registry::get().at("avg_pool2d"), pool);
    auto all = [&] {
      auto r = conv_passes(cpu::ConvImpl::OneDnn, c, in.xwb, in.dy);
      r.push_back(run(cpu::ConvImpl::OneDnn, cpu::PoolImpl::OneDnn, "avg_pool2d", pool, {in.xwb[0]})[0]);
      r.push_back(run(cpu::ConvImpl::OneDnn, cpu::PoolImpl::OneDnn, "avg_pool2d_grad", pool, {in.xwb[0], in.xwb[0]})[0]);
      return r;
    };
    set_num_threads(1);
    auto one = all();
    for (int t : {2, 3}) {
      set_num_threads(t);
      auto many = all();
      for (size_t k = 0; k < one.size(); ++k)
        expect_same_bits(many[k], one[k], "result " + std::to_string(k) + " on " + std::to_string(t) + " threads");
    }
  }
  set_num_threads(saved);
}

// The first workspace query or call of a shape creates its primitives; later calls of it create none.
TEST(OneDnnSpatial, PrimitivesAreCreatedOncePerShape) {
  if (!cpu::onednn_built()) GTEST_SKIP() << "built without oneDNN";
  Rng rng(24, 24);
  ConvCase c{"fresh", Shape{21, 5, 10, 9}, 11, {3, 2}, {1, 1}, {1, 0}, true};  // a shape no other test uses
  ConvInputs in = conv_inputs(c, rng);
  const int64_t before = cpu::onednn_primitives_created();
  auto first = conv_passes(cpu::ConvImpl::OneDnn, c, in.xwb, in.dy);
  const int64_t after_first = cpu::onednn_primitives_created();
  EXPECT_GT(after_first, before);
  auto second = conv_passes(cpu::ConvImpl::OneDnn, c, in.xwb, in.dy);
  EXPECT_EQ(cpu::onednn_primitives_created(), after_first);
  for (int k = 0; k < 3; ++k) expect_same_bits(second[k], first[k], kPass[k]);
}

// Executors on several device threads (cpu:N) share the cache: threads creating and running the same new
// shape at once get one set of primitives and the single-threaded result's bits.
TEST(OneDnnSpatial, ConcurrentCallsShareOneCacheEntry) {
  if (!cpu::onednn_built()) GTEST_SKIP() << "built without oneDNN";
  Rng rng(25, 25);
  ConvCase c{"concurrent", Shape{23, 9, 11, 10}, 12, {3, 3}, {2, 1}, {1, 1}, true};  // no other test's shape
  ConvInputs in = conv_inputs(c, rng);
  const Attrs a = conv_attrs(c);
  cpu::ScopedSpatialImpl impl(cpu::ConvImpl::OneDnn, cpu::PoolImpl::OneDnn);
  auto passes = [&] {
    std::vector<Tensor> r;
    for (const char* op : kPass) {
      const OpDef& d = Registry::get().at(op);
      std::vector<Tensor> args = std::string(op) == "conv2d"             ? in.xwb
                                 : std::string(op) == "conv2d_grad_input" ? std::vector<Tensor>{in.dy, in.xwb[0], in.xwb[1]}
                                                                          : std::vector<Tensor>{in.dy, in.xwb[0]};
      std::vector<TensorDesc> descs;
      for (const auto& t : args) descs.push_back(t.desc());
      r.push_back(run_poisoned(d, a, args, d.infer(a, descs))[0]);
    }
    return r;
  };
  const int64_t before = cpu::onednn_primitives_created();
  std::vector<std::vector<Tensor>> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) threads.emplace_back([&] { r = passes(); });
  for (auto& t : threads) t.join();
  const int64_t created = cpu::onednn_primitives_created() - before;
  auto again = passes();
  EXPECT_EQ(cpu::onednn_primitives_created() - before, created);
  for (const auto& r : results)
    for (int k = 0; k < 3; ++k) expect_same_bits(r[static_cast<size_t>(k)], again[static_cast<size_t>(k)], kPass[k]);
}

// Under BRAID_CONV=im2col's choice the workspace is im2col's (the static plan sizes what the kernel uses).
TEST(OneDnnSpatial, WorkspaceFollowsTheImplementation) {
  if (!cpu::onednn_built()) GTEST_SKIP() << "built without oneDNN";
  const ConvCase c = conv_cases()[6];
  const Attrs a = conv_attrs(c);
  const OpDef& d = Registry::get().at("conv2d");
  std::vector<TensorDesc> in{{c.x}, {Shape{c.out, c.x[1], 5, 5}}, {Shape{c.out}}};
  auto out = d.infer(a, in);
  size_t im2col, onednn;
  {
    cpu::ScopedSpatialImpl impl(cpu::ConvImpl::Im2col, cpu::PoolImpl::Loops);
    im2col = d.workspace(a, in, out);
  }
  {
    cpu::ScopedSpatialImpl impl(cpu::ConvImpl::OneDnn, cpu::PoolImpl::Loops);
    onednn = d.workspace(a, in, out);
  }
  // im2col: one group's column and output matrices; oneDNN: the batch's blocked x and y plus blocked weights.
  const size_t elems = static_cast<size_t>(c.x.numel() + out[0].numel());
  EXPECT_GE(onednn, elems * sizeof(float));
  EXPECT_NE(im2col, onednn);
  // Doubles stay on im2col whatever the choice.
  std::vector<TensorDesc> in64{{c.x, DType::f64}, {Shape{c.out, c.x[1], 5, 5}, DType::f64}, {Shape{c.out}, DType::f64}};
  auto out64 = d.infer(a, in64);
  size_t d_im2col, d_onednn;
  {
    cpu::ScopedSpatialImpl impl(cpu::ConvImpl::Im2col, cpu::PoolImpl::Loops);
    d_im2col = d.workspace(a, in64, out64);
  }
  {
    cpu::ScopedSpatialImpl impl(cpu::ConvImpl::OneDnn, cpu::PoolImpl::Loops);
    d_onednn = d.workspace(a, in64, out64);
  }
  EXPECT_EQ(d_im2col, d_onednn);
}

TEST(OneDnnSpatial, BatchChunksDependOnTheBatchOnly) {
  auto chunks = [](int64_t B) {
    auto c = cpu::batch_chunks(B);
    return std::vector<int64_t>{c.per, c.count, c.tail};
  };
  EXPECT_EQ(chunks(1), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(chunks(16), (std::vector<int64_t>{1, 16, 1}));
  EXPECT_EQ(chunks(19), (std::vector<int64_t>{2, 10, 1}));
  EXPECT_EQ(chunks(128), (std::vector<int64_t>{8, 16, 8}));
  EXPECT_EQ(chunks(100), (std::vector<int64_t>{7, 15, 2}));
}
