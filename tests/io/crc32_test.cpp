// io::crc32 against zlib's crc32_z (the reference, and what Python's zlib.crc32 computes): every length up to
// 1 KiB at several alignments and starting values, chained calls, and buffers of tens of MB.
#include <gtest/gtest.h>
#include <zlib.h>

#include <random>
#include <vector>

#include "io/crc32.h"

TEST(Crc32, MatchesZlibForEveryLengthAlignmentAndSeed) {
  std::mt19937 rng(7);
  std::vector<unsigned char> b(4096);
  for (auto& c : b) c = static_cast<unsigned char>(rng());
  for (size_t n = 0; n <= 1024; ++n)
    for (size_t off : {0, 1, 5, 8, 15})
      for (uint32_t seed : {0u, 0xffffffffu, 0x12345678u}) {
        uint32_t want = static_cast<uint32_t>(crc32_z(seed, b.data() + off, n));
        ASSERT_EQ(braid::io::crc32(seed, b.data() + off, n), want) << "length " << n << " offset " << off;
      }
  EXPECT_EQ(braid::io::crc32(0, "123456789", 9), 0xcbf43926u);  // the CRC-32 check value
}

TEST(Crc32, ChainsAndHandlesLargeBuffers) {
  std::mt19937_64 rng(3);
  std::vector<uint64_t> words((48 << 20) / 8 + 3);
  for (auto& w : words) w = rng();
  const auto* p = reinterpret_cast<const unsigned char*>(words.data()) + 3;  // unaligned
  const size_t n = (48 << 20) + 5;
  uint32_t whole = braid::io::crc32(0, p, n);
  EXPECT_EQ(whole, static_cast<uint32_t>(crc32_z(0, p, n)));
  uint32_t chained = braid::io::crc32(braid::io::crc32(0, p, 1000003), p + 1000003, n - 1000003);
  EXPECT_EQ(chained, whole);
}
