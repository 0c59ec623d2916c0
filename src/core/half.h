// 16-bit floats on the CPU: bf16 (8-bit exponent, 7-bit mantissa) and IEEE fp16, stored as uint16_t bits,
// converted to and from f32 with round to nearest even (the GPU's __float2bfloat16_rn / __float2half_rn), so
// that a graph with 16-bit values (precision bf16/f16 on GPUs, graph/build.h BuildOptions::half) runs on the
// CPU as the reference of the GPU run: the same values rounded at the same places.
#pragma once
#include <cstdint>
#include <cstring>

namespace braid {

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even (overflow rounds to inf, as the GPU)
  return static_cast<uint16_t>(u >> 16);
}

// fp16 through the compiler's _Float16 (GCC >= 12 on x86-64: correctly rounded, subnormals included).
inline float f16_to_f32(uint16_t h) {
  _Float16 x;
  std::memcpy(&x, &h, 2);
  return static_cast<float>(x);
}

inline uint16_t f32_to_f16(float f) {
  _Float16 x = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &x, 2);
  return h;
}

}  // namespace braid
