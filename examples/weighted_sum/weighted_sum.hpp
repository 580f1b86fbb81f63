// The weighted sum y = (x * w).sum(-1) of seed 000, as plain C++ and CUDA kernels.
//
// x is viewed as rows: [R, D] with row stride `x_row_stride` (elements) and contiguous rows; w is
// [D]; y and grad_y are [R]. Everything is float32.
//
// Backward (seed 000's derivation):
//   grad_x[r, d] = grad_y[r] * w[d]                         (an outer product)
//   grad_w[d]    = sum_r grad_y[r] * x[r, d]                 (a reduction over rows)
// The reduction over rows is done in two steps, as the seed does on the GPU: each block of
// kRowsPerBlock rows writes its partial sum into grad_w_partial[block, :], and the caller sums
// the partials (a [blocks, D] -> [D] reduction) at the end. No atomics: deterministic.
#pragma once

#include <cstdint>

namespace weighted_sum {

inline constexpr std::int64_t kRowsPerBlock = 16;

inline std::int64_t num_row_blocks(std::int64_t rows) {
  return (rows + kRowsPerBlock - 1) / kRowsPerBlock;
}

struct Rows {
  std::int64_t rows = 0, dim = 0, x_row_stride = 0, grad_x_row_stride = 0;
};

void forward_cpu(const Rows& shape, const float* x, const float* w, float* y);
void backward_cpu(const Rows& shape, const float* x, const float* w, const float* grad_y,
                  float* grad_x, float* grad_w_partial);

// CUDA versions: launched on `stream` (a cudaStream_t), asynchronous. Throw std::runtime_error
// on a launch error. Compiled only when the build has CUDA.
void forward_cuda(const Rows& shape, const float* x, const float* w, float* y, void* stream);
void backward_cuda(const Rows& shape, const float* x, const float* w, const float* grad_y,
                   float* grad_x, float* grad_w_partial, void* stream);

}  // namespace weighted_sum
