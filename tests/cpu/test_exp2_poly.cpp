// exp2_poly (src/cuda/common/math.cuh): 2^x on the FMA pipe, which the sm90 forward's softmax
// may use for part of its exponentials (FLASHPP_SM90_EXP2_POLY). The function is plain C++ too
// (FLASHPP_HD) and computes on the CPU exactly what it computes on the GPU (the rounding-down add
// is exact either way, the polynomial is fused multiply-adds in both), so its error is measured
// here against 2^x in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "cuda/common/math.cuh"

namespace {

using flashpp::cuda::exp2_poly;

double rel_error(float x) {
  const double exact = std::exp2(static_cast<double>(x));
  return std::fabs(static_cast<double>(exp2_poly(x)) - exact) / exact;
}

// The bound the kernel's use needs: P is rounded to fp16 (half-ulp 2^-12) or bf16 (2^-9) next,
// so the polynomial must stay below 2^-12; it reaches 8.6e-5 (2^-13.5).
constexpr double kBound = 1.0 / 8192.0;  // 2^-13

// Over [-126, 0] (the softmax's arguments: s * scale*log2(e) - max <= 0) and a little above:
// a fine grid (2^-18) over the fraction in a few unit intervals, every 1/1024 over the whole
// range, random arguments, and the floats next to 0.
TEST(Exp2Poly, RelativeErrorBelowTwoToMinus13) {
  double worst = 0.0;
  float worst_x = 0.0f;
  auto check = [&](float x) {
    const double e = rel_error(x);
    if (e > worst) worst = e, worst_x = x;
  };
  for (int n : {-126, -100, -17, -2, -1, 0, 5}) {
    for (int i = 0; i < (1 << 18); ++i) check(static_cast<float>(n) + static_cast<float>(i) / (1 << 18));
  }
  for (int i = -126 * 1024; i <= 8 * 1024; ++i) check(static_cast<float>(i) / 1024.0f);
  std::mt19937 rng(20261126);
  std::uniform_real_distribution<float> any(-126.0f, 0.0f);
  for (int i = 0; i < (1 << 20); ++i) check(any(rng));
  // The 2^20 floats just below 0 and just below -1e-3, as the row maximum's neighbours give.
  for (float start : {-0.0f, -1e-3f}) {
    float x = start;
    for (int i = 0; i < (1 << 20); ++i) check(x = std::nextafter(x, -1.0f));
  }
  std::printf("exp2_poly: max relative error %.3e (2^%.2f) at x = %.9g\n", worst, std::log2(worst),
              static_cast<double>(worst_x));
  EXPECT_LE(worst, kBound);
}

// Integers come out exact (the fraction is 0 and the polynomial's constant term is 1): the row's
// maximum gives P = 1 exactly, as with ex2.approx.
TEST(Exp2Poly, IntegersExact) {
  for (int n = -126; n <= 127; ++n) {
    EXPECT_EQ(exp2_poly(static_cast<float>(n)), std::ldexp(1.0f, n)) << n;
  }
}

// The masked scores are -inf and must give exactly 0; so does everything at or below -127 (the
// clamp), and NaN (fmaxf drops it; ex2.approx would give NaN). Between -127 and -126 the result is
// a subnormal below the smallest normal float (ex2.approx.ftz gives 0 there).
TEST(Exp2Poly, ZeroAtMinusInfinityAndBelowMinus127) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {-inf, -1e30f, -1000.0f, -128.5f, -127.0f}) {
    const float y = exp2_poly(x);
    EXPECT_EQ(y, 0.0f) << x;
    EXPECT_FALSE(std::signbit(y)) << x;  // +0, not -0
  }
  EXPECT_EQ(exp2_poly(std::numeric_limits<float>::quiet_NaN()), 0.0f);
  const float smallest_normal = std::numeric_limits<float>::min();  // 2^-126
  for (int i = 1; i < 1024; ++i) {
    const float x = -127.0f + static_cast<float>(i) / 1024.0f;
    const float y = exp2_poly(x);
    EXPECT_GE(y, 0.0f) << x;
    EXPECT_LT(y, smallest_normal) << x;
  }
}

// The result never decreases with x across the integer boundaries (where the polynomial's end
// 1 + c1 + c2 + c3 < 2 meets the next power of two) or inside an interval's grid.
TEST(Exp2Poly, MonotoneOnAGrid) {
  float previous = exp2_poly(-126.0f);
  for (int i = -126 * 4096 + 1; i <= 0; ++i) {
    const float y = exp2_poly(static_cast<float>(i) / 4096.0f);
    ASSERT_GE(y, previous) << i;
    previous = y;
  }
}

}  // namespace
