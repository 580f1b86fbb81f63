// One warp per row for the forward (a dot product reduced with shuffles); for the backward one
// block per kRowsPerBlock rows, its threads striding over the columns, writing grad_x and the
// block's partial grad_w.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "weighted_sum.hpp"

namespace weighted_sum {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int kBackwardThreads = 128;

__global__ void forward_kernel(Rows s, const float* x, const float* w, float* y) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (row >= s.rows) return;
  const float* xr = x + row * s.x_row_stride;
  float acc = 0.0f;
  for (std::int64_t d = threadIdx.x; d < s.dim; d += kWarp) acc += xr[d] * w[d];
  for (int lane_mask = kWarp / 2; lane_mask > 0; lane_mask /= 2) {
    acc += __shfl_xor_sync(0xffffffffu, acc, lane_mask);
  }
  if (threadIdx.x == 0) y[row] = acc;
}

__global__ void backward_kernel(Rows s, const float* x, const float* w, const float* grad_y,
                                float* grad_x, float* grad_w_partial) {
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock;
  const std::int64_t end = first + kRowsPerBlock < s.rows ? first + kRowsPerBlock : s.rows;
  for (std::int64_t d = threadIdx.x; d < s.dim; d += blockDim.x) {
    const float wd = w[d];
    float partial = 0.0f;
    for (std::int64_t r = first; r < end; ++r) {
      const float g = grad_y[r];
      grad_x[r * s.grad_x_row_stride + d] = g * wd;
      partial += g * x[r * s.x_row_stride + d];
    }
    grad_w_partial[blockIdx.x * s.dim + d] = partial;
  }
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("weighted_sum: ") + what + ": " + cudaGetErrorString(e));
  }
}

}  // namespace

void forward_cuda(const Rows& s, const float* x, const float* w, float* y, void* stream) {
  if (s.rows == 0) return;
  const dim3 block(kWarp, kWarpsPerBlock);
  const auto grid = static_cast<unsigned>((s.rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  forward_kernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(s, x, w, y);
  check_launch("forward kernel launch");
}

void backward_cuda(const Rows& s, const float* x, const float* w, const float* grad_y,
                   float* grad_x, float* grad_w_partial, void* stream) {
  if (s.rows == 0) return;
  const auto grid = static_cast<unsigned>(num_row_blocks(s.rows));
  backward_kernel<<<grid, kBackwardThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      s, x, w, grad_y, grad_x, grad_w_partial);
  check_launch("backward kernel launch");
}

}  // namespace weighted_sum
