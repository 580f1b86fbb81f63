// Which elements of a backward tile (key tile [j0, j1) x query tile [i0, i1)) are visible: the
// mask rule of src/common/mask.hpp AND the key bound j < Nk.
//
// The key bound matters as much as the mask. Keys past Nk arrive in shared memory as zero rows,
// so their scores are 0 and P = exp2(0 - lse), which overflows to inf when every real score of
// the row is very negative (lse << 0); dS = P (dP - D) is then inf and dQ += dS K multiplies it by
// the zero row: inf * 0 = NaN in every dQ column. So a tile cut by Nk takes the per-element test
// even when no mask is active, and that test hides the keys past Nk.
#pragma once

#include <cstdint>

#include "../../../common/host_device.hpp"
#include "../../../common/mask.hpp"

namespace flashpp::cuda::bwd {

// True when some element of the tile may be hidden: the key tile is cut by Nk (fewer than
// key_rows keys), or the mask hides part of the tile.
FLASHPP_HD bool tile_needs_element_test(const detail::Mask& m, std::int64_t i0,
                                               std::int64_t i1, std::int64_t j0, std::int64_t j1,
                                               int key_rows) {
  return j1 - j0 < key_rows || (m.active() && !m.tile_fully_visible(i0, i1, j0, j1));
}

// The element test itself, for kernels that test (i, j) directly.
FLASHPP_HD bool element_visible(const detail::Mask& m, std::int64_t k_len, std::int64_t i,
                                       std::int64_t j) {
  return j < k_len && m.visible(i, j);
}

// The query rows [begin, end) that see at least one key of [j0, j1), from the mask rule
// -left <= j - (i + shift) <= right.
struct RowRange {
  std::int64_t begin, end;
};
FLASHPP_HD RowRange rows_seeing_keys(const detail::Mask& m, std::int64_t j0,
                                            std::int64_t j1, std::int64_t q_len) {
  std::int64_t begin = j0 - m.shift - m.right;
  std::int64_t end = (j1 - 1) - m.shift + m.left + 1;
  begin = begin < 0 ? 0 : begin;
  end = end > q_len ? q_len : end;
  return RowRange{begin, end > begin ? end : begin};
}

// The mask rule for a tile of kRows keys x kCols queries as 32-bit bounds on row - col (tile
// coordinates): with j = j0 + row, i = i0 + col, -left <= j - i - shift <= right reads
// lo <= row - col <= hi for lo = -left - (j0 - i0 - shift), hi = right - (j0 - i0 - shift).
// row - col lies in (-kCols, kRows), so clamping the bounds to [-kCols, kRows] changes no answer
// and fits them in 32 bits. The key bound is separate: key_rows
// (the tile's keys below Nk), tested as row < key_rows.
struct TileBand {
  int lo, hi;
  int key_rows;
};
template <int kRows, int kCols>
FLASHPP_HD TileBand tile_band(const detail::Mask& m, std::int64_t j0, std::int64_t j1,
                                     std::int64_t i0) {
  const std::int64_t base = j0 - i0 - m.shift;
  auto clamp = [](std::int64_t x) {
    return static_cast<int>(x < -kCols ? -kCols : (x > kRows ? kRows : x));
  };
  return TileBand{clamp(-m.left - base), clamp(m.right - base), static_cast<int>(j1 - j0)};
}

}  // namespace flashpp::cuda::bwd
