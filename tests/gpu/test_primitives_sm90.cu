// GPU unit tests of the sm_90a building blocks (compiled for sm_90a only, and only when 90a is
// among FLASHPP_CUDA_ARCHS; tests/gpu/CMakeLists.txt): wgmma with shared-memory descriptors
// (ptx/wgmma.cuh), TMA tile loads completing on an mbarrier (ptx/tma.cuh, common/tensor_map.hpp),
// the multi-arrival mbarrier (ptx/mbarrier.cuh), bulk copies, and stmatrix through
// FragmentReader::store (common/swizzled_fragments.cuh). Each runs only on a device of compute
// capability 9.x and skips elsewhere. Same conventions as test_primitives.cu: a tiny kernel per
// wrapper, poisoned outputs, a CPU reference.
//
// Waits on barriers are bounded here (mbarrier_test_wait_parity with a cap, then the wrapper's
// wait on the completed phase), so that a broken barrier fails the test instead of hanging it.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cuda/ptx>
#include <vector>

#include "cuda/common/swizzle.cuh"
#include "cuda/common/swizzled_fragments.cuh"
#include "cuda/common/tensor_map.hpp"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "primitive_checks.hpp"

namespace flashpp::cuda {
namespace {

using gpu_test::DeviceBuffer;
using gpu_test::kPoison16;

#define FLASHPP_SKIP_UNLESS_SM90()                                                          \
  do {                                                                                     \
    FLASHPP_SKIP_WITHOUT_GPU();                                                            \
    if (::flashpp::gpu_test::device_major() != 9) {                                        \
      GTEST_SKIP() << "needs a device of compute capability 9.x (sm_90a code)";            \
    }                                                                                      \
  } while (0)

// Error codes the kernels report (0: none).
enum KernelError : int {
  kMisalignedSmem = 1,      // dynamic shared memory not 1024-byte aligned
  kBarrierTimeout = 2,      // a phase did not complete in time
  kNextPhaseComplete = 3,   // the phase after the completed one reads as complete too
  kNotCompiledForSm90a = 4  // the kernel body was compiled without sm_90a features
};

// Spins (bounded) until the phase of `bar` with this parity has completed; then the wrapper's own
// wait, which must return at once. False on timeout.
__device__ bool wait_phase(std::uint64_t* bar, std::uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  for (int i = 0; i < (1 << 22); ++i) {
    if (::cuda::ptx::mbarrier_test_wait_parity(bar, parity)) {
      mbarrier_wait(bar, parity);
      return true;
    }
    __nanosleep(64);
  }
#else
  (void)bar, (void)parity;
#endif
  return false;
}

// Element (r, c) of a row-major [rows][cols] matrix written into a 64-column-panelled
// SwizzledTile: ordinary shared-memory stores, as a kernel staging an operand would.
template <typename Tile>
__device__ void fill_swizzled(std::uint16_t* tile, const std::uint16_t* src, int cols) {
  for (int e = threadIdx.x; e < Tile::kElements; e += blockDim.x) {
    const int r = e / cols, c = e % cols;
    tile[Tile::offset(r, c & ~7) + (c & 7)] = src[e];
  }
}

// =============================================================================================
// wgmma m64nNk16, both operands from shared memory, K-major (the forward's S = Q K^T)
// =============================================================================================

// D [64][64] = A [64][128] B^T, B stored [64 (n)][128 (k)]: 8 k16 steps over two 64-column panels
// each, as issue_scores steps them. The accumulator starts as NaN: the first product must
// overwrite it (accumulate = 0).
template <typename T>
__global__ void wgmma_ss_kernel(const std::uint16_t* a, const std::uint16_t* b, float* d, int* error) {
#if FLASHPP_WGMMA_AVAILABLE
  using Tile = SwizzledTile<64, 128>;
  constexpr std::uint32_t kPanelBytes = 64 * 128;
  extern __shared__ __align__(1024) unsigned char smem[];
  auto* sa = reinterpret_cast<std::uint16_t*>(smem);
  auto* sb = reinterpret_cast<std::uint16_t*>(smem + Tile::kBytes);
  if (threadIdx.x == 0 && (shared_address(smem) & 1023u) != 0) atomicExch(error, kMisalignedSmem);
  fill_swizzled<Tile>(sa, a, 128);
  fill_swizzled<Tile>(sb, b, 128);
  ptx::fence_shared_to_async();
  __syncthreads();

  float acc[32];
  for (int i = 0; i < 32; ++i) acc[i] = __int_as_float(0x7FFFFFFF);
  const std::uint64_t a_desc = ptx::smem_descriptor<ptx::Major::k>(sa, 0);
  const std::uint64_t b_desc = ptx::smem_descriptor<ptx::Major::k>(sb, 0);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const std::uint32_t step = (kk / 4) * kPanelBytes + (kk % 4) * 32;
    ptx::WgmmaShape<64, T>::template ss<0, 0>(acc, ptx::advance_descriptor(a_desc, step),
                                              ptx::advance_descriptor(b_desc, step), kk > 0 ? 1 : 0);
  }
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::fence_registers(acc);

