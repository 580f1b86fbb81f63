// cp.async: asynchronous 16-byte global -> shared copies (sm80+), grouped so that a kernel can
// keep several tiles in flight ("stages") and wait for the oldest one only.
//
// CCCL offers cuda::memcpy_async/cuda::pipeline, but neither exposes the "src-size" operand that
// zero-fills the destination, which is how tiles past the end of a sequence (or past the true
// head dim) are predicated without branches or copies. So the instruction is written in PTX; the
// group helpers keep the same vocabulary (commit a group, wait until at most N are pending).
#pragma once

#include <cstdint>

#include "ldmatrix.cuh"  // shared_address

namespace flashpp::cuda {

// Copies 16 bytes from global `src` to shared `dst` when `valid`, else writes 16 zero bytes to
// `dst` and reads nothing (src must still be a valid-looking address; pass any base pointer).
// .cg: cache in L2 only; K/V tiles are re-read by other blocks through L2, not by this SM's L1.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
               "l"(src), "r"(src_bytes));
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` committed groups are still in flight (for this thread; a
// __syncthreads() afterwards makes every thread's copies visible to the block).
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace flashpp::cuda
