// Row reductions inside a quad: in the mma accumulator layout the four lanes 4g..4g+3 hold the
// columns of the same rows, so a row max / row sum needs two xor-shuffles (distance 1 and 2).
#pragma once

namespace flashpp::cuda {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

}  // namespace flashpp::cuda
