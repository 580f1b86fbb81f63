// Tensor-core matrix multiply-accumulate, m16n8k16, 16-bit inputs, float32 accumulators.
//
// CCCL's cuda::ptx has no wrapper for mma.sync, so this is written in PTX. Fragment layouts
// (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4 and t = lane % 4:
//   A (16x16, row-major), 4 regs of 2 halves: a0 = A[g][2t..2t+1],   a1 = A[g+8][2t..2t+1],
//                                             a2 = A[g][2t+8..2t+9], a3 = A[g+8][2t+8..2t+9]
//   B (16x8, "col-major"), 2 regs:            b0 = B[2t..2t+1][g],   b1 = B[2t+8..2t+9][g]
//   C/D (16x8, float):                        c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
// Note that the C fragments of two adjacent 16x8 tiles form exactly the A fragment of a 16x16
// tile: that is what lets the forward feed P from registers straight into the P.V product.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashpp::cuda {

// Element tags: the storage dtype of a kernel instantiation.
template <typename T>
struct MmaType;
template <>
struct MmaType<__half> {
  static constexpr const char* ptx = "f16";
};
template <>
struct MmaType<__nv_bfloat16> {
  static constexpr const char* ptx = "bf16";
};

// d += a * b for one 16x8x16 tile.
template <typename Element>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4],
                                             const std::uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const std::uint32_t (&a)[4],
                                                     const std::uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4],
                                                            const std::uint32_t (&a)[4],
                                                            const std::uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace flashpp::cuda
