// Tile shapes of the sm80 backward's two kernels per kernel head dim (plain constexpr data, host
// and device).
#pragma once

#include "../../common/backward_workspace.hpp"

namespace flashpp::cuda::sm80 {

// Main kernel (one block per key tile): kKeyRows keys stay in shared memory while the block
// walks query tiles of kQueryRows rows, two stages deep. Every warp owns 16 keys in the S^T and
// dK/dV products, so kKeyRows / 16 warp rows; the rest of the warps split columns.
// Shared memory: K, V (2 * kKeyRows * D), Q, dO (2 stages * 2 * kQueryRows * D), P, dS
// (2 * kKeyRows * kQueryRows), all 16-bit; it must stay under 163 KB (A100's per-block limit).
// kKeysPerWarp: keys a warp owns in S^T and dK/dV (16 or 32). With 16 keys per warp and 8 warps
// a warp owns all query columns and P~^T/dS^T stay in registers for dV/dK. With 32 keys per warp
// ("wide") two warps share a key group (half of the query columns in S^T, half of the head
// columns in dV/dK each), P~^T and dS^T go through shared memory, and each ldmatrix feeds twice
// the mma; measured on the H200: +8% at D=64, +23% at D=128 (docs/perf-notes.md).
// FLASHPP_BWD_TILE_VARIANT (compile definition, default 0) selects alternatives for tuning runs.
#ifndef FLASHPP_BWD_TILE_VARIANT
#define FLASHPP_BWD_TILE_VARIANT 0
#endif

template <int kHeadDim>
struct MainTile {
  static constexpr bool kWide = (kHeadDim >= 64 && kHeadDim <= 128) ||
                                (FLASHPP_BWD_TILE_VARIANT == 1 && kHeadDim == 32);
  static constexpr int kKeyRows = main_key_rows(kHeadDim);
  // D=64 walks 128 queries per step (FlashAttention-2's 128x128 block): each warp's S^T is then
  // 32 keys x 64 queries, half the barriers per FLOP; measured +6..8% over 64-query steps.
  static constexpr int kQueryRows =
      kHeadDim == 64 && FLASHPP_BWD_TILE_VARIANT != 2 ? 128
      : kHeadDim <= 96 || kHeadDim == 192 || kWide    ? 64
                                                      : 32;
  static constexpr int kKeysPerWarp = kWide ? 32 : 16;
  static constexpr int kWarps = 8;  // every head dim
  // Blocks of 4 warps leave room for two per SM (registers: 2 x 128 x 255 < 64 K), so one
  // block's mma phase can overlap the other's element-wise phase and barriers.
  static constexpr int kMinBlocksPerSm = kWarps <= 4 ? 2 : 1;
};

// Deterministic dQ kernel (one block per query tile): every warp owns 16 query rows and keeps its
// dQ rows in registers while K/V tiles stream through shared memory two stages deep.
template <int kHeadDim>
struct DqTile {
  static constexpr int kWarps = 4;
  static constexpr int kQueryRows = 16 * kWarps;
  static constexpr int kKeyRows = kHeadDim <= 128 ? 64 : 32;
};

}  // namespace flashpp::cuda::sm80
