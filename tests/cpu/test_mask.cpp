// src/common/mask.hpp: tile classification and key ranges agree with Mask::visible,
// exhaustively on small grids over shifts and window sizes (bounded and unbounded).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/mask.hpp"

namespace {

using flashpp::detail::kNoLimit;
using flashpp::detail::Mask;

std::vector<Mask> masks_to_check() {
  std::vector<Mask> masks;
  const std::int64_t limits[] = {0, 1, 2, 3, 5, kNoLimit};
  for (std::int64_t shift = -6; shift <= 6; ++shift)
    for (std::int64_t left : limits)
      for (std::int64_t right : limits) masks.push_back(Mask{shift, left, right});
  return masks;
}

constexpr std::int64_t kNq = 9, kNk = 9;

TEST(MaskRule, VisibleFollowsTheDocumentedFormula) {
  for (const Mask& m : masks_to_check()) {
    for (std::int64_t i = 0; i < kNq; ++i) {
      for (std::int64_t j = 0; j < kNk; ++j) {
        const std::int64_t diagonal = i + m.shift;
        const bool expected = j >= diagonal - m.left && j <= diagonal + m.right;
        ASSERT_EQ(m.visible(i, j), expected) << "shift " << m.shift << " left " << m.left
                                             << " right " << m.right << " i " << i << " j " << j;
      }
    }
  }
}

TEST(MaskRule, TileClassificationAgreesWithVisible) {
  for (const Mask& m : masks_to_check()) {
    for (std::int64_t i0 = 0; i0 < kNq; ++i0)
      for (std::int64_t i1 = i0 + 1; i1 <= kNq; ++i1)
        for (std::int64_t j0 = 0; j0 < kNk; ++j0)
          for (std::int64_t j1 = j0 + 1; j1 <= kNk; ++j1) {
            bool any = false, all = true;
            for (std::int64_t i = i0; i < i1; ++i)
              for (std::int64_t j = j0; j < j1; ++j) {
                any = any || m.visible(i, j);
                all = all && m.visible(i, j);
              }
            ASSERT_EQ(m.tile_fully_hidden(i0, i1, j0, j1), !any)
                << "shift " << m.shift << " left " << m.left << " right " << m.right
                << " rows [" << i0 << "," << i1 << ") keys [" << j0 << "," << j1 << ")";
            ASSERT_EQ(m.tile_fully_visible(i0, i1, j0, j1), all)
                << "shift " << m.shift << " left " << m.left << " right " << m.right
                << " rows [" << i0 << "," << i1 << ") keys [" << j0 << "," << j1 << ")";
            const Mask::RowStarts starts = m.fully_visible_row_starts(j0, j1, i1 - i0);
            ASSERT_EQ(starts.first_row <= i0 && i0 <= starts.last_row, all)
                << "shift " << m.shift << " left " << m.left << " right " << m.right
                << " rows [" << i0 << "," << i1 << ") keys [" << j0 << "," << j1 << ")";
            const Mask::RowStarts seeing = m.seeing_row_starts(j0, j1, i1 - i0);
            ASSERT_EQ(seeing.first_row <= i0 && i0 <= seeing.last_row, any)
                << "shift " << m.shift << " left " << m.left << " right " << m.right
                << " rows [" << i0 << "," << i1 << ") keys [" << j0 << "," << j1 << ")";
          }
  }
}

TEST(MaskRule, KeyRangeAgreesWithVisible) {
  for (const Mask& m : masks_to_check()) {
    for (std::int64_t i = 0; i < kNq; ++i) {
      const std::int64_t first = m.first_key(i), last = m.last_key(i, kNk);
      for (std::int64_t j = 0; j < kNk; ++j) {
        ASSERT_EQ(m.visible(i, j), j >= first && j <= last)
            << "shift " << m.shift << " left " << m.left << " right " << m.right << " i " << i
            << " j " << j << " range [" << first << "," << last << "]";
      }
    }
  }
}

TEST(MaskRule, ActiveOnlyWithALimit) {
  EXPECT_FALSE((Mask{0, kNoLimit, kNoLimit}.active()));
  EXPECT_FALSE((Mask{5, kNoLimit, kNoLimit}.active()));
  EXPECT_TRUE((Mask{0, kNoLimit, 0}.active()));
  EXPECT_TRUE((Mask{0, 3, kNoLimit}.active()));
}

}  // namespace
