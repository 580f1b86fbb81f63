// mma.m16n8k16 operand fragments read with ldmatrix from a SwizzledTile (swizzle.cuh), in the
// four ways a tile can feed a product. With a tile stored row-major as T[row][col]:
//
//   a_fragment        A = T[m0.., k0..]          (the tile is A itself, rows = M)
//   a_fragment_trans  A = transpose(T)[m0.., k0..], i.e. T stores A column by column (rows = K)
//   b_fragments       B = transpose(T)           (T stores B's columns as rows: [N][K], e.g. K for
//                                                 S = Q K^T)
//   b_fragments_trans B = T                      (T is [K][N] row-major, e.g. V for O = P V)
//
// Each b_* call yields the B fragments of two adjacent 8-column tiles (n0 and n0 + 8) for one
// 16-deep k-step. The lane-to-row assignment follows ldmatrix: lanes 8q..8q+7 give the rows of
// matrix q, and matrix q lands in register q.
#pragma once

#include <cstdint>

#include "ldmatrix.cuh"

namespace flashpp::cuda {

// The A fragment of the 16x16 block at (m0, k0) of a row-major [M][K] tile.
// Matrices: 0 = (m0, k0), 1 = (m0 + 8, k0), 2 = (m0, k0 + 8), 3 = (m0 + 8, k0 + 8).
template <typename Tile, typename Element>
__device__ __forceinline__ void a_fragment(std::uint32_t (&a)[4], const Element* tile, int m0,
                                           int k0, int lane) {
  const int row = m0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int col = k0 + (lane >> 4) * 8;
  ldmatrix_x4(a, shared_address(tile + Tile::offset(row, col)));
}

// The A fragment of the 16x16 block at (m0, k0) of A, where the tile stores A transposed
// ([K][M] row-major). Matrices: 0 = T(k0, m0), 1 = T(k0, m0 + 8), 2 = T(k0 + 8, m0),
// 3 = T(k0 + 8, m0 + 8), each transposed by ldmatrix.
template <typename Tile, typename Element>
__device__ __forceinline__ void a_fragment_trans(std::uint32_t (&a)[4], const Element* tile,
                                                 int m0, int k0, int lane) {
  const int row = k0 + (lane & 7) + (lane >> 4) * 8;
  const int col = m0 + ((lane >> 3) & 1) * 8;
  ldmatrix_x4_trans(a, shared_address(tile + Tile::offset(row, col)));
}

// B fragments of the 8-column tiles n0 and n0 + 8 at k-step k0, where the tile stores B's
// columns as rows ([N][K]). b[0..1] belong to tile n0, b[2..3] to tile n0 + 8.
// Matrices: 0 = T(n0, k0), 1 = T(n0, k0 + 8), 2 = T(n0 + 8, k0), 3 = T(n0 + 8, k0 + 8).
template <typename Tile, typename Element>
__device__ __forceinline__ void b_fragments(std::uint32_t (&b)[4], const Element* tile, int n0,
                                            int k0, int lane) {
  const int row = n0 + (lane & 7) + (lane >> 4) * 8;
  const int col = k0 + ((lane >> 3) & 1) * 8;
  ldmatrix_x4(b, shared_address(tile + Tile::offset(row, col)));
}

// B fragments of the 8-column tiles n0 and n0 + 8 at k-step k0, where the tile is B itself
// ([K][N] row-major). b[0..1] belong to tile n0, b[2..3] to tile n0 + 8.
// Matrices: 0 = T(k0, n0), 1 = T(k0 + 8, n0), 2 = T(k0, n0 + 8), 3 = T(k0 + 8, n0 + 8), each
// transposed by ldmatrix.
template <typename Tile, typename Element>
__device__ __forceinline__ void b_fragments_trans(std::uint32_t (&b)[4], const Element* tile,
                                                  int n0, int k0, int lane) {
  const int row = k0 + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int col = n0 + (lane >> 4) * 8;
  ldmatrix_x4_trans(b, shared_address(tile + Tile::offset(row, col)));
}

}  // namespace flashpp::cuda
