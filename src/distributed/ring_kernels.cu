// Element-wise kernels of ring attention (see ring_kernels.hpp). Memory-bound and small next to
// the attention blocks; grid-stride loops with 64-bit indices.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "distributed/ring_kernels.hpp"
#include "common/lse_merge.hpp"
#include "distributed/ring_schedule.hpp"

namespace flashpp::ring_detail {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

unsigned grid_for(std::int64_t total) {
  const std::int64_t blocks = (total + kThreads - 1) / kThreads;
  return unsigned(blocks < 65536 * 8 ? (blocks > 0 ? blocks : 1) : 65536 * 8);
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    throw Error(ErrorCode::backend_failure,
                std::string("flashpp ring: ") + what + ": " + cudaGetErrorString(e));
  }
}

// Offset of element idx (row-major over shape) in a tensor of the given strides.
__device__ __forceinline__ std::int64_t strided_offset(std::int64_t idx, Dims4 shape,
                                                       Dims4 strides) {
  std::int64_t off = 0;
  for (int d = 3; d >= 0; --d) {
    off += (idx % shape.v[d]) * strides.v[d];
    idx /= shape.v[d];
  }
  return off;
}

__global__ void pack_kernel(const std::uint16_t* src, Dims4 src_strides, std::uint16_t* dst,
                            Dims4 shape, std::int64_t total) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    dst[i] = src[strided_offset(i, shape, src_strides)];
  }
}

template <typename T>
__global__ void accumulate_kernel(float* acc, std::int64_t acc_rows, std::int64_t row0,
                                  const T* blk, Dims4 shape, bool init, std::int64_t total) {
  const std::int64_t hd = shape.v[2] * shape.v[3], m = shape.v[1];
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / (m * hd), row = (i / hd) % m, e = i % hd;
    float& a = acc[(b * acc_rows + row0 + row) * hd + e];
    const float x = to_float(blk[i]);
    a = init ? x : a + x;
  }
}

// One warp per (b, row, h): the row's weights once, its D elements by the lanes.
template <typename T>
__global__ void merge_kernel(float* o_acc, float* lse_acc, std::int64_t n, std::int64_t row0,
                             const T* o_blk, const float* lse_blk, Dims4 shape, bool init) {
  const std::int64_t B = shape.v[0], m = shape.v[1], H = shape.v[2], D = shape.v[3];
  const std::int64_t rows = B * m * H;
  const std::int64_t warps = std::int64_t(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (std::int64_t r = blockIdx.x * std::int64_t(blockDim.x / 32) + threadIdx.x / 32; r < rows;
       r += warps) {
    const std::int64_t b = r / (m * H), i = (r / H) % m, h = r % H;
    float* acc_row = o_acc + ((b * n + row0 + i) * H + h) * D;
    const T* blk_row = o_blk + ((b * m + i) * H + h) * D;
    float& lse_a = lse_acc[(b * H + h) * n + row0 + i];
    const float lse_b = lse_blk[(b * H + h) * m + i];
    if (init) {
      for (std::int64_t d = lane; d < D; d += 32) acc_row[d] = to_float(blk_row[d]);
      __syncwarp();
      if (lane == 0) lse_a = lse_b;
      continue;
    }
    const detail::MergeWeights w = detail::lse_merge(lse_a, lse_b);
    for (std::int64_t d = lane; d < D; d += 32) {
      acc_row[d] = w.w_acc * acc_row[d] + w.w_blk * to_float(blk_row[d]);
    }
    __syncwarp();  // every lane has read lse_a before lane 0 writes it
    if (lane == 0) lse_a = w.lse;
  }
}

template <typename T>
__global__ void store_kernel(const float* acc, T* dst, Dims4 shape, Dims4 dst_strides,
                             std::int64_t total) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    dst[strided_offset(i, shape, dst_strides)] = from_float<T>(acc[i]);
  }
}

std::int64_t numel(Dims4 s) { return s.v[0] * s.v[1] * s.v[2] * s.v[3]; }

}  // namespace

void launch_pack(const void* src, Dims4 src_strides, void* dst, Dims4 shape, cudaStream_t stream) {
  const std::int64_t total = numel(shape);
  if (total == 0) return;
  pack_kernel<<<grid_for(total), kThreads, 0, stream>>>(
      static_cast<const std::uint16_t*>(src), src_strides, static_cast<std::uint16_t*>(dst), shape,
      total);
  check_launch("pack");
}

void launch_accumulate(float* acc, std::int64_t acc_rows, std::int64_t row0, const void* blk,
                       DType dtype, Dims4 shape, bool init, cudaStream_t stream) {
  const std::int64_t total = numel(shape);
  if (total == 0) return;
  if (dtype == DType::bf16) {
    accumulate_kernel<<<grid_for(total), kThreads, 0, stream>>>(
        acc, acc_rows, row0, static_cast<const __nv_bfloat16*>(blk), shape, init, total);
  } else {
    accumulate_kernel<<<grid_for(total), kThreads, 0, stream>>>(
        acc, acc_rows, row0, static_cast<const __half*>(blk), shape, init, total);
  }
  check_launch("accumulate");
}

void launch_merge(float* o_acc, float* lse_acc, std::int64_t n, std::int64_t row0,
                  const void* o_blk, const float* lse_blk, DType dtype, Dims4 shape, bool init,
                  cudaStream_t stream) {
  const std::int64_t rows = shape.v[0] * shape.v[1] * shape.v[2];
  if (rows == 0) return;
  const unsigned grid = grid_for(rows * 32);
  if (dtype == DType::bf16) {
    merge_kernel<<<grid, kThreads, 0, stream>>>(o_acc, lse_acc, n, row0,
                                                static_cast<const __nv_bfloat16*>(o_blk), lse_blk,
                                                shape, init);
  } else {
    merge_kernel<<<grid, kThreads, 0, stream>>>(o_acc, lse_acc, n, row0,
                                                static_cast<const __half*>(o_blk), lse_blk, shape,
                                                init);
  }
  check_launch("merge");
}

void launch_store(const float* acc, void* dst, DType dtype, Dims4 shape, Dims4 dst_strides,
                  cudaStream_t stream) {
  const std::int64_t total = numel(shape);
  if (total == 0) return;
  if (dtype == DType::bf16) {
    store_kernel<<<grid_for(total), kThreads, 0, stream>>>(
        acc, static_cast<__nv_bfloat16*>(dst), shape, dst_strides, total);
  } else {
    store_kernel<<<grid_for(total), kThreads, 0, stream>>>(acc, static_cast<__half*>(dst), shape,
                                                            dst_strides, total);
  }
  check_launch("store");
}

}  // namespace flashpp::ring_detail
