// Tile sizes of the CPU FlashAttention (see docs/cpu-backend.md for how they were chosen).
#pragma once

#include <cstdint>

#include <omp.h>

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

// Forward and the dQ pass of the backward: a query tile of kQueryTile rows walks key tiles of
// kKeyTile rows. kQueryTile is the lane dimension of the key-major score tile (a multiple of 16);
// kKeyTile is a multiple of the micro-kernel's 6 rows and of the Philox group of 4 keys.
inline constexpr std::int64_t kQueryTile = 256;
inline constexpr std::int64_t kKeyTile = 48;

// The dK/dV pass of the backward: a key tile of kBwdKeyTile rows walks query tiles of
// kBwdQueryTile rows. kBwdKeyTile is the lane dimension there (a multiple of 16).
inline constexpr std::int64_t kBwdKeyTile = 256;
inline constexpr std::int64_t kBwdQueryTile = 48;

// Leading dimensions of the lane-major tiles (Q^T, dO^T, K^T, V^T, scores): 16 floats more than
// the tile, so that the rows of a B panel (1 KiB apart otherwise) do not all fall into the same
// few L1 sets (+15-20 % on the S^T product in a one-core microbenchmark; within the noise of
// the full benchmark on the shared build machine).
inline constexpr std::int64_t kQueryLd = kQueryTile + 16;
inline constexpr std::int64_t kBwdKeyLd = kBwdKeyTile + 16;

// The tile a call uses along a sequence of length N split over `heads` independent heads:
// max_tile, halved (down to 64) while there would be fewer than four tasks per thread, so that
// small problems still spread over every core.
inline std::int64_t choose_tile(std::int64_t max_tile, std::int64_t heads, std::int64_t N) {
  const std::int64_t threads = omp_get_max_threads();
  std::int64_t tile = max_tile;
  while (tile > 64 && heads * ((N + tile - 1) / tile) < 4 * threads) tile /= 2;
  return tile;
}

static_assert(kQueryTile % 64 == 0 && kBwdKeyTile % 64 == 0, "lane dimensions: whole vectors");

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
