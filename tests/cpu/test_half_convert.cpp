// src/common/half_convert.hpp: float <-> f16 / bf16, checked exhaustively over all 2^16 codes.
//
// For every pair of neighbouring finite codes (a, b) the float midpoint is exact, so the rule
// "round to nearest, ties to even" can be checked directly: values strictly between round to
// the nearer code, the midpoint to the code with an even (zero) last bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/half_convert.hpp"

namespace {

using flashpp::detail::bf16_to_float;
using flashpp::detail::bits_float;
using flashpp::detail::float_bits;
using flashpp::detail::float_to_bf16;
using flashpp::detail::float_to_half;
using flashpp::detail::half_to_float;

constexpr float kInf = std::numeric_limits<float>::infinity();

// The format under test, as a pair of functions plus the code of +infinity.
struct Format {
  const char* name;
  float (*to_float)(std::uint16_t);
  std::uint16_t (*from_float)(float);
  std::uint16_t infinity;
};
const Format kHalf{"f16", half_to_float, float_to_half, 0x7C00};
const Format kBf16{"bf16", bf16_to_float, float_to_bf16, 0x7F80};

bool is_nan_code(const Format& f, std::uint16_t h) {
  return (h & 0x7FFF) > f.infinity;
}

void check_round_trip(const Format& f) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const auto code = static_cast<std::uint16_t>(h);
    const float x = f.to_float(code);
    if (is_nan_code(f, code)) {
      ASSERT_TRUE(std::isnan(x)) << f.name << " code " << h;
      ASSERT_TRUE(is_nan_code(f, f.from_float(x))) << f.name << " NaN code " << h;
      continue;
    }
    ASSERT_EQ(f.from_float(x), code) << f.name << " code " << h << " value " << x;
  }
}

// Neighbouring positive finite codes h and h+1 (and their negatives).
void check_ties_and_neighbours(const Format& f) {
  for (std::uint32_t h = 0; h + 1 < f.infinity; ++h) {
    const auto lo = static_cast<std::uint16_t>(h), hi = static_cast<std::uint16_t>(h + 1);
    const float a = f.to_float(lo), b = f.to_float(hi);
    const float mid = static_cast<float>((static_cast<double>(a) + b) / 2);
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(a) + b) / 2) << "midpoint exact";
    const std::uint16_t even = (lo & 1u) == 0 ? lo : hi;
    ASSERT_EQ(f.from_float(mid), even) << f.name << " tie between " << h << " and " << h + 1;
    ASSERT_EQ(f.from_float(-mid), even | 0x8000) << f.name << " negative tie at " << h;
    ASSERT_EQ(f.from_float(std::nextafter(mid, 0.0f)), lo) << f.name << " below tie " << h;
    ASSERT_EQ(f.from_float(std::nextafter(mid, kInf)), hi) << f.name << " above tie " << h;
  }
}

TEST(HalfConvert, F16RoundTripsEveryCode) { check_round_trip(kHalf); }
TEST(HalfConvert, Bf16RoundTripsEveryCode) { check_round_trip(kBf16); }
TEST(HalfConvert, F16RoundsToNearestEven) { check_ties_and_neighbours(kHalf); }
TEST(HalfConvert, Bf16RoundsToNearestEven) { check_ties_and_neighbours(kBf16); }

TEST(HalfConvert, F16InfinityOverflowAndNaN) {
  EXPECT_EQ(float_to_half(kInf), 0x7C00);
  EXPECT_EQ(float_to_half(-kInf), 0xFC00);
  EXPECT_EQ(half_to_float(0x7C00), kInf);
  EXPECT_EQ(half_to_float(0xFC00), -kInf);
  // 65504 is the largest f16; the midpoint to the next (virtual) code 65536 is 65520, which
  // rounds to even, i.e. up, to infinity.
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_half(1e30f), 0x7C00);
  EXPECT_EQ(float_to_half(-1e30f), 0xFC00);
  const std::uint16_t nan = float_to_half(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(is_nan_code(kHalf, nan));
  // A NaN whose payload sits only in the low float bits must not turn into infinity.
  EXPECT_TRUE(is_nan_code(kHalf, float_to_half(bits_float(0x7F800001u))));
  EXPECT_TRUE(is_nan_code(kHalf, float_to_half(bits_float(0xFF800001u))));
}

