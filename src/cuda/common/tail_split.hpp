// Splitting the last, partial wave of the backward's main kernel (stream-K style); the sm80 and
// the sm90 (kernel.cuh's) families.
//
// Without a mask every (key tile, kv head, batch) unit walks the same number of query steps, so
// the grid runs in waves of `slots` blocks (SMs x blocks per SM). B=4, H=32, N=4096 at 128-key
// tiles is 4096 units on 132 SMs: 31 full waves and a 32nd of 4 blocks, during which 128 SMs
// idle for a whole unit's time (3% of the kernel). Here the units of such a small last wave are
// each cut into `pieces` blocks that walk consecutive ranges of the unit's steps. Each piece adds
// its dV and scale * dK into float32 sums of its unit (workspace, zeroed by the preprocess) with
// atomics, and the postprocess, which runs after the main kernel anyway, writes the sums out
// (split_unit.cuh). The same rule splits grids of fewer units than half a wave (a single long
// sequence), which otherwise leave most SMs idle throughout.
//
// Not used where the order of float additions must not vary (deterministic mode). Under a mask
// units cost different amounts and the longest-first order of block_order.cuh balances the waves;
// there the sm90 family splits only grids of at most one wave, every unit of them (into about two
// waves of pieces, longest units first; sm90/backward/launch.cuh, plan_backward_split), and the
// sm80 family none.
// Plain C++ (host and device): tests/cpu/test_tail_split.cpp checks the plan and the mapping.
#pragma once

#include <cstdint>

#include "../../common/host_device.hpp"

// FLASHPP_BWD_SPLIT_TAIL=0 (compile definition) launches every unit whole (for comparisons).
#ifndef FLASHPP_BWD_SPLIT_TAIL
#define FLASHPP_BWD_SPLIT_TAIL 1
#endif

namespace flashpp::cuda {

// The workspace holds partial sums for at most this many split units (8 MB at D=64, 16 MB at
// D=128): last waves of up to 128 blocks, i.e. GPUs of up to 256 block slots.
inline constexpr std::int64_t kMaxSplitUnits = 128;

struct TailSplit {
  std::int64_t whole_units = 0;  // units [0, whole_units): one block each, in launch order
  std::int64_t split_units = 0;  // the units after them: `pieces` blocks each
  std::int64_t pieces = 1;

