#include "weighted_sum.hpp"

namespace weighted_sum {

void forward_cpu(const Rows& s, const float* x, const float* w, float* y) {
  for (std::int64_t r = 0; r < s.rows; ++r) {
    const float* row = x + r * s.x_row_stride;
    float acc = 0.0f;
    for (std::int64_t d = 0; d < s.dim; ++d) acc += row[d] * w[d];
    y[r] = acc;
  }
}

void backward_cpu(const Rows& s, const float* x, const float* w, const float* grad_y,
                  float* grad_x, float* grad_w_partial) {
  const std::int64_t blocks = num_row_blocks(s.rows);
  for (std::int64_t b = 0; b < blocks; ++b) {
    float* partial = grad_w_partial + b * s.dim;
    for (std::int64_t d = 0; d < s.dim; ++d) partial[d] = 0.0f;
    const std::int64_t end = b * kRowsPerBlock + kRowsPerBlock < s.rows
                                 ? b * kRowsPerBlock + kRowsPerBlock
                                 : s.rows;
    for (std::int64_t r = b * kRowsPerBlock; r < end; ++r) {
      const float* row = x + r * s.x_row_stride;
      float* grad_row = grad_x + r * s.grad_x_row_stride;
      for (std::int64_t d = 0; d < s.dim; ++d) {
        grad_row[d] = grad_y[r] * w[d];         // outer product grad_y ⊗ w
        partial[d] += grad_y[r] * row[d];        // this block's share of grad_w
      }
    }
  }
}

}  // namespace weighted_sum