TEST(HalfConvert, F16Subnormals) {
  const float tiny = std::ldexp(1.0f, -24);  // the smallest f16 subnormal
  EXPECT_EQ(half_to_float(0x0001), tiny);
  EXPECT_EQ(half_to_float(0x03FF), 1023 * tiny);
  EXPECT_EQ(half_to_float(0x8001), -tiny);
  EXPECT_EQ(float_to_half(tiny), 0x0001);
  EXPECT_EQ(float_to_half(tiny / 2), 0x0000);                                 // tie to even: 0
  EXPECT_EQ(float_to_half(std::nextafter(tiny / 2, 1.0f)), 0x0001);           // above the tie
  EXPECT_EQ(float_to_half(1.5f * tiny), 0x0002);                              // tie to even: 2
  EXPECT_EQ(float_to_half(2.5f * tiny), 0x0002);                              // tie to even: 2
  EXPECT_EQ(float_to_half(1023.5f * tiny), 0x0400);  // rounds up into the smallest normal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(float_to_half(-std::ldexp(1.0f, -30)), 0x8000);  // sign of zero kept
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(HalfConvert, Bf16InfinityNaNAndSubnormals) {
  EXPECT_EQ(float_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(float_to_bf16(-kInf), 0xFF80);
  EXPECT_EQ(bf16_to_float(0x7F80), kInf);
  // The largest finite bf16 is 0x7F7F; values at or above the midpoint to 2^128 overflow.
  const float max_bf16 = bf16_to_float(0x7F7F);
  EXPECT_EQ(float_to_bf16(max_bf16), 0x7F7F);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_TRUE(is_nan_code(kBf16, float_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  // Payload only in the 16 bits that are dropped: must stay NaN, not become infinity.
  EXPECT_TRUE(is_nan_code(kBf16, float_to_bf16(bits_float(0x7F800001u))));
  EXPECT_TRUE(is_nan_code(kBf16, float_to_bf16(bits_float(0xFF800001u))));
  // bf16 keeps float's exponent range: float subnormals map to bf16 subnormals.
  EXPECT_EQ(bf16_to_float(0x0001), bits_float(0x00010000u));
  EXPECT_EQ(float_to_bf16(bits_float(0x00018000u)), 0x0002);  // tie to even
  EXPECT_EQ(float_to_bf16(bits_float(0x00008000u)), 0x0000);  // tie to even: 0
  EXPECT_EQ(float_to_bf16(bits_float(0x00008001u)), 0x0001);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(HalfConvert, F16AgreesWithCompilerFloat16) {
#if defined(__FLT16_MAX__)
  // Where the compiler has _Float16, its conversion is an independent oracle. Sample floats
  // spread over every exponent, including the f16 subnormal and overflow ranges.
  std::uint32_t state = 12345;
  for (int n = 0; n < 2000000; ++n) {
    state = state * 1664525u + 1013904223u;
    const std::uint32_t exponent = 96 + (state >> 27) % 64;  // 2^-31 .. 2^32
    const std::uint32_t bits = (state & 0x807FFFFFu) | (exponent << 23);
    const float x = bits_float(bits);
    const _Float16 h = static_cast<_Float16>(x);
    std::uint16_t expected;
    static_assert(sizeof h == 2);
    std::memcpy(&expected, &h, 2);
    ASSERT_EQ(float_to_half(x), expected) << "x = " << x << " bits " << std::hex << bits;
  }
#else
  GTEST_SKIP() << "the compiler has no _Float16";
#endif
}

}  // namespace
