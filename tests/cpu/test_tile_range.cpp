// key_tile_range (src/cuda/common/tile_range.hpp), the one function every CUDA kernel family uses
// to pick the key tiles a query tile visits and the ones that need an element mask, against the
// mask's own per-tile rules, over random masks, lengths and tile shapes.
#include <gtest/gtest.h>

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

TEST(TileRange, MatchesBruteForce) {
  std::mt19937_64 rng(12345);
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 4000; ++trial) {
    const std::int64_t Nq = pick(1, 300), Nk = pick(1, 300);
    const std::int64_t block_m = pick(0, 1) ? 64 : 128;
    const std::int64_t block_n = std::int64_t(16) << pick(0, 3);
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

}  // namespace
}  // namespace flashpp
