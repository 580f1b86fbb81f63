// Tile sizes of the CPU FlashAttention (see docs/cpu-backend.md for how they were chosen).
#pragma once

#include <cstdint>

#include <omp.h>

namespace flashpp::cpu {

// Forward and the dQ pass of the backward: a query tile of kQueryTile rows walks key tiles of
// kKeyTile rows. kQueryTile is the lane dimension of the key-major score tile (a multiple of 16);
// kKeyTile is a multiple of the micro-kernel's 6 rows and of the Philox group of 4 keys.
inline constexpr std::int64_t kQueryTile = 256;
inline constexpr std::int64_t kKeyTile = 48;

// The dK/dV pass of the backward: a key tile of kBwdKeyTile rows walks query tiles of
// kBwdQueryTile rows. kBwdKeyTile is the lane dimension there (a multiple of 16).
inline constexpr std::int64_t kBwdKeyTile = 64;
inline constexpr std::int64_t kBwdQueryTile = 96;

// The query tile a call uses: kQueryTile, halved (down to 64) while there would be fewer than
// four tasks per thread, so that small problems still spread over every core.
inline std::int64_t choose_query_tile(std::int64_t heads, std::int64_t Nq) {
  const std::int64_t threads = omp_get_max_threads();
  std::int64_t tile = kQueryTile;
  while (tile > 64 && heads * ((Nq + tile - 1) / tile) < 4 * threads) tile /= 2;
  return tile;
}

static_assert(kQueryTile % 16 == 0 && kBwdKeyTile % 16 == 0, "lane dimensions: whole vectors");

}  // namespace flashpp::cpu
