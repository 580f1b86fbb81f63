// The snake walk of the sm90 forward's persistent grid (snake_next in
// src/cuda/common/block_order.cuh; FLASHPP_SM90_FWD_WALK=snake): plain integer arithmetic, so it
// is checked here on the CPU. Every launch position must be taken by exactly one block, and the
// blocks' loads under a causal mask must come out balanced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cuda/common/block_order.cuh"

namespace {

using flashpp::cuda::block_item;
using flashpp::cuda::BlockItem;
using flashpp::cuda::heads_per_group;
using flashpp::cuda::snake_next;

// The positions block `block` of `blocks` takes, in order.
std::vector<std::int64_t> walk_of(std::int64_t items, std::int64_t group_items,
                                  std::int64_t blocks, std::int64_t block) {
  std::vector<std::int64_t> taken;
  std::int64_t group_start = 0, round = 0, linear = -1;
  while (snake_next(items, group_items, blocks, block, group_start, round, linear)) {
    taken.push_back(linear);
    if (taken.size() > static_cast<std::size_t>(items)) break;  // a runaway walk fails below
  }
  return taken;
}

// Every position 0 .. items-1 is taken exactly once, by full and partial groups, with fewer,
// as many and more blocks than a group has items.
TEST(SnakeWalk, EveryItemExactlyOnce) {
  for (std::int64_t tiles : {1, 2, 7, 8, 32, 128}) {
    for (std::int64_t heads : {1, 3, 16, 37, 128}) {
      for (std::int64_t group : {std::int64_t{1}, std::int64_t{2}, std::int64_t{8}, heads}) {
        const std::int64_t items = tiles * heads;
        for (std::int64_t blocks : {1, 2, 3, 7, 64, 132, 133, 264, 1000}) {
          if (blocks > items) continue;  // the persistent grid has at most one block per item
          std::vector<int> count(static_cast<std::size_t>(items), 0);
          for (std::int64_t b = 0; b < blocks; ++b) {
            const std::vector<std::int64_t> taken = walk_of(items, group * tiles, blocks, b);
            for (std::int64_t linear : taken) {
              ASSERT_GE(linear, 0);
              ASSERT_LT(linear, items);
              ++count[static_cast<std::size_t>(linear)];
            }
          }
          for (std::int64_t i = 0; i < items; ++i) {
            ASSERT_EQ(count[static_cast<std::size_t>(i)], 1)
                << "position " << i << " tiles " << tiles << " heads " << heads << " group "
                << group << " blocks " << blocks;
          }
        }
      }
    }
  }
}

// A block's positions ascend (its items come group after group, in the head-group order that
// keeps the heads in flight sharing K/V in L2), and the first round of a launch is
// block b -> position b, as in the stride walk.
TEST(SnakeWalk, PositionsAscendPerBlock) {
  const std::int64_t tiles = 8, heads = 128, group = 32, blocks = 132;
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::vector<std::int64_t> taken = walk_of(tiles * heads, group * tiles, blocks, b);
    ASSERT_FALSE(taken.empty());
    EXPECT_EQ(taken.front(), b);
    EXPECT_TRUE(std::is_sorted(taken.begin(), taken.end())) << "block " << b;
  }
}

// One group over all items is the plain snake: b, 2G-1-b, 2G+b, 4G-1-b, ...
TEST(SnakeWalk, OneGroupIsThePlainSnake) {
  const std::int64_t items = 100, blocks = 7;
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::vector<std::int64_t> expected;
    for (std::int64_t r = 0; r * blocks < items; ++r) {
      const std::int64_t p = r * blocks + (r % 2 == 0 ? b : blocks - 1 - b);
      if (p < items) expected.push_back(p);
    }
    EXPECT_EQ(walk_of(items, items, blocks, b), expected) << "block " << b;
  }
}

// Load balance under a causal mask, in a list model: an item of rank r costs its key tiles
// (tiles - r for square causal with equal query and key tiles) plus a fixed 0.3 tile; a block's
// load is the sum of its items' costs. The benchmark grid (B=4, H=32, 128-row tiles, N 1024 ..
// 16384) on 132 blocks, groups as launch_query_tiles sizes them: the busiest block within 2% of
// the mean (the stride walk of today's FLASHPP_SM90_FWD_PERSISTENT=1 reaches 0.74 of it at
// N=1024, 0.79 at 2048).
TEST(SnakeWalk, BalancedUnderCausalMask) {
  const std::int64_t heads = 128, blocks = 132;
  for (std::int64_t n : {1024, 2048, 4096, 8192, 16384}) {
    const std::int64_t tiles = n / 128;
    const std::int64_t group = heads_per_group(true, tiles, heads, blocks);
    const std::int64_t items = tiles * heads;
    std::vector<double> load(static_cast<std::size_t>(blocks), 0.0);
    for (std::int64_t b = 0; b < blocks; ++b) {
      for (std::int64_t linear : walk_of(items, group * tiles, blocks, b)) {
        const BlockItem item = block_item(linear, tiles, heads, group);
        load[static_cast<std::size_t>(b)] += static_cast<double>(tiles - item.rank) + 0.3;
      }
    }
    const double mean = std::accumulate(load.begin(), load.end(), 0.0) / blocks;
    const double busiest = *std::max_element(load.begin(), load.end());
    EXPECT_GE(mean / busiest, 0.98) << "N " << n << " group " << group;
  }
}

}  // namespace