  FLASHPP_HD std::int64_t blocks() const { return whole_units + split_units * pieces; }
};

// `units` items of `steps` steps each on a GPU that holds `slots` blocks at once. A last wave of
// at most half the slots is split into as many pieces as fill the slots (at most one per step).
inline TailSplit plan_tail_split(std::int64_t units, std::int64_t steps, std::int64_t slots,
                                 bool allowed) {
  TailSplit plan{units, 0, 1};
  if (!allowed || units <= 0 || steps < 2 || slots < 2) return plan;
  const std::int64_t last_wave = units % slots;
  if (last_wave == 0 || 2 * last_wave > slots || last_wave > kMaxSplitUnits) return plan;
  const std::int64_t pieces = slots / last_wave < steps ? slots / last_wave : steps;
  return TailSplit{units - last_wave, last_wave, pieces};
}

// A masked grid (units of unequal step counts, at most `steps`) of at most `slots` units, split
// whole: each unit into as many equal runs of its own steps as make about `waves` waves of pieces
// (at least two, at most `steps`), so that, launched longest unit first, the longest units' pieces
// are no longer than the waves need (the sm90 backward, launch.cuh plan_backward_split). A larger
// grid, a single step, or a forbidden split: every unit whole.
inline TailSplit plan_masked_split(std::int64_t units, std::int64_t steps, std::int64_t slots,
                                   std::int64_t waves, bool allowed) {
  if (!allowed || units <= 0 || units > slots || units > kMaxSplitUnits || steps < 2) {
    return TailSplit{units > 0 ? units : 0, 0, 1};
  }
  const std::int64_t pieces = waves * slots / units;
  return TailSplit{0, units, pieces < 2 ? 2 : pieces < steps ? pieces : steps};
}

// The split of a small last wave of paired key tiles (the sm90 backward's kPaired kernel at D=128:
// a cluster of two blocks takes two neighbouring key tiles of a head and walks one step range for
// both). `pair_units` pairs (`tiles_per_head` / 2 a head, which must be even: a pair never spans
// two heads) on a GPU that holds `pair_slots` clusters at once, planned as plan_tail_split plans
// single tiles. The plan returned counts key tiles, as the postprocess and the split sums do
// (whole and split units both even: unit 2q + r is tile r of pair q); pair_plan gives the pairs'
// view that the kernel walks.
inline TailSplit plan_pair_tail_split(std::int64_t pair_units, std::int64_t tiles_per_head,
                                      std::int64_t steps, std::int64_t pair_slots, bool allowed) {
  const TailSplit none{2 * (pair_units > 0 ? pair_units : 0), 0, 1};
  if (tiles_per_head % 2 != 0) return none;
  const TailSplit pairs = plan_tail_split(pair_units, steps, pair_slots, allowed);
  if (pairs.split_units == 0 || 2 * pairs.split_units > kMaxSplitUnits) return none;
  return TailSplit{2 * pairs.whole_units, 2 * pairs.split_units, pairs.pieces};
}

// The pairs' view of a plan of plan_pair_tail_split: whole and split pairs, the same pieces.
FLASHPP_HD TailSplit pair_plan(const TailSplit& tiles) {
  return TailSplit{tiles.whole_units / 2, tiles.split_units / 2, tiles.pieces};
}

// The split unit (key tile) whose piece block `block` of a paired split launch is (clusters of
// two, launched in pair_plan's order: block 2c + r takes tile r of cluster c's pair), -1 for a
// tile of a whole pair. 32-bit (launches of fewer than 2^31 blocks) for the kernel's epilogue.
FLASHPP_HD int pair_block_split_index(const TailSplit& tiles, unsigned block) {
  const auto whole_pairs = static_cast<unsigned>(tiles.whole_units / 2);
  const unsigned cluster = block / 2;
  if (tiles.split_units == 0 || cluster < whole_pairs) return -1;
  return static_cast<int>(2 * ((cluster - whole_pairs) / static_cast<unsigned>(tiles.pieces)) +
                          block % 2);
}

// An unmasked grid of at most one wave (`units` <= `slots`, every unit `steps` steps), split whole
// (the sm90 backward, launch.cuh plan_backward_split): each unit into the number of pieces p, from
// 2 to `waves` * slots / units and at most `steps`, whose waves of pieces end first (the smallest
// such p): ceil(units p / slots) waves of 1/p of a unit's time. Split only where that is at most
// 4/5 of the one wave of whole units. Pieces past one wave's worth (p > slots / units) must walk
// at least kMinWavePieceSteps steps each: a piece re-loads K and V, fills the pipeline and adds
// its dK, dV through atomics, a fixed cost that session 35 run 2 put at 3-16 steps' time (H100).
// With `waves` = 1 it is plan_tail_split's rule for such grids (p = slots / units where units <=
// slots / 2, else whole); with 2, B=1 H=32:8 N=1024 D=64 (48 units of 64 steps on 132 slots)
// takes 5 pieces (240 blocks: 0.4 of a unit's time) instead of 2 (96 blocks: 0.5), and grids of
// 67-88 units of at least 36 steps, which one wave of whole units leaves a third or more idle,
// take 3 (two waves of 1/3).
inline constexpr std::int64_t kMinWavePieceSteps = 12;
inline TailSplit plan_grid_split(std::int64_t units, std::int64_t steps, std::int64_t slots,
                                 std::int64_t waves, bool allowed) {
  const TailSplit whole{units > 0 ? units : 0, 0, 1};
  if (!allowed || units <= 0 || units > slots || units > kMaxSplitUnits || steps < 2) return whole;
  const std::int64_t one_wave = slots / units;
  std::int64_t most = waves * slots / units;
  if (most > one_wave) {  // past one wave's worth: only pieces of kMinWavePieceSteps or more
    const std::int64_t long_enough = steps / kMinWavePieceSteps;
    most = long_enough < most ? long_enough : most;
    most = most > one_wave ? most : one_wave;
  }
  most = most < steps ? most : steps;
  std::int64_t best = 1, best_waves = 1;  // whole units: one wave of 1
  for (std::int64_t p = 2; p <= most; ++p) {
    const std::int64_t w = (units * p + slots - 1) / slots;
    if (w * best < best_waves * p) {  // w / p < best_waves / best
      best = p;
      best_waves = w;
    }
  }
  if (best == 1 || 5 * best_waves > 4 * best) return whole;
  return TailSplit{0, units, best};
}

// What block `linear` of the launch does: a whole unit, or piece `piece` of a split unit.
struct UnitPiece {
  std::int64_t unit;         // linear unit index (block_order.cuh maps it to tile and head)
  std::int64_t split_index;  // -1 for a whole unit, else 0 .. split_units - 1
  std::int64_t piece;        // 0 .. pieces - 1 (0 for a whole unit)
};

FLASHPP_HD UnitPiece unit_piece(const TailSplit& plan, std::int64_t linear) {
  if (linear < plan.whole_units) return UnitPiece{linear, -1, 0};
  const std::int64_t rest = linear - plan.whole_units;
  return UnitPiece{plan.whole_units + rest / plan.pieces, rest / plan.pieces, rest % plan.pieces};
}

// The steps [begin, end) of a unit's `steps` that the piece walks.
struct StepRange {
  std::int64_t begin, end;
};
FLASHPP_HD StepRange piece_steps(const TailSplit& plan, const UnitPiece& piece,
                                 std::int64_t steps) {
  if (piece.split_index < 0) return StepRange{0, steps};
  return StepRange{piece.piece * steps / plan.pieces, (piece.piece + 1) * steps / plan.pieces};
}

}  // namespace flashpp::cuda
