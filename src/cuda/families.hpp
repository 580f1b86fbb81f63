// The CUDA backend's kernel families, as the dispatchers (forward_dispatch.cpp,
// backward_dispatch.cu) see them:
//   sm80  the portable FlashAttention-2 design on mma.sync and cp.async (sm_80 and later);
//   sm90  the Hopper design on wgmma, TMA and warp specialisation (sm_90a builds, on compute
//         capability 9.0 devices).
// Each family's run_forward / run_backward picks its instantiation for (dtype, head dim); the head
// dims each family is compiled for are listed in instances.hpp.
// FLASHPP_CUDA_FAMILY=sm80|sm90 in the environment forces a family (read on every call).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "../api/problem.hpp"
#include "common/forward_params.hpp"

namespace flashpp::cuda {

// The family FLASHPP_CUDA_FAMILY asks for: "" (auto), "sm80" or "sm90"; anything else throws.
std::string requested_family();

// Why the sm90 family cannot run on `device` in this build (empty when it can).
std::string sm90_unavailable_reason(int device);

struct BackwardParams;  // common/backward_params.hpp

namespace sm80 {
void run_forward(const ForwardParams& params, const detail::Problem& problem, cudaStream_t stream);
// The backward: every kernel head dim of common/backward_workspace.hpp (sm80/backward/).
void run_backward(const BackwardParams& params, const detail::BackwardArgs& args,
                  cudaStream_t stream);
}  // namespace sm80

namespace sm90 {
void run_forward(const ForwardParams& params, const detail::ForwardArgs& args, cudaStream_t stream);
// The workspace of the forward's split walk (forward/split_walk.hpp) where a call takes it, else 0.
std::size_t forward_split_workspace_bytes(const detail::Problem& problem);
// The FP8 (e4m3 inputs) forward, and the workspace it needs (V transposed, forward_fp8/).
void run_forward_fp8(const ForwardParams& params, const detail::ForwardArgs& args,
                     cudaStream_t stream);
std::size_t forward_fp8_workspace_bytes(const detail::Problem& problem);
// The backward, at the kernel head dims of common/backward_workspace.hpp that it instantiates.
void run_backward(const BackwardParams& params, const detail::BackwardArgs& args,
                  cudaStream_t stream);
}  // namespace sm90

}  // namespace flashpp::cuda
