// Dropout factors of a tile: z = keep_scale where the element is kept, 0 where it is dropped,
// with the keep decision of src/common/philox.hpp. One Philox call decides 16 elements (rows i
// and i + 8 of a 16-row block x 8 keys of a 32-key block), so the tile is walked call by call:
// each call's bytes go to the tile elements it decides.
#pragma once

#include <cstdint>

#include "../common/philox.hpp"

namespace flashpp::cpu {

// Calls visit(r, c, factor) for every element of the tile queries i0 .. i0+q_rows-1 x keys
// j0 .. j0+kv_rows-1 of head bh (each exactly once, in no particular order).
template <typename Visit>
inline void for_each_dropout_factor(std::int64_t q_rows, std::int64_t kv_rows, std::int64_t i0,
                                    std::int64_t j0, std::uint32_t bh,
                                    const detail::DropoutParams& d, Visit visit) {
  if (q_rows <= 0 || kv_rows <= 0) return;
  const float kept = d.keep_scale;
  const std::int64_t i_end = i0 + q_rows, j_end = j0 + kv_rows;
  for (std::int64_t ib = i0 / 16 * 16; ib < i_end; ib += 16) {
    for (std::int64_t r = 0; r < 8; ++r) {
      const std::int64_t rows[2] = {ib + r, ib + 8 + r};
      const bool row_in[2] = {rows[0] >= i0 && rows[0] < i_end, rows[1] >= i0 && rows[1] < i_end};
      if (!row_in[0] && !row_in[1]) continue;
      for (std::int64_t jb = j0 / 32 * 32; jb < j_end; jb += 32) {
        for (std::int64_t c = 0; c < 4; ++c) {
          // Keys jb + 8 * group + 2c + e of this call.
          const std::int64_t first = jb + 2 * c, last = jb + 24 + 2 * c + 1;
          if (last < j0 || first >= j_end) continue;
          const detail::PhiloxResult bytes = detail::dropout_random_bytes(
              d, bh, static_cast<std::uint32_t>(rows[0]), static_cast<std::uint32_t>(first));
          for (int half = 0; half < 2; ++half) {
            if (!row_in[half]) continue;
            for (int group = 0; group < 4; ++group) {
              for (int e = 0; e < 2; ++e) {
                const std::int64_t j = jb + 8 * group + 2 * c + e;
                if (j < j0 || j >= j_end) continue;
                const bool keep = detail::dropout_keep_byte(
                    bytes, static_cast<unsigned>(8 * half + 2 * group + e), d.threshold);
                visit(rows[half] - i0, j - j0, keep ? kept : 0.0f);
              }
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

}  // namespace flashpp::cpu
