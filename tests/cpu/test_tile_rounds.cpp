// The sm90 forward's choice of query-tile height by the persistent grid's rounds
// (src/cuda/sm90/forward/tile_rounds.hpp): plain integer arithmetic, checked on the CPU.
#include <gtest/gtest.h>

#include "cuda/sm90/forward/tile_rounds.hpp"

namespace {

using flashpp::cuda::sm90::tall_rounds_pay;

// B=2 H=32 Nq=2000 on 132 blocks: 11 x 64 = 704 tall items take 6 rounds (1152 rows), 16 x 64 =
// 1024 two-warpgroup items 8 (1024 rows): 12.5% more rows, beyond 5%.
TEST(TileRounds, MoreRowsThanTheSlackKeepTheTwoWarpgroupTile) {
  EXPECT_FALSE(tall_rounds_pay(2000, 64, 132, 5));
  EXPECT_TRUE(tall_rounds_pay(2000, 64, 132, 13));
}

// B=4 H=32 N=4096: 22 rounds of 192 rows (4224) against 32 of 128 (4096), 3.1% more.
TEST(TileRounds, WithinTheSlackTakesTheTallTile) {
  EXPECT_TRUE(tall_rounds_pay(4096, 128, 132, 5));
  EXPECT_FALSE(tall_rounds_pay(4096, 128, 132, 3));
}

// N=1536: 8 tall tiles a head, 12 two-warpgroup ones; 8 and 12 rounds on 128 blocks, the same rows.
TEST(TileRounds, EqualRowsTakeTheTallTile) {
  EXPECT_TRUE(tall_rounds_pay(1536, 128, 128, 0));
  // One block: every item is its own round; 11 x 192 = 2112 rows against 16 x 128 = 2048.
  EXPECT_FALSE(tall_rounds_pay(2048, 1, 1, 3));
  EXPECT_TRUE(tall_rounds_pay(2048, 1, 1, 4));
}

}  // namespace
