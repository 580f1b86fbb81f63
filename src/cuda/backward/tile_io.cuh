// Global -> shared copies of the backward's tiles, all through cp.async (cp_async.cuh) so that
// the next query (or key) tile loads while the current one is computed.
#pragma once

#include <cstdint>

#include "../common/cp_async.cuh"

namespace flashpp::cuda::bwd {

// Copies rows [row0, row0 + Tile rows) of a [N, D] slice (rows `row_stride` elements apart,
// columns contiguous) into a swizzled tile. Rows at or past `row_limit` and columns at or past
// `head_dim` (a multiple of 8) are zero-filled: zero rows of K/V and zero columns contribute
// nothing to any product, which is what lets any N and any head dim run on fixed tiles.
template <typename Tile, int kThreads, typename Element>
__device__ __forceinline__ void load_rows_async(Element* tile, const Element* slice,
                                                std::int64_t row_stride, std::int64_t row0,
                                                std::int64_t row_limit, int head_dim, int tid) {
  constexpr int kChunks = Tile::kChunks;
  constexpr int kTotal = (Tile::kElements / 8);
#pragma unroll
  for (int index = tid; index < kTotal; index += kThreads) {
    const int row = index / kChunks;
    const int chunk = index % kChunks;
    const std::int64_t global_row = row0 + row;
    const bool valid = global_row < row_limit && chunk * 8 < head_dim;
    const Element* src = valid ? slice + global_row * row_stride + chunk * 8 : slice;
    cp_async_16(tile + Tile::chunk_offset(row, chunk), src, valid);
  }
}

// Copies kCount floats (a multiple of 4, 16-byte aligned source) into shared memory.
template <int kCount, int kThreads>
__device__ __forceinline__ void load_floats_async(float* dst, const float* src, int tid) {
  static_assert(kCount % 4 == 0, "whole 16-byte chunks");
  for (int chunk = tid; chunk < kCount / 4; chunk += kThreads) {
    cp_async_16(dst + chunk * 4, src + chunk * 4, true);
  }
}

}  // namespace flashpp::cuda::bwd
