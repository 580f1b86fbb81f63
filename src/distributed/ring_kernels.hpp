// The element-wise kernels of ring attention (ring_kernels.cu): packing a strided K/V view into
// a contiguous send buffer, the float32 lse merge of partial outputs, float32 accumulation of
// block gradients, and the final conversion to the output's dtype and strides. Tensors are
// [B, N, H, D]; "contiguous" means strides (N*H*D, H*D, D, 1).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashpp/flashpp.hpp"

namespace flashpp::ring_detail {

struct Dims4 {
  std::int64_t v[4];
};

// dst (contiguous) = src (strided, 2-byte elements), shape `shape`.
void launch_pack(const void* src, Dims4 src_strides, void* dst, Dims4 shape, cudaStream_t stream);

// acc: float32 contiguous [B, acc_rows, H, D]; blk: contiguous `shape` = [B, m, H, D] in dtype.
// acc[:, row0:row0+m] = blk (init) or += blk.
void launch_accumulate(float* acc, std::int64_t acc_rows, std::int64_t row0, const void* blk,
                       DType dtype, Dims4 shape, bool init, cudaStream_t stream);

// o_acc float32 contiguous [B, n, H, D], lse_acc float32 [B, H, n]; o_blk contiguous `shape` =
// [B, m, H, D] in dtype, lse_blk [B, H, m]: rows [row0, row0+m) of the accumulators merged with
// the block by lse (init: copied).
void launch_merge(float* o_acc, float* lse_acc, std::int64_t n, std::int64_t row0,
                  const void* o_blk, const float* lse_blk, DType dtype, Dims4 shape, bool init,
                  cudaStream_t stream);

// dst (dtype, strided) = acc (float32 contiguous), shape `shape`.
void launch_store(const float* acc, void* dst, DType dtype, Dims4 shape, Dims4 dst_strides,
                  cudaStream_t stream);

}  // namespace flashpp::ring_detail