  // Accumulator layout: warp w owns rows 16w..; element 4i + c at row g + 8 (c / 2), column
  // 8i + 2t + c % 2.
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 8; ++i)
    for (int c = 0; c < 4; ++c)
      d[(16 * warp + g + 8 * (c >> 1)) * 64 + 8 * i + 2 * t + (c & 1)] = acc[4 * i + c];
#else
  (void)a, (void)b, (void)d;
  if (threadIdx.x == 0) atomicExch(error, kNotCompiledForSm90a);
#endif
}

template <typename T>
void check_wgmma_ss() {
  FLASHPP_SKIP_UNLESS_SM90();
  constexpr int M = 64, N = 64, K = 128;
  const std::vector<float> a = gpu_test::eighths(M * K, 41), b = gpu_test::eighths(N * K, 42);
  DeviceBuffer da(M * K * 2), db(N * K * 2), dd(M * N * 4), derr(4);
  FLASHPP_ALLOC_OK(da);
  FLASHPP_ALLOC_OK(db);
  FLASHPP_ALLOC_OK(dd);
  FLASHPP_ALLOC_OK(derr);
  da.upload(gpu_test::to_bits<T>(a));
  db.upload(gpu_test::to_bits<T>(b));
  dd.fill_bytes(0xFF);
  derr.fill_bytes(0);
  const int smem_bytes = 2 * SwizzledTile<64, 128>::kBytes;
  wgmma_ss_kernel<T><<<1, 128, smem_bytes>>>(static_cast<const std::uint16_t*>(da.data()),
                                             static_cast<const std::uint16_t*>(db.data()),
                                             static_cast<float*>(dd.data()),
                                             static_cast<int*>(derr.data()));
  FLASHPP_LAUNCH_OK();
  ASSERT_EQ(derr.download<int>(1)[0], 0) << "kernel error code";
  const std::vector<float> d = dd.download<float>(M * N);
  gpu_test::expect_matrix(d, M, N, [&](int m, int n) {
    float want = 0.0f;
    for (int k = 0; k < K; ++k) want += a[m * K + k] * b[n * K + k];
    return want;
  });
}

TEST(PrimitivesSm90, WgmmaSsKMajorFp16) { check_wgmma_ss<__half>(); }
TEST(PrimitivesSm90, WgmmaSsKMajorBf16) { check_wgmma_ss<__nv_bfloat16>(); }

// =============================================================================================
// wgmma m64n128k16, A from registers, B MN-major through the transpose bit (the forward's O += P V)
// =============================================================================================

