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

}  // namespace flashpp::cuda
