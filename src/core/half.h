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

// fp16 in plain integer and float arithmetic (round to nearest even, subnormals included; NaN becomes the
// quiet NaN 0x7e00): the path for compilers without _Float16 on x86-64 (clang before 15), and the reference
// the _Float16 path is tested against (tests/core/half_test.cpp, every fp16 and a sweep of f32).
inline float f16_to_f32_soft(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t u;
  if (exp == 0x1F) {
    u = sign | 0x7F800000u | (mant << 13);
  } else if (exp == 0) {
    float f = static_cast<float>(mant) * 0x1p-24f;  // exact: mant < 2^10
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// F. Giesen's float_to_half_fast3_rtne: subnormal results by one float addition (rounds to nearest even in the
// default rounding mode), normal ones by adding half an ulp minus one plus the kept mantissa's lowest bit.
inline uint16_t f32_to_f16_soft(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint32_t o;
  if (u >= (127u + 16u) << 23) {  // 2^16 or more, inf or NaN
    o = u > 0x7F800000u ? 0x7E00u : 0x7C00u;
  } else if (u < 113u << 23) {  // below 2^-14: an fp16 subnormal or zero
    const uint32_t magic_u = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    float magic, x;
    std::memcpy(&magic, &magic_u, 4);
    std::memcpy(&x, &u, 4);
    x += magic;
    std::memcpy(&o, &x, 4);
    o -= magic_u;
  } else {
    const uint32_t mant_odd = (u >> 13) & 1u;
    u += ((15u - 127u) << 23) + 0xFFFu;
    u += mant_odd;
    o = u >> 13;
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

#if defined(__FLT16_MAX__) && !defined(BRAID_SOFT_F16)
#define BRAID_HAVE_FLOAT16 1
// fp16 through the compiler's _Float16 where it has one (GCC >= 12, clang >= 15 on x86-64: correctly rounded,
// subnormals included).
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
#else
inline float f16_to_f32(uint16_t h) { return f16_to_f32_soft(h); }
inline uint16_t f32_to_f16(float f) { return f32_to_f16_soft(f); }
#endif

}  // namespace braid