// D [64][128] = C + P [64][64] V [64][128]: P in each warp's m16n8k16 A-fragment layout (rows
// 16w..16w+15), V stored [key][d] in a SwizzledTile<64, 128> (two panels: LBO = 64 * 128 bytes),
// 4 k16 steps of 16 rows (2048 bytes), as issue_pv does.
template <typename T>
__global__ void wgmma_rs_kernel(const std::uint16_t* p, const std::uint16_t* v, const float* c,
                                float* d, int* error) {
#if FLASHPP_WGMMA_AVAILABLE
  using Tile = SwizzledTile<64, 128>;
  extern __shared__ __align__(1024) unsigned char smem[];
  auto* sv = reinterpret_cast<std::uint16_t*>(smem);
  if (threadIdx.x == 0 && (shared_address(smem) & 1023u) != 0) atomicExch(error, kMisalignedSmem);
  fill_swizzled<Tile>(sv, v, 128);
  ptx::fence_shared_to_async();
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 16 * warp + g;
  auto pair = [&](int row, int col) {
    return static_cast<std::uint32_t>(p[row * 64 + col]) |
           (static_cast<std::uint32_t>(p[row * 64 + col + 1]) << 16);
  };
  std::uint32_t frag[4][4];
  for (int kk = 0; kk < 4; ++kk) {
    frag[kk][0] = pair(r0, 16 * kk + 2 * t);
    frag[kk][1] = pair(r0 + 8, 16 * kk + 2 * t);
    frag[kk][2] = pair(r0, 16 * kk + 8 + 2 * t);
    frag[kk][3] = pair(r0 + 8, 16 * kk + 8 + 2 * t);
  }
  float acc[64];
  for (int i = 0; i < 16; ++i)
    for (int cc = 0; cc < 4; ++cc)
      acc[4 * i + cc] = c[(r0 + 8 * (cc >> 1)) * 128 + 8 * i + 2 * t + (cc & 1)];
  const std::uint64_t v_desc = ptx::smem_descriptor<ptx::Major::mn>(sv, 64 * 128);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    ptx::WgmmaShape<128, T>::template rs<1>(acc, frag[kk], ptx::advance_descriptor(v_desc, kk * 16 * 128), 1);
  }
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::fence_registers(acc);
  ptx::fence_registers(reinterpret_cast<std::uint32_t(&)[16]>(frag));
  for (int i = 0; i < 16; ++i)
    for (int cc = 0; cc < 4; ++cc)
      d[(r0 + 8 * (cc >> 1)) * 128 + 8 * i + 2 * t + (cc & 1)] = acc[4 * i + cc];
#else
  (void)p, (void)v, (void)c, (void)d;
  if (threadIdx.x == 0) atomicExch(error, kNotCompiledForSm90a);
#endif
}

template <typename T>
void check_wgmma_rs() {
  FLASHPP_SKIP_UNLESS_SM90();
  constexpr int M = 64, N = 128, K = 64;
  const std::vector<float> p = gpu_test::eighths(M * K, 51), v = gpu_test::eighths(K * N, 52),
                           c = gpu_test::eighths(M * N, 53);
  DeviceBuffer dp(M * K * 2), dv(K * N * 2), dc(M * N * 4), dd(M * N * 4), derr(4);
  FLASHPP_ALLOC_OK(dp);
  FLASHPP_ALLOC_OK(dv);
  FLASHPP_ALLOC_OK(dc);
  FLASHPP_ALLOC_OK(dd);
  FLASHPP_ALLOC_OK(derr);
  dp.upload(gpu_test::to_bits<T>(p));
  dv.upload(gpu_test::to_bits<T>(v));
  dc.upload(c);
  dd.fill_bytes(0xFF);
  derr.fill_bytes(0);
  wgmma_rs_kernel<T><<<1, 128, SwizzledTile<64, 128>::kBytes>>>(
      static_cast<const std::uint16_t*>(dp.data()), static_cast<const std::uint16_t*>(dv.data()),
      static_cast<const float*>(dc.data()), static_cast<float*>(dd.data()),
      static_cast<int*>(derr.data()));
  FLASHPP_LAUNCH_OK();
  ASSERT_EQ(derr.download<int>(1)[0], 0) << "kernel error code";
  const std::vector<float> d = dd.download<float>(M * N);
  gpu_test::expect_matrix(d, M, N, [&](int m, int n) {
    float want = c[m * N + n];
    for (int k = 0; k < K; ++k) want += p[m * K + k] * v[k * N + n];
    return want;
  });
}

