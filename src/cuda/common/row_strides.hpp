// Element strides of a [B, N, H, *] view (the last dimension is contiguous), as every CUDA
// kernel's parameters hold them: forward (common/forward_params.hpp) and backward
// (common/backward_params.hpp) alike.
#pragma once

#include <cstdint>

namespace flashpp::cuda {

struct RowStrides {
  std::int64_t batch = 0, row = 0, head = 0;
};

// The row strides of a [B, N, H, *] tensor view (TensorView, src/api/problem.hpp: strides in
// that order), as both dispatchers fill their kernels' parameters.
template <typename View>
RowStrides row_strides(const View& t) {
  return RowStrides{t.strides[0], t.strides[1], t.strides[2]};
}

}  // namespace flashpp::cuda
