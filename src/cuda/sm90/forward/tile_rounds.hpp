// The rounds of a persistent grid under the sm90 forward's two query-tile heights (128 rows: two
// consumer warpgroups; 192: the tall tile at D 96 and 128, tile_config.hpp), for the choice
// between them (split_plan.hpp, use_tall_tile). Plain C++: tests/cpu/test_tile_rounds.cpp checks
// it.
#pragma once

#include <cstdint>

namespace flashpp::cuda::sm90 {

// Whether the tall tile's rounds cost no more than the two-warpgroup tile's on a persistent grid
// of `blocks` blocks without a mask (the stride walk: every item costs the same, the grid takes
// ceil(items / blocks) rounds of one tile's rows each): the tall tile's rows over all its rounds
// at most `slack` percent more (its work per joule is about that much higher at D 96 and 128,
// session 40). B=2 H=32 Nq=2000 Nk=9000 at D=128: 6 rounds of 192 rows against 8 of 128 (one of
// them a third full) measured -4% (run 7); B=4 H=32 N=4096, 22 against 32 rounds, +1.4..+2.3%.
inline bool tall_rounds_pay(std::int64_t q_len, std::int64_t batch_heads, std::int64_t blocks,
                            std::int64_t slack) {
  auto rows = [&](std::int64_t block_m) {
    const std::int64_t items = (q_len + block_m - 1) / block_m * batch_heads;
    return (items + blocks - 1) / blocks * block_m;
  };
  return 100 * rows(192) <= (100 + slack) * rows(128);
}

}  // namespace flashpp::cuda::sm90
