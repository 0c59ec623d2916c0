// balanced_slots (core/parallel.h): where devices share cores, the busy ones go to different cores.
#include <gtest/gtest.h>

#include "core/parallel.h"

using braid::balanced_slots;

// Slot s of n runs on CPU share s % shares (pin_thread_to_share); with 2 CPUs and 4 devices, 2 shares.
TEST(Placement, EqualLoadsAreRoundRobin) {
  EXPECT_EQ(balanced_slots({1, 1, 1, 1}, 2), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(balanced_slots({0, 0, 0, 0}, 2), (std::vector<int>{0, 1, 0, 1}));
}

TEST(Placement, HeavyDevicesGoToDifferentShares) {
  // mlp pp 4: stages fc1 | act1 | fc2, logits | loss; by id, devices 0 and 2 shared one core.
  std::vector<int> s = balanced_slots({3.0, 0.01, 3.8, 0.001}, 2);
  EXPECT_NE(s[0] % 2, s[2] % 2);
  s = balanced_slots({5, 5, 1, 1, 1, 1, 1, 1}, 2);  // two heavy among eight
  EXPECT_NE(s[0] % 2, s[1] % 2);
  // Four shares for eight: the largest loads each alone on a share first.
  s = balanced_slots({8, 1, 7, 1, 6, 1, 5, 1}, 4);
  EXPECT_EQ((std::vector<int>{s[0] % 4, s[2] % 4, s[4] % 4, s[6] % 4}), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Placement, EnoughCpusKeepTheIds) {
  EXPECT_EQ(balanced_slots({3, 0, 5, 1}, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(balanced_slots({3, 0, 5, 1}, 16), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(balanced_slots({}, 2).empty());
}
