// The launch order of the CUDA kernels' (tile, head) work items (src/cuda/common/block_order.cuh):
// plain integer arithmetic, so it is checked here on the CPU, where CI runs.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <utility>

#include "cuda/common/block_order.cuh"

namespace {

using flashpp::cuda::block_item;
using flashpp::cuda::BlockItem;
using flashpp::cuda::heads_per_group;
using flashpp::cuda::last_tiles_first_item;

// Every (rank, head) is taken by exactly one launch position, for full and partial last groups.
TEST(BlockOrder, EveryItemExactlyOnce) {
  for (std::int64_t tiles : {1, 2, 7, 32}) {
    for (std::int64_t heads : {1, 3, 16, 37, 128}) {
      for (std::int64_t group : {std::int64_t{1}, std::int64_t{2}, std::int64_t{8}, heads}) {
        std::set<std::pair<std::int64_t, std::int64_t>> seen;
        for (std::int64_t linear = 0; linear < tiles * heads; ++linear) {
          const BlockItem item = block_item(linear, tiles, heads, group);
          ASSERT_GE(item.rank, 0);
          ASSERT_LT(item.rank, tiles);
          ASSERT_GE(item.head, 0);
          ASSERT_LT(item.head, heads);
          seen.emplace(item.rank, item.head);
        }
        EXPECT_EQ(static_cast<std::int64_t>(seen.size()), tiles * heads)
            << "tiles " << tiles << " heads " << heads << " group " << group;
      }
    }
  }
}

// One head per group is the plain order: a head's tiles one after the other, rank 0 first.
TEST(BlockOrder, GroupOfOneIsHeadByHead) {
  for (std::int64_t linear = 0; linear < 5 * 9; ++linear) {
    const BlockItem item = block_item(linear, 5, 9, 1);
    EXPECT_EQ(item.head, linear / 5);
    EXPECT_EQ(item.rank, linear % 5);
  }
}

// Within a group the ranks never decrease (longest first), and groups follow each other.
TEST(BlockOrder, RanksAscendWithinAGroup) {
  const std::int64_t tiles = 6, heads = 10, group = 4;  // groups of 4, 4 and 2 heads
  std::int64_t previous_rank = 0, previous_group = 0;
  for (std::int64_t linear = 0; linear < tiles * heads; ++linear) {
    const BlockItem item = block_item(linear, tiles, heads, group);
    const std::int64_t g = item.head / group;
    ASSERT_GE(g, previous_group);
    if (g == previous_group) {
      ASSERT_GE(item.rank, previous_rank);
    }
    previous_group = g;
    previous_rank = item.rank;
  }
}

// The last tiles of every head first, then the other tiles head by head; every item once.
TEST(BlockOrder, LastTilesFirst) {
  for (std::int64_t tiles : {1, 2, 6, 22}) {
    for (std::int64_t heads : {1, 3, 128}) {
      std::set<std::pair<std::int64_t, std::int64_t>> seen;
      for (std::int64_t linear = 0; linear < tiles * heads; ++linear) {
        const BlockItem item = last_tiles_first_item(linear, tiles, heads);
        ASSERT_GE(item.rank, 0);
        ASSERT_LT(item.rank, tiles);
        ASSERT_GE(item.head, 0);
        ASSERT_LT(item.head, heads);
        if (linear < heads) {
          EXPECT_EQ(item.rank, 0);
          EXPECT_EQ(item.head, linear);
        } else {
          EXPECT_GT(item.rank, 0);
          EXPECT_EQ(item.head, (linear - heads) / (tiles - 1));
        }
        seen.emplace(item.rank, item.head);
      }
      EXPECT_EQ(static_cast<std::int64_t>(seen.size()), tiles * heads)
          << "tiles " << tiles << " heads " << heads;
    }
  }
}

TEST(BlockOrder, GroupSize) {
  // Equal costs (no mask): head by head.
  EXPECT_EQ(heads_per_group(false, 32, 128, 264), 1);
  // Unequal costs: the smallest power of two giving >= 1.5 waves (2 * g * tiles >= 3 * slots).
  EXPECT_EQ(heads_per_group(true, 32, 128, 264), 16);   // 16 * 32 = 512 >= 396
  EXPECT_EQ(heads_per_group(true, 128, 128, 132), 2);   // 2 * 128 = 256 >= 198
  EXPECT_EQ(heads_per_group(true, 1024, 128, 132), 1);  // one head already spans many waves
  // Capped at the number of heads.
  EXPECT_EQ(heads_per_group(true, 4, 3, 264), 3);
  EXPECT_EQ(heads_per_group(true, 0, 8, 264), 1);
}

}  // namespace
