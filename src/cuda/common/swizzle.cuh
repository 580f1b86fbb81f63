// Swizzled shared-memory tiles of 16-bit elements, free of bank conflicts for ldmatrix and for
// the 16-byte cp.async stores that fill them.
//
// A tile of `kRows` rows by `kCols` columns is cut into column panels of kPanelChunks 16-byte
// chunks (8 chunks = 64 elements = 128 bytes when kCols is a multiple of 64, else 4 chunks = 32
// elements = 64 bytes). Each panel is stored row after row. Within a panel the chunk index is
// XORed with bits of the row:
//   8-chunk panels: chunk ^ (row % 8)         -> 8 consecutive rows at one logical chunk hit 8
//                                                different 16-byte bank groups;
//   4-chunk panels: chunk ^ ((row / 2) % 4)   -> two rows share a 128-byte line, so row parity
//                                                picks the half and row/2 the chunk within it.
// ldmatrix reads 8 rows at the same logical chunk, so each of its 8-lane phases touches all 32
// banks exactly once. Tile bases used by the kernels are multiples of 8 rows, so the XOR term
// depends only on the lane, and the compiler keeps it in one register.
#pragma once

#include <cstdint>

namespace flashpp::cuda {

template <int kRows, int kCols>
struct SwizzledTile {
  static_assert(kCols % 32 == 0, "tile columns must be a multiple of 32 elements");
  static_assert(kRows % 8 == 0, "tile rows must be a multiple of 8");
  static constexpr int kRowCount = kRows;
  static constexpr int kChunks = kCols / 8;  // 16-byte chunks per row
  static constexpr int kPanelChunks = kCols % 64 == 0 ? 8 : 4;
  static constexpr int kPanelElements = kRows * kPanelChunks * 8;
  static constexpr int kElements = kRows * kCols;
  static constexpr int kBytes = kElements * 2;

  // Element offset of the chunk (row, chunk) from the start of the tile.
  __device__ __forceinline__ static int chunk_offset(int row, int chunk) {
    const int panel = chunk / kPanelChunks;
    const int in_panel = chunk % kPanelChunks;
    const int xor_bits = kPanelChunks == 8 ? (row & 7) : ((row >> 1) & 3);
    return panel * kPanelElements + (row * kPanelChunks + (in_panel ^ xor_bits)) * 8;
  }
  // Moving down by `rows` (a multiple of 8) keeps the XOR term: the offset just grows by this.
  static constexpr int kRowStepElements(int rows) { return rows * kPanelChunks * 8; }
  // Element offset of (row, col) where col is a multiple of 8.
  __device__ __forceinline__ static int offset(int row, int col) { return chunk_offset(row, col / 8); }
};

}  // namespace flashpp::cuda
