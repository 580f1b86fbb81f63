// Test builds only (CMake -DFLASHPP_POISON=ON): fill what a kernel may wrongly read with NaN
// before it runs, so that an element read without being written shows up as NaN in the results
// instead of as a plausible stale value.
//   poison_dynamic_smem  every byte of the block's dynamic shared memory := 0xFF (NaN in fp16,
//                        bf16 and fp32), at kernel entry, before any copy or barrier init;
//   poison_device_buffer every byte of a workspace := 0xFF, before the first kernel that uses it.
// In normal builds both compile to nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#ifndef FLASHPP_POISON
#define FLASHPP_POISON 0
#endif

namespace flashpp::cuda {

inline constexpr bool kPoison = FLASHPP_POISON != 0;

// Called by every thread of the block, first thing; ends with a block barrier.
__device__ __forceinline__ void poison_dynamic_smem(void* smem) {
  if constexpr (kPoison) {
    std::uint32_t bytes;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    auto* words = static_cast<std::uint32_t*>(smem);
    const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    for (std::uint32_t w = tid; w < bytes / 4; w += threads) words[w] = 0xFFFFFFFFu;
    __syncthreads();
  }
}

inline void poison_device_buffer(void* data, std::size_t bytes, cudaStream_t stream) {
  if constexpr (kPoison) {
    if (data != nullptr && bytes != 0) cudaMemsetAsync(data, 0xFF, bytes, stream);
  }
}

}  // namespace flashpp::cuda