TEST(PrimitivesSm90, WgmmaRsMnMajorFp16) { check_wgmma_rs<__half>(); }
TEST(PrimitivesSm90, WgmmaRsMnMajorBf16) { check_wgmma_rs<__nv_bfloat16>(); }

// =============================================================================================
// TMA: 2-D boxes of a [B, N, H, D] tensor map into a swizzled tile, completing on an mbarrier
// =============================================================================================

// Two phases of one barrier: the box at (b, h, rows m0[phase]..+63), both 64-column panels, as
// the sm90 forward loads its Q tile. The tile is poisoned before each load. Output: the raw tile
// of each phase.
__global__ void tma_kernel(const __grid_constant__ CUtensorMap map, int b, int h, int m0_first,
                           int m0_second, std::uint16_t* out, int* error) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Tile = SwizzledTile<64, 128>;
  constexpr int kPanelBytes = 64 * 128;
  extern __shared__ __align__(1024) unsigned char smem[];
  auto* tile = reinterpret_cast<std::uint16_t*>(smem);
  auto* bar = reinterpret_cast<std::uint64_t*>(smem + Tile::kBytes);
  if (threadIdx.x == 0 && (shared_address(smem) & 1023u) != 0) atomicExch(error, kMisalignedSmem);
  if (threadIdx.x == 0) mbarrier_init_single(bar);
  __syncthreads();
  for (int phase = 0; phase < 2; ++phase) {
    for (int e = threadIdx.x; e < Tile::kElements; e += blockDim.x) tile[e] = 0xFFFFu;
    ptx::fence_shared_to_async();  // the poison lands before the copy engine's writes
    __syncthreads();
    if (threadIdx.x == 0) {
      const int m0 = phase == 0 ? m0_first : m0_second;
      mbarrier_expect_bytes(bar, Tile::kBytes);
      for (int panel = 0; panel < 2; ++panel) {
        tma_load_4d(smem + panel * kPanelBytes, &map, panel * 64, m0, h, b, bar);
      }
    }
    const bool done = wait_phase(bar, static_cast<std::uint32_t>(phase));
    if (__syncthreads_or(!done)) {  // leave together, so that no thread waits at a barrier alone
      if (!done) atomicExch(error, kBarrierTimeout);
      return;
    }
    // The next phase has had no arrival yet: it must not read as complete.
    if (threadIdx.x == 0 && ::cuda::ptx::mbarrier_test_wait_parity(bar, static_cast<std::uint32_t>(phase ^ 1))) {
      atomicExch(error, kNextPhaseComplete);
    }
    for (int e = threadIdx.x; e < Tile::kElements; e += blockDim.x) out[phase * Tile::kElements + e] = tile[e];
    __syncthreads();
  }
#else
  (void)map, (void)b, (void)h, (void)m0_first, (void)m0_second, (void)out;
  if (threadIdx.x == 0) atomicExch(error, kNotCompiledForSm90a);
#endif
}

