// The CUDA forward's kernel families, as the dispatcher (forward_dispatch.cpp) sees them:
//   sm80  the portable FlashAttention-2 design on mma.sync and cp.async (sm_80 and later);
//   sm90  the Hopper design on wgmma, TMA and warp specialisation (sm_90a builds, on compute
//         capability 9.0 devices).
// Each family's run_forward picks its instantiation for (dtype, head dim).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../api/problem.hpp"
#include "common/forward_params.hpp"

namespace flashpp::cuda {

// The smallest instantiated head dim >= D (0 when none), over a family's ascending list.
template <std::size_t N>
constexpr int instantiated_head_dim(const int (&dims)[N], std::int64_t D) {
  for (int d : dims)
    if (D <= d) return d;
  return 0;
}

namespace sm80 {
inline constexpr int kForwardHeadDims[] = {32, 64, 96, 128, 192, 256};
void run_forward(const ForwardParams& params, const detail::Problem& problem, cudaStream_t stream);
}  // namespace sm80

namespace sm90 {
inline constexpr int kForwardHeadDims[] = {64, 96, 128, 192, 256};
void run_forward(const ForwardParams& params, const detail::ForwardArgs& args, cudaStream_t stream);
}  // namespace sm90

}  // namespace flashpp::cuda
