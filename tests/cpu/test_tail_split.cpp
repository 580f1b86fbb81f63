// The split of the backward main kernel's last wave (src/cuda/common/tail_split.hpp): plain
// integer arithmetic, so it is checked here on the CPU, where CI runs.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/common/backward_workspace.hpp"
#include "cuda/common/tail_split.hpp"

namespace {

using flashpp::cuda::kMaxSplitUnits;
using flashpp::cuda::main_key_rows;
using flashpp::cuda::split_unit_floats;
using flashpp::cuda::split_unit_rows;
using flashpp::cuda::pair_block_split_index;
using flashpp::cuda::pair_plan;
using flashpp::cuda::piece_steps;
using flashpp::cuda::plan_grid_split;
using flashpp::cuda::plan_masked_split;
using flashpp::cuda::plan_pair_tail_split;
using flashpp::cuda::plan_tail_split;
using flashpp::cuda::StepRange;
using flashpp::cuda::TailSplit;
using flashpp::cuda::unit_piece;
using flashpp::cuda::UnitPiece;

// Every step of every unit is walked by exactly one block, and the blocks of a split unit are
// consecutive and non-empty.
TEST(TailSplit, EveryStepExactlyOnce) {
  for (std::int64_t units : {1, 3, 4, 100, 131, 132, 136, 200, 4096}) {
    for (std::int64_t steps : {1, 2, 3, 32, 64}) {
      for (std::int64_t slots : {1, 2, 132, 264}) {
        const TailSplit plan = plan_tail_split(units, steps, slots, true);
        ASSERT_EQ(plan.whole_units + plan.split_units, units);
        ASSERT_GE(plan.pieces, 1);
        ASSERT_LE(plan.pieces, steps > 1 ? steps : 1);
        std::vector<std::vector<int>> walked(units, std::vector<int>(steps, 0));
        for (std::int64_t linear = 0; linear < plan.blocks(); ++linear) {
          const UnitPiece piece = unit_piece(plan, linear);
          ASSERT_GE(piece.unit, 0);
          ASSERT_LT(piece.unit, units);
          EXPECT_EQ(piece.split_index >= 0, piece.unit >= plan.whole_units);
          const StepRange range = piece_steps(plan, piece, steps);
          EXPECT_LT(range.begin, range.end) << "an empty piece";
          for (std::int64_t s = range.begin; s < range.end; ++s) ++walked[piece.unit][s];
        }
        for (std::int64_t u = 0; u < units; ++u) {
          for (std::int64_t s = 0; s < steps; ++s) {
            ASSERT_EQ(walked[u][s], 1) << "units " << units << " steps " << steps << " slots "
                                       << slots << " unit " << u << " step " << s;
          }
        }
      }
    }
  }
}

// The last wave of B=4, H=32, N=4096 at 128-key tiles on 132 SMs (4 units) is cut into 32
// one-step pieces; a full last wave, a large one, or a forbidden split leaves the grid whole.
TEST(TailSplit, SplitsOnlySmallLastWaves) {
  const TailSplit bench = plan_tail_split(4096, 32, 132, true);
  EXPECT_EQ(bench.whole_units, 4092);
  EXPECT_EQ(bench.split_units, 4);
  EXPECT_EQ(bench.pieces, 32);
  EXPECT_EQ(bench.blocks(), 4092 + 128);

  EXPECT_EQ(plan_tail_split(16384, 128, 132, true).split_units, 16);  // 124 waves + 16 units
  EXPECT_EQ(plan_tail_split(16384, 128, 132, true).pieces, 8);
  EXPECT_EQ(plan_tail_split(3, 4, 132, true).pieces, 4);  // fewer units than slots: capped by steps

  EXPECT_EQ(plan_tail_split(264, 32, 132, true).pieces, 1);   // no partial wave
  EXPECT_EQ(plan_tail_split(200, 32, 132, true).pieces, 1);   // last wave of 68 > 132 / 2
  EXPECT_EQ(plan_tail_split(4096, 32, 132, false).pieces, 1);  // masks, deterministic mode
  EXPECT_EQ(plan_tail_split(4096, 1, 132, true).pieces, 1);    // one step cannot be split
  // No more split units than the workspace holds.
  EXPECT_EQ(plan_tail_split(kMaxSplitUnits + 1, 8, 1000, true).pieces, 1);
  EXPECT_EQ(plan_tail_split(kMaxSplitUnits, 8, 1000, true).split_units, kMaxSplitUnits);
}

// Masked grids (the sm90 backward): at most a wave of units, each cut into about two waves' worth
// of pieces (at least two, at most its steps); larger grids, one step or a forbidden split stay
// whole. Every step of a unit whose own step count is below the plan's maximum is walked once too
// (the kernel cuts a unit's own steps; pieces past them are empty).
TEST(TailSplit, MaskedGridsSplitWhole) {
  const TailSplit mqa = plan_masked_split(32, 1024, 132, 2, true);  // B=1 H=16:1 N=4096 D=128
  EXPECT_EQ(mqa.whole_units, 0);
  EXPECT_EQ(mqa.split_units, 32);
  EXPECT_EQ(mqa.pieces, 8);
  EXPECT_EQ(plan_masked_split(44, 128, 132, 2, true).pieces, 6);   // B=1 H=16:4 N=2048 D=64
  EXPECT_EQ(plan_masked_split(128, 512, 132, 2, true).pieces, 2);  // a wave: two pieces
  EXPECT_EQ(plan_masked_split(44, 128, 132, 1, true).pieces, 3);   // one wave of pieces
  EXPECT_EQ(plan_masked_split(4, 5, 132, 2, true).pieces, 5);      // capped by the steps
  EXPECT_EQ(plan_masked_split(133, 512, 132, 2, true).split_units, 0);  // more than a wave
  EXPECT_EQ(plan_masked_split(133, 512, 132, 2, true).whole_units, 133);
  EXPECT_EQ(plan_masked_split(32, 1, 132, 2, true).split_units, 0);     // one step
  EXPECT_EQ(plan_masked_split(32, 64, 132, 2, false).split_units, 0);   // not allowed
  EXPECT_EQ(plan_masked_split(kMaxSplitUnits + 1, 64, 1000, 2, true).split_units, 0);
  for (std::int64_t units : {1, 7, 44, 66, 100, 132}) {
    const std::int64_t steps = 40;
    const TailSplit plan = plan_masked_split(units, steps, 132, 2, true);
    for (std::int64_t own : {1, 3, 17, 40}) {  // a unit's own step count under the mask
      std::vector<int> walked(own, 0);
      for (std::int64_t p = 0; p < plan.pieces; ++p) {
        const StepRange r = piece_steps(plan, UnitPiece{0, 0, p}, own);
        for (std::int64_t s = r.begin; s < r.end; ++s) ++walked[s];
      }
      for (std::int64_t s = 0; s < own; ++s) ASSERT_EQ(walked[s], 1) << units << " " << own;
    }
  }
}

// Unmasked grids of at most a wave (sm90 backward): the piece count whose waves end first, the
// smallest of equals; with one wave allowed, plan_tail_split's plan for such grids.
TEST(TailSplit, UnmaskedGridsSplitWhole) {
  EXPECT_EQ(plan_grid_split(48, 64, 132, 2, true).pieces, 5);   // B=1 H=32:8 N=1024 D=64
  EXPECT_EQ(plan_grid_split(48, 64, 132, 2, true).whole_units, 0);
  EXPECT_EQ(plan_grid_split(32, 64, 132, 2, true).pieces, 4);   // 8 ties with 4: the fewer
  EXPECT_EQ(plan_grid_split(88, 64, 132, 2, true).pieces, 3);   // 2 waves of 1/3
  EXPECT_EQ(plan_grid_split(89, 64, 132, 2, true).split_units, 0);  // 3 waves of 1/3: no gain
  EXPECT_EQ(plan_grid_split(80, 64, 132, 2, true).pieces, 3);   // 2 waves of 1/3
  EXPECT_EQ(plan_grid_split(128, 64, 132, 2, true).split_units, 0);  // nothing to gain
  EXPECT_EQ(plan_grid_split(110, 64, 132, 2, true).split_units, 0);  // 5/6: below 1/5 gained
  EXPECT_EQ(plan_grid_split(48, 3, 132, 2, true).pieces, 2);    // capped by the steps
  // Pieces past one wave walk at least kMinWavePieceSteps steps: 59 steps allow 4 (2 waves of
  // 1/4, no better than one wave of halves), 14 steps none (session 35 run 2: 84 units of 14
  // steps at D=128 ran 22% slower in three pieces than whole).
  EXPECT_EQ(plan_grid_split(48, 59, 132, 2, true).pieces, 2);
  EXPECT_EQ(plan_grid_split(84, 14, 132, 2, true).split_units, 0);
  EXPECT_EQ(plan_grid_split(80, 80, 132, 2, true).pieces, 3);   // B=2 H=16:4 N=1280 D=128
  EXPECT_EQ(plan_grid_split(80, 35, 132, 2, true).split_units, 0);
  EXPECT_EQ(plan_grid_split(48, 1, 132, 2, true).split_units, 0);
  EXPECT_EQ(plan_grid_split(133, 64, 132, 2, true).split_units, 0);  // more than a wave
  EXPECT_EQ(plan_grid_split(48, 64, 132, 2, false).split_units, 0);
  for (std::int64_t units = 1; units <= 132; ++units) {
    for (std::int64_t steps : {2, 5, 64}) {
      const TailSplit one = plan_grid_split(units, steps, 132, 1, true);
      const TailSplit tail = plan_tail_split(units, steps, 132, true);
      ASSERT_EQ(one.pieces, tail.pieces) << units << " " << steps;
      ASSERT_EQ(one.split_units, tail.split_units) << units << " " << steps;
      const TailSplit two = plan_grid_split(units, steps, 132, 2, true);
      // Never later than the one-wave plan: waves of pieces times a piece's share.
      const std::int64_t w1 = (units * one.pieces + 131) / 132, w2 = (units * two.pieces + 131) / 132;
      ASSERT_LE(w2 * one.pieces, w1 * two.pieces) << units << " " << steps;
    }
  }
}

// The pairs' split (sm90 backward, D=128): planned in pairs, counted in key tiles. Every step of
// every key tile is walked by exactly one block of the launch (block 2c + r: tile r of cluster
// c's pair), both blocks of a cluster walk the same step range, and a split tile's sums index
// (pair_block_split_index) is the one the postprocess reads for that tile (whole_units + index).
TEST(TailSplit, PairedLastWaveSplitByPairs) {
  const TailSplit n4096 = plan_pair_tail_split(2048, 32, 64, 66, true);  // B=4 H=32 N=4096
  EXPECT_EQ(n4096.whole_units, 4092);
  EXPECT_EQ(n4096.split_units, 4);
  EXPECT_EQ(n4096.pieces, 33);
  const TailSplit n16384 = plan_pair_tail_split(4096, 128, 256, 66, true);  // B=2 N=16384
  EXPECT_EQ(n16384.whole_units, 8184);
  EXPECT_EQ(n16384.split_units, 8);
  EXPECT_EQ(n16384.pieces, 16);
  EXPECT_EQ(plan_pair_tail_split(2048, 31, 64, 66, true).split_units, 0);  // a pair per head odd
  EXPECT_EQ(plan_pair_tail_split(2048, 32, 64, 66, false).split_units, 0);
  EXPECT_EQ(plan_pair_tail_split(66 * 31, 32, 64, 66, true).split_units, 0);  // whole waves
  EXPECT_EQ(plan_pair_tail_split(50 + 66, 2, 64, 66, true).split_units, 0);   // 50 > half
  for (std::int64_t pair_units : {1, 3, 12, 33, 68, 70, 2048}) {
    for (std::int64_t steps : {2, 3, 64}) {
      for (std::int64_t pair_slots : {2, 60, 66}) {
        const TailSplit plan = plan_pair_tail_split(pair_units, 8, steps, pair_slots, true);
        const std::int64_t tiles = 2 * pair_units;
        ASSERT_EQ(plan.whole_units + plan.split_units, tiles);
        ASSERT_EQ(plan.whole_units % 2, 0);
        const TailSplit pairs = pair_plan(plan);
        ASSERT_EQ(2 * pairs.blocks(), plan.blocks());
        std::vector<std::vector<int>> walked(tiles, std::vector<int>(steps, 0));
        for (std::int64_t block = 0; block < plan.blocks(); ++block) {
          const UnitPiece piece = unit_piece(pairs, block / 2);
          const std::int64_t tile = 2 * piece.unit + block % 2;
          const int index = pair_block_split_index(plan, static_cast<unsigned>(block));
          if (piece.split_index < 0) {
            ASSERT_EQ(index, -1);
          } else {
            ASSERT_EQ(index, 2 * piece.split_index + block % 2);
            ASSERT_EQ(plan.whole_units + index, tile);
            ASSERT_LT(index, plan.split_units);
          }
          const StepRange r = piece_steps(pairs, piece, steps);
          for (std::int64_t s = r.begin; s < r.end; ++s) ++walked[tile][s];
        }
        for (std::int64_t t = 0; t < tiles; ++t) {
          for (std::int64_t s = 0; s < steps; ++s) {
            ASSERT_EQ(walked[t][s], 1) << pair_units << " " << steps << " " << pair_slots;
          }
        }
      }
    }
  }
}

// A split unit's sums (dV and dK, float32) hold the key tile of every family that splits: the sm80
// main kernel's (main_key_rows) and the sm90 kernel's at D=64 (three consumers of 64 keys: 192)
// and at 96 / 128 (two: 128). The GQA 32:8 D=64 N=1024 case of session 33 splits 60 such units.
TEST(TailSplit, UnitSumsHoldEveryFamilysKeyTile) {
  for (int width : {32, 40, 48, 56, 64, 72, 80, 96, 104, 112, 120, 128, 160, 192, 224, 256}) {
    EXPECT_GE(split_unit_rows(width), main_key_rows(width)) << width;
    EXPECT_EQ(split_unit_floats(width), 2u * static_cast<unsigned>(split_unit_rows(width) * width));
  }
  EXPECT_GE(split_unit_rows(64), 192);
  EXPECT_GE(split_unit_rows(96), 128);
  EXPECT_GE(split_unit_rows(128), 128);
  const TailSplit gqa = plan_tail_split(6 * 32, 16 * 4, 132, true);  // 6 tiles x 32 kv heads
  EXPECT_EQ(gqa.whole_units, 132);
  EXPECT_EQ(gqa.split_units, 60);
  EXPECT_EQ(gqa.pieces, 2);
}

}  // namespace
