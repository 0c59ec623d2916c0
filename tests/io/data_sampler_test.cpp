// BatchSampler: each epoch is a permutation (every index once), reproducible from the seed, different
// across epochs; drop_last semantics; and restore(epoch, position) continues exactly like an
// uninterrupted sampler, mid-epoch and at an epoch boundary.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "io/dataset.h"
#include "io_test_util.h"

using namespace braid;
using namespace braid::io;

namespace {

std::vector<int64_t> epoch_order(BatchSampler& s) {
  std::vector<int64_t> all;
  int64_t epoch = -1;
  for (int64_t b = 0; b < s.batches_per_epoch(); ++b) {
    auto batch = s.next();
    if (b == 0) epoch = s.epoch();  // the wrap into a new epoch happens lazily, on its first batch
    EXPECT_EQ(s.epoch(), epoch);
    all.insert(all.end(), batch.begin(), batch.end());
  }
  return all;
}

}  // namespace

TEST(BatchSampler, EachEpochIsAPermutation) {
  BatchSampler s(100, 10, true, 5);
  ASSERT_EQ(s.batches_per_epoch(), 10);
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    auto order = epoch_order(s);
    ASSERT_EQ(order.size(), 100u);
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
    epochs.push_back(order);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  std::vector<int64_t> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(epochs[0], identity);
}

TEST(BatchSampler, ReproducibleFromSeed) {
  BatchSampler a(50, 7, true, 9), b(50, 7, true, 9), c(50, 7, true, 10);
  bool differs = false;
  for (int i = 0; i < 20; ++i) {
    auto x = a.next(), y = b.next(), z = c.next();
    EXPECT_EQ(x, y);
    differs |= x != z;
  }
  EXPECT_TRUE(differs);
}

TEST(BatchSampler, NoShuffleIsIdentity) {
  BatchSampler s(6, 2, false, 1);
  EXPECT_EQ(s.next(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(s.next(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(s.next(), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(s.next(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(s.epoch(), 1);
}

TEST(BatchSampler, DropLast) {
  BatchSampler s(10, 3, true, 2);
  EXPECT_EQ(s.batches_per_epoch(), 3);
  for (int e = 0; e < 4; ++e) {
    std::set<int64_t> seen;
    for (int b = 0; b < 3; ++b) {
      auto batch = s.next();
      ASSERT_EQ(batch.size(), 3u);
      for (int64_t i : batch) EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice in epoch " << e;
    }
    EXPECT_EQ(s.epoch(), e);
    EXPECT_EQ(seen.size(), 9u);
  }
  EXPECT_EQ(s.next().size(), 3u);
  EXPECT_EQ(s.epoch(), 4);
}

TEST(BatchSampler, KeepLast) {
  BatchSampler s(10, 3, true, 2, /*drop_last=*/false);
  EXPECT_EQ(s.batches_per_epoch(), 4);
  std::vector<size_t> sizes;
  std::set<int64_t> seen;
  for (int b = 0; b < 4; ++b) {
    auto batch = s.next();
    sizes.push_back(batch.size());
    seen.insert(batch.begin(), batch.end());
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{3, 3, 3, 1}));
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(s.epoch(), 0);
  EXPECT_EQ(s.next().size(), 3u);
  EXPECT_EQ(s.epoch(), 1);
}

TEST(BatchSampler, RestoreEqualsUninterrupted) {
  for (int64_t stop : {1, 4, 5, 6, 11}) {  // mid-epoch, at the epoch end (5 batches/epoch), in epoch 2
    BatchSampler full(23, 4, true, 77);
    BatchSampler first(23, 4, true, 77);
    std::vector<std::vector<int64_t>> expected;
    for (int i = 0; i < 16; ++i) expected.push_back(full.next());
    for (int64_t i = 0; i < stop; ++i) EXPECT_EQ(first.next(), expected[static_cast<size_t>(i)]);
    BatchSampler resumed(23, 4, true, 77);
    resumed.restore(first.epoch(), first.position());
    for (int64_t i = stop; i < 16; ++i)
      EXPECT_EQ(resumed.next(), expected[static_cast<size_t>(i)]) << "stop " << stop << " batch " << i;
  }
}

TEST(BatchSampler, NextViewMatchesNext) {
  BatchSampler a(30, 4, true, 3), b(30, 4, true, 3);
  for (int i = 0; i < 20; ++i) {
    auto v = a.next_view();
    EXPECT_EQ(std::vector<int64_t>(v.begin(), v.end()), b.next());
  }
}

TEST(BatchSampler, Errors) {
  std::string e = braid::io::testing::user_error([] { BatchSampler s(5, 8, true, 1); });
  EXPECT_NE(e.find("fewer than one batch of 8"), std::string::npos) << e;
  BatchSampler keep(5, 8, true, 1, false);
  EXPECT_EQ(keep.next().size(), 5u);
  BatchSampler s(10, 2, true, 1);
  e = braid::io::testing::user_error([&] { s.restore(0, 11); });
  EXPECT_NE(e.find("10 samples"), std::string::npos) << e;
  EXPECT_THROW(s.restore(-1, 0), UserError);
}
