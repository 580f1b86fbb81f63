// Blocks (or clusters) of a kernel resident on the whole current device at once, asked of the
// driver once per (kernel, device, block size, shared memory, cluster size) and remembered: the
// occupancy query costs more host time than a small call's whole launch, and masked launches
// (causal) need it every call to order their blocks (block_order.cuh). The caller has made the
// kernel's shared-memory opt-in.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "check_cuda.hpp"
#include "launch_config.hpp"

namespace flashpp::cuda {

// Blocks (`cluster` = 1) or clusters of `cluster` blocks along x resident at once.
template <typename Kernel>
std::int64_t cached_resident(Kernel kernel, int threads, int dynamic_smem, int cluster) {
  using Key = std::tuple<const void*, int, int, int, int>;
  static std::mutex mutex;
  static std::map<Key, std::int64_t> slots;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const Key key{reinterpret_cast<const void*>(kernel), device, threads, dynamic_smem, cluster};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = slots.find(key);
    if (it != slots.end()) return it->second;
  }
  std::int64_t count = 0;
  if (cluster == 1) {
    count = resident_blocks(kernel, threads, dynamic_smem);
  } else {
    // A cluster's blocks share a GPC: with an odd number of free SMs in one, the last idles, so
    // this is not the block count over `cluster`.
    LaunchShape shape{dim3(static_cast<unsigned>(cluster)), dim3(static_cast<unsigned>(threads)),
                      static_cast<std::size_t>(dynamic_smem)};
    shape.cluster_x = static_cast<unsigned>(cluster);
    cudaLaunchAttribute attributes[2];
    const cudaLaunchConfig_t config = launch_config(shape, nullptr, attributes);
    int clusters = 0;
    check_cuda(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config),
               "cudaOccupancyMaxActiveClusters");
    count = clusters > 0 ? clusters : 1;
  }
  const std::lock_guard<std::mutex> lock(mutex);
  slots.emplace(key, count);
  return count;
}

template <typename Kernel>
std::int64_t cached_resident_blocks(Kernel kernel, int threads, int dynamic_smem) {
  return cached_resident(kernel, threads, dynamic_smem, 1);
}

}  // namespace flashpp::cuda
