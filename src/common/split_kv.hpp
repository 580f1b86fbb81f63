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

// At least 1. Aims at one full wave: work_units x splits >= sm_count x blocks_per_sm, with
// every split at least min_tiles_per_split key tiles long.
inline int choose_num_splits(const SplitKvInput& in) {
  const std::int64_t slots = static_cast<std::int64_t>(in.sm_count) * in.blocks_per_sm;
  if (in.work_units >= slots) return 1;
  std::int64_t splits = (slots + in.work_units - 1) / in.work_units;
  const std::int64_t by_length =
      std::max<std::int64_t>(1, in.key_tiles / std::max(1, in.min_tiles_per_split));
  splits = std::min<std::int64_t>({splits, by_length, in.max_splits});
  return static_cast<int>(std::max<std::int64_t>(1, splits));
}

}  // namespace flashpp::detail
