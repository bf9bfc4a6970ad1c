// IEEE half and bfloat16 <-> float conversions, bit-exact and portable (no ISA intrinsics here;
// the kernels have their own vector conversions and are tested against these).
#pragma once

#include <cstdint>
#include <cstring>

namespace pocket {

inline float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

inline float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);
    // Subnormal: value = mant * 2^-24.
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000u | (mant << 13));  // inf / nan
  return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest even, overflow to infinity, NaN preserved as a quiet NaN.
inline uint16_t FloatToFp16(float f) {
  const uint32_t x = FloatToBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: value / 2^-24, rounded to nearest even.
    float v = BitsToFloat(abs) * 16777216.0f;  // exact: scaling by a power of two
    uint32_t q = static_cast<uint32_t>(v);
    float rem = v - static_cast<float>(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t mant = abs & 0x7fffffu;
  uint32_t exp = (abs >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: fine
  return static_cast<uint16_t>(sign | h);
}

inline float Bf16ToFloat(uint16_t b) {
  return BitsToFloat(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBf16(float f) {
  uint32_t x = FloatToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace pocket
