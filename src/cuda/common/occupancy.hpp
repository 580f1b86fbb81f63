// Blocks of a kernel resident on the whole current device at once, asked of the driver once per
// (kernel, device, block size, shared memory) and remembered: the occupancy query costs more
// host time than a small call's whole launch, and masked launches (causal) need it every call to
// order their blocks (block_order.cuh). The caller has made the kernel's shared-memory opt-in.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "check_cuda.hpp"

namespace flashpp::cuda {

template <typename Kernel>
std::int64_t cached_resident_blocks(Kernel kernel, int threads, int dynamic_smem) {
  using Key = std::tuple<const void*, int, int, int>;
  static std::mutex mutex;
  static std::map<Key, std::int64_t> slots;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const Key key{reinterpret_cast<const void*>(kernel), device, threads, dynamic_smem};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = slots.find(key);
    if (it != slots.end()) return it->second;
  }
  const std::int64_t count = resident_blocks(kernel, threads, dynamic_smem);
  const std::lock_guard<std::mutex> lock(mutex);
  slots.emplace(key, count);
  return count;
}

// The kernel's opt-in to `bytes` of dynamic shared memory, made once per (kernel, device, bytes):
// a launch then costs no cudaFuncSetAttribute call (about a microsecond of host time each).
template <typename Kernel>
void ensure_dynamic_smem(Kernel kernel, int bytes, const char* what) {
  using Key = std::tuple<const void*, int, int>;
  static std::mutex mutex;
  static std::map<Key, bool> done;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const Key key{reinterpret_cast<const void*>(kernel), device, bytes};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (done.count(key) != 0) return;
  }
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), what);
  const std::lock_guard<std::mutex> lock(mutex);
  done.emplace(key, true);
}

}  // namespace flashpp::cuda
