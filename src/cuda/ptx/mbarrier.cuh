// The shared-memory transaction barrier (mbarrier) in the roles a producer/consumer pipeline
// needs beyond ptx/tma.cuh's single-arrival use: a barrier that several consumers arrive on
// (count > 1) and the plain arrival. sm90+ (through CCCL's cuda::ptx).
#pragma once

#include <cstdint>
#include <cuda/ptx>

namespace flashpp::cuda::ptx {

// One thread initialises; a block-wide barrier must follow before any other thread uses it.
__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, std::uint32_t arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ::cuda::ptx::mbarrier_init(bar, arrivals);
#else
  (void)bar, (void)arrivals;
#endif
}

// Makes the initialisations visible to the bulk copy engine (once, after the last init).
__device__ __forceinline__ void fence_barrier_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ::cuda::ptx::fence_mbarrier_init(::cuda::ptx::sem_release, ::cuda::ptx::scope_cluster);
#endif
}

// One arrival of the calling thread on the current phase (release semantics: the thread's earlier
// shared-memory reads are complete before the phase can flip).
__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  (void)::cuda::ptx::mbarrier_arrive(bar);
#else
  (void)bar;
#endif
}

}  // namespace flashpp::cuda::ptx
