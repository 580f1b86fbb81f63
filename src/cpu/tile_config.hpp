// Tile sizes of the CPU FlashAttention (see docs/cpu-backend.md for how they were chosen).
#pragma once

#include <cstdint>

namespace flashpp::cpu {

// Forward and the dQ pass of the backward: a query tile of kQueryTile rows walks key tiles of
// kKeyTile rows. kQueryTile is the lane dimension of the key-major score tile (a multiple of 16);
// kKeyTile is a multiple of the micro-kernel's 6 rows and of the Philox group of 4 keys.
inline constexpr std::int64_t kQueryTile = 64;
inline constexpr std::int64_t kKeyTile = 96;

// The dK/dV pass of the backward: a key tile of kBwdKeyTile rows walks query tiles of
// kBwdQueryTile rows. kBwdKeyTile is the lane dimension there (a multiple of 16).
inline constexpr std::int64_t kBwdKeyTile = 64;
inline constexpr std::int64_t kBwdQueryTile = 96;

static_assert(kQueryTile % 16 == 0 && kBwdKeyTile % 16 == 0, "lane dimensions: whole vectors");

}  // namespace flashpp::cpu
