// The CUDA backend's entry points, as seen by src/api. Built from src/cuda/*.cu when CUDA is
// enabled; src/cuda/cuda_stub.cpp stands in otherwise.
#pragma once

#include <cstddef>
#include <string>

#include "../api/problem.hpp"

namespace flashpp::cuda {

bool compiled() noexcept;
bool available() noexcept;

// Empty when the CUDA backend can run this problem; otherwise why not (names the argument).
std::string unsupported_reason(const detail::Problem& problem, bool backward);

std::size_t forward_workspace_size(const detail::Problem& problem);
std::size_t backward_workspace_size(const detail::Problem& problem, bool deterministic);

// flashpp::cuda_kernel_families: the families the dispatchers pick on `device` now.
std::string kernel_families(int device);

void forward(const detail::ForwardArgs& args);
void backward(const detail::BackwardArgs& args);

}  // namespace flashpp::cuda
