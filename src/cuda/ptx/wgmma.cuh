// Hopper's warpgroup matrix multiply (wgmma, sm_90a): the asynchronous tensor-core product that a
// warpgroup of four consecutive warps issues together. Thin wrappers, no policy:
//
//   smem_descriptor(...)      the 64-bit shared-memory matrix descriptor of an operand tile
//   wgmma_fence()             orders earlier register writes before the next wgmma reads them
//   WgmmaShape<N, T>::ss/rs   one m64nNk16 product, A from shared memory (ss) or registers (rs)
//   wgmma_commit()            closes the wgmma issued so far into a group
//   wgmma_wait<K>()           waits until at most K groups are still running
//   fence_registers(x)        keeps the compiler from moving accesses of x across this point
//   wgmma_wait_after<K>(x)   wait_group K that ptxas cannot hoist above the computation of x
//   wgmma_wait_all_after(x)  the same with K = 0
//   fence_shared_to_async()   makes ordinary shared-memory stores visible to wgmma operand reads
//
// Operand layouts. The tiles the kernels feed to wgmma are the 128-byte-swizzled panels of
// common/swizzle.cuh (64 columns of 16-bit elements per panel, rows of 128 bytes, the 16-byte
// chunk index XORed with row % 8, each panel starting on a 1024-byte boundary), exactly what the
// bulk copy engine writes with CU_TENSOR_MAP_SWIZZLE_128B. For such a panel:
//   K-major operand (rows along M or N, the reduced dimension K contiguous, e.g. Q and K for
//   S = Q K^T): eight rows form a 1024-byte core group, so the stride between row groups (SBO)
//   is 1024 bytes; a k16 step moves the start address 32 bytes along the row, inside the swizzle
//   atom (the hardware applies the XOR from the address bits); the next 64 columns are the next
//   panel.
//   MN-major operand (K along the rows, M or N contiguous, e.g. V for O = P V, read with the
//   transpose bit): eight K rows again form a 1024-byte group (SBO = 1024), the leading byte
//   offset (LBO) is the distance between 64-column panels, and a k16 step moves the start address
//   16 rows = 2048 bytes.
//
// Accumulator layout (f32, m64nN): warp w of the warpgroup owns rows 16w..16w+15; within them,
// element 4i+c of a thread (lane = 4g + t) sits at row g + 8*(c/2), column 8i + 2t + (c%2): the
// mma.sync m16n8 layout repeated over N/8 column tiles (common/forward_steps.cuh relies on it).
// The A operand from registers (rs) takes the m16n8k16 A-fragment layout per warp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashpp::cuda::ptx {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASHPP_WGMMA_AVAILABLE 1
#else
#define FLASHPP_WGMMA_AVAILABLE 0
#endif

enum class Major { k, mn };

// Descriptor of a 128-byte-swizzled operand starting at `smem` (a shared-memory address inside a
// panel; panel bases 1024-byte aligned). `panel_bytes`: distance between 64-column panels (used
// by MN-major operands whose N spans more than one panel). kSwizzleBytes = 64: a K-major panel of
// 64-byte rows with the 64-byte swizzle (eight rows = 512 bytes; the FP8 forward's 64-key Vt
// panel of 192- and 64-key tiles), panel bases 512-byte aligned.
template <Major kMajor, int kSwizzleBytes = 128>
__device__ __forceinline__ std::uint64_t smem_descriptor(const void* smem, std::uint32_t panel_bytes) {
  static_assert(kSwizzleBytes == 128 || (kSwizzleBytes == 64 && kMajor == Major::k), "swizzle");
  const auto addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  std::uint64_t desc = (addr & 0x3FFFFu) >> 4;                                    // start address
  const std::uint32_t lbo = kMajor == Major::mn ? panel_bytes : 16u;              // K-major: unused
  desc |= static_cast<std::uint64_t>((lbo & 0x3FFFFu) >> 4) << 16;                // leading offset
  desc |= static_cast<std::uint64_t>((8u * kSwizzleBytes) >> 4) << 32;            // stride offset
  desc |= static_cast<std::uint64_t>(kSwizzleBytes == 128 ? 1 : 2) << 62;         // swizzle mode
  return desc;
}