TEST(PrimitivesSm90, TmaTileLoadsCompleteOnMbarrier) {
  FLASHPP_SKIP_UNLESS_SM90();
  // [B 2, N 100, H 3, D 96] bf16, contiguous; boxes of 64 rows x 64 columns.
  constexpr int kB = 2, kN = 100, kH = 3, kD = 96, kBoxRows = 64;
  constexpr int b = 1, h = 2, m0_first = 0, m0_second = 64;  // the second box runs past N
  std::vector<std::uint16_t> src(static_cast<std::size_t>(kB) * kN * kH * kD);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint16_t>(i + 1);  // < 0xFFFF
  DeviceBuffer dsrc(src.size() * 2), dout(2 * SwizzledTile<64, 128>::kBytes), derr(4);
  FLASHPP_ALLOC_OK(dsrc);
  FLASHPP_ALLOC_OK(dout);
  FLASHPP_ALLOC_OK(derr);
  dsrc.upload(src);
  dout.fill_bytes(0xFF);
  derr.fill_bytes(0);
  CUtensorMap map;
  if (!make_row_tile_map(&map, dsrc.data(), DType::bf16, kB, kN, kH, kD,
                         static_cast<std::int64_t>(kN) * kH * kD, kH * kD, kD, kBoxRows)) {
    GTEST_SKIP() << "the driver made no tensor map";
  }
  const int smem_bytes = SwizzledTile<64, 128>::kBytes + 8;
  tma_kernel<<<1, 128, smem_bytes>>>(map, b, h, m0_first, m0_second,
                                     static_cast<std::uint16_t*>(dout.data()),
                                     static_cast<int*>(derr.data()));
  FLASHPP_LAUNCH_OK();
  ASSERT_EQ(derr.download<int>(1)[0], 0) << "kernel error code";
  const auto out = dout.download<std::uint16_t>(2 * 64 * 128);
  int errors = 0;
  for (int phase = 0; phase < 2; ++phase) {
    const int m0 = phase == 0 ? m0_first : m0_second;
    for (int r = 0; r < kBoxRows; ++r)
      for (int c = 0; c < 128; ++c) {
        // Rows past N and columns past D arrive as zeros.
        const bool inside = m0 + r < kN && c < kD;
        const std::uint16_t want =
            inside ? src[((static_cast<std::size_t>(b) * kN + m0 + r) * kH + h) * kD + c] : 0;
        const std::uint16_t got = out[phase * 64 * 128 + gpu_test::swizzled_offset(64, 128, r, c)];
        if (got != want && ++errors <= 10) {
          ADD_FAILURE() << "phase " << phase << ", box (" << r << ", " << c << "): got 0x"
                        << std::hex << got << ", want 0x" << want << std::dec;
        }
      }
  }
  EXPECT_EQ(errors, 0);
}

// =============================================================================================
// mbarrier with several arrivals (ptx/mbarrier.cuh) and the 1-D bulk copy (ptx/tma.cuh)
// =============================================================================================

// Four warps, a barrier of four arrivals (one per warp, after the warp's write), two phases.
// Output [phase][thread][warp]: the four values each thread reads once the phase completed.
__global__ void mbarrier_arrivals_kernel(int* out, int* error) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ std::uint64_t bar;
  __shared__ int slots[4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(&bar, 4);
    ptx::fence_barrier_init();
  }
  __syncthreads();
  for (int phase = 0; phase < 2; ++phase) {
    if (lane == 0) slots[warp] = 100 * phase + warp + 1;
    __syncwarp();
    if (lane == 0) ptx::mbarrier_arrive(&bar);
    const bool done = wait_phase(&bar, static_cast<std::uint32_t>(phase));
    if (__syncthreads_or(!done)) {
      if (!done) atomicExch(error, kBarrierTimeout);
      return;
    }
    // Warp 0 has not arrived on the next phase yet, so it cannot be complete.
    if (threadIdx.x == 0 && ::cuda::ptx::mbarrier_test_wait_parity(&bar, static_cast<std::uint32_t>(phase ^ 1))) {
      atomicExch(error, kNextPhaseComplete);
    }
    for (int w = 0; w < 4; ++w) out[(phase * 128 + threadIdx.x) * 4 + w] = slots[w];
    __syncthreads();  // every read of this phase's values before the next phase's writes
  }
#else
  (void)out;
  if (threadIdx.x == 0) atomicExch(error, kNotCompiledForSm90a);
#endif
}

