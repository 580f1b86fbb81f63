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
using flashpp::cuda::piece_steps;
using flashpp::cuda::plan_masked_split;
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
