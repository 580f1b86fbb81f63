// Which key tiles a query tile visits, and which of them need an element mask: one host+device
// function for every kernel family (tests/cpu/test_tile_range.cpp checks it against the mask's
// per-tile rules).
//
// For query rows [m0, m_end) and key tiles of block_n keys, the keys any row sees lie in
// [first_key(m0), last_key(m_end - 1)] (the mask's bounds grow with the row), so the visited
// tiles are [begin, end). A tile needs no element mask iff it lies wholly inside [0, Nk) and every
// row sees every key of it; both conditions are monotone in the tile index, so those tiles form
// one contiguous range [unmasked_begin, unmasked_end) (empty when unmasked_begin >= unmasked_end).
#pragma once

#include <cstdint>

#include "../../common/host_device.hpp"
#include "../../common/mask.hpp"

namespace flashpp::cuda {

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

}  // namespace flashpp::cuda
