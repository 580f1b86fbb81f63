// Dropout factors of a tile: z = 1/(1-p) where the element is kept, 0 where it is dropped, with
// the keep decision of src/common/philox.hpp. One Philox call yields the four random words of
// keys 4*floor(j/4) .. +3 of a row, so a row of a tile costs one call per four keys.
#pragma once

#include <cstdint>

#include "../common/philox.hpp"

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

// z[c * ld + r] (key-major tile).
inline void dropout_factors_key_major(float* z, std::int64_t ld, std::int64_t kv_rows,
                                      std::int64_t q_rows, std::int64_t i0, std::int64_t j0,
                                      std::uint32_t bh, const detail::DropoutParams& d) {
  for_each_dropout_factor(q_rows, kv_rows, i0, j0, bh, d,
                          [&](std::int64_t r, std::int64_t c, float f) { z[c * ld + r] = f; });
}

// z[r * ld + c] (query-major tile).
inline void dropout_factors_query_major(float* z, std::int64_t ld, std::int64_t q_rows,
                                        std::int64_t kv_rows, std::int64_t i0, std::int64_t j0,
                                        std::uint32_t bh, const detail::DropoutParams& d) {
  for_each_dropout_factor(q_rows, kv_rows, i0, j0, bh, d,
                          [&](std::int64_t r, std::int64_t c, float f) { z[r * ld + c] = f; });
}

}  // namespace flashpp::cpu
