// The split walk of the sm90 forward's persistent grid without a mask: the last, partial round of
// items cut over their key tiles, so that every block ends at about the same time (stream-K for the
// tail).
//
// Without a mask every item (query tile, head) costs its T key tiles, and the stride walk deals I
// items to G blocks in ceil(I / G) rounds. B=4, H=32, N=4096 at 128-row tiles is 4096 items on
// 132 SMs: 31 rounds and a 32nd of 4 items, during which 128 SMs idle (3% of the kernel; session
// 30 run 1 measured 128 blocks as fast as 132 there and at N=1024). The split walk keeps the
// stride walk for the first floor(I / G) - 1 rounds ("whole" items) and lays the rest, between G
// and 2G - 1 items, end to end as S = (I - whole) * T key-tile steps, dealt to the G blocks as
// equal runs [v S / G, (v + 1) S / G) (v: the block's ticket, below). A run is at least T steps
// long, so an item is cut at most once: its first key tiles [0, c) end the run of ticket v and
// its others [c, T) start the run of ticket v + 1. The piece [0, c) is written (write_partial:
// the unnormalised O, running max and sums of each consumer thread, to the workspace) and the
// block of ticket v + 1 merges it into its own piece before the epilogue (merge_partial).
//
// Order and progress: a block walks the pieces of its run last item first, so the piece it
// writes comes first and the piece it merges last; the writer of ticket v - 1 wrote its piece at
// the start of its run, long before the merge at the end of ticket v's. Tickets are taken from a
// counter at block start (the workspace's first word), so a block only ever waits for a block
// that started before it: no wait on a block that has no SM (a grid larger than what is resident
// when other kernels share the GPU) can stall the grid.
//
// Workspace (zeroed flags, then the partial states):
//   int flags[1 + G * consumers]   the ticket counter, then one ready flag per (ticket, consumer)
//   float4 partials[G][consumers * 128][D/8 + 1]  per consumer thread, laid out [chunk][thread]
// Plain C++ (host and device): tests/cpu/test_split_walk.cpp checks the cover and the pairing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../../common/host_device.hpp"

namespace flashpp::cuda::sm90 {

struct SplitWalkPlan {
  std::int64_t whole_items = 0;  // items [0, whole_items): the stride walk
  std::int64_t tiles = 0;        // key tiles per item (T)
  std::int64_t steps = 0;        // S = (items - whole_items) * T; 0: no split
  std::int64_t blocks = 0;       // G

  FLASHPP_HD bool splits() const { return steps > 0; }
};

// `items` items of `tiles` key tiles each on `blocks` persistent blocks: the split where the last
// round is partial, there are more items than blocks, and an item has two key tiles to cut.
inline SplitWalkPlan plan_split_walk(std::int64_t items, std::int64_t tiles, std::int64_t blocks) {
  SplitWalkPlan plan;
  if (blocks < 2 || tiles < 2 || items <= blocks || items % blocks == 0) return plan;
  plan.whole_items = (items / blocks - 1) * blocks;
  plan.tiles = tiles;
  plan.steps = (items - plan.whole_items) * tiles;
  plan.blocks = blocks;
  return plan;
}

// What a piece's owner does after its key tiles.
enum class PieceEnd : int { output = 0, write_partial = 1, merge_partial = 2 };

// One piece of an item: key tiles [lo, hi) of split item `item` (the item at launch position
// whole_items + item), and what ends it; `slot`: the ticket whose partial state it writes
// (write_partial: its own) or merges (merge_partial: the ticket before).
struct SplitPiece {
  std::int64_t item, lo, hi;
  PieceEnd end;
  std::int64_t slot;
};

// The run of ticket v: items [first, last] of the split part, walked from `last` down.
struct SplitRun {
  std::int64_t begin, end;  // steps [begin, end)
  std::int64_t first, last;
};

FLASHPP_HD SplitRun split_run(const SplitWalkPlan& plan, std::int64_t ticket) {
  SplitRun r;
  r.begin = ticket * plan.steps / plan.blocks;
  r.end = (ticket + 1) * plan.steps / plan.blocks;
  r.first = r.begin / plan.tiles;
  r.last = (r.end - 1) / plan.tiles;
  return r;
}

// The piece of split item `item` in ticket v's run.
FLASHPP_HD SplitPiece split_piece(const SplitWalkPlan& plan, const SplitRun& run,
                                  std::int64_t ticket, std::int64_t item) {
  const std::int64_t item_begin = item * plan.tiles;
  SplitPiece p;
  p.item = item;
  p.lo = run.begin > item_begin ? run.begin - item_begin : 0;
  p.hi = run.end - item_begin < plan.tiles ? run.end - item_begin : plan.tiles;
  p.end = p.hi < plan.tiles ? PieceEnd::write_partial
          : p.lo > 0        ? PieceEnd::merge_partial
                            : PieceEnd::output;
  p.slot = p.end == PieceEnd::merge_partial ? ticket - 1 : ticket;
  return p;
}

// Workspace layout for G blocks of `consumers` warpgroups at `d_tiles` 8-column tiles of O.
FLASHPP_HD std::int64_t split_flag_words(std::int64_t blocks, int consumers) {
  return 1 + blocks * consumers;
}
FLASHPP_HD std::int64_t split_partials_offset(std::int64_t blocks, int consumers) {
  return (split_flag_words(blocks, consumers) * 4 + 255) / 256 * 256;  // bytes, 256-aligned
}
FLASHPP_HD std::int64_t split_slot_float4s(int consumers, int d_tiles) {
  return static_cast<std::int64_t>(consumers) * 128 * (d_tiles + 1);
}
inline std::size_t split_workspace_bytes(std::int64_t blocks, int consumers, int d_tiles) {
  return static_cast<std::size_t>(split_partials_offset(blocks, consumers) +
                                  blocks * split_slot_float4s(consumers, d_tiles) * 16);
}

}  // namespace flashpp::cuda::sm90
