// Which tiles a thread block visits and which of them need an element mask: the one place every
// kernel family derives them from the mask rule (src/common/mask.hpp), in both directions.
//   key_tile_range    a query tile's key tiles, and the contiguous run of them needing no mask
//                     (the forwards; the sm80 deterministic dQ kernel)
//   rows_seeing_keys  a key tile's query rows (the backward main kernels, which walk query tiles)
//   tile_needs_element_test, element_visible, tile_band
//                     per tile and per element: the mask AND the key bound j < Nk
// tests/cpu/test_tile_range.cpp checks them against the mask's per-element rule.
//
// For query rows [m0, m_end) and key tiles of block_n keys, the keys any row sees lie in
// [first_key(m0), last_key(m_end - 1)] (the mask's bounds grow with the row), so the visited
// tiles are [begin, end). A tile needs no element mask iff it lies wholly inside [0, Nk) and every
// row sees every key of it; both conditions are monotone in the tile index, so those tiles form
// one contiguous range [unmasked_begin, unmasked_end) (empty when unmasked_begin >= unmasked_end).
//
// The key bound matters as much as the mask. Keys past Nk arrive in shared memory as zero rows,
// so their scores are 0 and, in the backward, P = exp2(0 - lse), which overflows to inf when every
// real score of the row is very negative (lse << 0); dS = P (dP - D) is then inf and dQ += dS K
// multiplies it by the zero row: inf * 0 = NaN in every dQ column. So a tile cut by Nk takes the
// per-element test even when no mask is active, and that test hides the keys past Nk.
#pragma once

#include <cstdint>

#include "../../common/host_device.hpp"
#include "../../common/mask.hpp"

namespace flashpp::cuda {

// ---- A query tile's key tiles -------------------------------------------------------------------

struct KeyTileRange {
  std::int64_t begin = 0, end = 0;                    // tiles visited: [begin, end)
  std::int64_t unmasked_begin = 0, unmasked_end = 0;  // of those, the ones needing no mask

  FLASHPP_HD bool empty() const { return begin >= end; }
  FLASHPP_HD bool needs_mask(std::int64_t tile) const {
    return tile < unmasked_begin || tile >= unmasked_end;
  }
};

FLASHPP_HD std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

FLASHPP_HD KeyTileRange key_tile_range(const detail::Mask& mask, std::int64_t Nk, std::int64_t m0,
                                       std::int64_t m_end, std::int64_t block_n) {
  KeyTileRange r;
  const std::int64_t key_first = mask.first_key(m0);
  const std::int64_t key_last = mask.last_key(m_end - 1, Nk);
  if (Nk <= 0 || m_end <= m0 || key_first > key_last) return r;  // empty: O = 0, lse = -inf
  r.begin = key_first / block_n;
  r.end = key_last / block_n + 1;
  // Tile n (keys [n*block_n, (n+1)*block_n)) needs no mask iff lo <= n*block_n <= hi.
  std::int64_t lo = 0;
  std::int64_t hi = Nk - block_n;
  if (mask.active()) {
    const std::int64_t lo_mask = (m_end - 1) + mask.shift - mask.left;
    const std::int64_t hi_mask = m0 + mask.shift + mask.right - (block_n - 1);
    if (mask.left < detail::kNoLimit) lo = lo_mask > lo ? lo_mask : lo;
    if (mask.right < detail::kNoLimit) hi = hi_mask < hi ? hi_mask : hi;
  }
  std::int64_t ub = floor_div(lo + block_n - 1, block_n);  // ceil(lo / block_n), lo >= 0
  std::int64_t ue = floor_div(hi, block_n) + 1;
  ub = ub < r.begin ? r.begin : ub;
  ue = ue > r.end ? r.end : ue;
  r.unmasked_begin = ub;
  r.unmasked_end = ue < ub ? ub : ue;
  return r;
}

// ---- A key tile's query rows (the transposed walk of the backward's main kernels) ---------------

// The query rows [begin, end) that see at least one key of [j0, j1), from the mask rule
// -left <= j - (i + shift) <= right.
struct RowRange {
  std::int64_t begin, end;
};
FLASHPP_HD RowRange rows_seeing_keys(const detail::Mask& m, std::int64_t j0, std::int64_t j1,
                                     std::int64_t q_len) {
  std::int64_t begin = j0 - m.shift - m.right;
  std::int64_t end = (j1 - 1) - m.shift + m.left + 1;
  begin = begin < 0 ? 0 : begin;
  end = end > q_len ? q_len : end;
  return RowRange{begin, end > begin ? end : begin};
}

// ---- Per tile and per element (a key tile [j0, j1) x a query tile [i0, i1)) ---------------------

// True when some element of the tile may be hidden: the key tile is cut by Nk (fewer than
// key_rows keys), or the mask hides part of the tile.
FLASHPP_HD bool tile_needs_element_test(const detail::Mask& m, std::int64_t i0, std::int64_t i1,
                                        std::int64_t j0, std::int64_t j1, int key_rows) {
  return j1 - j0 < key_rows || (m.active() && !m.tile_fully_visible(i0, i1, j0, j1));
}

// The element test itself, for kernels that test (i, j) directly.
FLASHPP_HD bool element_visible(const detail::Mask& m, std::int64_t k_len, std::int64_t i,
                                std::int64_t j) {
  return j < k_len && m.visible(i, j);
}

// The mask rule for a tile of kRows keys x kCols queries as 32-bit bounds on row - col (tile
// coordinates): with j = j0 + row, i = i0 + col, -left <= j - i - shift <= right reads
// lo <= row - col <= hi for lo = -left - (j0 - i0 - shift), hi = right - (j0 - i0 - shift).
// row - col lies in (-kCols, kRows), so clamping the bounds to [-kCols, kRows] changes no answer
// and fits them in 32 bits. The key bound is separate: key_rows (the tile's keys below Nk),
// tested as row < key_rows.
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

}  // namespace flashpp::cuda
