// The CUDA forward, as called by src/cuda's entry points (backend.cpp). Implemented by the
// portable sm80+ FlashAttention-2 kernels in src/cuda/sm80/forward/.
#pragma once

#include <string>

#include "../api/problem.hpp"

namespace flashpp::cuda {

// Empty when the forward kernels support these tensors (beyond what unsupported_reason checks:
// 16-byte alignment of pointers and strides for the 16-byte copies), else why not.
std::string forward_layout_unsupported_reason(const detail::ForwardArgs& args);

// Runs the forward on args.stream (the caller has set the current device).
void run_forward(const detail::ForwardArgs& args);

}  // namespace flashpp::cuda
