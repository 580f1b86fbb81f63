// check_cuda: turns a CUDA runtime error into flashpp::Error(backend_failure) carrying the CUDA
// message, so that every failure reaches the caller as the same exception type the API documents.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "flashpp/flashpp.hpp"

namespace flashpp::cuda {

// `what` names the operation (e.g. "forward kernel launch") so the message says where it failed.
inline void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw Error(ErrorCode::backend_failure, std::string("flashpp CUDA backend: ") + what +
                                              " failed: " + cudaGetErrorName(status) + ": " +
                                              cudaGetErrorString(status));
}

// After a kernel launch: launch-configuration errors are reported by cudaGetLastError (the kernel
// itself runs asynchronously; its faults surface at the next synchronising call).
inline void check_launch(const char* what) { check_cuda(cudaGetLastError(), what); }

}  // namespace flashpp::cuda
