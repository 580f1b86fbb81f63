// Thread-block clusters (sm_90): the calling block's rank, a barrier over every thread of the
// cluster, and another block's shared memory (distributed shared memory): its addresses, bulk
// copies into it that complete on its mbarriers, and arrivals on those.
// Thin wrappers over CCCL's cuda::ptx, and inline PTX where CCCL has no form (mapa, the bulk copy
// into another block, the remote arrival with default semantics).
#pragma once

#include <cstdint>
#include <cuda/ptx>

namespace flashpp::cuda::ptx {

// This block's rank in its cluster (0 .. cluster size - 1).
__device__ __forceinline__ unsigned cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return ::cuda::ptx::get_sreg_cluster_ctarank();
#else
  return 0;
#endif
}

// Every thread of every block of the cluster arrives, then waits (release / acquire at cluster
// scope: shared-memory writes before it are visible to every block after it).
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  ::cuda::ptx::barrier_cluster_arrive(::cuda::ptx::sem_release);
  ::cuda::ptx::barrier_cluster_wait(::cuda::ptx::sem_acquire);
#endif
}

// The shared::cluster address of the same shared-memory object in block `rank` (mapa), for the
// instructions that take one (bulk_copy_to_cluster).
__device__ __forceinline__ std::uint32_t cluster_address(const void* smem, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  std::uint32_t remote;
  const auto local = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
#else
  (void)smem, (void)rank;
  return 0;
#endif
}

// `bytes` (a multiple of 16) of this block's shared memory at `src` copied into another block's
// (`remote`, from cluster_address) by the copy engine, counted against the transaction count of
// the mbarrier `remote_bar` in that block (which completes once they have landed: the only sign,
// for either block, that the source has been read).
__device__ __forceinline__ void bulk_copy_to_cluster(std::uint32_t remote, const void* src, std::uint32_t bytes,
                                                     std::uint32_t remote_bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const auto local = static_cast<std::uint32_t>(__cvta_generic_to_shared(src));
  asm volatile(
      "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      ::"r"(remote), "r"(local), "r"(bytes), "r"(remote_bar)
      : "memory");
#else
  (void)remote, (void)src, (void)bytes, (void)remote_bar;
#endif
}

// One arrival on this block's mbarrier `bar` that also expects `bytes` more of asynchronous
// transactions (a bulk_copy_to_cluster from another block) in the current phase.
__device__ __forceinline__ void arrive_expect_bytes(std::uint64_t* bar, std::uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  (void)::cuda::ptx::mbarrier_arrive_expect_tx(::cuda::ptx::sem_release, ::cuda::ptx::scope_cta,
                                               ::cuda::ptx::space_shared, bar, bytes);
#else
  (void)bar, (void)bytes;
#endif
}

// One arrival on an mbarrier in another block's shared memory (`remote`: from cluster_address),
// with the default semantics of a remote arrival (release at CTA scope, no cluster-wide fence:
// a release at cluster scope compiles to MEMBAR.ALL.GPU, and the acquire that pairs with it to an
// L1 invalidation). For "done reading this area" signals, whose reads have completed (their values
// were used) before the arrival issues.
__device__ __forceinline__ void remote_arrive(std::uint32_t remote) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
#else
  (void)remote;
#endif
}

}  // namespace flashpp::cuda::ptx
