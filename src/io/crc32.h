// CRC-32 (the zlib / gzip / PNG polynomial, reflected), the checksum of checkpoint tensors. Same values as
// zlib's crc32_z and Python's zlib.crc32, and the same chaining (crc32(crc32(0, a), b) is the CRC of a + b);
// on x86-64 with PCLMULQDQ about 4x faster than zlib 1.2.13 (carry-less multiplication folding, as in
// Chromium's zlib, from Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"), else zlib.
#pragma once
#include <cstddef>
#include <cstdint>

namespace braid::io {

uint32_t crc32(uint32_t crc, const void* data, size_t n);

}  // namespace braid::io
