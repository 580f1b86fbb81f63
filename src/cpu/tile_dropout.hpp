// Dropout factors of a tile: z = keep_scale where the element is kept, 0 where it is dropped,
// with the keep decision of src/common/philox.hpp. One Philox call decides 16 elements (rows
// 2a + {0, 1, 8, 9} x keys 2c + {0, 1, 8, 9} of a 16 x 16 block), so the tile is walked call by
// call: each call's bytes go to the tile elements it decides.
#pragma once

#include <cstdint>

#include "../common/philox.hpp"

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

// Calls visit(r, c, factor) for every element of the tile queries i0 .. i0+q_rows-1 x keys
// j0 .. j0+kv_rows-1 of head bh (each exactly once, in no particular order).
template <typename Visit>
inline void for_each_dropout_factor(std::int64_t q_rows, std::int64_t kv_rows, std::int64_t i0,
                                    std::int64_t j0, std::uint32_t bh,
                                    const detail::DropoutParams& d, Visit visit) {
  if (q_rows <= 0 || kv_rows <= 0) return;
  const float kept = d.keep_scale;
  const std::int64_t i_end = i0 + q_rows, j_end = j0 + kv_rows;
  constexpr int kComb[4] = {0, 1, 8, 9};  // offsets of a comb's rows (keys) from 2a (2c)
  for (std::int64_t ib = i0 / 16 * 16; ib < i_end; ib += 16) {
    for (std::int64_t jb = j0 / 16 * 16; jb < j_end; jb += 16) {
      for (int a = 0; a < 4; ++a) {
        for (int c = 0; c < 4; ++c) {
          const detail::PhiloxResult bytes = detail::dropout_random_bytes(
              d, bh, static_cast<std::uint32_t>(ib + 2 * a), static_cast<std::uint32_t>(jb + 2 * c));
          for (int ri : kComb) {
            const std::int64_t i = ib + 2 * a + ri;
            if (i < i0 || i >= i_end) continue;
            for (int ci : kComb) {
              const std::int64_t j = jb + 2 * c + ci;
              if (j < j0 || j >= j_end) continue;
              const bool keep = detail::dropout_keep_byte(
                  bytes,
                  detail::dropout_byte_index(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j)),
                  d.threshold);
              visit(i - i0, j - j0, keep ? kept : 0.0f);
            }
          }
        }
      }
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

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
