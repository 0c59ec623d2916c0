// The synthetic format: determinism from the seed, independence of a sample from the rest of its batch,
// integer bounds, rough normal statistics, and the error for integer inputs without a bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "io/dataset.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;
using namespace braid::io::testing;

namespace {

DataSourceSpec synth(int64_t samples) {
  DataSourceSpec s;
  s.format = "synthetic";
  s.samples = samples;
  return s;
}

const std::vector<DatasetInput> kInputs = {input("x", Shape{2, 3}, DType::f32), input("tok", Shape{5}, DType::i32, 7),
                                           input("y", Shape{}, DType::i64, 3)};

bool same(const Tensor& a, const Tensor& b) {
  return a.desc() == b.desc() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

}  // namespace

TEST(DataSynthetic, SizeAndDeterminism) {
  auto a = open_dataset(synth(100), kInputs, 42);
  auto b = open_dataset(synth(100), kInputs, 42);
  auto c = open_dataset(synth(100), kInputs, 43);
  EXPECT_EQ(a->size(), 100);
  std::vector<int64_t> idx = {0, 5, 99, 5};
  auto ra = read_batch(*a, kInputs, idx), rb = read_batch(*b, kInputs, idx), rc = read_batch(*c, kInputs, idx);
  for (size_t k = 0; k < kInputs.size(); ++k) {
    EXPECT_TRUE(same(ra[k], rb[k])) << k;
    EXPECT_FALSE(same(ra[k], rc[k])) << k;
  }
  // Reading the same sample twice in one batch gives the same values (rows 1 and 3).
  EXPECT_EQ(std::memcmp(ra[0].data<float>() + 6, ra[0].data<float>() + 18, 6 * sizeof(float)), 0);
}

TEST(DataSynthetic, SampleIndependentOfBatch) {
  auto ds = open_dataset(synth(50), kInputs, 7);
  auto alone = read_batch(*ds, kInputs, {17});
  auto among = read_batch(*ds, kInputs, {3, 49, 17, 0});
  EXPECT_EQ(std::memcmp(alone[0].raw(), among[0].data<float>() + 2 * 6, 6 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(alone[1].raw(), among[1].data<int32_t>() + 2 * 5, 5 * sizeof(int32_t)), 0);
  EXPECT_EQ(alone[2].data<int64_t>()[0], among[2].data<int64_t>()[2]);
  // Inputs draw from different streams: x of sample 0 differs from x of sample 1.
  EXPECT_NE(among[0].data<float>()[0], among[0].data<float>()[6]);
}

TEST(DataSynthetic, BoundsAndStatistics) {
  const int64_t n = 4000;
  auto ds = open_dataset(synth(n), kInputs, 3);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  auto out = read_batch(*ds, kInputs, idx);
  std::vector<int64_t> hist(7, 0);
  for (int64_t j = 0; j < out[1].numel(); ++j) {
    int32_t v = out[1].data<int32_t>()[j];
    ASSERT_TRUE(v >= 0 && v < 7) << v;
    ++hist[static_cast<size_t>(v)];
  }
  for (int64_t h : hist) EXPECT_NEAR(static_cast<double>(h), n * 5 / 7.0, n * 5 / 7.0 * 0.1);
  for (int64_t j = 0; j < out[2].numel(); ++j) ASSERT_TRUE(out[2].data<int64_t>()[j] >= 0 && out[2].data<int64_t>()[j] < 3);
  double sum = 0, sq = 0;
  for (int64_t j = 0; j < out[0].numel(); ++j) {
    double v = out[0].data<float>()[j];
    sum += v, sq += v * v;
  }
  double mean = sum / static_cast<double>(out[0].numel());
  double var = sq / static_cast<double>(out[0].numel()) - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(var, 1.0, 0.05);
}

TEST(DataSynthetic, IntegerInputWithoutBound) {
  std::string e = user_error([] { open_dataset(synth(10), {input("ids", Shape{4}, DType::i64)}, 1); });
  EXPECT_NE(e.find("cannot tell the range of integer input 'ids'"), std::string::npos) << e;
  e = user_error([] { open_dataset(synth(0), {input("x", Shape{4}, DType::f32)}, 1); });
  EXPECT_NE(e.find("samples > 0"), std::string::npos) << e;
}

TEST(DataSynthetic, LimitAndF64) {
  auto spec = synth(100);
  spec.limit = 10;
  std::vector<DatasetInput> in = {input("x", Shape{3}, DType::f64)};
  auto ds = open_dataset(spec, in, 1);
  EXPECT_EQ(ds->size(), 10);
  auto out = read_batch(*ds, in, {9});
  EXPECT_TRUE(std::isfinite(out[0].data<double>()[2]));
}

// Dataset::read is thread-safe (io/dataset.h): the devices of a plan read their micro-batches at once. Four
// threads reading overlapping batches into their own tensors get exactly what one thread reads.
TEST(DataSynthetic, ConcurrentReadsEqualSequentialOnes) {
  auto d = open_dataset(synth(64), kInputs, 5);
  std::vector<std::vector<int64_t>> idx(4);
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 16; ++i) idx[static_cast<size_t>(t)].push_back((t * 13 + i * 7) % 64);
  std::vector<std::vector<Tensor>> want;
  for (const auto& ix : idx) want.push_back(read_batch(*d, kInputs, ix));
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t]() {
      for (int rep = 0; rep < 200; ++rep) {
        auto got = read_batch(*d, kInputs, idx[static_cast<size_t>(t)]);
        for (size_t k = 0; k < kInputs.size(); ++k) bad[static_cast<size_t>(t)] += !same(got[k], want[static_cast<size_t>(t)][k]);
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[static_cast<size_t>(t)], 0) << "thread " << t;
}
