// ldmatrix: each of the 32 lanes gives the shared-memory address of one 16-byte row; the warp
// receives four 8x8 matrices of 16-bit elements in the mma fragment layout (lane l holds row
// l / 4, elements 2*(l % 4) and 2*(l % 4) + 1 of each matrix). Lanes 8m..8m+7 address the rows
// of matrix m. The transposed form hands out the transpose of each 8x8 matrix instead, which
// turns a row-major [k][n] tile (such as V stored [key][d]) into "col-major" B fragments.
//
// CCCL's cuda::ptx has no ldmatrix/stmatrix wrapper, so this is PTX.
#pragma once

#include <cstdint>

namespace flashpp::cuda {

// 32-bit shared-state-space address of a generic pointer into shared memory.
__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t smem_row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row_addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4],
                                                  std::uint32_t smem_row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row_addr));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
inline constexpr bool kStmatrixAvailable = true;
#else
inline constexpr bool kStmatrixAvailable = false;
#endif

// The mirror of ldmatrix_x4 (sm90+): lanes 8m..8m+7 give the row addresses of matrix m, and each
// lane's r[m] holds its two elements of matrix m in the same fragment layout. One instruction
// stores a whole 16x16 A fragment (or two 16x8 accumulator tiles packed to 16 bits).
// kTransposed: each 8x8 matrix stored transposed, so lane (g, t)'s two elements of matrix m (its
// row g, columns 2t, 2t + 1) land at position g of stored rows 2t and 2t + 1: an accumulator
// tile of 8 rows x 8 columns leaves as 8 stored rows of its columns, 16 bytes each.
template <bool kTransposed = false>
__device__ __forceinline__ void stmatrix_x4(std::uint32_t smem_row_addr,
                                            const std::uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kTransposed) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                     smem_row_addr),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
  } else {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                     smem_row_addr),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
  }
#else
  (void)smem_row_addr, (void)r;
  __trap();
#endif
}

}  // namespace flashpp::cuda
