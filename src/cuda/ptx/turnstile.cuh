// A turn counter in global memory that orders work of different thread blocks (the sm90
// backward's deterministic dQ: the blocks adding into one query tile take turns in key-tile
// order, so the float32 sums happen in the same order every run).
//   wait_turn(counter, turn)  one thread spins until *counter >= turn (acquire, GPU scope)
//   pass_turn(counter)        one thread adds 1 (release, GPU scope)
// The callers put a barrier of the threads involved after wait_turn and before pass_turn: the
// release is cumulative, so it also orders the other threads' writes that the barrier ordered
// before it (the pattern of a CTA-wide semaphore).
#pragma once

#include <cstdint>

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

}  // namespace flashpp::cuda::ptx
