// Tile shapes of the sm90 forward per instantiated head dim.
//
//   consumers: consumer warpgroups; each owns 64 query rows, so block_m = 64 * consumers
//   block_n:   keys per K/V tile (the N of S = Q K^T, the K of O += P V; a multiple of 16)
//   stages:    K/V tiles in flight through shared memory (the TMA ring)
//
// Shared memory per block: block_m x padded D (Q) + 2 x stages x block_n x padded D (K, V), 16-bit,
// padded D = head dim rounded up to 64 columns (the swizzled panels), within the 227 KB a Hopper
// block may use. The starting points are FlashAttention-3's published shapes where they fit this
// kernel; docs/perf-notes.md records what each entry measured.
#pragma once

namespace flashpp::cuda::sm90 {

template <int kConsumers, int kBlockN, int kStages>
struct Sm90TileShape {
  static constexpr int consumers = kConsumers;
  static constexpr int block_n = kBlockN;
  static constexpr int stages = kStages;
  // The most query tiles a head may have for the part-empty tiles first order of unmasked calls
  // (launch.cuh, last_tiles_first; session 26 run 2 for the 8).
  static constexpr long long last_first_max_tiles = 8;
};

template <int kHeadDim>
struct ForwardTileConfig;

// FLASHPP_SM90_FWD_VARIANT (a compile definition, default 0) selects an alternative table for
// tuning runs on the lent GPU (tools/gpu_check.sh --variant NAME -DFLASHPP_SM90_FWD_VARIANT=1).
#ifndef FLASHPP_SM90_FWD_VARIANT
#define FLASHPP_SM90_FWD_VARIANT 0
#endif

#if FLASHPP_SM90_FWD_VARIANT == 1  // deeper at D=64; FlashAttention-3's wider key tiles at D=128
template <> struct ForwardTileConfig<64> : Sm90TileShape<2, 128, 6> {};
template <> struct ForwardTileConfig<96> : Sm90TileShape<2, 128, 3> {};
template <> struct ForwardTileConfig<128> : Sm90TileShape<2, 176, 2> {};
template <> struct ForwardTileConfig<192> : Sm90TileShape<2, 96, 2> {};
template <> struct ForwardTileConfig<256> : Sm90TileShape<2, 80, 2> {};
#elif FLASHPP_SM90_FWD_VARIANT == 2  // the first table (two stages everywhere)
template <> struct ForwardTileConfig<64> : Sm90TileShape<2, 128, 2> {};
template <> struct ForwardTileConfig<96> : Sm90TileShape<2, 128, 2> {};
template <> struct ForwardTileConfig<128> : Sm90TileShape<2, 128, 2> {};
template <> struct ForwardTileConfig<192> : Sm90TileShape<2, 96, 2> {};
template <> struct ForwardTileConfig<256> : Sm90TileShape<2, 64, 2> {};
#elif FLASHPP_SM90_FWD_VARIANT == 3  // the table before the persistent grid: three stages, O staged through Q
template <> struct ForwardTileConfig<64> : Sm90TileShape<2, 128, 4> {};
template <> struct ForwardTileConfig<96> : Sm90TileShape<2, 128, 3> {};
template <> struct ForwardTileConfig<128> : Sm90TileShape<2, 128, 3> {};
template <> struct ForwardTileConfig<192> : Sm90TileShape<2, 64, 3> {};
template <> struct ForwardTileConfig<256> : Sm90TileShape<2, 64, 2> {};
#else
// Two stages at D 96-192 leave room for O's own staging buffer (kernel.cuh: kSeparateOutput), so
// that the persistent grid loads the next item's Q during the current item's last P V.
template <> struct ForwardTileConfig<64> : Sm90TileShape<2, 128, 4> {};
template <> struct ForwardTileConfig<96> : Sm90TileShape<2, 128, 2> {};
template <> struct ForwardTileConfig<128> : Sm90TileShape<2, 128, 2> {};
template <> struct ForwardTileConfig<192> : Sm90TileShape<2, 64, 2> {};
template <> struct ForwardTileConfig<256> : Sm90TileShape<2, 64, 2> {};
#endif

// A second shape where the registers allow more consumer warpgroups (three: 192 query rows a block,
// 160 registers each; at D=64 four: 256 rows, 112 registers each): more warps to overlap one
// warpgroup's softmax with the others' products, and fewer K/V bytes copied into each SM per FLOP
// (at the power limit the copies' energy sets part of the speed: perf-notes session 40).
// split_plan.hpp's use_tall_tile picks it: unmasked calls of more than `unmasked_two_tile_rows`
// query rows whose rounds on the persistent grid cost at most `round_slack` percent more rows
// (tall_rounds_pay; negative: not asked), masked ones of more than `masked_two_tile_rows`.
//   D=64 (128-key tiles): session 17 run 1 (H100, bf16, B=4 H=32, gpu_compare, against the table
//     above): N=4096 +14%, N=16384 +20% without a mask, +10% causal at 16384; causal N=4096
//     equal, N=1024 -15% (fewer, costlier items).
//   D=96 and D=128 (64-key tiles: at 128 keys D=96 spills 148 bytes, at 96 keys D=128 spills
//     and serialises its products): session 40 runs 4-5 (H200, bf16, against the table above,
//     do_bench at the power limit / gpu_compare): D=96 N 1536-8192 +2..+8% / +2..+9%; D=128
//     N=1536 and 3072 +3..+8% / +4..+8%, 16384 +3..+8% / +5..+7%, 4096 0..+2% / -0.1..+2%,
//     unmasked N=1024 -2.5..-7.5% / -2.7..+0.5% (D=96 -0.8% / +2.5%). Run 7: unmasked B=2 H=32
//     Nq=2000 Nk=9000 -4% at D=128, the grid's rounds (tile_rounds.hpp).
template <int kHeadDim>
struct ForwardTallTileConfig {
  static constexpr bool exists = false;
};
// The tall D=64 tile has four consumer warpgroups (256 rows; 112 registers each, kernel.cuh) on
// 64-key tiles in six stages. Session 44 run 3 (H200, fp16 and bf16, B=4 H=32 (B=2 at 16384),
// against the 192-row tile of three consumers on 128-key tiles in the same process; gpu_compare, an
// A/A control within 0.6%; do_bench --repeats 3): unmasked N=1024 +6.1% / +7..+8% (4 tiles a head
// instead of 6, the last a third full), 1536 -0.5..-0.2%, 2048 +0.7..+1.3%, 4096 +1.4..+1.6% /
// +0.1..+1.8%, 16384 +1.3%; causal N=1536 +0.3..+0.6%, 2048 +6.7..+7.1%, 4096 +3.2..+3.9% /
// +0.4..+1.6%, 16384 -0.1..+0.2% (causal N<=1024 took the 128-row tile then). Four stages read
// 0-1.7% below six; three consumers on 64-key tiles -3..-11%. The part-empty tiles first order
// takes up to 24 tiles a head (session 42 run 3 and session 43 run 2 measured it on the 192-row
// tile: +0.8..+1.9% at N 2048 and 4096; not measured again on this tile).
// Masked calls take it above 384 rows (the 192-row tile: above 1024). Session 44 runs 4-5 (H200,
// causal, fp16 and bf16, B=4 H=32, gpu_compare, FLASHPP_SM90_FWD_TALL=1 against the 128-row tile in
// the same process): N=256 +2..+3%, 384 -1.0..-2.7%, 512 +4.0..+5.5%, 640 +3.4..+3.9%, 768
// +9.2..+10.9%, 896 +1.2..+2.2%, 1024 +5.7..+6.7%.
template <>
struct ForwardTallTileConfig<64> : Sm90TileShape<4, 64, 6> {
  static constexpr bool exists = true;
  static constexpr long long unmasked_two_tile_rows = 0;
  static constexpr long long masked_two_tile_rows = 384;
  static constexpr long long round_slack = -1;
  static constexpr long long last_first_max_tiles = 24;
};
template <>
struct ForwardTallTileConfig<96> : Sm90TileShape<3, 64, 3> {
  static constexpr bool exists = true;
  static constexpr long long unmasked_two_tile_rows = 0;
  static constexpr long long masked_two_tile_rows = 1024;
  static constexpr long long round_slack = 5;
};
template <>
struct ForwardTallTileConfig<128> : Sm90TileShape<3, 64, 3> {
  static constexpr bool exists = true;
  static constexpr long long unmasked_two_tile_rows = 1024;
  static constexpr long long masked_two_tile_rows = 1024;
  static constexpr long long round_slack = 5;
};

// A third shape at D 96 and 128, for unmasked calls over many keys that take the tall tile: its
// 192 rows with 80-key tiles, a quarter fewer key-tile steps per FLOP (their barrier waits, row
// reductions and rescales). split_plan.hpp's use_long_keys_tile picks it from `min_keys` keys.
// Only its plain kernel on the stride walk is instantiated (4 bytes of spills at D=128, none at
// D=96): the D=128 split-walk kernel spills 104 bytes and measured no better, and masked calls
// lost with it (causal N=1536 -4..-6%). Session 41 (H200, bf16 and fp16, unmasked, B=4 H=32
// (B=2 at 16384), against the tall tile in the same library; gpu_compare / do_bench at the
// power limit):
//   D=128 (runs 3-4): N=16384 +5.7..+8.0% / +2.1..+5.8%, N=8192 +5.3..+6.0% / +4.1..+6.2%,
//     N=4096 0..+2.8% / -0.1..+3.0%, N=1536 -1.3..-1.1% / -3.0..-1.0%; B=2 Nq=4096 Nk=32768
//     +3.6% (do_bench). 96-key tiles spill and serialise their products (session 40).
//   D=96 (run 7): N=16384 +5.4..+7.0% / +2.7..+3.9%, N=8192 +3.8..+4.0% / -0.3..+1.6%, N=4096
//     +1.4..+2.1% / +1.3..+2.8%.
template <int kHeadDim>
struct ForwardLongKeysTileConfig {
  static constexpr bool exists = false;
};
template <>
struct ForwardLongKeysTileConfig<96> : Sm90TileShape<3, 80, 3> {
  static constexpr bool exists = true;
  static constexpr long long min_keys = 4096;
};
template <>
struct ForwardLongKeysTileConfig<128> : Sm90TileShape<3, 80, 3> {
  static constexpr bool exists = true;
  static constexpr long long min_keys = 4096;
};

}  // namespace flashpp::cuda::sm90
