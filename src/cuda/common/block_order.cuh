// Which work item a thread block takes, for grids of (tile, head) items whose cost falls with the
// tile's rank, as under a causal mask (the forward's last query tiles see the most keys, the
// backward's first key tiles are seen by the most queries).
//
// The GPU starts blocks in launch order. Taken head by head, a causal grid ends each wave with a
// mix of long and short blocks and leaves SMs idle at the end (a list-scheduling simulation of
// B=4, H=32, N=4096, 128-row tiles on 264 block slots: 93% busy). Ordering the blocks longest first
// over a group of heads (all rank-0 tiles of the group, then all rank-1 tiles, ...) is the classic
// longest-processing-time rule and brings that to ~99%. The group is kept small enough (a few waves
// of blocks) that the heads it spans still share their K/V in L2; without a mask every item costs
// the same and the group is one head, the plain head-by-head order.
#pragma once

#include <cstdint>

#include "../../common/host_device.hpp"

// FLASHPP_BLOCK_ORDER=0 (compile definition) keeps the plain head-by-head order (for comparisons).
#ifndef FLASHPP_BLOCK_ORDER
#define FLASHPP_BLOCK_ORDER 1
#endif

namespace flashpp::cuda {

struct BlockItem {
  std::int64_t rank;  // 0 = the most expensive tile of its head
  std::int64_t head;  // within the launch
};

// Item of the block at launch position `linear` (0 .. tiles * heads - 1). Every item is taken by
// exactly one position (tests/cpu/test_block_order.cpp). Plain C++: host code and tests use it too.
FLASHPP_HD BlockItem block_item(std::int64_t linear, std::int64_t tiles, std::int64_t heads,
                                std::int64_t heads_per_group) {
  const std::int64_t group = linear / (heads_per_group * tiles);
  const std::int64_t first_head = group * heads_per_group;
  const std::int64_t rest = heads - first_head;
  const std::int64_t group_heads = rest < heads_per_group ? rest : heads_per_group;
  const std::int64_t within = linear - first_head * tiles;
  return BlockItem{within / group_heads, first_head + within % group_heads};
}

// The order of an unmasked launch whose last query tile of each head is part-empty, with whole
// warpgroups of the tile past the last row (they skip their work, so the item costs less):
// positions 0 .. heads - 1 take those tiles (rank 0) of every head, the later positions the
// other tiles head by head, as block_item with one head per group. A persistent grid whose
// blocks take positions b, b + G, ... then gives each of its first `heads` blocks one cheap item,
// instead of giving every cheap item to the blocks whose positions fall on a head's rank 0 (with
// `tiles` dividing G, the same blocks each time). Every item is taken by exactly one position
// (tests/cpu/test_block_order.cpp).
FLASHPP_HD BlockItem last_tiles_first_item(std::int64_t linear, std::int64_t tiles,
                                           std::int64_t heads) {
  if (linear < heads) return BlockItem{0, linear};
  const std::int64_t rest = linear - heads, others = tiles - 1;
  return BlockItem{1 + rest % others, rest / others};
}

// Heads per group: 1 when every item costs the same, else the smallest power of two that gives a
// group about 1.5 waves of blocks (`slots` = blocks resident on the whole GPU at once).
inline std::int64_t heads_per_group(bool unequal_costs, std::int64_t tiles, std::int64_t heads,
                                    std::int64_t slots) {
  if (!unequal_costs || tiles <= 0) return 1;
  std::int64_t g = 1;
  while (g < heads && 2 * g * tiles < 3 * slots) g *= 2;
  return g < heads ? g : (heads > 0 ? heads : 1);
}

// The snake walk of a persistent grid (FLASHPP_SM90_FWD_WALK=snake in the sm90 forward): which
// launch positions block `block` of `blocks` takes, in order. The positions come in head groups of
// `group_items` (heads_per_group x tiles; the last group may be shorter), longest items first in
// each group (block_item). Within a group the blocks deal the positions in rounds of `blocks`,
// alternating direction (position r * blocks + i goes to block i in even rounds, blocks - 1 - i in
// odd ones), so a block that took one of the longest items of a round takes one of the shortest of
// the next; and the group's position 0 goes to block (group start mod blocks), so that the blocks
// left without an item in one group's last, partial round are the first served in the next.
// (One snake over all positions, without the restart per group, pairs a group's last items with
// the next group's first, longest ones: in a list-scheduling model of B=4 H=32 causal, 128-row
// tiles, 132 blocks, it balances worse than the stride walk, 0.64 against 0.74 of the ideal at
// N=1024; this walk gives >= 0.99 from N=1024 to 16384.)
// Every position is taken by exactly one block (tests/cpu/test_block_order.cpp). `group_start`
// and `round` are the walk's state, both 0 before the first call; returns false when the block
// has no further item.
FLASHPP_HD bool snake_next(std::int64_t items, std::int64_t group_items, std::int64_t blocks,
                           std::int64_t block, std::int64_t& group_start, std::int64_t& round,
                           std::int64_t& linear) {
  while (group_start < items) {
    const std::int64_t rest = items - group_start;
    const std::int64_t size = rest < group_items ? rest : group_items;
    if (round * blocks < size) {
      const std::int64_t lane = (block - group_start % blocks + blocks) % blocks;
      const std::int64_t position = round * blocks + (round % 2 == 0 ? lane : blocks - 1 - lane);
      ++round;
      // Past the group's end: so is every later round of this block in this group.
      if (position < size) {
        linear = group_start + position;
        return true;
      }
    }
    group_start += size;
    round = 0;
  }
  return false;
}

}  // namespace flashpp::cuda
