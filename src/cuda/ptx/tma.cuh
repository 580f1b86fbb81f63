// Hopper's bulk copy engine (TMA) and the mbarrier it completes on, for tile loads that cost one
// instruction in one thread instead of a cp.async per 16 bytes in every thread. Thin wrappers over
// CCCL's cuda::ptx; sm90+ only (kTmaAvailable says whether the code being compiled may use them;
// on older targets the calls compile to a trap and callers keep their cp.async path).
//
// A 2-D box of a tensor map made with CU_TENSOR_MAP_SWIZZLE_128B (tensor_map.hpp) lands in shared
// memory as rows of 128 bytes whose 16-byte chunks are XORed with (row % 8): exactly one 64-column
// panel of SwizzledTile (swizzle.cuh), provided the panel starts on a 1024-byte boundary.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cuda/ptx>

namespace flashpp::cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
inline constexpr bool kTmaAvailable = true;
#else
inline constexpr bool kTmaAvailable = false;
#endif

// One thread initialises the barrier (one arrival per phase: the thread that posts the byte
// count), then makes the initialisation visible to the copy engine; a __syncthreads follows.
__device__ __forceinline__ void mbarrier_init_single(std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ::cuda::ptx::mbarrier_init(bar, 1u);
  ::cuda::ptx::fence_mbarrier_init(::cuda::ptx::sem_release, ::cuda::ptx::scope_cluster);
#else
  (void)bar;
  __trap();
#endif
}

// The calling thread's arrival for this phase, announcing `bytes` the copies will deliver.
__device__ __forceinline__ void mbarrier_expect_bytes(std::uint64_t* bar, std::uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  (void)::cuda::ptx::mbarrier_arrive_expect_tx(::cuda::ptx::sem_release, ::cuda::ptx::scope_cta,
                                               ::cuda::ptx::space_shared, bar, bytes);
#else
  (void)bar, (void)bytes;
  __trap();
#endif
}

// Blocks until the phase with this parity (0, 1, 0, ... for the barrier's uses) has completed.
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* bar, std::uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  while (!::cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
#else
  (void)bar, (void)parity;
  __trap();
#endif
}

// Box at coordinates (c0 innermost .. c3) of a 4-D tensor map into shared memory; completes on bar.
// `map` must live in kernel-parameter (__grid_constant__), constant or global memory.
__device__ __forceinline__ void tma_load_4d(void* smem, const CUtensorMap* map, int c0, int c1,
                                            int c2, int c3, std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const std::int32_t coords[4] = {c0, c1, c2, c3};
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_shared, ::cuda::ptx::space_global, smem, map,
                                    coords, bar);
#else
  (void)smem, (void)map, (void)c0, (void)c1, (void)c2, (void)c3, (void)bar;
  __trap();
#endif
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared; completes on bar.
__device__ __forceinline__ void bulk_load(void* smem, const void* gmem, std::uint32_t bytes,
                                          std::uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ::cuda::ptx::cp_async_bulk(::cuda::ptx::space_shared, ::cuda::ptx::space_global, smem, gmem,
                             bytes, bar);
#else
  (void)smem, (void)gmem, (void)bytes, (void)bar;
  __trap();
#endif
}

// dst[i] += src[i] for `bytes` / 4 floats (a multiple of 16 bytes, both addresses 16-byte
// aligned), by the copy engine: global memory sees one reduction per element, the calling thread
// only issues it. The source is read asynchronously: order earlier shared-memory writes of it
// with fence_shared_to_async (wgmma.cuh), close the copies into a group with bulk_commit, and
// wait with bulk_wait_read before writing the source again (bulk_wait before the kernel ends).
__device__ __forceinline__ void bulk_reduce_add(float* gmem, const float* smem, std::uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ::cuda::ptx::cp_reduce_async_bulk(::cuda::ptx::space_global, ::cuda::ptx::space_shared,
                                    ::cuda::ptx::op_add, gmem, smem, bytes);
#else
  (void)gmem, (void)smem, (void)bytes;
  __trap();
#endif
}

__device__ __forceinline__ void bulk_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ::cuda::ptx::cp_async_bulk_commit_group();
#endif
}

// Until at most kPending of this thread's bulk groups still read their shared-memory sources.
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<kPending>{});
#endif
}

// Until at most kPending of this thread's bulk groups are incomplete (writes done).
template <int kPending>
__device__ __forceinline__ void bulk_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ::cuda::ptx::cp_async_bulk_wait_group(::cuda::ptx::n32_t<kPending>{});
#endif
}

}  // namespace flashpp::cuda
