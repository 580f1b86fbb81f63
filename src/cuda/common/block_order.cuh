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

// Heads per group: 1 when every item costs the same, else the smallest power of two that gives a
// group about 1.5 waves of blocks (`slots` = blocks resident on the whole GPU at once).
inline std::int64_t heads_per_group(bool unequal_costs, std::int64_t tiles, std::int64_t heads,
                                    std::int64_t slots) {
  if (!unequal_costs || tiles <= 0) return 1;
  std::int64_t g = 1;
  while (g < heads && 2 * g * tiles < 3 * slots) g *= 2;
  return g < heads ? g : (heads > 0 ? heads : 1);
}

}  // namespace flashpp::cuda
