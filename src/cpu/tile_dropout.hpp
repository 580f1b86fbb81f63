// Dropout factors of a tile: z = 1/(1-p) where the element is kept, 0 where it is dropped, with
// the keep decision of src/common/philox.hpp. One Philox call yields the four random words of
// keys 4*floor(j/4) .. +3 of a row, so a row of a tile costs one call per four keys.
#pragma once

#include <cstdint>

#include "../common/philox.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12 false positive on its own intrinsics once inlined (see tile_io.hpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace flashpp::cpu {

// Calls visit(r, c, factor) for every element of the tile queries i0 .. i0+q_rows-1 x keys
// j0 .. j0+kv_rows-1 of head bh.
template <typename Visit>
inline void for_each_dropout_factor(std::int64_t q_rows, std::int64_t kv_rows, std::int64_t i0,
                                    std::int64_t j0, std::uint32_t bh,
                                    const detail::DropoutParams& d, Visit visit) {
  const float kept = d.keep_scale;
  for (std::int64_t r = 0; r < q_rows; ++r) {
    const auto i = static_cast<std::uint32_t>(i0 + r);
    detail::PhiloxResult words{};
    for (std::int64_t c = 0; c < kv_rows; ++c) {
      const auto j = static_cast<std::uint32_t>(j0 + c);
      if (c == 0 || (j & 3u) == 0) words = detail::dropout_random_words(d, bh, i, j);
      visit(r, c, detail::dropout_keep_word(words.r[j & 3u], d.threshold) ? kept : 0.0f);
    }
  }
}

#if defined(__AVX512F__)

// Philox4x32-10 on 16 counters at once that differ only in their second word (16 consecutive
// query rows i); the same rounds as detail::philox4x32_10, lane by lane.
struct PhiloxWords16 {
  __m512i r[4];
};

// hi and lo halves of the 32 x 32 -> 64-bit products m * x, per lane.
inline void philox_mulhilo16(std::uint32_t m, __m512i x, __m512i& hi, __m512i& lo) {
  const __m512i vm = _mm512_set1_epi32(static_cast<int>(m));
  const __m512i even = _mm512_mul_epu32(x, vm);                          // lanes 0, 2, ...
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), vm);   // lanes 1, 3, ...
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  lo = _mm512_mullo_epi32(x, vm);
}

inline PhiloxWords16 philox4x32_10_rows16(std::uint32_t c0s, __m512i c1, std::uint32_t c2s,
                                          std::uint32_t c3s, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  __m512i c0 = _mm512_set1_epi32(static_cast<int>(c0s));
  __m512i c2 = _mm512_set1_epi32(static_cast<int>(c2s));
  __m512i c3 = _mm512_set1_epi32(static_cast<int>(c3s));
  for (int round = 0; round < 10; ++round) {
    __m512i hi0, lo0, hi1, lo1;
    philox_mulhilo16(kMul0, c0, hi0, lo0);
    philox_mulhilo16(kMul1, c2, hi1, lo1);
    const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
    const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return PhiloxWords16{{c0, c1, c2, c3}};
}

#endif

// z[c * ld + r] (key-major tile). Lanes r .. r+15 are 16 query rows, so one vector Philox call
// yields the factors of four keys for 16 rows. Lanes up to round_up(q_rows, 16) are written
// (ld must allow it); the padding lanes hold factors of rows past the tile, never read.
inline void dropout_factors_key_major(float* z, std::int64_t ld, std::int64_t kv_rows,
                                      std::int64_t q_rows, std::int64_t i0, std::int64_t j0,
                                      std::uint32_t bh, const detail::DropoutParams& d) {
#if defined(__AVX512F__)
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i threshold = _mm512_set1_epi32(static_cast<int>(d.threshold));
  const __m512 kept = _mm512_set1_ps(d.keep_scale);
  const std::int64_t j_end = j0 + kv_rows;
  for (std::int64_t r = 0; r < q_rows; r += 16) {
    const __m512i rows = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(i0 + r)), lane);
    for (std::int64_t group = j0 >> 2; group <= (j_end - 1) >> 2; ++group) {
      const PhiloxWords16 w = philox4x32_10_rows16(static_cast<std::uint32_t>(group), rows, bh,
                                                   d.counter3, d.key0, d.key1);
      for (int t = 0; t < 4; ++t) {
        const std::int64_t j = group * 4 + t;
        if (j < j0 || j >= j_end) continue;
        const __mmask16 keep =
            _mm512_cmp_epu32_mask(_mm512_srli_epi32(w.r[t], 8), threshold, _MM_CMPINT_NLT);
        _mm512_storeu_ps(z + (j - j0) * ld + r, _mm512_maskz_mov_ps(keep, kept));
      }
    }
  }
#else
  for_each_dropout_factor(q_rows, kv_rows, i0, j0, bh, d,
                          [&](std::int64_t r, std::int64_t c, float f) { z[c * ld + r] = f; });
#endif
}

// z[r * ld + c] (query-major tile).
inline void dropout_factors_query_major(float* z, std::int64_t ld, std::int64_t q_rows,
                                        std::int64_t kv_rows, std::int64_t i0, std::int64_t j0,
                                        std::uint32_t bh, const detail::DropoutParams& d) {
  for_each_dropout_factor(q_rows, kv_rows, i0, j0, bh, d,
                          [&](std::int64_t r, std::int64_t c, float f) { z[r * ld + c] = f; });
}

}  // namespace flashpp::cpu
