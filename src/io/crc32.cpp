// CRC-32 by PCLMULQDQ folding where the CPU has it (checked once at run time), zlib otherwise and for the
// tail of fewer than 16 bytes. The folding constants are those of Intel's paper for the reflected
// polynomial 0x04C11DB7 (k1..k5, the Barrett constant and the polynomial P'), as Chromium's zlib uses them.
#include "io/crc32.h"

#include <zlib.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace braid::io {

namespace {

#if defined(__x86_64__)
#define BRAID_CRC_TARGET __attribute__((target("pclmul,sse4.1")))

BRAID_CRC_TARGET inline __m128i load(const unsigned char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
// x folded forward by the distance k encodes, plus the next block.
BRAID_CRC_TARGET inline __m128i fold_into(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x11), _mm_clmulepi64_si128(x, k, 0x00)), next);
}

// The CRC (pre- and post-inverted by the caller) of len bytes, len >= 64 and a multiple of 16.
BRAID_CRC_TARGET uint32_t fold(const unsigned char* buf, size_t len, uint32_t crc) {
  alignas(16) static const uint64_t k1k2[] = {0x0154442bd4, 0x01c6e41596};
  alignas(16) static const uint64_t k3k4[] = {0x01751997d0, 0x00ccaa009e};
  alignas(16) static const uint64_t k5k0[] = {0x0163cd6124, 0x0000000000};
  alignas(16) static const uint64_t poly[] = {0x01db710641, 0x01f7011641};
  // Four 128-bit lanes fold 64 bytes per step.
  __m128i x1 = _mm_xor_si128(load(buf), _mm_cvtsi32_si128(static_cast<int>(crc)));
  __m128i x2 = load(buf + 16), x3 = load(buf + 32), x4 = load(buf + 48);
  __m128i k = _mm_load_si128(reinterpret_cast<const __m128i*>(k1k2));
  buf += 64;
  len -= 64;
  for (; len >= 64; buf += 64, len -= 64) {
    x1 = fold_into(x1, k, load(buf));
    x2 = fold_into(x2, k, load(buf + 16));
    x3 = fold_into(x3, k, load(buf + 32));
    x4 = fold_into(x4, k, load(buf + 48));
  }
  // Four lanes into one, then 16 bytes per step.
  k = _mm_load_si128(reinterpret_cast<const __m128i*>(k3k4));
  x1 = fold_into(x1, k, x2);
  x1 = fold_into(x1, k, x3);
  x1 = fold_into(x1, k, x4);
  for (; len >= 16; buf += 16, len -= 16) x1 = fold_into(x1, k, load(buf));
  // 128 bits to 64, then Barrett reduction to 32.
  const __m128i mask = _mm_setr_epi32(~0, 0, ~0, 0);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(x1, k, 0x10));
  k = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(k5k0));
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask), k, 0x00), _mm_srli_si128(x1, 4));
  k = _mm_load_si128(reinterpret_cast<const __m128i*>(poly));
  __m128i x2b = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask), k, 0x10), mask);
  x1 = _mm_xor_si128(x1, _mm_clmulepi64_si128(x2b, k, 0x00));
  return static_cast<uint32_t>(_mm_extract_epi32(x1, 1));
}

bool has_pclmul() {
  static const bool ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return ok;
}
#endif

}  // namespace

uint32_t crc32(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  if (n >= 64 && has_pclmul()) {
    const size_t body = n & ~size_t{15};
    crc = ~fold(p, body, ~crc);
    p += body;
    n -= body;
  }
#endif
  return n == 0 ? crc : static_cast<uint32_t>(crc32_z(crc, p, n));
}

}  // namespace braid::io
