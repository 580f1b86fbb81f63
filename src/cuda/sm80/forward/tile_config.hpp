// Tile shapes of the sm80 forward per instantiated head dim.
//
//   block_m: query rows per thread block (the Q tile, loaded once)
//   block_n: keys per K/V tile streamed through shared memory
//   warps:   warps per block; each owns block_m / warps query rows (a multiple of 16)
//   stages:  K/V tiles in flight (cp.async ring depth, >= 2)
//
// Shared memory per block = (block_m + 2 * stages * block_n) * head_dim * 2 bytes, kept within
// the 163 KB an A100 block may use so that one table serves every sm80+ GPU.
// The entries start from FlashAttention-2's published choices and are revised from measurements
// on the lent H100 (docs/perf-notes.md records each change and what it gave).
#pragma once

namespace flashpp::cuda::sm80 {

template <int kHeadDim>
struct ForwardTileConfig;

template <int kBlockM, int kBlockN, int kWarps, int kStages>
struct TileShape {
  static constexpr int block_m = kBlockM;
  static constexpr int block_n = kBlockN;
  static constexpr int warps = kWarps;
  static constexpr int stages = kStages;
};

// FLASHPP_FWD_VARIANT (a compile definition, default 0) selects an alternative table for
// tuning runs on the lent GPU (tools/gpu_check.sh --variants); the shipped table is variant 0.
#ifndef FLASHPP_FWD_VARIANT
#define FLASHPP_FWD_VARIANT 0
#endif

template <> struct ForwardTileConfig<32> : TileShape<128, 64, 4, 2> {};
template <> struct ForwardTileConfig<96> : TileShape<128, 64, 4, 2> {};
template <> struct ForwardTileConfig<192> : TileShape<128, 64, 8, 2> {};
template <> struct ForwardTileConfig<256> : TileShape<128, 32, 8, 2> {};
#if FLASHPP_FWD_VARIANT == 1    // wider K/V tiles
template <> struct ForwardTileConfig<64> : TileShape<128, 128, 4, 2> {};
template <> struct ForwardTileConfig<128> : TileShape<128, 128, 8, 2> {};
#elif FLASHPP_FWD_VARIANT == 2  // 16 rows per warp, 8 warps
template <> struct ForwardTileConfig<64> : TileShape<128, 128, 8, 2> {};
template <> struct ForwardTileConfig<128> : TileShape<128, 64, 8, 2> {};
#elif FLASHPP_FWD_VARIANT == 3  // smaller query tiles: more blocks, fewer registers
template <> struct ForwardTileConfig<64> : TileShape<64, 64, 4, 2> {};
template <> struct ForwardTileConfig<128> : TileShape<64, 64, 4, 2> {};
#else
template <> struct ForwardTileConfig<64> : TileShape<128, 64, 4, 2> {};
template <> struct ForwardTileConfig<128> : TileShape<128, 64, 4, 2> {};
#endif

}  // namespace flashpp::cuda::sm80
