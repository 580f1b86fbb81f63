// A turn counter in global memory that orders work of different thread blocks (the sm90
// backward's deterministic dQ: the blocks adding into one query tile take turns in key-tile
// order, so the float32 sums happen in the same order every run).
//   wait_turn(counter, turn)  one thread spins until *counter >= turn (acquire, GPU scope)
//   pass_turn(counter)        one thread adds 1 (release, GPU scope)
// Where other threads' writes are in the turn, the callers put a barrier of the threads involved
// after wait_turn and before pass_turn: the release is cumulative, so it also orders the writes
// that the barrier ordered before it (the pattern of a CTA-wide semaphore).
// Where the turn's writes are a bulk copy's (the async proxy: ptx/tma.cuh's bulk_reduce_add),
// the turn is taken and passed by the thread that issues the copy, with proxy fences:
//   wait_turn_async(counter, turn)  wait_turn, then the copies issued next follow the acquire
//   pass_turn_async(counter)        after the copies' bulk_wait<0> (writes done, not only their
//                                   reads of shared memory): their writes precede the release
#pragma once

#include <cstdint>
#include <cuda/ptx>

namespace flashpp::cuda::ptx {

__device__ __forceinline__ int load_acquire(const int* address) {
  int value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ void wait_turn(const int* counter, int turn) {
  while (load_acquire(counter) < turn) {
  }
}

__device__ __forceinline__ void pass_turn(int* counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
}

__device__ __forceinline__ void fence_async_global() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_global);
#endif
}

__device__ __forceinline__ void wait_turn_async(const int* counter, int turn) {
  wait_turn(counter, turn);
  fence_async_global();
}

__device__ __forceinline__ void pass_turn_async(int* counter) {
  fence_async_global();
  pass_turn(counter);
}

}  // namespace flashpp::cuda::ptx
