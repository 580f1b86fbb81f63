// Accumulator rows to global memory in whole 32-byte sectors.
//
// In the mma accumulator layout (mma.sync m16n8 tiles, and each warp's rows of a wgmma
// accumulator) lane (g, t) holds columns 8n + 2t and 8n + 2t + 1 of its rows. Stored as is, a
// row leaves in 4-byte pieces and every 32-byte sector of it is written in two halves by two
// store instructions; on the H200 such partial-sector writes made the sm90 backward's dK/dV
// epilogue take 8-11k cycles a block at D=128 against 2.2k in whole sectors (session 22 run 7).
// Here lanes t and t ^ 1 swap one 16-bit pair per two 8-column tiles (2a, 2a + 1): the even lane
// then holds tile 2a's columns 2t .. 2t + 3, the odd lane tile 2a + 1's, and stores them as 8
// bytes, so the four lanes of a row write the two tiles' 32 bytes with one instruction.
#pragma once

#include <cstdint>

#include "math.cuh"

namespace flashpp::cuda {

// The first column of a tile pair that lane t stores, relative to the pair's first column.
__device__ __forceinline__ int sector_store_column(int t) { return 2 * (t & 2) + ((t & 1) ? 8 : 0); }

// The 8-column tile (of the row's tiles 0, 1, 2, ...) whose columns lane t stores from pair a:
// 2a for the even lanes, 2a + 1 for the odd ones (for the bound check of `store`).
__device__ __forceinline__ int sector_store_tile(int a, int t) { return 2 * a + (t & 1); }

// One pair of 8-column tiles of this lane's row: `even` and `odd` are its packed pairs of tiles
// 2a and 2a + 1; `at` points at the pair's first column plus sector_store_column(t) (8-byte
// aligned when the row is 16-byte aligned). Every lane of the warp calls it (a shuffle);
// `store` says whether this lane writes (its row and its tile in range).
__device__ __forceinline__ void store_tile_pair(void* at, std::uint32_t even, std::uint32_t odd,
                                                int t, bool store) {
  const bool odd_lane = (t & 1) != 0;
  const std::uint32_t other = __shfl_xor_sync(0xffffffffu, odd_lane ? even : odd, 1);
  if (store) {
    *static_cast<uint2*>(at) = odd_lane ? make_uint2(other, odd) : make_uint2(even, other);
  }
}

// One row of this lane's accumulator tiles acc[0 .. kTiles) (8 columns each; `half` 0 or 1: the
// lane's row g or g + 8 of them), times `scale`, as Element, to `row` (the row's first column
// plus sector_store_column(t)), in whole sectors. Tile n is written when `row_in` and n <
// `col_tiles` (the tiles below the true head dim). Every lane of the warp calls it.
template <typename Element, int kTiles>
__device__ __forceinline__ void store_accumulator_row(Element* row, const float (&acc)[kTiles][4],
                                                      int half, float scale, int col_tiles,
                                                      bool row_in, int t) {
  static_assert(kTiles % 2 == 0, "pairs of 8-column tiles");
#pragma unroll
  for (int a = 0; a < kTiles / 2; ++a) {
    const float (&even)[4] = acc[2 * a], (&odd)[4] = acc[2 * a + 1];
    store_tile_pair(row + 16 * a,
                    pack_pair<Element>(even[2 * half] * scale, even[2 * half + 1] * scale),
                    pack_pair<Element>(odd[2 * half] * scale, odd[2 * half + 1] * scale), t,
                    row_in && sector_store_tile(a, t) < col_tiles);
  }
}

}  // namespace flashpp::cuda
