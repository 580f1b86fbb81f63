// Swizzled shared-memory tiles, free of bank conflicts for ldmatrix and for the 16-byte cp.async
// stores that fill them. The element size is a parameter (kElementBytes: 2 for the fp16/bf16
// tiles, 1 for FP8's e4m3 ones, sm90/forward_fp8/fp8_layout.hpp); a 16-byte chunk holds
// kChunkElements = 16 / kElementBytes elements.
//
// A tile of `kRows` rows by `kCols` columns is cut into column panels of kPanelChunks 16-byte
// chunks (8 chunks = 128 bytes when a row is a multiple of 128 bytes, else 4 chunks = 64 bytes).
// Each panel is stored row after row. Within a panel the chunk index is XORed with bits of the
// row:
//   8-chunk panels: chunk ^ (row % 8)         -> 8 consecutive rows at one logical chunk hit 8
//                                                different 16-byte bank groups;
//   4-chunk panels: chunk ^ ((row / 2) % 4)   -> two rows share a 128-byte line, so row parity
//                                                picks the half and row/2 the chunk within it.
// ldmatrix reads 8 rows at the same logical chunk, so each of its 8-lane phases touches all 32
// banks exactly once. Tile bases used by the kernels are multiples of 8 rows, so the XOR term
// depends only on the lane, and the compiler keeps it in one register.
#pragma once

#include <cstdint>

#include "../../common/host_device.hpp"

namespace flashpp::cuda {

template <int kRows, int kCols, int kElementBytes = 2>
struct SwizzledTile {
  static_assert(kElementBytes == 1 || kElementBytes == 2, "8- or 16-bit elements");
  static constexpr int kChunkElements = 16 / kElementBytes;  // elements per 16-byte chunk
  static_assert(kCols * kElementBytes % 64 == 0, "tile rows must be a multiple of 64 bytes");
  static_assert(kRows % 8 == 0, "tile rows must be a multiple of 8");
  static constexpr int kRowCount = kRows;
  static constexpr int kChunks = kCols / kChunkElements;  // 16-byte chunks per row
  static constexpr int kPanelChunks = kChunks % 8 == 0 ? 8 : 4;
  static constexpr int kPanelElements = kRows * kPanelChunks * kChunkElements;
  static constexpr int kElements = kRows * kCols;
  static constexpr int kBytes = kElements * kElementBytes;

  // Where chunk `in_panel` (< kPanelChunks) of a panel row is stored in that row.
  FLASHPP_HD static int swizzled_chunk(int row, int in_panel) {
    const int xor_bits = kPanelChunks == 8 ? (row & 7) : ((row >> 1) & 3);
    return in_panel ^ xor_bits;
  }
  // Element offset of the chunk (row, chunk) from the start of the tile.
  FLASHPP_HD static int chunk_offset(int row, int chunk) {
    const int panel = chunk / kPanelChunks;
    const int in_panel = chunk % kPanelChunks;
    const int swizzled = swizzled_chunk(row, in_panel);
    return panel * kPanelElements + (row * kPanelChunks + swizzled) * kChunkElements;
  }
  // Moving down by `rows` (a multiple of 8) keeps the XOR term: the offset just grows by this.
  static constexpr int kRowStepElements(int rows) { return rows * kPanelChunks * kChunkElements; }
  // Element offset of (row, col) where col is a multiple of kChunkElements.
  FLASHPP_HD static int offset(int row, int col) { return chunk_offset(row, col / kChunkElements); }
};

}  // namespace flashpp::cuda
