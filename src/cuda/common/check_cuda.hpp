// check_cuda: turns a CUDA runtime error into flashpp::Error(backend_failure) carrying the CUDA
// message, so that every failure reaches the caller as the same exception type the API documents.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
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

// Blocks of `kernel` resident on the whole current device at once (SMs x blocks per SM).
template <typename Kernel>
std::int64_t resident_blocks(Kernel kernel, int threads, int dynamic_smem) {
  int device = 0, sms = 0, per_sm = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
             "cudaDeviceGetAttribute (multiprocessors)");
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, dynamic_smem),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return static_cast<std::int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
}

}  // namespace flashpp::cuda
