// The CUDA forward, as called by src/cuda's entry points (backend.cpp). forward_dispatch.cpp picks
// a kernel family (families.hpp): sm90 (src/cuda/sm90/forward/) on Hopper, else sm80
// (src/cuda/sm80/forward/).
#pragma once

#include <string>

#include "../api/problem.hpp"

namespace flashpp::cuda {

// Empty when the forward kernels support these tensors (beyond what unsupported_reason checks:
// 16-byte alignment of pointers and strides for the 16-byte copies), else why not.
std::string forward_layout_unsupported_reason(const detail::ForwardArgs& args);

enum class ForwardFamily { sm80, sm90 };

struct ForwardFamilyChoice {
  ForwardFamily family;
  std::string why_not_sm90;  // empty when the family is sm90
};

// The family run_forward will use for these arguments (FLASHPP_CUDA_FAMILY read each call).
ForwardFamilyChoice choose_forward_family(const detail::ForwardArgs& args);

// Runs the forward on args.stream (the caller has set the current device).
void run_forward(const detail::ForwardArgs& args);

}  // namespace flashpp::cuda
