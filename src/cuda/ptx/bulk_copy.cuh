// Bulk (non-tensor) copies of the copy engine that the pipelines need beyond common/tma.cuh:
// reduce-add of a float32 block from shared to global memory, its completion groups, and the
// proxy fence that makes ordinary shared-memory stores visible to the copy engine. sm90+.
#pragma once

#include <cstdint>

namespace flashpp::cuda::ptx {

// global[dst .. dst + bytes) += shared[src ..) element-wise in float32, performed by the copy
// engine (one instruction from one thread; addresses 16-byte aligned, bytes a multiple of 16).
// Joins the calling thread's current bulk group (bulk_commit closes it).
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, std::uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto s = static_cast<std::uint32_t>(__cvta_generic_to_shared(src));
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(s), "r"(bytes)
               : "memory");
#else
  (void)dst, (void)src, (void)bytes;
#endif
}

__device__ __forceinline__ void bulk_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's bulk groups still read their shared-memory source
// (the source may then be overwritten; the global side may still be in flight).
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Waits until at most kPending of this thread's bulk groups are incomplete (writes done).
template <int kPending>
__device__ __forceinline__ void bulk_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Orders this thread's earlier ordinary shared-memory stores before later copy-engine or wgmma
// reads of them (with a barrier between the writers and the issuing thread).
__device__ __forceinline__ void fence_shared_to_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

}  // namespace flashpp::cuda::ptx
