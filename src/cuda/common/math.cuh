// Scalar math on the hot path of the softmax, and float32 -> 16-bit pair packing for mma inputs.
// exp2_poly is plain C++ as well (FLASHPP_HD), so that tests/cpu/test_exp2_poly.cpp checks it on
// the CPU; the rest is device code, compiled only by nvcc.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "../../common/host_device.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace flashpp::cuda {

// 2^x on the FMA pipe instead of MUFU (FlashAttention-4's idea; perf-notes "exp2 on the FMA pipe
// in the sm90 forward"), for x <= 127: Cody-Waite split x = n + f with n = floor(x) and f in
// [0, 1), a degree-3 polynomial for 2^f in [1, 2) (three FFMA, Horner), and n added into the
// exponent bits with one integer shift-add. x is clamped to >= -127 first: x <= -127 (-inf, the
// masked scores, included; NaN too, as fmaxf drops it) gives n = -127, f = 0, 2^f = 1 exactly,
// and the exponent sum 0: exactly +0. For x in (-127, -126) the result is a subnormal below
// 2^-126 (ex2.approx.ftz gives 0 there); from -126 up, relative error <= 8.6e-5 = 2^-13.5 over
// the coefficients' rounding (tests/cpu/test_exp2_poly.cpp measures it), below the half-ulp of
// fp16 (2^-12) and bf16 (2^-9) that P is rounded to next. Coefficients: minimax for the relative
// error of 1 + c1 f + c2 f^2 + c3 f^3 against 2^f on [0, 1] (Remez, then rounded to float).
// About 8 issue slots (FMNMX, FADD.RM, 2 FADD, 3 FFMA, a shift-add) where ex2.approx takes one
// slot and 1/16 of an SM's MUFU clock.
inline constexpr float kExp2PolyC1 = 0.6951167583f;
inline constexpr float kExp2PolyC2 = 0.2276449949f;
inline constexpr float kExp2PolyC3 = 0.07706703991f;

FLASHPP_HD float exp2_poly(float x) {
  // 1.5 * 2^23: adding it rounds to an integer (here downwards) held in the low mantissa bits.
  constexpr float kRoundShift = 12582912.0f;
  const float xc = fmaxf(x, -127.0f);
#if defined(__CUDA_ARCH__)
  const float shifted = __fadd_rd(xc, kRoundShift);  // 1.5 * 2^23 + floor(xc), exact
#else
  const float shifted = std::floor(xc) + kRoundShift;  // the same value
#endif
  const float n = shifted - kRoundShift;                // floor(xc), exact
  const float f = xc - n;                               // in [0, 1), exact
  const float p = fmaf(fmaf(fmaf(kExp2PolyC3, f, kExp2PolyC2), f, kExp2PolyC1), f, 1.0f);
  // The low 9 bits of `shifted`'s pattern are n (two's complement), and the shift drops the
  // rest: (bits << 23) = n << 23 modulo 2^32, the exponent field's increment.
  std::uint32_t shifted_bits, p_bits;
#if defined(__CUDA_ARCH__)
  shifted_bits = __float_as_uint(shifted);
  p_bits = __float_as_uint(p);
#else
  std::memcpy(&shifted_bits, &shifted, sizeof shifted_bits);
  std::memcpy(&p_bits, &p, sizeof p_bits);
#endif
  const std::uint32_t bits = (shifted_bits << 23) + p_bits;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float y;
  std::memcpy(&y, &bits, sizeof y);
  return y;
#endif
}

#if defined(__CUDACC__)

// 2^x with the hardware approximation (ex2.approx, relative error ~2^-22, flushes subnormal
// results to zero): one MUFU op instead of the accurate exp2f's range reduction. exp2(-inf) = 0,
// which the masked scores rely on. The softmax folds scale*log2(e) into one FFMA before it.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// Two floats -> one 32-bit register of two 16-bit values (lo in the low half), round to nearest.
template <typename Element>
__device__ __forceinline__ std::uint32_t pack_pair(float lo, float hi);

template <>
__device__ __forceinline__ std::uint32_t pack_pair<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

template <>
__device__ __forceinline__ std::uint32_t pack_pair<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

#endif  // __CUDACC__

}  // namespace flashpp::cuda
