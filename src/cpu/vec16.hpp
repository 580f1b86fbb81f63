// Sixteen float32 lanes for the bf16 engines' element-wise steps (forward_bf16.cpp,
// backward_bf16.cpp): one zmm register at the AVX-512 levels (the real engines), a pair of ymm
// registers in the AVX2 build of the AMX emulation (amx_tiles.hpp), so that the engines' whole
// loop, not only their tile products, runs and is tested on machines without AVX-512.
//
// The AVX-512 versions are the intrinsics the engines used before this wrapper (one instruction
// each); nothing here may cost the real engines an instruction.
#pragma once

#include <cstdint>
#include <cstring>

#include "vector_math.hpp"

#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__))
#error "vec16.hpp: the bf16 engines need AVX-512 or (for the AMX emulation) AVX2 + FMA"
#endif

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

using LaneMask16 = std::uint16_t;  // bit v: lane v

#if defined(__AVX512F__)

struct F32x16 {
  __m512 v;
};
inline F32x16 load16(const float* p) { return {_mm512_loadu_ps(p)}; }
inline void store16(float* p, F32x16 x) { _mm512_storeu_ps(p, x.v); }
inline F32x16 set16(float x) { return {_mm512_set1_ps(x)}; }
inline F32x16 zero16() { return {_mm512_setzero_ps()}; }
inline F32x16 operator+(F32x16 a, F32x16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline F32x16 operator-(F32x16 a, F32x16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline F32x16 operator*(F32x16 a, F32x16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline F32x16 max16(F32x16 a, F32x16 b) { return {_mm512_max_ps(a.v, b.v)}; }
inline F32x16 min16(F32x16 a, F32x16 b) { return {_mm512_min_ps(a.v, b.v)}; }
inline F32x16 fnmadd16(F32x16 a, F32x16 b, F32x16 c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }
inline F32x16 fmsub16(F32x16 a, F32x16 b, F32x16 c) { return {_mm512_fmsub_ps(a.v, b.v, c.v)}; }
inline F32x16 exp16(F32x16 x) { return {exp_ps(x.v)}; }
inline F32x16 exp2_16(F32x16 y) { return {exp2_ps(y.v)}; }
inline F32x16 tanh16(F32x16 x) { return {tanh_ps(x.v)}; }
// keep ? x : fill, lane by lane
inline F32x16 select16(LaneMask16 keep, F32x16 x, F32x16 fill) {
  return {_mm512_mask_mov_ps(fill.v, static_cast<__mmask16>(keep), x.v)};
}
inline float reduce_max16(F32x16 x) { return _mm512_reduce_max_ps(x.v); }
inline float reduce_add16(F32x16 x) { return _mm512_reduce_add_ps(x.v); }

// float32 -> bf16 bits, round to nearest even, in the 32-bit lanes (low half = the bf16).
// NaN is not expected in the engines' probabilities and score gradients.
inline __m512i bf16_rounded_bits(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
}
// 16 bf16 (round to nearest even) at dst.
inline void store16_bf16(std::uint16_t* dst, F32x16 x) {
#if defined(__AVX512BF16__)
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), (__m256i)_mm512_cvtneps_pbh(x.v));
#else
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_rounded_bits(x.v), 16)));
#endif
}
// 16 VNNI words: word n = bf16(even[n]) | bf16(odd[n]) << 16 (two consecutive rows along the
// reduction dimension of a B operand, see amx_tiles.hpp).
inline void store16_bf16_pairs(std::uint32_t* dst, F32x16 even, F32x16 odd) {
  const __m512i lo = _mm512_srli_epi32(bf16_rounded_bits(even.v), 16);
  const __m512i hi = _mm512_and_si512(bf16_rounded_bits(odd.v), _mm512_set1_epi32(int(0xFFFF0000u)));
  _mm512_storeu_si512(dst, _mm512_or_si512(lo, hi));
}

#else  // AVX2: two halves

