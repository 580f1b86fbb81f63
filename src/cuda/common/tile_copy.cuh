// Global -> shared tile copies with cp.async (cp_async.cuh) into swizzled tiles (swizzle.cuh):
// the one loader every kernel uses for its Q, K, V, dO tiles.
#pragma once

#include <cstdint>

#include "../ptx/cp_async.cuh"
#include "swizzle.cuh"

namespace flashpp::cuda {

// Issues the cp.async copies of a [Tile rows x head dim] tile whose row r starts at
// gmem + r * row_stride. Rows >= rows_valid and chunks >= chunks_valid (past the true head dim)
// are zero-filled, so the products over them add exact zeros.
//
// When the block's threads cover whole rows (kThreads a multiple of the chunks per row, and the
// rows covered per pass a multiple of 8), each thread keeps one chunk column and steps down by
// a fixed number of rows: the swizzle term is then the same for every step, and the addresses
// advance by constants instead of being recomputed (and kept live) per chunk.
// kCheckRows = false: the caller knows every row of the tile exists (all K/V tiles but the last),
// which drops a 64-bit compare per copy from the main loop.
template <typename Tile, int kThreads, bool kCheckRows = true, typename Element>
__device__ __forceinline__ void load_tile_async(Element* smem, const Element* gmem,
                                                std::int64_t row_stride, std::int64_t rows_valid,
                                                int chunks_valid, int tid) {
  constexpr int kTotal = Tile::kElements / Tile::kChunkElements;
  static_assert(kTotal % kThreads == 0, "every thread copies the same number of chunks");
  constexpr bool kWholeRows =
      kThreads % Tile::kChunks == 0 && (kThreads / Tile::kChunks) % 8 == 0;
  if constexpr (kWholeRows) {
    constexpr int kRowStep = kThreads / Tile::kChunks;
    const int row0 = tid / Tile::kChunks;
    const int chunk = tid % Tile::kChunks;
    const bool chunk_valid = chunk < chunks_valid;
    Element* dst = smem + Tile::chunk_offset(row0, chunk);
    const Element* src = gmem + row0 * row_stride + chunk * Tile::kChunkElements;
#pragma unroll
    for (int i = 0; i < kTotal / kThreads; ++i) {
      const bool valid = chunk_valid && (!kCheckRows || row0 + i * kRowStep < rows_valid);
      cp_async_16(dst + i * Tile::kRowStepElements(kRowStep), valid ? src : gmem, valid);
      src += kRowStep * row_stride;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kTotal / kThreads; ++i) {
      const int e = tid + i * kThreads;
      const int row = e / Tile::kChunks;
      const int chunk = e % Tile::kChunks;
      const bool valid = (!kCheckRows || row < rows_valid) && chunk < chunks_valid;
      const Element* src = valid ? gmem + row * row_stride + chunk * Tile::kChunkElements : gmem;
      cp_async_16(smem + Tile::chunk_offset(row, chunk), src, valid);
    }
  }
}

}  // namespace flashpp::cuda
