// The branch-free float exp and tanh (ops/cpu/fast_math.h) against double std::exp / std::tanh, on every
// 97th float in their working ranges plus the edges: at most 2 ulp off the correctly rounded result.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ops/cpu/fast_math.h"

namespace braid::ops::cpu {
namespace {

// Distance in units in the last place between two floats of the same sign (or zero).
int64_t ulps(float a, float b) {
  auto key = [](float f) {
    int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? int64_t{std::numeric_limits<int32_t>::min()} - i : int64_t{i};
  };
  return std::llabs(key(a) - key(b));
}

// Every 97th float bit pattern from lo up to hi (both >= 0), and their negatives.
template <typename F>
void sweep(float lo, float hi, F&& check) {
  for (int32_t i = std::bit_cast<int32_t>(lo); i <= std::bit_cast<int32_t>(hi); i += 97) {
    float x = std::bit_cast<float>(i);
    check(x);
    check(-x);
  }
}

TEST(FastMath, TanhWithinTwoUlp) {
  int64_t worst = 0;
  float worst_x = 0;
  sweep(1e-30f, 12.0f, [&](float x) {
    float want = static_cast<float>(std::tanh(static_cast<double>(x)));
    int64_t u = ulps(fast_tanhf(x), want);
    if (u > worst) worst = u, worst_x = x;
  });
  EXPECT_LE(worst, 2) << "at x = " << worst_x << ": " << fast_tanhf(worst_x) << " vs " << std::tanh(double(worst_x));
  EXPECT_EQ(fast_tanhf(0.0f), 0.0f);
  EXPECT_EQ(fast_tanhf(30.0f), 1.0f);
  EXPECT_EQ(fast_tanhf(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_TRUE(std::isnan(fast_tanhf(std::numeric_limits<float>::quiet_NaN())));
}

TEST(FastMath, ExpWithinTwoUlp) {
  int64_t worst = 0;
  float worst_x = 0;
  sweep(1e-30f, 87.0f, [&](float x) {
    float want = static_cast<float>(std::exp(static_cast<double>(x)));
    int64_t u = ulps(fast_expf(x), want);
    if (u > worst) worst = u, worst_x = x;
  });
  EXPECT_LE(worst, 2) << "at x = " << worst_x << ": " << fast_expf(worst_x) << " vs " << std::exp(double(worst_x));
  EXPECT_EQ(fast_expf(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(fast_expf(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace braid::ops::cpu