struct F32x16 {
  __m256 lo, hi;
};
inline F32x16 load16(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline void store16(float* p, F32x16 x) {
  _mm256_storeu_ps(p, x.lo);
  _mm256_storeu_ps(p + 8, x.hi);
}
inline F32x16 set16(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline F32x16 zero16() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline F32x16 operator+(F32x16 a, F32x16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline F32x16 operator-(F32x16 a, F32x16 b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
inline F32x16 operator*(F32x16 a, F32x16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline F32x16 max16(F32x16 a, F32x16 b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
inline F32x16 min16(F32x16 a, F32x16 b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
inline F32x16 fnmadd16(F32x16 a, F32x16 b, F32x16 c) {
  return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)};
}
inline F32x16 fmsub16(F32x16 a, F32x16 b, F32x16 c) {
  return {_mm256_fmsub_ps(a.lo, b.lo, c.lo), _mm256_fmsub_ps(a.hi, b.hi, c.hi)};
}
inline F32x16 exp16(F32x16 x) { return {exp_ps(x.lo), exp_ps(x.hi)}; }
inline F32x16 exp2_16(F32x16 y) { return {exp2_ps(y.lo), exp2_ps(y.hi)}; }
inline F32x16 tanh16(F32x16 x) { return {tanh_ps(x.lo), tanh_ps(x.hi)}; }
inline __m256 lane_mask8(unsigned bits) {
  const __m256i pattern = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i set = _mm256_and_si256(_mm256_set1_epi32(static_cast<int>(bits)), pattern);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(set, pattern));
}
inline F32x16 select16(LaneMask16 keep, F32x16 x, F32x16 fill) {
  return {_mm256_blendv_ps(fill.lo, x.lo, lane_mask8(keep & 0xFFu)),
          _mm256_blendv_ps(fill.hi, x.hi, lane_mask8(keep >> 8))};
}
inline float reduce_max16(F32x16 x) {
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_max_ps(x.lo, x.hi));
  float m = t[0];
  for (int i = 1; i < 8; ++i) m = t[i] > m ? t[i] : m;
  return m;
}
inline float reduce_add16(F32x16 x) {
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(x.lo, x.hi));
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}
inline __m256i bf16_rounded_bits(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
}
inline void store16_bf16(std::uint16_t* dst, F32x16 x) {
  const __m256i lo = _mm256_srli_epi32(bf16_rounded_bits(x.lo), 16);
  const __m256i hi = _mm256_srli_epi32(bf16_rounded_bits(x.hi), 16);
  // packus works per 128-bit lane: (lo0 hi0 lo1 hi1) -> reorder the 64-bit quarters
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), packed);
}
inline void store16_bf16_pairs(std::uint32_t* dst, F32x16 even, F32x16 odd) {
  const __m256i top = _mm256_set1_epi32(int(0xFFFF0000u));
  const __m256i w0 = _mm256_or_si256(_mm256_srli_epi32(bf16_rounded_bits(even.lo), 16),
                                     _mm256_and_si256(bf16_rounded_bits(odd.lo), top));
  const __m256i w1 = _mm256_or_si256(_mm256_srli_epi32(bf16_rounded_bits(even.hi), 16),
                                     _mm256_and_si256(bf16_rounded_bits(odd.hi), top));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), w0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8), w1);
}

#endif

// Lanes [first, last] of a row of kVecs x 16 lanes that are set, as kVecs masks of 16 (empty when
// first > last).
template <int kVecs>
inline void visible_lanes(std::int64_t first, std::int64_t last, LaneMask16 out[kVecs]) {
  for (int v = 0; v < kVecs; ++v) {
    const std::int64_t lo = first - 16 * v > 0 ? first - 16 * v : 0;
    const std::int64_t hi = last - 16 * v < 15 ? last - 16 * v : 15;
    out[v] = lo > hi ? LaneMask16(0)
                     : static_cast<LaneMask16>(((1u << (hi + 1)) - 1u) & ~((1u << lo) - 1u));
  }
}
inline void visible_lanes64(std::int64_t first, std::int64_t last, LaneMask16 out[4]) {
  visible_lanes<4>(first, last, out);
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
