// Element strides of a [B, N, H, *] view (the last dimension is contiguous), as every CUDA
// kernel's parameters hold them: forward (common/forward_params.hpp) and backward
// (common/backward_params.hpp) alike.
#pragma once

#include <cstdint>

namespace flashpp::cuda {

struct RowStrides {
  std::int64_t batch = 0, row = 0, head = 0;
};

}  // namespace flashpp::cuda
