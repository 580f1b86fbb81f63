// The CUDA backward, as called by src/cuda's entry points (backend.cpp). Implemented in
// backward_dispatch.cu (which family runs, the workspace) and the families' kernels:
// src/cuda/sm80/backward/ and src/cuda/sm90/backward/, around the shared preprocess D = rowsum(dO*O)
// and dQ postprocess (common/backward_pre_post.cu).
#pragma once

#include <cstddef>
#include <string>

#include "../api/problem.hpp"

namespace flashpp::cuda {

// Empty when the backward kernels support this problem, else the reason (names the argument).
std::string backward_unsupported_reason(const detail::Problem& problem);

// Bytes of device scratch the backward needs (float32 dQ accumulator, D, ...).
std::size_t backward_scratch_bytes(const detail::Problem& problem, bool deterministic);

// Runs the backward on args.stream. args.workspace is at least backward_scratch_bytes() large
// (backend.cpp allocates it when the caller passed none).
void run_backward(const detail::BackwardArgs& args);

}  // namespace flashpp::cuda
