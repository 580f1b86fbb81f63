// A host model of the FP8 (e4m3) accumulation inside one Hopper wgmma instruction, to explain the
// score error of the GPU kernel (docs/fp8.md).
//
// The products of two e4m3 values are exact (4 x 4 significant bits). Within one k32 step of an
// e4m3 wgmma the hardware adds the 32 products and the incoming float32 accumulator by aligning
// them to the largest exponent among them and keeping a fixed number of bits below it: about 13
// here (DeepSeek-V3's report gives "around 14 bits" for FP8 GEMMs on H800; an earlier flashpp
// attempt found 13 to fit its measured lse errors). Bits shifted out are truncated. The model: every addend is
// truncated toward zero to a multiple of 2^(E - kKeptBits), E = the largest addend's exponent,
// and the sum of the truncated addends is the new accumulator. Across k32 steps the float32
// accumulator carries the sum, so a head dim of D costs D / 32 such truncations.
#pragma once

#include <cmath>
#include <limits>
#include <cstdint>

namespace flashpp::test {

inline constexpr int kFp8AccumulatorKeptBits = 13;

// Truncates x toward zero to a multiple of 2^exponent.
inline double truncate_to(double x, int exponent) {
  const double unit = std::ldexp(1.0, exponent);
  return std::trunc(x / unit) * unit;
}

// sum_k a[k] * b[k] (a, b e4m3 values as doubles) as the FP8 wgmma accumulates it, k32 steps.
inline double tensor_core_fp8_dot(const double* a, const double* b, std::int64_t count,
                                  int kept_bits = kFp8AccumulatorKeptBits) {
  double acc = 0.0;
  for (std::int64_t k0 = 0; k0 < count; k0 += 32) {
    const std::int64_t k1 = k0 + 32 < count ? k0 + 32 : count;
    int top = std::numeric_limits<int>::min();
    auto consider = [&](double x) {
      if (x != 0.0) {
        int e;
        std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
        if (e - 1 > top) top = e - 1;
      }
    };
    consider(acc);
    for (std::int64_t k = k0; k < k1; ++k) consider(a[k] * b[k]);
    if (top == std::numeric_limits<int>::min()) continue;  // all zero
    const int unit = top - kept_bits;
    double sum = truncate_to(acc, unit);
    for (std::int64_t k = k0; k < k1; ++k) sum += truncate_to(a[k] * b[k], unit);
    acc = static_cast<double>(static_cast<float>(sum));
  }
  return acc;
}

}  // namespace flashpp::test
