// The split-KV heuristic of the decode kernels: into how many key ranges a decode problem is
// cut so that B x Hkv x (query tiles) x splits blocks fill the GPU.
#pragma once

#include <algorithm>
#include <cstdint>

namespace flashpp::detail {

struct SplitKvInput {
  std::int64_t work_units = 1;    // blocks without splitting: B x Hkv x query tiles
  std::int64_t key_tiles = 1;     // key tiles of the longest sequence
  int sm_count = 1;
  int blocks_per_sm = 1;          // resident blocks per SM of the decode kernel
  int min_tiles_per_split = 4;    // below this a split costs more (combine) than it saves
  int max_splits = 128;
};

// At least 1. With `slots` = sm_count x blocks_per_sm resident blocks, a problem of n = work_units
// x splits equal blocks runs in about ceil(n / slots) waves of blocks that each do 1/splits of
// the work: the time goes as ceil(n / slots) / splits. Every split also costs a partial result
// and a share of the combine, so the smallest split count within 5% of the best modelled time
// is chosen, among those that leave every split at least min_tiles_per_split key tiles.
inline int choose_num_splits(const SplitKvInput& in) {
  const std::int64_t slots = std::max<std::int64_t>(1, std::int64_t(in.sm_count) * in.blocks_per_sm);
  const std::int64_t work = std::max<std::int64_t>(1, in.work_units);
  const std::int64_t by_length =
      std::max<std::int64_t>(1, in.key_tiles / std::max(1, in.min_tiles_per_split));
  const std::int64_t cap = std::max<std::int64_t>(1, std::min<std::int64_t>(by_length, in.max_splits));
  auto modelled_time = [&](std::int64_t s) {
    return static_cast<double>((work * s + slots - 1) / slots) / static_cast<double>(s);
  };
  double best_time = modelled_time(1);
  for (std::int64_t s = 2; s <= cap; ++s) best_time = std::min(best_time, modelled_time(s));
  for (std::int64_t s = 1; s <= cap; ++s) {
    if (modelled_time(s) <= best_time * 1.05) return static_cast<int>(s);
  }
  return static_cast<int>(cap);
}

}  // namespace flashpp::detail
