// Vectorised exp and tanh for the softmax steps (AVX-512 and AVX2), with scalar twins for the fallback
// and for loop tails. Accuracy: a few ulp in float32, which is below the storage rounding of
// every dtype flashpp supports; exp of anything below about -87 is exactly 0 (masked scores are
// -inf and must give a probability of exactly 0).
#pragma once

#include <cmath>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
// GCC 12 reports its own intrinsics' deliberately undefined pass-through operands as
// "may be used uninitialized" once they are inlined; the warning is a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

inline constexpr float kLog2e = 1.44269504088896341f;  // log2(e): natural units to base 2
inline constexpr float kLn2 = 0.693147180559945309f;

// 2^f = e^(f ln 2) on [-1/2, 1/2] by its degree-6 Taylor polynomial, coefficients ln2^k / k!
// from the highest (exp2_ps, Horner's rule).
inline constexpr int kExp2PolyTerms = 7;
inline constexpr float kExp2Poly[kExp2PolyTerms] = {
    1.5403530393381608e-4f, 1.3333558146428443e-3f, 9.6181291076284772e-3f, 5.5504108664821580e-2f,
    2.4022650695910071e-1f, 6.9314718055994531e-1f, 1.0f};

inline float exp_scalar(float x) { return x < -87.0f ? 0.0f : std::exp(x); }
inline float exp2_scalar(float y) { return y < -126.0f ? 0.0f : std::exp2(y); }
inline float tanh_scalar(float x) { return std::tanh(x); }

#if defined(__AVX512F__)

// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2]; exp(r) by its
// degree-6 Taylor polynomial (error < 2e-8 relative on that interval); 2^n applied with scalef,
// which saturates to 0 / inf without integer-exponent tricks.
inline __m512 exp_ps(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(kLog2e);
  const __m512 kLn2Hi = _mm512_set1_ps(0.693359375f);
  const __m512 kLn2Lo = _mm512_set1_ps(-2.12194440e-4f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
  x = _mm512_min_ps(x, _mm512_set1_ps(88.5f));
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));  // keeps -inf out of the reduction (no NaN)
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, kLn2Hi, x);
  r = _mm512_fnmadd_ps(n, kLn2Lo, r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~underflow), p, n);
}

// 2^y for the softmax in base-2 units (the bf16 forward: scores pre-multiplied by log2(e), so
// that one FMA gives the exponent): 2^y = 2^n 2^f, n = round(y), f = y - n in [-1/2, 1/2]
// (exact), 2^f = e^(f ln 2) by the degree-6 Taylor polynomial exp_ps uses on the same interval.
// y below -126, and -inf, give exactly 0 (maskz: the NaN that -inf makes of f never leaves);
// y must stay below 128. Ten instructions against exp_ps's fourteen plus the caller's scaling.
inline __m512 exp2_ps(__m512 y) {
  const __mmask16 normal = _mm512_cmp_ps_mask(y, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
  const __m512 n = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(y, n);
  __m512 p = _mm512_set1_ps(kExp2Poly[0]);
  for (int i = 1; i < kExp2PolyTerms; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Poly[i]));
  return _mm512_maskz_scalef_ps(normal, p, n);
}

// tanh(y) = sign(y) (1 - e) / (1 + e) with e = exp(-2|y|): no cancellation for large |y| and
// an absolute error of a few 1e-8 near 0, which is what the soft-capped score needs.
inline __m512 tanh_ps(__m512 y) {
  const __m512 abs_y = _mm512_abs_ps(y);
  const __m512 e = exp_ps(_mm512_mul_ps(abs_y, _mm512_set1_ps(-2.0f)));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  // copy the sign of y onto t
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(0x80000000));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sign));
}

// Mask with the first `count` lanes set (count in [0, 16]).
inline __mmask16 lanes_mask(long count) {
  return count >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

#endif

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)

// exp on 8 lanes (AVX2 builds): the same reduction and polynomial as exp_ps above. 2^n is built
// in the exponent field, (n + 127) << 23: x is clamped to [-87, 88], so n stays in [-126, 127]
// (a normal float); lanes below -87 are set to exactly 0.
inline __m256 exp_ps(__m256 x) {
  const __m256 log2e = _mm256_set1_ps(kLog2e);
  const __m256 kLn2Hi = _mm256_set1_ps(0.693359375f);
  const __m256 kLn2Lo = _mm256_set1_ps(-2.12194440e-4f);
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  x = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));  // keeps -inf out of the reduction (no NaN)
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, kLn2Hi, x);
  r = _mm256_fnmadd_ps(n, kLn2Lo, r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

// 2^y on 8 lanes: the same as the AVX-512 exp2_ps above, 2^n built in the exponent field.
inline __m256 exp2_ps(__m256 y) {
  const __m256 normal = _mm256_cmp_ps(y, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
  const __m256 n = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(y, n);
  __m256 p = _mm256_set1_ps(kExp2Poly[0]);
  for (int i = 1; i < kExp2PolyTerms; ++i) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2Poly[i]));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(normal, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

// tanh on 8 lanes: the same formula as the AVX-512 tanh_ps above.
inline __m256 tanh_ps(__m256 y) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 abs_y = _mm256_andnot_ps(sign_bit, y);
  const __m256 e = exp_ps(_mm256_mul_ps(abs_y, _mm256_set1_ps(-2.0f)));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  return _mm256_or_ps(t, _mm256_and_ps(y, sign_bit));  // copy the sign of y onto t
}

#endif

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
