// Global -> shared copies of the backward's tiles, all through cp.async (cp_async.cuh) so that
// the next query (or key) tile loads while the current one is computed.
#pragma once

#include <cstdint>

#include "../../ptx/cp_async.cuh"
#include "../../common/tile_copy.cuh"

namespace flashpp::cuda::sm80 {

// Copies rows [row0, row0 + Tile rows) of a [N, D] slice (rows `row_stride` elements apart,
// columns contiguous) into a swizzled tile. Rows at or past `row_limit` and columns at or past
// `head_dim` (a multiple of 8) are zero-filled: zero rows of K/V and zero columns contribute
// nothing to any product, which is what lets any N and any head dim run on fixed tiles.
// Whole tiles (all but the last of a sequence) take the copy path without row checks.
template <typename Tile, int kThreads, typename Element>
__device__ __forceinline__ void load_rows_async(Element* tile, const Element* slice,
                                                std::int64_t row_stride, std::int64_t row0,
                                                std::int64_t row_limit, int head_dim, int tid) {
  const Element* src = slice + row0 * row_stride;
  const std::int64_t rows_valid = row_limit - row0;
  if (rows_valid >= Tile::kRowCount) {
    load_tile_async<Tile, kThreads, false>(tile, src, row_stride, rows_valid, head_dim / 8, tid);
  } else {
    load_tile_async<Tile, kThreads, true>(tile, src, row_stride, rows_valid, head_dim / 8, tid);
  }
}

// Copies kCount floats (a multiple of 4, 16-byte aligned source) into shared memory.
template <int kCount, int kThreads>
__device__ __forceinline__ void load_floats_async(float* dst, const float* src, int tid) {
  static_assert(kCount % 4 == 0, "whole 16-byte chunks");
  if constexpr (kCount / 4 <= kThreads) {
    if (tid < kCount / 4) cp_async_16(dst + tid * 4, src + tid * 4, true);
  } else {
    for (int chunk = tid; chunk < kCount / 4; chunk += kThreads) {
      cp_async_16(dst + chunk * 4, src + chunk * 4, true);
    }
  }
}

}  // namespace flashpp::cuda::sm80