TEST(PrimitivesSm90, MbarrierCountsArrivals) {
  FLASHPP_SKIP_UNLESS_SM90();
  DeviceBuffer dout(2 * 128 * 4 * 4), derr(4);
  FLASHPP_ALLOC_OK(dout);
  FLASHPP_ALLOC_OK(derr);
  dout.fill_bytes(0xFF);
  derr.fill_bytes(0);
  mbarrier_arrivals_kernel<<<1, 128>>>(static_cast<int*>(dout.data()), static_cast<int*>(derr.data()));
  FLASHPP_LAUNCH_OK();
  ASSERT_EQ(derr.download<int>(1)[0], 0) << "kernel error code";
  const auto out = dout.download<int>(2 * 128 * 4);
  for (int phase = 0; phase < 2; ++phase)
    for (int thread = 0; thread < 128; ++thread)
      for (int w = 0; w < 4; ++w)
        ASSERT_EQ(out[(phase * 128 + thread) * 4 + w], 100 * phase + w + 1)
            << "phase " << phase << ", thread " << thread << ", warp " << w << "'s value";
}

// bulk_load of `bytes` from global into shared memory (as the backward loads its lse and delta
// rows), completing on a single-arrival barrier; copied out.
__global__ void bulk_load_kernel(const float* src, int count, float* out, int* error) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ __align__(128) float buffer[256];
  __shared__ std::uint64_t bar;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) buffer[i] = __int_as_float(0x7FFFFFFF);
  if (threadIdx.x == 0) mbarrier_init_single(&bar);
  ptx::fence_shared_to_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_expect_bytes(&bar, static_cast<std::uint32_t>(count * 4));
    bulk_load(buffer, src, static_cast<std::uint32_t>(count * 4), &bar);
  }
  if (!wait_phase(&bar, 0)) {
    atomicExch(error, kBarrierTimeout);
    return;  // no block-wide barrier follows
  }
  for (int i = threadIdx.x; i < 256; i += blockDim.x) out[i] = buffer[i];
#else
  (void)src, (void)count, (void)out;
  if (threadIdx.x == 0) atomicExch(error, kNotCompiledForSm90a);
#endif
}

TEST(PrimitivesSm90, BulkLoadCompletesOnMbarrier) {
  FLASHPP_SKIP_UNLESS_SM90();
  constexpr int kCount = 192;  // 768 bytes: a multiple of 16; the rest of the buffer stays NaN
  std::vector<float> src(kCount);
  for (int i = 0; i < kCount; ++i) src[i] = 0.5f * static_cast<float>(i) - 7.25f;  // never 0
  DeviceBuffer dsrc(kCount * 4), dout(256 * 4), derr(4);
  FLASHPP_ALLOC_OK(dsrc);
  FLASHPP_ALLOC_OK(dout);
  FLASHPP_ALLOC_OK(derr);
  dsrc.upload(src);
  dout.fill_bytes(0);
  derr.fill_bytes(0);
  bulk_load_kernel<<<1, 64>>>(static_cast<const float*>(dsrc.data()), kCount,
                              static_cast<float*>(dout.data()), static_cast<int*>(derr.data()));
  FLASHPP_LAUNCH_OK();
  ASSERT_EQ(derr.download<int>(1)[0], 0) << "kernel error code";
  const auto out = dout.download<float>(256);
  for (int i = 0; i < 256; ++i) {
    if (i < kCount) {
      EXPECT_EQ(out[i], src[i]) << "element " << i;
    } else {
      EXPECT_TRUE(std::isnan(out[i])) << "element " << i << " past the copy was written";
    }
  }
}

// =============================================================================================
// stmatrix through FragmentReader<Tile, a_mk>::store (the inverse of its load)
// =============================================================================================

