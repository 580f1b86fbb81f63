// Kernel launches that need more than `<<<grid, block, smem, stream>>>`: a dependent launch
// (programmatic stream serialisation: the kernel may start while the one before it on the stream
// still runs, ptx/griddepcontrol.cuh) and clusters of blocks along x (ptx/cluster.cuh). The
// cudaLaunchConfig_t and its attributes are built here only; launch sites and the occupancy query
// of clusters (occupancy.hpp) describe what they want as a LaunchShape.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "check_cuda.hpp"

namespace flashpp::cuda {

struct LaunchShape {
  dim3 grid;
  dim3 block;
  std::size_t dynamic_smem = 0;
  bool dependent = false;  // programmatic stream serialisation (sm90+)
  unsigned cluster_x = 1;  // blocks of a cluster along x; 1: no clusters
};

// A launch configuration of `shape` on `stream` whose attributes live in `attributes`, which must
// outlive it.
inline cudaLaunchConfig_t launch_config(const LaunchShape& shape, cudaStream_t stream,
                                        cudaLaunchAttribute (&attributes)[2]) {
  cudaLaunchConfig_t config{};
  config.gridDim = shape.grid;
  config.blockDim = shape.block;
  config.dynamicSmemBytes = shape.dynamic_smem;
  config.stream = stream;
  unsigned count = 0;
  if (shape.cluster_x > 1) {
    attributes[count] = cudaLaunchAttribute{};
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = shape.cluster_x;
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  if (shape.dependent) {
    attributes[count] = cudaLaunchAttribute{};
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = attributes;
  config.numAttrs = count;
  return config;
}

// Launches `kernel` with `shape` on `stream`; a failure throws with `what` in its message.
template <typename... Params, typename... Args>
void launch_kernel(const LaunchShape& shape, cudaStream_t stream, void (*kernel)(Params...),
                   const char* what, Args&&... args) {
  cudaLaunchAttribute attributes[2];
  const cudaLaunchConfig_t config = launch_config(shape, stream, attributes);
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), what);
}

}  // namespace flashpp::cuda
