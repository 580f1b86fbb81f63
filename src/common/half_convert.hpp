// Scalar fp16 / bf16 / e4m3 <-> float32 conversions for host code (round to nearest even, NaN and
// infinity preserved, subnormals handled). Vectorised paths live in the CPU backend.
#pragma once

#include <cstdint>
#include <cstring>

namespace flashpp::detail {

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(std::uint16_t h) { return bits_float(std::uint32_t(h) << 16); }

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return std::uint16_t((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline std::uint16_t float_to_half(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return std::uint16_t(sign | 0x7E00u);   // NaN
  if (abs >= 0x477FF000u) return std::uint16_t(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // result is subnormal or zero: round abs / 2^-24 to nearest even integer
    const float a = bits_float(abs);
    const float scaled = a * 16777216.0f;  // exact (power of two)
    std::uint32_t m = static_cast<std::uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return std::uint16_t(sign | m);
  }
  // normal: rebias exponent, round mantissa from 23 to 10 bits
  std::uint32_t v = abs - (112u << 23);
  v += 0xFFFu + ((v >> 13) & 1u);
  return std::uint16_t(sign | (v >> 13));
}

// float8 e4m3 ("fn": no infinities; S.1111.111 is NaN; the largest finite value is 448): a value
// is (1 + m/8) * 2^(e - 7) for exponent field e in 1..15, m/8 * 2^-6 for e = 0 (subnormals).
inline float e4m3_to_float(std::uint8_t x) {
  const std::uint32_t sign = std::uint32_t(x & 0x80u) << 24;
  const std::uint32_t exp = (x >> 3) & 0xFu;
  const std::uint32_t mant = x & 0x7u;
  if (exp == 0xF && mant == 0x7) return bits_float(sign | 0x7FC00000u);  // NaN
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 0.001953125f;  // mant * 2^-9
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 120u) << 23) | (mant << 20));
}

// float32 -> e4m3, round to nearest even, saturating to +-448 (as cvt.rn.satfinite does): values
// beyond the range become +-448, NaN stays NaN (0x7F with the sign).
inline std::uint8_t float_to_e4m3(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Fu);
  if (abs >= 0x43E00000u) return static_cast<std::uint8_t>(sign | 0x7Eu);  // >= 448 (or inf)
  if (abs < 0x3C800000u) {
    // below 2^-6: subnormal; round abs / 2^-9 to the nearest even integer (8 lands on 2^-6,
    // whose code 0x08 is exactly the integer 8: the encodings line up)
    const float scaled = bits_float(abs) * 512.0f;  // exact
    std::uint32_t m = static_cast<std::uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<std::uint8_t>(sign | m);
  }
  // normal: round the mantissa from 23 to 3 bits, then rebias the exponent (127 -> 7)
  std::uint32_t v = abs + 0x7FFFFu + ((abs >> 20) & 1u);
  const std::uint32_t code = ((v >> 23) - 120u) << 3 | ((v >> 20) & 7u);
  return static_cast<std::uint8_t>(sign | (code > 0x7Eu ? 0x7Eu : code));
}

}  // namespace flashpp::detail
