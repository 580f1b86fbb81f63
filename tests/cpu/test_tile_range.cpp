// src/cuda/common/tile_range.hpp, where every CUDA kernel family derives the tiles a block visits
// and the ones that need an element mask, against the mask's per-element rule, over random masks,
// lengths and tile shapes: key_tile_range (a query tile's key tiles), rows_seeing_keys (a key
// tile's query rows), tile_needs_element_test, element_visible and tile_band.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>

#include "common/mask.hpp"
#include "cuda/common/tile_range.hpp"

namespace flashpp {
namespace {

using detail::kNoLimit;
using detail::Mask;

// Does any (i, j) with i in [m0, m_end) and j in tile n (clipped to Nk) see each other?
bool tile_has_visible(const Mask& m, std::int64_t Nk, std::int64_t m0, std::int64_t m_end,
                      std::int64_t n, std::int64_t block_n) {
  for (std::int64_t i = m0; i < m_end; ++i)
    for (std::int64_t j = n * block_n; j < (n + 1) * block_n && j < Nk; ++j)
      if (m.visible(i, j)) return true;
  return false;
}

bool tile_all_visible(const Mask& m, std::int64_t Nk, std::int64_t m0, std::int64_t m_end,
                      std::int64_t n, std::int64_t block_n) {
  if ((n + 1) * block_n > Nk) return false;
  for (std::int64_t i = m0; i < m_end; ++i)
    for (std::int64_t j = n * block_n; j < (n + 1) * block_n; ++j)
      if (!m.visible(i, j)) return false;
  return true;
}

// Random masks of every kind the API produces, for lengths Nq, Nk.
struct RandomMasks {
  std::mt19937_64 rng{12345};
  std::int64_t pick(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  }
  Mask mask(std::int64_t Nq, std::int64_t Nk) {
    Mask m;
    switch (pick(0, 3)) {
      case 0: break;                                      // no mask
      case 1: m.right = 0; break;                         // causal top-left
      case 2: m.right = 0; m.shift = Nk - Nq; break;      // causal bottom-right
      default:                                            // windows
        m.left = pick(0, 1) ? pick(0, 100) : kNoLimit;
        m.right = pick(0, 1) ? pick(0, 100) : kNoLimit;
        m.shift = pick(0, 1) ? Nk - Nq : 0;
    }
    return m;
  }
};

TEST(TileRange, MatchesBruteForce) {
  RandomMasks random;
  auto pick = [&](std::int64_t lo, std::int64_t hi) { return random.pick(lo, hi); };
  for (int trial = 0; trial < 4000; ++trial) {
    const std::int64_t Nq = pick(1, 300), Nk = pick(1, 300);
    const std::int64_t block_m = pick(0, 1) ? 64 : 128;
    const std::int64_t block_n = std::int64_t(16) << pick(0, 3);
    const Mask m = random.mask(Nq, Nk);
    for (std::int64_t m0 = 0; m0 < Nq; m0 += block_m) {
      const std::int64_t m_end = std::min(m0 + block_m, Nq);
      const cuda::KeyTileRange r = cuda::key_tile_range(m, Nk, m0, m_end, block_n);
      const std::int64_t tiles = (Nk + block_n - 1) / block_n;
      for (std::int64_t n = 0; n < tiles; ++n) {
        const bool inside = !r.empty() && n >= r.begin && n < r.end;
        if (tile_has_visible(m, Nk, m0, m_end, n, block_n)) {
          ASSERT_TRUE(inside) << "a tile with visible keys is skipped: trial " << trial << " n " << n;
        }
        if (inside) {
          ASSERT_EQ(r.needs_mask(n), !tile_all_visible(m, Nk, m0, m_end, n, block_n))
              << "trial " << trial << " m0 " << m0 << " n " << n;
        }
      }
      // The visited range is tight: its first and last tiles hold a visible key.
      if (!r.empty()) {
        EXPECT_TRUE(tile_has_visible(m, Nk, m0, m_end, r.begin, block_n));
        EXPECT_TRUE(tile_has_visible(m, Nk, m0, m_end, r.end - 1, block_n));
      }
    }
  }
}

// rows_seeing_keys: exactly the query rows that see some key of the tile (the union of the rows
// each key is seen by is one interval, so the range is tight at both ends).
TEST(TileRange, RowsSeeingKeysMatchBruteForce) {
  RandomMasks random;
  for (int trial = 0; trial < 4000; ++trial) {
    const std::int64_t Nq = random.pick(1, 300), Nk = random.pick(1, 300);
    const std::int64_t block_n = std::int64_t(16) << random.pick(0, 3);
    const Mask m = random.mask(Nq, Nk);
    for (std::int64_t j0 = 0; j0 < Nk; j0 += block_n) {
      const std::int64_t j1 = std::min(j0 + block_n, Nk);
      const cuda::RowRange rows = cuda::rows_seeing_keys(m, j0, j1, Nq);
      ASSERT_LE(rows.begin, rows.end);
      for (std::int64_t i = 0; i < Nq; ++i) {
        bool sees = false;
        for (std::int64_t j = j0; j < j1 && !sees; ++j) sees = m.visible(i, j);
        ASSERT_EQ(sees, i >= rows.begin && i < rows.end)
            << "trial " << trial << " j0 " << j0 << " row " << i;
      }
    }
  }
}

// The per-tile test, the per-element test and the 32-bit band of a key tile x query tile agree
// with the mask and the key bound j < Nk element by element.
TEST(TileRange, TileTestsMatchElementRule) {
  constexpr int kRows = 64, kCols = 32;  // key rows x query columns, as tile_band's template
  RandomMasks random;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::int64_t Nq = random.pick(1, 300), Nk = random.pick(1, 300);
    const Mask m = random.mask(Nq, Nk);
    const std::int64_t j0 = random.pick(0, (Nk - 1) / kRows) * kRows;
    const std::int64_t i0 = random.pick(0, (Nq - 1) / kCols) * kCols;
    const std::int64_t j1 = std::min<std::int64_t>(j0 + kRows, Nk);
    const std::int64_t i1 = std::min<std::int64_t>(i0 + kCols, Nq);
    const cuda::TileBand band = cuda::tile_band<kRows, kCols>(m, j0, j1, i0);
    bool hidden = false;
    for (int row = 0; row < kRows; ++row) {
      for (int col = 0; col < kCols; ++col) {
        const std::int64_t j = j0 + row, i = i0 + col;
        const bool visible = j < Nk && m.visible(i, j);
        ASSERT_EQ(cuda::element_visible(m, Nk, i, j), visible);
        const bool in_band = row - col >= band.lo && row - col <= band.hi && row < band.key_rows;
        ASSERT_EQ(in_band, visible) << "trial " << trial << " row " << row << " col " << col;
        if (i < i1) hidden = hidden || !visible;
      }
    }
    // The per-tile test says "test the elements" exactly when some element of the tile is hidden.
    ASSERT_EQ(cuda::tile_needs_element_test(m, i0, i1, j0, j1, kRows), hidden)
        << "trial " << trial << " i0 " << i0 << " j0 " << j0;
  }
}

}  // namespace
}  // namespace flashpp
