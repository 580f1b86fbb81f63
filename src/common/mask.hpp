// The visibility rule (docs/design.md, "Masks"), shared verbatim by every backend.
//
// With shift s (0 for top-left alignment, Nk - Nq for bottom-right), query i sees key j iff
//     -left <= j - (i + s) <= right
// where causal means right = min(right, 0) and an unbounded side is kNoLimit.
#pragma once

#include <cstdint>

#include "host_device.hpp"

namespace flashpp::detail {

inline constexpr std::int64_t kNoLimit = std::int64_t(1) << 60;

struct Mask {
  std::int64_t shift = 0;
  std::int64_t left = kNoLimit;
  std::int64_t right = kNoLimit;

  // True when some (i, j) inside [0,Nq) x [0,Nk) may be hidden, i.e. masking is in play at all.
  FLASHPP_HD bool active() const { return left < kNoLimit || right < kNoLimit; }

  FLASHPP_HD bool visible(std::int64_t i, std::int64_t j) const {
    const std::int64_t d = j - (i + shift);
    return d >= -left && d <= right;
  }

  // The keys row i sees lie in [first_key(i), last_key(i)] (clipped to [0, Nk)); the range is
  // empty when first > last.
  FLASHPP_HD std::int64_t first_key(std::int64_t i) const {
    const std::int64_t f = i + shift - left;
    return f < 0 ? 0 : f;
  }
  FLASHPP_HD std::int64_t last_key(std::int64_t i, std::int64_t Nk) const {
    const std::int64_t l = i + shift + right;
    return l > Nk - 1 ? Nk - 1 : l;
  }

  // Tile classification for a block of rows [i0, i1) and keys [j0, j1) (half-open).
  // fully_hidden: no (i, j) in the block is visible -> the tile is skipped.
  // fully_visible: every (i, j) is visible -> no element mask is needed.
  FLASHPP_HD bool tile_fully_hidden(std::int64_t i0, std::int64_t i1, std::int64_t j0,
                                    std::int64_t j1) const {
    // visible j for row i is [i+s-left, i+s+right]; the union over rows is
    // [i0+s-left, i1-1+s+right].
    return j1 - 1 < i0 + shift - left || j0 > i1 - 1 + shift + right;
  }
  FLASHPP_HD bool tile_fully_visible(std::int64_t i0, std::int64_t i1, std::int64_t j0,
                                     std::int64_t j1) const {
    // every row must see every key: j0 >= (i1-1)+s-left and j1-1 <= i0+s+right.
    return j0 >= i1 - 1 + shift - left && j1 - 1 <= i0 + shift + right;
  }
  // The same question for every tile of `rows` rows at once, for keys [j0, j1): the tile from
  // row i0 is fully visible exactly when first_row <= i0 <= last_row (the bounds below; an
  // inactive mask gives a range around every row a problem can have). For loops over row tiles
  // that would otherwise ask tile_fully_visible for each.
  struct RowStarts {
    std::int64_t first_row, last_row;
  };
  FLASHPP_HD RowStarts fully_visible_row_starts(std::int64_t j0, std::int64_t j1,
                                                std::int64_t rows) const {
    return RowStarts{j1 - 1 - shift - right, j0 - rows + 1 - shift + left};
  }
  // The tile of `rows` rows from row i0 sees some key of [j0, j1) (it is not fully hidden)
  // exactly when first_row <= i0 <= last_row.
  FLASHPP_HD RowStarts seeing_row_starts(std::int64_t j0, std::int64_t j1, std::int64_t rows) const {
    return RowStarts{j0 - rows + 1 - shift - right, j1 - 1 - shift + left};
  }
};

}  // namespace flashpp::detail
