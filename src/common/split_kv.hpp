// The split-KV heuristic of the decode kernels: into how many key ranges a decode problem is
// cut so that B x Hkv x (query tiles) x splits blocks fill the GPU.
#pragma once

#include <algorithm>
#include <cstdint>

#include "host_device.hpp"

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

// The heuristic of the default decode variant (the one above is the legacy variant's, kept for
// A/B runs with FLASHPP_DECODE_VARIANT=legacy). Decoding is memory-bound, so what matters is that
// one wave of blocks covers the GPU and that the longest block is as short as it can be:
//   - when work_units already fill the resident slots, no split (1);
//   - else at most slots / work_units splits (a single wave: a second, partial wave of short
//     blocks costs a block's fixed latency again for little work), and among those the smallest
//     count whose longest split, ceil(key_tiles / s) tiles, is as short as with the largest
//     count (fewest partials for the same critical path; the split sizes come out even);
//   - every split keeps at least min_tiles_per_split tiles (one per warp), unless the cache is
//     shorter than that.
inline int choose_num_splits_v2(const SplitKvInput& in) {
  const std::int64_t slots = std::max<std::int64_t>(1, std::int64_t(in.sm_count) * in.blocks_per_sm);
  const std::int64_t work = std::max<std::int64_t>(1, in.work_units);
  if (work >= slots) return 1;
  const std::int64_t tiles = std::max<std::int64_t>(1, in.key_tiles);
  const std::int64_t by_length = std::max<std::int64_t>(1, tiles / std::max(1, in.min_tiles_per_split));
  const std::int64_t s_max = std::max<std::int64_t>(
      1, std::min({by_length, std::int64_t(std::max(1, in.max_splits)), slots / work}));
  const std::int64_t longest = (tiles + s_max - 1) / s_max;
  std::int64_t s = (tiles + longest - 1) / longest;  // the smallest s with ceil(tiles / s) <= longest
  while (s > 1 && (tiles + s - 2) / (s - 1) <= longest) --s;
  return static_cast<int>(std::min(s, s_max));
}

// The key range [lo, hi] that the query rows [i_first, i_last] of one decode block may see, for a
// sequence of nk keys aligned bottom-right to nq queries, with a window (left, right) when
// `masked` (kNoLimit-sized values for an unbounded side). Empty when hi < lo.
struct KeyRange {
  std::int64_t lo = 0, hi = -1;
};
FLASHPP_HD KeyRange decode_key_range(std::int64_t nk, std::int64_t nq, std::int64_t i_first,
                                     std::int64_t i_last, bool masked, std::int64_t left,
                                     std::int64_t right) {
  KeyRange r;
  r.lo = 0;
  r.hi = nk - 1;
  if (masked) {
    const std::int64_t shift = nk - nq;
    const std::int64_t first = i_first + shift - left;
    const std::int64_t last = i_last + shift + right;
    r.lo = first > r.lo ? first : r.lo;
    r.hi = last < r.hi ? last : r.hi;
  }
  return r;
}

// Tiles [begin, end) of split `split` out of `splits` over the tiles that cover `keys` (tiles of
// `tile` keys): consecutive, equal shares (the last ones may be shorter or empty).
struct TileSpan {
  int begin = 0, end = 0;
};
FLASHPP_HD TileSpan split_tiles(KeyRange keys, int tile, int splits, int split) {
  TileSpan t;
  if (keys.hi < keys.lo) return t;
  const int tile_lo = static_cast<int>(keys.lo / tile);
  const int n_tiles = static_cast<int>(keys.hi / tile) - tile_lo + 1;
  const int per_split = (n_tiles + splits - 1) / splits;
  t.begin = tile_lo + split * per_split;
  const int last = tile_lo + n_tiles, stop = t.begin + per_split;
  t.end = stop < last ? stop : last;
  if (t.end < t.begin) t.end = t.begin;
  return t;
}

// How many tiles warp `warp` of `warps` takes from a span when the warps take turns
// (tiles begin + warp, begin + warp + warps, ...).
FLASHPP_HD int warp_tile_count(TileSpan span, int warp, int warps) {
  const int n = span.end - span.begin - warp;
  return n > 0 ? (n + warps - 1) / warps : 0;
}

}  // namespace flashpp::detail
