// The sm90 forward's split walk (src/cuda/sm90/forward/split_walk.hpp): plain integer arithmetic,
// checked here on the CPU, where CI runs. What the kernel relies on: every (item, key tile) is
// walked by exactly one block; an item is cut at most once, into a piece that ends a ticket's run
// (written first in that block's walk) and one that starts the next ticket's run (merged last in
// that block's walk, from the slot of the ticket before); the runs are as equal as integers allow.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/sm90/forward/split_walk.hpp"

namespace {

using flashpp::cuda::sm90::PieceEnd;
using flashpp::cuda::sm90::plan_split_walk;
using flashpp::cuda::sm90::split_piece;
using flashpp::cuda::sm90::split_run;
using flashpp::cuda::sm90::split_workspace_bytes;
using flashpp::cuda::sm90::SplitPiece;
using flashpp::cuda::sm90::SplitRun;
using flashpp::cuda::sm90::SplitWalkPlan;

// The pieces of a ticket's run, in the order the block walks them (ItemWalk<split>::for_each).
std::vector<SplitPiece> run_pieces(const SplitWalkPlan& plan, std::int64_t ticket) {
  std::vector<SplitPiece> pieces;
  const SplitRun run = split_run(plan, ticket);
  for (std::int64_t i = run.last; i >= run.first; --i) pieces.push_back(split_piece(plan, run, ticket, i));
  return pieces;
}

TEST(SplitWalk, NoSplitWhereTheLastRoundIsFullOrThereIsNothingToCut) {
  EXPECT_FALSE(plan_split_walk(4096, 32, 128).splits());  // 32 full rounds
  EXPECT_FALSE(plan_split_walk(100, 32, 132).splits());   // fewer items than blocks
  EXPECT_FALSE(plan_split_walk(132, 32, 132).splits());
  EXPECT_FALSE(plan_split_walk(4096, 1, 132).splits());  // one key tile: nothing to cut
  EXPECT_FALSE(plan_split_walk(4096, 32, 1).splits());
  const SplitWalkPlan plan = plan_split_walk(4096, 32, 132);  // B=4 H=32 N=4096 at D=128
  ASSERT_TRUE(plan.splits());
  EXPECT_EQ(plan.whole_items, 30 * 132);
  EXPECT_EQ(plan.steps, (4096 - 30 * 132) * 32);
}

TEST(SplitWalk, EveryKeyTileOnceAndEveryCutPaired) {
  for (std::int64_t items : {3, 5, 7, 133, 263, 1024, 4096, 8192}) {
    for (std::int64_t tiles : {2, 3, 8, 32, 128}) {
      for (std::int64_t blocks : {2, 3, 132}) {
        const SplitWalkPlan plan = plan_split_walk(items, tiles, blocks);
        if (!plan.splits()) continue;
        SCOPED_TRACE(testing::Message() << items << " items, " << tiles << " tiles, " << blocks << " blocks");
        ASSERT_GE(items - plan.whole_items, blocks + 1);
        ASSERT_LT(items - plan.whole_items, 2 * blocks);
        ASSERT_EQ(plan.whole_items % blocks, 0);
        const std::int64_t split_items = items - plan.whole_items;
        std::vector<std::vector<int>> walked(split_items, std::vector<int>(tiles, 0));
        std::vector<int> written(blocks, 0), merged(blocks, 0);
        std::int64_t shortest = plan.steps, longest = 0;
        for (std::int64_t ticket = 0; ticket < blocks; ++ticket) {
          const std::vector<SplitPiece> pieces = run_pieces(plan, ticket);
          ASSERT_FALSE(pieces.empty());
          std::int64_t steps = 0;
          for (std::size_t k = 0; k < pieces.size(); ++k) {
            const SplitPiece& p = pieces[k];
            ASSERT_GE(p.item, 0);
            ASSERT_LT(p.item, split_items);
            ASSERT_LT(p.lo, p.hi);
            for (std::int64_t j = p.lo; j < p.hi; ++j) ++walked[p.item][j];
            steps += p.hi - p.lo;
            if (p.end == PieceEnd::write_partial) {
              EXPECT_EQ(k, 0u) << "the written piece comes first in the block's walk";
              EXPECT_EQ(p.lo, 0);
              EXPECT_EQ(p.slot, ticket);
              ++written[ticket];
            } else if (p.end == PieceEnd::merge_partial) {
              EXPECT_EQ(k, pieces.size() - 1) << "the merged piece comes last";
              EXPECT_EQ(p.hi, tiles);
              ASSERT_GE(p.slot, 0);
              EXPECT_EQ(p.slot, ticket - 1);
              // The piece before the cut is the one the ticket before writes.
              const std::vector<SplitPiece> before = run_pieces(plan, ticket - 1);
              EXPECT_EQ(before.front().end, PieceEnd::write_partial);
              EXPECT_EQ(before.front().item, p.item);
              EXPECT_EQ(before.front().hi, p.lo);
              ++merged[ticket - 1];
            } else {
              EXPECT_EQ(p.lo, 0);
              EXPECT_EQ(p.hi, tiles);
            }
          }
          shortest = steps < shortest ? steps : shortest;
          longest = steps > longest ? steps : longest;
        }
        for (std::int64_t i = 0; i < split_items; ++i)
          for (std::int64_t j = 0; j < tiles; ++j) ASSERT_EQ(walked[i][j], 1) << "item " << i << " tile " << j;
        for (std::int64_t t = 0; t < blocks; ++t) EXPECT_EQ(written[t], merged[t]) << "ticket " << t;
        EXPECT_LE(longest - shortest, 1);
        EXPECT_GE(shortest, tiles);  // a run holds at least one item's tiles: one cut per item
      }
    }
  }
}

TEST(SplitWalk, WorkspaceHoldsFlagsThenAlignedPartials) {
  // 132 blocks of two consumer warpgroups at D=128: 265 flag words, then 132 slots of 256
  // threads x 17 float4.
  EXPECT_EQ(split_workspace_bytes(132, 2, 16), 1280u + 132u * 256u * 17u * 16u);
}

}  // namespace
