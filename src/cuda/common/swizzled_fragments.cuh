// mma.m16n8k16 operand fragments read with ldmatrix from a SwizzledTile (swizzle.cuh), in the
// four ways a tile can feed a product. With a tile stored row-major as T[row][col], the name
// says which of the product's dimensions the tile's rows and columns are:
//
//   Operand::a_mk  A = T[m0.., k0..]               (the tile is A itself: [M][K])
//   Operand::a_km  A = transpose(T)[m0.., k0..]    (T stores A column by column: [K][M])
//   Operand::b_nk  B = transpose(T)                (T stores B's columns as rows: [N][K], e.g.
//                                                    K for S = Q K^T)
//   Operand::b_kn  B = T                           (T is B itself: [K][N], e.g. V for O = P V)
//
// A FragmentReader is built once per tile and lane: it resolves everything that depends on the
// lane (which row it addresses, its XOR term of the swizzle) up front, so each load in an
// unrolled loop costs one XOR and one add on compile-time offsets instead of the full swizzle
// arithmetic. That works because every load starts at a row that is a multiple of 8 and a column
// that is a multiple of 16, so the swizzle's XOR term depends on the lane alone.
//
// Each b_nk / b_kn load yields the B fragments of two adjacent 8-column tiles (n0 and n0 + 8) for
// one 16-deep k-step: registers 0..1 belong to tile n0, 2..3 to tile n0 + 8. Each a_mk / a_km
// load yields one 16x16 A fragment.
#pragma once

#include <cstdint>

#include "../ptx/ldmatrix.cuh"

namespace flashpp::cuda {

enum class Operand { a_mk, a_km, b_nk, b_kn };

template <typename Tile, Operand kOperand>
class FragmentReader {
  // ldmatrix lanes 8q..8q+7 address the rows of matrix q. Which 8x8 block of the tile matrix q
  // is, by operand (row block, column block):
  //   a_mk: q=0 (0,0)  q=1 (1,0)  q=2 (0,1)  q=3 (1,1)   -> A regs a0..a3
  //   b_kn: q=0 (0,0)  q=1 (1,0)  q=2 (0,1)  q=3 (1,1)   -> b0,b1 of n0, b0,b1 of n0+8
  //   a_km: q=0 (0,0)  q=1 (0,1)  q=2 (1,0)  q=3 (1,1)   -> A regs a0..a3 (transposed)
  //   b_nk: q=0 (0,0)  q=1 (0,1)  q=2 (1,0)  q=3 (1,1)   -> b0,b1 of n0, b0,b1 of n0+8
  static constexpr bool kRowBlockFromBit3 = kOperand == Operand::a_mk || kOperand == Operand::b_kn;
  static constexpr bool kTranspose = kOperand == Operand::a_km || kOperand == Operand::b_kn;
  static constexpr int kPanelChunks = Tile::kPanelChunks;

 public:
  __device__ __forceinline__ FragmentReader(const void* tile, int lane) {
    const int bit3 = (lane >> 3) & 1, bit4 = lane >> 4;
    const int row = (lane & 7) + 8 * (kRowBlockFromBit3 ? bit3 : bit4);
    const int chunk = kRowBlockFromBit3 ? bit4 : bit3;
    const int row_xor = kPanelChunks == 8 ? (row & 7) : ((row >> 1) & 3);
    lane_base_ = shared_address(tile) + 2u * static_cast<std::uint32_t>(row * kPanelChunks * 8);
    lane_xor_ = chunk ^ row_xor;
  }

  // The fragment whose top-left element is tile (row0, col0): row0 a multiple of 8 (16 for a
  // full fragment), col0 a multiple of 16. For a_mk and b_nk that is (m0 or n0, k0); for a_km and
  // b_kn it is (k0, m0 or n0).
  __device__ __forceinline__ void load(std::uint32_t (&r)[4], int row0, int col0) const {
    if constexpr (kTranspose) {
      ldmatrix_x4_trans(r, address(row0, col0));
    } else {
      ldmatrix_x4(r, address(row0, col0));
    }
  }

  // The inverse of load for Operand::a_mk (sm90+: stmatrix): writes the 16x16 A fragment r whose
  // top-left element is tile (row0, col0), i.e. packed accumulators of rows row0.., columns
  // col0.. (a0/a1: rows g/g+8 of columns 0-7, a2/a3: of columns 8-15).
  __device__ __forceinline__ void store(const std::uint32_t (&r)[4], int row0, int col0) const {
    static_assert(kOperand == Operand::a_mk, "fragments are stored in the A layout");
    stmatrix_x4(address(row0, col0), r);
  }

 private:
  __device__ __forceinline__ std::uint32_t address(int row0, int col0) const {
    const int chunk0 = col0 / 8;
    const int panel = chunk0 / kPanelChunks;
    const int in_panel = (chunk0 % kPanelChunks) ^ lane_xor_;
    return lane_base_ +
           2u * static_cast<std::uint32_t>(panel * Tile::kPanelElements + row0 * kPanelChunks * 8 +
                                           in_panel * 8);
  }

  std::uint32_t lane_base_;
  int lane_xor_;
};

}  // namespace flashpp::cuda
