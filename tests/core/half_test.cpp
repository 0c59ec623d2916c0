// fp16 conversions: the integer/float path (f16_to_f32_soft, f32_to_f16_soft, used where the compiler has no
// _Float16, such as clang 14 for the fuzzers) against the compiler's _Float16 on every fp16 value, every
// rounding boundary between neighbours and a sweep of f32 bit patterns; and fixed values on either path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/half.h"

using namespace braid;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(Half, SoftPathFixedValues) {
  EXPECT_EQ(f32_to_f16_soft(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16_soft(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16_soft(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16_soft(65519.99f), 0x7BFF);
  EXPECT_EQ(f32_to_f16_soft(65520.0f), 0x7C00);  // halfway to 2^16 rounds to the even: infinity
  EXPECT_EQ(f32_to_f16_soft(1.0f + 0x1p-11f), 0x3C00);  // a tie goes to the even mantissa
  EXPECT_EQ(f32_to_f16_soft(1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(f32_to_f16_soft(0x1p-24f), 0x0001);  // the smallest subnormal
  EXPECT_EQ(f32_to_f16_soft(0x1p-25f), 0x0000);  // half of it: a tie, to the even zero
  EXPECT_EQ(f32_to_f16_soft(0x1.8p-24f), 0x0002);
  EXPECT_EQ(f32_to_f16_soft(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16_soft(INFINITY), 0x7C00);
  EXPECT_EQ(f32_to_f16_soft(NAN) & 0x7E00, 0x7E00);
  EXPECT_EQ(f16_to_f32_soft(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32_soft(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(f16_to_f32_soft(0x8400), -0x1p-14f);
  EXPECT_TRUE(std::isinf(f16_to_f32_soft(0xFC00)));
  EXPECT_TRUE(std::isnan(f16_to_f32_soft(0x7C01)));
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every value survives the round trip
    float f = f16_to_f32_soft(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_f16_soft(f), h) << std::hex << h;
    }
  }
}

#ifdef BRAID_HAVE_FLOAT16
bool same(uint16_t a, uint16_t b) {
  bool nan_a = (a & 0x7C00) == 0x7C00 && (a & 0x3FF), nan_b = (b & 0x7C00) == 0x7C00 && (b & 0x3FF);
  return nan_a || nan_b ? nan_a == nan_b : a == b;
}

TEST(Half, SoftPathMatchesFloat16) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float a = f16_to_f32(static_cast<uint16_t>(h)), b = f16_to_f32_soft(static_cast<uint16_t>(h));
    if (std::isnan(a)) {
      EXPECT_TRUE(std::isnan(b)) << std::hex << h;
    } else {
      EXPECT_EQ(to_bits(a), to_bits(b)) << std::hex << h;
    }
    // The midpoint to the next value up and its f32 neighbours: every rounding decision.
    if (std::isnan(a) || std::isinf(a)) continue;
    float next = f16_to_f32(static_cast<uint16_t>(h + 1));
    if (std::isnan(next) || std::isinf(next) || (h & 0x7FFF) == 0x7FFF) continue;
    float mid = a + (next - a) / 2;
    for (float x : {mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)})
      EXPECT_TRUE(same(f32_to_f16(x), f32_to_f16_soft(x))) << x;
  }
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65521) {  // about 65,000 f32 patterns of every exponent
    float x = from_bits(static_cast<uint32_t>(u));
    EXPECT_TRUE(same(f32_to_f16(x), f32_to_f16_soft(x))) << std::hex << u;
  }
}
#endif

}  // namespace