// One warp stores a 16x16 A fragment (values from the documented m16n8k16 A layout) at tile
// (16, 32) of a poisoned SwizzledTile<32, 64>, reads it back with load, and copies the tile out.
// Output: the raw tile, then each lane's 4 registers read back.
__global__ void stmatrix_kernel(const std::uint16_t* a, std::uint16_t* tile_out,
                                std::uint32_t* loaded, int* error) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Tile = SwizzledTile<32, 64>;
  __shared__ __align__(128) std::uint16_t tile[Tile::kElements];
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  for (int e = lane; e < Tile::kElements; e += 32) tile[e] = 0xFFFFu;
  __syncwarp();
  auto pair = [&](int m, int k) {
    return static_cast<std::uint32_t>(a[m * 16 + k]) |
           (static_cast<std::uint32_t>(a[m * 16 + k + 1]) << 16);
  };
  const std::uint32_t r[4] = {pair(g, 2 * t), pair(g + 8, 2 * t), pair(g, 2 * t + 8),
                              pair(g + 8, 2 * t + 8)};
  const FragmentReader<Tile, Operand::a_mk> reader(tile, lane);
  reader.store(r, 16, 32);
  __syncwarp();
  std::uint32_t back[4];
  reader.load(back, 16, 32);
  for (int i = 0; i < 4; ++i) loaded[lane * 4 + i] = back[i];
  for (int e = lane; e < Tile::kElements; e += 32) tile_out[e] = tile[e];
  if (!kStmatrixAvailable && lane == 0) atomicExch(error, kNotCompiledForSm90a);
#else
  (void)a, (void)tile_out, (void)loaded;
  if (threadIdx.x == 0) atomicExch(error, kNotCompiledForSm90a);
#endif
}

TEST(PrimitivesSm90, StmatrixStoresAFragment) {
  FLASHPP_SKIP_UNLESS_SM90();
  std::vector<std::uint16_t> a(16 * 16);
  for (int i = 0; i < 256; ++i) a[i] = static_cast<std::uint16_t>(0x100 + i);
  DeviceBuffer da(256 * 2), dtile(32 * 64 * 2), dloaded(32 * 4 * 4), derr(4);
  FLASHPP_ALLOC_OK(da);
  FLASHPP_ALLOC_OK(dtile);
  FLASHPP_ALLOC_OK(dloaded);
  FLASHPP_ALLOC_OK(derr);
  da.upload(a);
  dtile.fill_bytes(0);
  dloaded.fill_bytes(0);
  derr.fill_bytes(0);
  stmatrix_kernel<<<1, 32>>>(static_cast<const std::uint16_t*>(da.data()),
                             static_cast<std::uint16_t*>(dtile.data()),
                             static_cast<std::uint32_t*>(dloaded.data()),
                             static_cast<int*>(derr.data()));
  FLASHPP_LAUNCH_OK();
  ASSERT_EQ(derr.download<int>(1)[0], 0) << "kernel error code";
  const auto tile = dtile.download<std::uint16_t>(32 * 64);
  int errors = 0;
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c < 64; ++c) {
      const bool inside = r >= 16 && c >= 32 && c < 48;
      const std::uint16_t want = inside ? a[(r - 16) * 16 + (c - 32)] : kPoison16;
      const std::uint16_t got = tile[gpu_test::swizzled_offset(32, 64, r, c)];
      if (got != want && ++errors <= 10) {
        ADD_FAILURE() << "tile (" << r << ", " << c << "): got 0x" << std::hex << got << ", want 0x"
                      << want << std::dec;
      }
    }
  EXPECT_EQ(errors, 0);
  const auto loaded = dloaded.download<std::uint32_t>(32 * 4);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    auto A = [&](int m, int k) { return a[m * 16 + k]; };
    const std::uint32_t want[4] = {gpu_test::pack16(A(g, 2 * t), A(g, 2 * t + 1)),
                                   gpu_test::pack16(A(g + 8, 2 * t), A(g + 8, 2 * t + 1)),
                                   gpu_test::pack16(A(g, 2 * t + 8), A(g, 2 * t + 9)),
                                   gpu_test::pack16(A(g + 8, 2 * t + 8), A(g + 8, 2 * t + 9))};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(loaded[lane * 4 + i], want[i]) << "lane " << lane << " register " << i;
  }
}

}  // namespace
}  // namespace flashpp::cuda
