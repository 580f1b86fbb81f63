// Warpgroup roles on sm_90a: register reallocation between producer and consumer warpgroups
// (setmaxnreg) and named barriers among a subset of a block's threads (bar.sync / bar.arrive).
//
// setmaxnreg takes effect only in a kernel compiled with a register cap at entry
// (__launch_bounds__(threads, 1)) and only when every warp of a warpgroup executes it; each
// role's call sits at the top of that role's branch.
#pragma once

#include <cstdint>

namespace flashpp::cuda::ptx {

// The warpgroup (four consecutive warps) of the calling thread, made warp-uniform.
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
}

template <int kRegisters>
__device__ __forceinline__ void release_registers() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

template <int kRegisters>
__device__ __forceinline__ void claim_registers() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

// Whether a split of the block's registers between one producer warpgroup and `consumers`
// consumer warpgroups fits what the block holds: under __launch_bounds__(threads, 1) a kernel
// starts with 65536 / threads registers a thread (rounded down to 8), and setmaxnreg.inc waits
// until the registers released by setmaxnreg.dec cover the increase, so a split that asks for
// more hangs the consumers at their claim (session 24: producers at 32 beside two consumers at
// 240 in a 384-thread block).
constexpr bool register_split_fits(int producer, int consumers, int consumer) {
  const int threads = 128 * (consumers + 1);
  return 128 * producer + 128 * consumers * consumer <= threads * (65536 / threads / 8 * 8);
}

// Named barriers: id 0 is __syncthreads'; kernels number theirs from 1 (see their enums).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace flashpp::cuda::ptx