// The same descriptor with its start address moved by `bytes` (a multiple of 16).
__device__ __forceinline__ std::uint64_t advance_descriptor(std::uint64_t desc, std::uint32_t bytes) {
  return desc + (bytes >> 4);
}

__device__ __forceinline__ void wgmma_fence() {
#if FLASHPP_WGMMA_AVAILABLE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#if FLASHPP_WGMMA_AVAILABLE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if FLASHPP_WGMMA_AVAILABLE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Orders this thread's earlier ordinary shared-memory stores (st.shared, stmatrix) before later
// reads of them by wgmma or the copy engine (the async proxy); a barrier between the writing
// threads and the issuing warpgroup follows.
__device__ __forceinline__ void fence_shared_to_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// wgmma.wait_group kPending, made to come after `x` (a value computed from every result that
// must be ready first, e.g. the row sums of a softmax). A plain wait has no register operands, and
// ptxas hoists it above such code (seen in the SASS: WARPGROUP.DEPBAR before the MUFU.EX2s), which
// serialises that code behind the running wgmma. Here the wait sits in both arms of a branch on a
// warp vote over x, so it cannot move above the code that computes x; both arms wait (a
// predicated wait made ptxas serialise every wgmma instead). The asm texts differ so that the
// compiler does not merge the arms back into one unconditional wait.
template <int kPending>
__device__ __forceinline__ void wgmma_wait_after(float x) {
#if FLASHPP_WGMMA_AVAILABLE
  if (__any_sync(0xffffffffu, __float_as_uint(x) == 0xFFFFFFFFu)) {
    asm volatile("wgmma.wait_group.sync.aligned %0; // after the softmax (rare arm)\n" ::"n"(kPending) : "memory");
  } else {
    asm volatile("wgmma.wait_group.sync.aligned %0; // after the softmax\n" ::"n"(kPending) : "memory");
  }
#else
  (void)x;
#endif
}

__device__ __forceinline__ void wgmma_wait_all_after(float x) { wgmma_wait_after<0>(x); }

template <int kCount>
__device__ __forceinline__ void fence_registers(float (&x)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(x[i])::"memory");
}

template <int kCount>
__device__ __forceinline__ void fence_registers(std::uint32_t (&x)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(x[i])::"memory");
}

// m64nNk16 with float32 accumulators; T = __half or __nv_bfloat16. kTransA / kTransB = 1 read A
// (ss only) / B MN-major.
template <int N, typename T>
struct WgmmaShape;

// m64nNk32 e4m3 x e4m3 with float32 accumulators (the FP8 forward). Both operands K-major (8-bit
// wgmma has no transpose); the A operand from registers (rs) takes the 8-bit A-fragment layout:
// per warp, register r of lane (g = lane/4, t = lane%4) holds row g + 8*(r%2), k = 16*(r/2) + 4t
// .. + 3, one byte each, lowest k in the lowest byte.
template <int N>
struct WgmmaFp8Shape;

#if FLASHPP_WGMMA_AVAILABLE
#include "wgmma_shapes.inc"
#include "wgmma_fp8_shapes.inc"
#else
// Host passes and other targets see declarations only; calling them there is a build error.
template <int N, typename T>
struct WgmmaShape {
  template <int kTransA, int kTransB>
  __device__ static void ss(float (&d)[N / 2], std::uint64_t a, std::uint64_t b, int accumulate);
  template <int kTransB>
  __device__ static void rs(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t b,
                            int accumulate);
};
template <int N>
struct WgmmaFp8Shape {
  __device__ static void ss(float (&d)[N / 2], std::uint64_t a, std::uint64_t b, int accumulate);
  __device__ static void rs(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t b,
                            int accumulate);
};
#endif

}  // namespace flashpp::cuda::ptx
