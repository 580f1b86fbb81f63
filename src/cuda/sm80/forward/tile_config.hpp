// Tile shapes of the sm80 forward per instantiated head dim.
//
//   block_m: query rows per thread block (the Q tile, loaded once)
//   block_n: keys per K/V tile streamed through shared memory
//   warps:   warps per block; each owns block_m / warps query rows (a multiple of 16)
//   stages:  K/V tiles in flight (cp.async ring depth, >= 2)
//   min_blocks: blocks per SM the register allocation must allow (__launch_bounds__); 1 = let
//            the compiler use up to 255 registers per thread
//
// Shared memory per block = (block_m + 2 * stages * block_n) * head_dim * 2 bytes, kept within
// the 163 KB an A100 block may use so that one table serves every sm80+ GPU.
// The entries start from FlashAttention-2's published choices and are revised from measurements
// on the lent H100 (docs/perf-notes.md records each change and what it gave).
#pragma once

namespace flashpp::cuda::sm80 {

template <int kHeadDim>
struct ForwardTileConfig;

template <int kBlockM, int kBlockN, int kWarps, int kStages, int kMinBlocks = 1>
struct TileShape {
  static constexpr int block_m = kBlockM;
  static constexpr int block_n = kBlockN;
  static constexpr int warps = kWarps;
  static constexpr int stages = kStages;
  static constexpr int min_blocks = kMinBlocks;
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
#if FLASHPP_FWD_VARIANT == 1    // 3 blocks per SM at D=64; narrower K/V tiles at D=128
template <> struct ForwardTileConfig<64> : TileShape<128, 64, 4, 2, 3> {};
template <> struct ForwardTileConfig<128> : TileShape<128, 32, 4, 2> {};
#elif FLASHPP_FWD_VARIANT == 2  // a deeper ring (3 stages)
template <> struct ForwardTileConfig<64> : TileShape<128, 64, 4, 3> {};
template <> struct ForwardTileConfig<128> : TileShape<128, 64, 4, 3> {};
#else
template <> struct ForwardTileConfig<64> : TileShape<128, 64, 4, 2> {};
template <> struct ForwardTileConfig<128> : TileShape<128, 64, 4, 2> {};
#endif

}  // namespace flashpp::cuda::sm80
