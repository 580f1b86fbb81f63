// The float32 dQ accumulator of the non-deterministic backward: where each element lives, how the
// main kernel adds a warp's mma accumulator fragment into it, and how the postprocess reads it.
//
// The accumulator is stored in blocks of 16 rows x 8 columns, one block per mma accumulator
// fragment (ptx/mma.cuh: lane l = 4g + t holds (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) as
// c0..c3). Block (bh, row/16, col/8) is 128 consecutive floats, ordered so that a warp adds a
// whole fragment with the widest atomics the GPU has, over contiguous memory:
//   sm90+: lane-major, c0..c3 of lane l at 4l..4l+3  -> one 16-byte red per lane, 512 B per warp
//   sm80:  element-major, c of lane l at 32c + l     -> four 4-byte reds, 128 B per warp each
// (row-major float2 atomics instead touch 8 rows, i.e. 8 cache lines, per warp instruction).
// Both kernels that touch the accumulator are compiled for the same architecture and run on the
// same device, so they always agree on the order.
#pragma once

#include <cstdint>

#include "backward_params.hpp"

namespace flashpp::cuda {

inline constexpr int kDqAccumBlockFloats = 16 * 8;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
inline constexpr int kDqAccumVector = 4;  // floats per atomic
#else
inline constexpr int kDqAccumVector = 1;
#endif

// First float of the 16x8 block holding rows 16*row_block.., columns 8*col_block.. of (b*Hq+h).
__device__ __forceinline__ float* dq_accum_block(const BackwardParams& p, std::int64_t bh,
                                                 std::int64_t row_block, int col_block,
                                                 int accum_width) {
  const std::int64_t row_blocks = p.rows_padded / 16;
  return p.dq_accum +
         ((bh * row_blocks + row_block) * (accum_width / 8) + col_block) * kDqAccumBlockFloats;
}

// The transposed order (BackwardParams::dq_accum_transposed), for a kernel whose accumulator
// fragments are dQ^T's (rows = columns of dQ, columns = query rows): blocks of 16 columns x 8 rows,
// (bh, col/16, row/8), row blocks innermost, so that the 8 blocks of a warp's 16 columns of a
// 64-row query tile are 4 KB in one piece; inside a block the same lane-major order as above,
// with (column, row) in the place of (row, column). First float of block (bh, col_block, row_block).
__device__ __forceinline__ float* dq_accum_t_block(const BackwardParams& p, std::int64_t bh,
                                                   int col_block, std::int64_t row_block) {
  const std::int64_t row_blocks = p.rows_padded / 8;
  return p.dq_accum +
         ((bh * (p.accum_width / 16) + col_block) * row_blocks + row_block) * kDqAccumBlockFloats;
}

// Position of element c (0..3) of lane `lane` inside a block.
__device__ __forceinline__ int dq_accum_slot(int lane, int c) {
  return (c / kDqAccumVector) * (32 * kDqAccumVector) + lane * kDqAccumVector + c % kDqAccumVector;
}

// block += this warp's accumulator fragment (every lane calls it with its own c0..c3).
__device__ __forceinline__ void dq_accum_add_fragment(float* block, int lane, const float (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(block + 4 * lane), make_float4(c[0], c[1], c[2], c[3]));
#else
#pragma unroll
  for (int e = 0; e < 4; ++e) atomicAdd(block + dq_accum_slot(lane, e), c[e]);
#endif
}

// The same fragment written in the accumulator's order into a shared-memory copy of a block
// (sm90+: a warp's staging area, added to the accumulator by one bulk reduce-add).
__device__ __forceinline__ void dq_accum_stage_fragment(float* block, int lane, const float (&c)[4]) {
  static_assert(kDqAccumVector == 4 || kDqAccumVector == 1, "lane-major or element-major blocks");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  *reinterpret_cast<float4*>(block + 4 * lane) = make_float4(c[0], c[1], c[2], c[3]);
#else
#pragma unroll
  for (int e = 0; e < 4; ++e) block[dq_accum_slot(lane, e)] = c[e];
#endif
}

// The fragment back from such a shared-memory copy (what dq_accum_stage_fragment wrote there).
__device__ __forceinline__ void dq_accum_load_fragment(float (&c)[4], const float* block, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const float4 v = *reinterpret_cast<const float4*>(block + 4 * lane);
  c[0] = v.x, c[1] = v.y, c[2] = v.z, c[3] = v.w;
#else
#pragma unroll
  for (int e = 0; e < 4; ++e) c[e] = block[dq_accum_slot(lane, e)];
#endif
}

}  // namespace flashpp::cuda
