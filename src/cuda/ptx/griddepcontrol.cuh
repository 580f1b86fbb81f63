// Programmatic dependent launch (sm90+): a kernel launched with the
// cudaLaunchAttributeProgrammaticStreamSerialization attribute may start while the kernel before
// it on the stream is still running; it must call grid_dependency_wait() before it reads anything
// that kernel writes (the wait returns once that grid has completed and its writes are visible).
// The earlier kernel calls allow_dependent_launch() to let the dependent grid be scheduled before
// it finishes (without it, the dependent starts as the earlier one's blocks exit).
//
// Both compile to nothing below sm90, where the host does not set the attribute either; a kernel
// launched without the attribute (or with no dependent) treats them as no-ops.
#pragma once

namespace flashpp::cuda {

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace flashpp::cuda
