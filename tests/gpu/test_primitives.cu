// GPU unit tests of the kernels' building blocks that every target has (sm80+): each test runs a
// tiny kernel around one wrapper of src/cuda/ptx or src/cuda/common and compares its result with
// a plain CPU computation of what the wrapper's header documents. Outputs are poisoned first
// (0xFF bytes: NaN in 16 and 32 bits) so that an element nobody wrote shows. The sm_90a ones
// (wgmma, TMA, mbarrier, stmatrix) are in test_primitives_sm90.cu.
//
//   ./flashpp_gpu_tests --gtest_filter='Primitives*'
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "cuda/common/dq_accum.cuh"
#include "cuda/common/dropout_signs.cuh"
#include "cuda/common/forward_steps.cuh"
#include "cuda/common/swizzle.cuh"
#include "cuda/common/swizzled_fragments.cuh"
#include "cuda/common/tile_copy.cuh"
#include "cuda/common/warp_reduce.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/mma.cuh"
#include "primitive_checks.hpp"

namespace flashpp::cuda {
// (Outside the unnamed namespace: nvcc warns about the members a given test leaves unused.)
namespace primitive_tests {

// A Traits type with the members forward_steps.cuh reads; one warp owns kMTiles * 16 rows of a
// query tile of kBlockRows rows (QTile: the block's whole tile, as in the kernels).
template <int kMTiles_, int kNTiles_, int kDTiles_, bool kSkipUnchangedRescale_,
          int kBlockRows = kMTiles_ * 16, int kRescaleSlackLog2_ = 0>
struct StepTraits {
  using Element = __half;
  static constexpr int kMTiles = kMTiles_;
  static constexpr int kNTiles = kNTiles_;
  static constexpr int kDTiles = kDTiles_;
  static constexpr int kBlockN = kNTiles * 8;
  static constexpr int kRowsPerWarp = kMTiles * 16;
  static constexpr bool kSkipUnchangedRescale = kSkipUnchangedRescale_;
  static constexpr float kRescaleSlackLog2 = kRescaleSlackLog2_;
  using QTile = SwizzledTile<kBlockRows, (kDTiles * 8 + 31) / 32 * 32>;
};

}  // namespace primitive_tests

namespace {

using primitive_tests::StepTraits;

using gpu_test::DeviceBuffer;
using gpu_test::kPoison16;

constexpr float kInf = std::numeric_limits<float>::infinity();

#define FLASHPP_SKIP_BELOW_SM80()                                                            \
  do {                                                                                      \
    FLASHPP_SKIP_WITHOUT_GPU();                                                             \
    if (::flashpp::gpu_test::device_major() < 8) GTEST_SKIP() << "needs compute capability 8.0+"; \
  } while (0)

// =============================================================================================
// mma.sync m16n8k16 (ptx/mma.cuh): fragments built from global memory by the documented layout
// =============================================================================================

// D = C + A B for A [16][16] (row-major), B [16][8] (stored B[k][n]), C and D [16][8] float.
template <typename T>
__global__ void mma_kernel(const std::uint16_t* a, const std::uint16_t* b, const float* c,
                           float* d) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  auto pair = [](const std::uint16_t* m, int lo, int hi) {
    return static_cast<std::uint32_t>(m[lo]) | (static_cast<std::uint32_t>(m[hi]) << 16);
  };
  const std::uint32_t ra[4] = {pair(a, g * 16 + 2 * t, g * 16 + 2 * t + 1),
                               pair(a, (g + 8) * 16 + 2 * t, (g + 8) * 16 + 2 * t + 1),
                               pair(a, g * 16 + 2 * t + 8, g * 16 + 2 * t + 9),
                               pair(a, (g + 8) * 16 + 2 * t + 8, (g + 8) * 16 + 2 * t + 9)};
  const std::uint32_t rb[2] = {pair(b, (2 * t) * 8 + g, (2 * t + 1) * 8 + g),
                               pair(b, (2 * t + 8) * 8 + g, (2 * t + 9) * 8 + g)};
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t],
                  c[(g + 8) * 8 + 2 * t + 1]};
  mma_m16n8k16<T>(acc, ra, rb);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

template <typename T>
void check_mma_m16n8k16() {
  FLASHPP_SKIP_BELOW_SM80();
  const std::vector<float> a = gpu_test::eighths(16 * 16, 1), b = gpu_test::eighths(16 * 8, 2),
                           c = gpu_test::eighths(16 * 8, 3);
  DeviceBuffer da(a.size() * 2), db(b.size() * 2), dc(c.size() * 4), dd(16 * 8 * 4);
  FLASHPP_ALLOC_OK(da);
  FLASHPP_ALLOC_OK(db);
  FLASHPP_ALLOC_OK(dc);
  FLASHPP_ALLOC_OK(dd);
  da.upload(gpu_test::to_bits<T>(a));
  db.upload(gpu_test::to_bits<T>(b));
  dc.upload(c);
  dd.fill_bytes(0xFF);
  mma_kernel<T><<<1, 32>>>(static_cast<const std::uint16_t*>(da.data()),
                           static_cast<const std::uint16_t*>(db.data()),
                           static_cast<const float*>(dc.data()), static_cast<float*>(dd.data()));
  FLASHPP_LAUNCH_OK();
  const std::vector<float> d = dd.download<float>(16 * 8);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      float want = c[m * 8 + n];
      for (int k = 0; k < 16; ++k) want += a[m * 16 + k] * b[k * 8 + n];  // exact (eighths)
      EXPECT_EQ(d[m * 8 + n], want) << "D[" << m << "][" << n << "]";
    }
}

TEST(PrimitivesMma, M16n8k16Fp16) { check_mma_m16n8k16<__half>(); }
TEST(PrimitivesMma, M16n8k16Bf16) { check_mma_m16n8k16<__nv_bfloat16>(); }

// =============================================================================================
// cp.async tile loads into swizzled tiles (common/tile_copy.cuh, swizzle.cuh, ptx/cp_async.cuh)
// =============================================================================================

// Source element (r, c) of a matrix with `stride` columns: nonzero, never the poison, unique.
inline std::uint16_t source_bits(int r, int c, int stride) {
  return static_cast<std::uint16_t>((r * stride + c) % 0x7FFE + 1);
}

inline std::vector<std::uint16_t> source_matrix(int rows, int stride) {
  std::vector<std::uint16_t> m(static_cast<std::size_t>(rows) * stride);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < stride; ++c) m[static_cast<std::size_t>(r) * stride + c] = source_bits(r, c, stride);
  return m;
}

// The shared tile, poisoned, loaded by load_tile_async, copied out raw.
template <typename Tile, int kThreads, bool kCheckRows>
__global__ void tile_copy_kernel(const std::uint16_t* gmem, std::int64_t row_stride,
                                 std::int64_t rows_valid, int chunks_valid, std::uint16_t* out) {
  __shared__ __align__(128) std::uint16_t tile[Tile::kElements];
  for (int i = threadIdx.x; i < Tile::kElements; i += kThreads) tile[i] = 0xFFFFu;
  __syncthreads();
  load_tile_async<Tile, kThreads, kCheckRows>(tile, gmem, row_stride, rows_valid, chunks_valid,
                                              static_cast<int>(threadIdx.x));
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  for (int i = threadIdx.x; i < Tile::kElements; i += kThreads) out[i] = tile[i];
}

template <int kRows, int kCols, int kThreads, bool kCheckRows>
void check_tile_copy(int stride, int rows_valid, int chunks_valid) {
  FLASHPP_SKIP_BELOW_SM80();
  using Tile = SwizzledTile<kRows, kCols>;
  // The reference layout itself must be a permutation of the tile.
  std::set<int> offsets;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) offsets.insert(gpu_test::swizzled_offset(kRows, kCols, r, c));
  ASSERT_EQ(offsets.size(), static_cast<std::size_t>(kRows * kCols));
  ASSERT_EQ(*offsets.rbegin(), kRows * kCols - 1);

  const std::vector<std::uint16_t> src = source_matrix(kRows, stride);
  DeviceBuffer dsrc(src.size() * 2), dout(Tile::kElements * 2);
  FLASHPP_ALLOC_OK(dsrc);
  FLASHPP_ALLOC_OK(dout);
  dsrc.upload(src);
  dout.fill_bytes(0xFF);
  tile_copy_kernel<Tile, kThreads, kCheckRows><<<1, kThreads>>>(
      static_cast<const std::uint16_t*>(dsrc.data()), stride, rows_valid, chunks_valid,
      static_cast<std::uint16_t*>(dout.data()));
  FLASHPP_LAUNCH_OK();
  const std::vector<std::uint16_t> out = dout.download<std::uint16_t>(Tile::kElements);
  int errors = 0;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      const bool valid = (!kCheckRows || r < rows_valid) && c / 8 < chunks_valid;
      const std::uint16_t want = valid ? source_bits(r, c, stride) : 0;
      const std::uint16_t got = out[gpu_test::swizzled_offset(kRows, kCols, r, c)];
      if (got != want && ++errors <= 10) {
        ADD_FAILURE() << "tile (" << r << ", " << c << "): got 0x" << std::hex << got
                      << ", want 0x" << want << std::dec;
      }
    }
  EXPECT_EQ(errors, 0);
}

// 8-chunk panels; 64 threads cover 8 whole rows per pass (the fixed-stride path); rows and head
// dim cut (zero fill).
TEST(PrimitivesTileCopy, Panels8WholeRowsZeroFill) { check_tile_copy<32, 64, 64, true>(80, 27, 6); }
// 32 threads cover 4 rows per pass: the general path; every row present (kCheckRows = false).
TEST(PrimitivesTileCopy, Panels8GeneralPathAllRows) { check_tile_copy<32, 64, 32, false>(64, 32, 8); }
// 4-chunk panels (32 columns), whole-row path, cut rows and chunks.
TEST(PrimitivesTileCopy, Panels4WholeRowsZeroFill) { check_tile_copy<16, 32, 32, true>(40, 11, 3); }
// Three 4-chunk panels (96 columns): 12 chunks per row, general path.
TEST(PrimitivesTileCopy, ThreePanels4GeneralPath) { check_tile_copy<16, 96, 32, true>(104, 16, 10); }
// Two 8-chunk panels (128 columns), 128 threads, whole rows.
TEST(PrimitivesTileCopy, TwoPanels8WholeRows) { check_tile_copy<64, 128, 128, true>(136, 50, 14); }

// =============================================================================================
// ldmatrix through FragmentReader (common/swizzled_fragments.cuh, ptx/ldmatrix.cuh)
// =============================================================================================

// A tile filled by load_tile_async (every element valid, row stride = kCols); then every operand
// reader built at row kBaseRows of the tile loads every full fragment position. Output:
// [operand][position][lane][register].
template <typename Tile, int kBaseRows>
__global__ void fragment_reader_kernel(const std::uint16_t* gmem, std::uint32_t* out) {
  __shared__ __align__(128) std::uint16_t tile[Tile::kElements];
  const int lane = threadIdx.x;
  load_tile_async<Tile, 32>(tile, gmem, Tile::kChunks * 8, Tile::kRowCount, Tile::kChunks, lane);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  constexpr int kRowSteps = (Tile::kRowCount - kBaseRows) / 16;
  constexpr int kColSteps = Tile::kChunks / 2;
  constexpr int kPositions = kRowSteps * kColSteps;
  const std::uint16_t* base = tile + Tile::kRowStepElements(kBaseRows);
  const FragmentReader<Tile, Operand::a_mk> a_mk(base, lane);
  const FragmentReader<Tile, Operand::a_km> a_km(base, lane);
  const FragmentReader<Tile, Operand::b_nk> b_nk(base, lane);
  const FragmentReader<Tile, Operand::b_kn> b_kn(base, lane);
  for (int rs = 0; rs < kRowSteps; ++rs)
    for (int cs = 0; cs < kColSteps; ++cs) {
      const int pos = rs * kColSteps + cs;
      std::uint32_t r[4][4];
      a_mk.load(r[0], rs * 16, cs * 16);
      a_km.load(r[1], rs * 16, cs * 16);
      b_nk.load(r[2], rs * 16, cs * 16);
      b_kn.load(r[3], rs * 16, cs * 16);
      for (int op = 0; op < 4; ++op)
        for (int i = 0; i < 4; ++i) out[((op * kPositions + pos) * 32 + lane) * 4 + i] = r[op][i];
    }
}

// The registers lane (g, t) must hold for a fragment whose top-left tile element is (R, C), from
// the mma.m16n8k16 layouts of ptx/mma.cuh and the operand meanings of swizzled_fragments.cuh.
inline void expected_fragment(int op, int R, int C, int lane, int stride, std::uint32_t (&r)[4]) {
  const int g = lane >> 2, t = lane & 3;
  auto T = [&](int row, int col) { return source_bits(row, col, stride); };
  if (op == 0 || op == 1) {
    // A[m][k]: a_mk = T[R+m][C+k]; a_km = T[R+k][C+m].
    auto A = [&](int m, int k) { return op == 0 ? T(R + m, C + k) : T(R + k, C + m); };
    r[0] = gpu_test::pack16(A(g, 2 * t), A(g, 2 * t + 1));
    r[1] = gpu_test::pack16(A(g + 8, 2 * t), A(g + 8, 2 * t + 1));
    r[2] = gpu_test::pack16(A(g, 2 * t + 8), A(g, 2 * t + 9));
    r[3] = gpu_test::pack16(A(g + 8, 2 * t + 8), A(g + 8, 2 * t + 9));
  } else {
    // B[k][n]: b_nk = T[R+n][C+k]; b_kn = T[R+k][C+n]. Registers 0-1: n-tile 0, 2-3: n-tile 8.
    auto B = [&](int k, int n) { return op == 2 ? T(R + n, C + k) : T(R + k, C + n); };
    r[0] = gpu_test::pack16(B(2 * t, g), B(2 * t + 1, g));
    r[1] = gpu_test::pack16(B(2 * t + 8, g), B(2 * t + 9, g));
    r[2] = gpu_test::pack16(B(2 * t, g + 8), B(2 * t + 1, g + 8));
    r[3] = gpu_test::pack16(B(2 * t + 8, g + 8), B(2 * t + 9, g + 8));
  }
}

template <int kRows, int kCols, int kBaseRows>
void check_fragment_reader() {
  FLASHPP_SKIP_BELOW_SM80();
  using Tile = SwizzledTile<kRows, kCols>;
  constexpr int kRowSteps = (kRows - kBaseRows) / 16, kColSteps = kCols / 16;
  constexpr int kPositions = kRowSteps * kColSteps;
  const std::vector<std::uint16_t> src = source_matrix(kRows, kCols);
  const std::size_t words = 4u * kPositions * 32 * 4;
  DeviceBuffer dsrc(src.size() * 2), dout(words * 4);
  FLASHPP_ALLOC_OK(dsrc);
  FLASHPP_ALLOC_OK(dout);
  dsrc.upload(src);
  dout.fill_bytes(0xFF);
  fragment_reader_kernel<Tile, kBaseRows><<<1, 32>>>(
      static_cast<const std::uint16_t*>(dsrc.data()), static_cast<std::uint32_t*>(dout.data()));
  FLASHPP_LAUNCH_OK();
  const std::vector<std::uint32_t> out = dout.download<std::uint32_t>(words);
  const char* names[4] = {"a_mk", "a_km", "b_nk", "b_kn"};
  int errors = 0;
  for (int op = 0; op < 4; ++op)
    for (int rs = 0; rs < kRowSteps; ++rs)
      for (int cs = 0; cs < kColSteps; ++cs)
        for (int lane = 0; lane < 32; ++lane) {
          std::uint32_t want[4];
          expected_fragment(op, kBaseRows + rs * 16, cs * 16, lane, kCols, want);
          for (int i = 0; i < 4; ++i) {
            const std::uint32_t got =
                out[((op * kPositions + rs * kColSteps + cs) * 32 + lane) * 4 + i];
            if (got != want[i] && ++errors <= 10) {
              ADD_FAILURE() << names[op] << " at tile (" << kBaseRows + rs * 16 << ", " << cs * 16
                            << "), lane " << lane << ", register " << i << ": got 0x" << std::hex
                            << got << ", want 0x" << want[i] << std::dec;
            }
          }
        }
  EXPECT_EQ(errors, 0);
}

TEST(PrimitivesFragmentReader, Panels4) { check_fragment_reader<32, 32, 0>(); }
TEST(PrimitivesFragmentReader, Panels8) { check_fragment_reader<32, 64, 0>(); }
TEST(PrimitivesFragmentReader, TwoPanels8) { check_fragment_reader<32, 128, 0>(); }
// A reader built 16 rows down the tile (as each warp's Q reader in the sm80 forward).
TEST(PrimitivesFragmentReader, Panels8FromRow16) { check_fragment_reader<32, 64, 16>(); }
TEST(PrimitivesFragmentReader, Panels4FromRow16) { check_fragment_reader<48, 32, 16>(); }

// =============================================================================================
// Swizzled tile -> ldmatrix -> mma.sync: a 32x32x64 product through every operand orientation
// =============================================================================================

// C [32][32] = A [32][64] B [64][32]. kOpA: a_mk (A stored [m][k], a 32x64 tile) or a_km (A
// stored [k][m], 64x32); kOpB: b_nk (B stored [n][k], 32x64) or b_kn (B stored [k][n], 64x32).
template <Operand kOp>
using GemmTile = SwizzledTile<(kOp == Operand::a_mk || kOp == Operand::b_nk) ? 32 : 64,
                              (kOp == Operand::a_mk || kOp == Operand::b_nk) ? 64 : 32>;

template <typename T, Operand kOpA, Operand kOpB>
__global__ void gemm_kernel(const std::uint16_t* a, const std::uint16_t* b, float* c) {
  using ATile = GemmTile<kOpA>;
  using BTile = GemmTile<kOpB>;
  __shared__ __align__(128) std::uint16_t sa[ATile::kElements];
  __shared__ __align__(128) std::uint16_t sb[BTile::kElements];
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  load_tile_async<ATile, 32>(sa, a, ATile::kChunks * 8, ATile::kRowCount, ATile::kChunks, lane);
  load_tile_async<BTile, 32>(sb, b, BTile::kChunks * 8, BTile::kRowCount, BTile::kChunks, lane);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  const FragmentReader<ATile, kOpA> ra(sa, lane);
  const FragmentReader<BTile, kOpB> rb(sb, lane);
  for (int mt = 0; mt < 2; ++mt)
    for (int np = 0; np < 2; ++np) {
      float acc[2][4] = {};
      for (int kk = 0; kk < 4; ++kk) {
        std::uint32_t fa[4], fb[4];
        if (kOpA == Operand::a_mk) {
          ra.load(fa, mt * 16, kk * 16);
        } else {
          ra.load(fa, kk * 16, mt * 16);
        }
        if (kOpB == Operand::b_nk) {
          rb.load(fb, np * 16, kk * 16);
        } else {
          rb.load(fb, kk * 16, np * 16);
        }
        const std::uint32_t b_lo[2] = {fb[0], fb[1]}, b_hi[2] = {fb[2], fb[3]};
        mma_m16n8k16<T>(acc[0], fa, b_lo);
        mma_m16n8k16<T>(acc[1], fa, b_hi);
      }
      for (int h = 0; h < 2; ++h) {
        const int row = mt * 16 + g, col = np * 16 + h * 8 + 2 * t;
        c[row * 32 + col] = acc[h][0];
        c[row * 32 + col + 1] = acc[h][1];
        c[(row + 8) * 32 + col] = acc[h][2];
        c[(row + 8) * 32 + col + 1] = acc[h][3];
      }
    }
}

template <typename T, Operand kOpA, Operand kOpB>
void check_swizzled_gemm() {
  FLASHPP_SKIP_BELOW_SM80();
  constexpr int M = 32, N = 32, K = 64;
  const std::vector<float> a = gpu_test::eighths(M * K, 11), b = gpu_test::eighths(K * N, 12);
  // The stored forms: A as [m][k] or [k][m], B as [n][k] or [k][n], rows contiguous.
  std::vector<float> a_stored(M * K), b_stored(K * N);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) {
      if (kOpA == Operand::a_mk) {
        a_stored[m * K + k] = a[m * K + k];
      } else {
        a_stored[k * M + m] = a[m * K + k];
      }
    }
  for (int k = 0; k < K; ++k)
    for (int n = 0; n < N; ++n) {
      if (kOpB == Operand::b_nk) {
        b_stored[n * K + k] = b[k * N + n];
      } else {
        b_stored[k * N + n] = b[k * N + n];
      }
    }
  DeviceBuffer da(M * K * 2), db(K * N * 2), dc(M * N * 4);
  FLASHPP_ALLOC_OK(da);
  FLASHPP_ALLOC_OK(db);
  FLASHPP_ALLOC_OK(dc);
  da.upload(gpu_test::to_bits<T>(a_stored));
  db.upload(gpu_test::to_bits<T>(b_stored));
  dc.fill_bytes(0xFF);
  gemm_kernel<T, kOpA, kOpB><<<1, 32>>>(static_cast<const std::uint16_t*>(da.data()),
                                        static_cast<const std::uint16_t*>(db.data()),
                                        static_cast<float*>(dc.data()));
  FLASHPP_LAUNCH_OK();
  const std::vector<float> c = dc.download<float>(M * N);
  int errors = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float want = 0.0f;
      for (int k = 0; k < K; ++k) want += a[m * K + k] * b[k * N + n];  // exact (eighths)
      if (c[m * N + n] != want && ++errors <= 10) {
        ADD_FAILURE() << "C[" << m << "][" << n << "]: got " << c[m * N + n] << ", want " << want;
      }
    }
  EXPECT_EQ(errors, 0);
}

TEST(PrimitivesSwizzledGemm, AmkBnkFp16) { check_swizzled_gemm<__half, Operand::a_mk, Operand::b_nk>(); }
TEST(PrimitivesSwizzledGemm, AmkBknFp16) { check_swizzled_gemm<__half, Operand::a_mk, Operand::b_kn>(); }
TEST(PrimitivesSwizzledGemm, AkmBnkFp16) { check_swizzled_gemm<__half, Operand::a_km, Operand::b_nk>(); }
TEST(PrimitivesSwizzledGemm, AkmBknFp16) { check_swizzled_gemm<__half, Operand::a_km, Operand::b_kn>(); }
TEST(PrimitivesSwizzledGemm, AmkBnkBf16) {
  check_swizzled_gemm<__nv_bfloat16, Operand::a_mk, Operand::b_nk>();
}
TEST(PrimitivesSwizzledGemm, AkmBknBf16) {
  check_swizzled_gemm<__nv_bfloat16, Operand::a_km, Operand::b_kn>();
}

// =============================================================================================
// Quad reductions (common/warp_reduce.cuh)
// =============================================================================================

__global__ void quad_reduce_kernel(const float* in, int rounds, float* max_out, float* sum_out) {
  const int lane = threadIdx.x;
  for (int r = 0; r < rounds; ++r) {
    max_out[r * 32 + lane] = quad_max(in[r * 32 + lane]);
    sum_out[r * 32 + lane] = quad_sum(in[r * 32 + lane]);
  }
}

TEST(PrimitivesWarpReduce, QuadMaxAndSum) {
  FLASHPP_SKIP_BELOW_SM80();
  constexpr int kRounds = 3;
  std::vector<float> in(kRounds * 32);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> dist(-64, 64);
  for (float& x : in) x = static_cast<float>(dist(rng)) / 4.0f;  // sums exact in any order
  // Round 1: a quad all -inf (max and sum -inf) and a quad with one -inf (sum -inf).
  for (int l = 4; l < 8; ++l) in[32 + l] = -kInf;
  in[32 + 9] = -kInf;
  DeviceBuffer din(in.size() * 4), dmax(in.size() * 4), dsum(in.size() * 4);
  FLASHPP_ALLOC_OK(din);
  FLASHPP_ALLOC_OK(dmax);
  FLASHPP_ALLOC_OK(dsum);
  din.upload(in);
  dmax.fill_bytes(0xFF);
  dsum.fill_bytes(0xFF);
  quad_reduce_kernel<<<1, 32>>>(static_cast<const float*>(din.data()), kRounds,
                                static_cast<float*>(dmax.data()), static_cast<float*>(dsum.data()));
  FLASHPP_LAUNCH_OK();
  const std::vector<float> mx = dmax.download<float>(in.size()), sm = dsum.download<float>(in.size());
  for (int r = 0; r < kRounds; ++r)
    for (int lane = 0; lane < 32; ++lane) {
      const int q = r * 32 + (lane & ~3);
      const float want_max = std::max(std::max(in[q], in[q + 1]), std::max(in[q + 2], in[q + 3]));
      const float want_sum = (in[q] + in[q + 1]) + (in[q + 2] + in[q + 3]);
      EXPECT_EQ(mx[r * 32 + lane], want_max) << "round " << r << ", lane " << lane;
      EXPECT_EQ(sm[r * 32 + lane], want_sum) << "round " << r << ", lane " << lane;
    }
}

// =============================================================================================
// The forward's element-wise steps (common/forward_steps.cuh) on the row view
// =============================================================================================

// Row and column of accumulator element c of tile (mt, nt) in lane (g, t): the row view.
__device__ __forceinline__ int view_row(int mt, int c, int g) { return mt * 16 + g + 8 * (c >> 1); }
__device__ __forceinline__ int view_col(int nt, int c, int t) { return nt * 8 + 2 * t + (c & 1); }

// ---- online_softmax_update + rescale_output over kSteps key tiles ---------------------------

// scores [step][row][key], O inputs [step][row][d]; per step: P [row][key], factor [row],
// moved [lane], row max [row], the lanes' partial row sums [row][t], and that step's O input
// after rescale_output [row][d] (a fresh O per step: a running one would be zero after the first
// step, whose factors are all 0).
template <typename Traits, int kSteps>
__global__ void online_softmax_kernel(const float* scores, const float* o_in, float scale_log2,
                                      float* p_out, float* factor_out, int* moved_out,
                                      float* max_out, float* sum_out, float* o_out) {
  constexpr int kRows = Traits::kRowsPerWarp, kKeys = Traits::kBlockN, kD = Traits::kDTiles * 8;
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  float row_max[Traits::kMTiles][2], row_sum[Traits::kMTiles][2];
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
    for (int h = 0; h < 2; ++h) row_max[mt][h] = -INFINITY, row_sum[mt][h] = 0.0f;
  for (int step = 0; step < kSteps; ++step) {
    float s[Traits::kMTiles][Traits::kNTiles][4];
    float o[Traits::kMTiles][Traits::kDTiles][4];
    for (int mt = 0; mt < Traits::kMTiles; ++mt) {
      for (int nt = 0; nt < Traits::kNTiles; ++nt)
        for (int c = 0; c < 4; ++c)
          s[mt][nt][c] = scores[(step * kRows + view_row(mt, c, g)) * kKeys + view_col(nt, c, t)];
      for (int dt = 0; dt < Traits::kDTiles; ++dt)
        for (int c = 0; c < 4; ++c)
          o[mt][dt][c] = o_in[(step * kRows + view_row(mt, c, g)) * kD + view_col(dt, c, t)];
    }
    const SoftmaxCorrection<Traits> correction =
        online_softmax_update<Traits>(s, row_max, row_sum, scale_log2);
    rescale_output<Traits>(o, correction);
    moved_out[step * 32 + lane] = correction.max_moved ? 1 : 0;
    for (int mt = 0; mt < Traits::kMTiles; ++mt) {
      for (int nt = 0; nt < Traits::kNTiles; ++nt)
        for (int c = 0; c < 4; ++c)
          p_out[(step * kRows + view_row(mt, c, g)) * kKeys + view_col(nt, c, t)] = s[mt][nt][c];
      for (int h = 0; h < 2; ++h) {
        const int row = mt * 16 + g + 8 * h;
        if (t == 0) {
          factor_out[step * kRows + row] = correction.factor[mt][h];
          max_out[step * kRows + row] = row_max[mt][h];
        }
        sum_out[(step * kRows + row) * 4 + t] = row_sum[mt][h];
      }
      for (int dt = 0; dt < Traits::kDTiles; ++dt)
        for (int c = 0; c < 4; ++c)
          o_out[(step * kRows + view_row(mt, c, g)) * kD + view_col(dt, c, t)] = o[mt][dt][c];
    }
  }
}

template <bool kSkipUnchangedRescale>
void check_online_softmax() {
  FLASHPP_SKIP_BELOW_SM80();
  using Traits = StepTraits<2, 4, 2, kSkipUnchangedRescale>;
  constexpr int kSteps = 3, kRows = 32, kKeys = 32, kD = 16;
  const float scale_log2 = 0.125f * 1.4426950408889634f;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-20.0f, 20.0f);
  std::vector<float> scores(kSteps * kRows * kKeys);
  for (float& x : scores) x = dist(rng);
  auto S = [&](int step, int row, int key) -> float& {
    return scores[(step * kRows + row) * kKeys + key];
  };
  for (int key = 0; key < kKeys; ++key) {
    S(0, 3, key) = -kInf;  // row 3: nothing visible in the first tile, then scores
    for (int step = 0; step < kSteps; ++step) S(step, 17, key) = -kInf;  // row 17: never any
  }
  for (int key = 0; key < kKeys; key += 3) S(1, 9, key) = -kInf;  // row 9: some keys masked
  // Step 2: every score below its row's running max, so no row's max moves (factor exactly 1).
  for (int row = 0; row < kRows; ++row) {
    float m = -kInf;
    for (int step = 0; step < 2; ++step)
      for (int key = 0; key < kKeys; ++key) m = std::max(m, S(step, row, key));
    if (m != -kInf) {
      for (int key = 0; key < kKeys; ++key) S(2, row, key) = m - 1.0f - std::abs(dist(rng));
    }
  }
  std::vector<float> o_init(kSteps * kRows * kD);
  for (int i = 0; i < kSteps * kRows * kD; ++i) o_init[i] = 1.0f + 0.25f * static_cast<float>(i % 13);

  DeviceBuffer ds(scores.size() * 4), doi(o_init.size() * 4), dp(scores.size() * 4),
      dfactor(kSteps * kRows * 4), dmoved(kSteps * 32 * 4), dmax(kSteps * kRows * 4),
      dsum(kSteps * kRows * 4 * 4), do_out(kSteps * kRows * kD * 4);
  for (const DeviceBuffer* b : {&ds, &doi, &dp, &dfactor, &dmoved, &dmax, &dsum, &do_out})
    ASSERT_TRUE(b->ok());
  ds.upload(scores);
  doi.upload(o_init);
  for (const DeviceBuffer* b : {&dp, &dfactor, &dmoved, &dmax, &dsum, &do_out}) b->fill_bytes(0xFF);
  online_softmax_kernel<Traits, kSteps><<<1, 32>>>(
      static_cast<const float*>(ds.data()), static_cast<const float*>(doi.data()), scale_log2,
      static_cast<float*>(dp.data()), static_cast<float*>(dfactor.data()),
      static_cast<int*>(dmoved.data()), static_cast<float*>(dmax.data()),
      static_cast<float*>(dsum.data()), static_cast<float*>(do_out.data()));
  FLASHPP_LAUNCH_OK();
  const auto p = dp.download<float>(scores.size());
  const auto factor = dfactor.download<float>(kSteps * kRows);
  const auto moved = dmoved.download<int>(kSteps * 32);
  const auto mx = dmax.download<float>(kSteps * kRows);
  const auto sum = dsum.download<float>(kSteps * kRows * 4);
  const auto o = do_out.download<float>(kSteps * kRows * kD);

  // Reference in double, by the rule of online_softmax_update's comment.
  std::vector<float> ref_max(kRows, -kInf);
  std::vector<double> ref_sum(kRows, 0.0);
  int errors = 0;
  auto fail = [&](bool ok) { return !ok && ++errors <= 20; };
  for (int step = 0; step < kSteps; ++step) {
    bool any_moved = false;
    std::vector<bool> row_moved(kRows);
    for (int row = 0; row < kRows; ++row) {
      float tile_max = -kInf;
      for (int key = 0; key < kKeys; ++key) tile_max = std::max(tile_max, S(step, row, key));
      const float new_max = std::max(ref_max[row], tile_max);
      const float reference = new_max == -kInf ? 0.0f : new_max;
      const double want_factor = std::exp2((static_cast<double>(ref_max[row]) - reference) * scale_log2);
      row_moved[row] = new_max != ref_max[row];
      any_moved = any_moved || row_moved[row];
      ref_max[row] = new_max;
      ref_sum[row] *= want_factor;
      for (int key = 0; key < kKeys; ++key) {
        const double want_p = std::exp2((static_cast<double>(S(step, row, key)) - reference) * scale_log2);
        ref_sum[row] += want_p;
        const float got = p[(step * kRows + row) * kKeys + key];
        if (fail(gpu_test::near(got, want_p, 1e-5, 1e-30))) {
          ADD_FAILURE() << "P step " << step << " row " << row << " key " << key << ": got " << got
                        << ", want " << want_p;
        }
      }
      const float got_factor = factor[step * kRows + row];
      if (fail(gpu_test::near(got_factor, want_factor, 1e-5))) {
        ADD_FAILURE() << "factor step " << step << " row " << row << ": got " << got_factor
                      << ", want " << want_factor;
      }
      if (fail(mx[step * kRows + row] == new_max)) {
        ADD_FAILURE() << "row max step " << step << " row " << row << ": got "
                      << mx[step * kRows + row] << ", want " << new_max;
      }
      const float* partial = &sum[(step * kRows + row) * 4];
      const double got_sum = static_cast<double>(partial[0]) + partial[1] + partial[2] + partial[3];
      if (fail(gpu_test::near(got_sum, ref_sum[row], 1e-5))) {
        ADD_FAILURE() << "row sum step " << step << " row " << row << ": got " << got_sum
                      << ", want " << ref_sum[row];
      }
    }
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2;
      const bool want = row_moved[g] || row_moved[g + 8] || row_moved[16 + g] || row_moved[24 + g];
      if (fail(moved[step * 32 + lane] == (want ? 1 : 0))) {
        ADD_FAILURE() << "max_moved step " << step << " lane " << lane << ": got "
                      << moved[step * 32 + lane];
      }
    }
    if (step == 2) {
      EXPECT_FALSE(any_moved) << "the test's step 2 is meant to move no max";
      // Documented as exactly 1 (rescale_output may skip it); ex2.approx(0) is 1.
      for (int row = 0; row < kRows; ++row) {
        if (row != 17) EXPECT_NEAR(factor[2 * kRows + row], 1.0f, 1e-6f) << "row " << row;
      }
    }
    // O: rescaled by the device's own factors (one float multiply), unless the warp skipped the
    // rescale because no row's max moved (kSkipUnchangedRescale): at step 2, row 17 (factor 0)
    // keeps its O only when skipped.
    const bool rescaled = !kSkipUnchangedRescale || any_moved;
    for (int row = 0; row < kRows; ++row)
      for (int d = 0; d < kD; ++d) {
        const float before = o_init[(step * kRows + row) * kD + d];
        const float want = rescaled ? before * factor[step * kRows + row] : before;
        const float got = o[(step * kRows + row) * kD + d];
        if (fail(got == want)) {
          ADD_FAILURE() << "O step " << step << " row " << row << " d " << d << ": got " << got
                        << ", want " << want;
        }
      }
  }
  EXPECT_EQ(errors, 0);
}

TEST(PrimitivesForwardSteps, OnlineSoftmaxAndRescale) { check_online_softmax<false>(); }
TEST(PrimitivesForwardSteps, OnlineSoftmaxAndSkippedRescale) { check_online_softmax<true>(); }

// ---- online_softmax_speculative over kSteps key tiles ----------------------------------------

// One warp runs the sm90 forward's softmax sequence over kSteps key tiles of 32 rows (the vote on
// the lanes' sums of P, or, kSumVote = false, on their largest P): the classic
// step first, then the speculative one, with an O of one column (O += P v, rescaled by each
// step's correction as the kernel does); writes O / l and lse (natural log) per row and, per
// step, which case the warp took (0 kept, 1 rescaled, 2 recomputed). The recompute callable
// reads the tile's scores again, as the kernel's reads them from Q and K.
template <typename Traits, int kSteps, bool kSumVote>
__global__ void speculative_softmax_kernel(const float* scores, const float* values,
                                           const int* sees, float scale_log2, float* o_out,
                                           float* lse_out, int* case_out) {
  constexpr int kRows = Traits::kRowsPerWarp, kKeys = Traits::kBlockN;
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  float row_max[Traits::kMTiles][2], row_sum[Traits::kMTiles][2], o[Traits::kMTiles][2];
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
    for (int h = 0; h < 2; ++h) row_max[mt][h] = -INFINITY, row_sum[mt][h] = 0.0f, o[mt][h] = 0.0f;
  for (int step = 0; step < kSteps; ++step) {
    float s[Traits::kMTiles][Traits::kNTiles][4];
    auto load = [&](float (&x)[Traits::kMTiles][Traits::kNTiles][4]) {
      for (int mt = 0; mt < Traits::kMTiles; ++mt)
        for (int nt = 0; nt < Traits::kNTiles; ++nt)
          for (int c = 0; c < 4; ++c)
            x[mt][nt][c] = scores[(step * kRows + view_row(mt, c, g)) * kKeys + view_col(nt, c, t)];
    };
    load(s);
    bool recomputed = false;
    SoftmaxCorrection<Traits> correction;
    if (step == 0) {
      correction = online_softmax_update<Traits>(s, row_max, row_sum, scale_log2);
    } else {
      bool sees_tile[Traits::kMTiles][2];
      for (int mt = 0; mt < Traits::kMTiles; ++mt)
        for (int h = 0; h < 2; ++h) sees_tile[mt][h] = sees[step * kRows + mt * 16 + g + 8 * h] != 0;
      correction = online_softmax_speculative<Traits, kSumVote>(
          s, row_max, row_sum, sees_tile, scale_log2,
          [&](float (&x)[Traits::kMTiles][Traits::kNTiles][4]) {
            recomputed = true;
            load(x);
          });
    }
    if (lane == 0) case_out[step] = recomputed ? 2 : correction.max_moved ? 1 : 0;
    for (int mt = 0; mt < Traits::kMTiles; ++mt)
      for (int h = 0; h < 2; ++h) {
        if (step > 0) o[mt][h] *= correction.factor[mt][h];
        for (int nt = 0; nt < Traits::kNTiles; ++nt)
          for (int c = 2 * h; c < 2 * h + 2; ++c)
            o[mt][h] += s[mt][nt][c] * values[step * kKeys + view_col(nt, c, t)];
      }
  }
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
    for (int h = 0; h < 2; ++h) {
      const float sum = quad_sum(row_sum[mt][h]), out = quad_sum(o[mt][h]);
      if (t == 0) {
        const int row = mt * 16 + g + 8 * h;
        o_out[row] = sum > 0.0f ? out / sum : 0.0f;
        lse_out[row] = sum > 0.0f ? row_max[mt][h] * (scale_log2 / kLog2e) + logf(sum) : -INFINITY;
      }
    }
}

// Rows built to take each case: `recompute_rows` false gives rows that stay within 2^100 (kept
// and rescaled only), true adds rows whose scores jump past it (and a row without a reference
// whose first visible scores lie 2^100 below 0).
template <bool kSumVote>
void check_speculative_softmax(bool recompute_rows) {
  FLASHPP_SKIP_BELOW_SM80();
  using Traits = StepTraits<2, 4, 2, true, 32, 8>;
  constexpr int kSteps = 4, kRows = 32, kKeys = 32;
  const float scale_log2 = kLog2e;  // scores in natural-log units
  std::mt19937 rng(recompute_rows ? 29 : 23);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> scores(kSteps * kRows * kKeys), values(kSteps * kKeys);
  for (float& x : scores) x = dist(rng);
  for (float& x : values) x = dist(rng);
  auto S = [&](int step, int row, int key) -> float& {
    return scores[(step * kRows + row) * kKeys + key];
  };
  auto row_of = [&](int step, int row, float shift) {
    for (int key = 0; key < kKeys; ++key) S(step, row, key) += shift;
  };
  auto hide = [&](int step, int row) {
    for (int key = 0; key < kKeys; ++key) S(step, row, key) = -kInf;
  };
  row_of(1, 0, 20.0f), row_of(2, 0, 40.0f), row_of(3, 0, 40.0f);          // row 0: +20, +20, 0
  hide(0, 2), hide(1, 2);                                                   // row 2: seen from step 2
  for (int step = 0; step < kSteps; ++step) hide(step, 4);                  // row 4: never
  hide(1, 5);                                                               // row 5: a hidden tile
  for (int step = 1; step < kSteps; ++step) row_of(step, 6, 1.5f * step);   // row 6: in the slack
  row_of(3, 7, -200.0f);                                                    // row 7: far below
  for (int key = 0; key < kKeys; key += 3) S(2, 9, key) = -kInf;            // row 9: keys hidden
  if (recompute_rows) {
    row_of(2, 1, 300.0f);             // row 1: a jump of 2^433
    hide(0, 3);                       // row 3: nothing, then scores e^-120 at step 1
    row_of(1, 3, -120.0f);
  }
  std::vector<int> sees(kSteps * kRows);
  for (int step = 0; step < kSteps; ++step)
    for (int row = 0; row < kRows; ++row)
      sees[step * kRows + row] = S(step, row, 0) != -kInf || S(step, row, 1) != -kInf;

  DeviceBuffer ds(scores.size() * 4), dv(values.size() * 4), dsees(sees.size() * 4), dout(kRows * 4),
      dlse(kRows * 4), dcase(kSteps * 4);
  for (const DeviceBuffer* b : {&ds, &dv, &dsees, &dout, &dlse, &dcase}) ASSERT_TRUE(b->ok());
  ds.upload(scores);
  dv.upload(values);
  dsees.upload(sees);
  for (const DeviceBuffer* b : {&dout, &dlse, &dcase}) b->fill_bytes(0xFF);
  speculative_softmax_kernel<Traits, kSteps, kSumVote><<<1, 32>>>(
      static_cast<const float*>(ds.data()), static_cast<const float*>(dv.data()),
      static_cast<const int*>(dsees.data()), scale_log2, static_cast<float*>(dout.data()),
      static_cast<float*>(dlse.data()), static_cast<int*>(dcase.data()));
  FLASHPP_LAUNCH_OK();
  const auto out = dout.download<float>(kRows);
  const auto lse = dlse.download<float>(kRows);
  const auto cases = dcase.download<int>(kSteps);

  // Which case each step should take, from the rule: a row keeps its reference (the max of the
  // tile where it last moved) unless the tile's max exceeds it by more than the slack (8 in
  // log2) or the row sees its first key; the warp rescales, or recomputes if such a row's largest
  // P lies 2^100 or more from its reference (0 for a row without one).
  std::vector<double> reference(kRows, -INFINITY);
  for (int step = 0; step < kSteps; ++step) {
    int want = 0;
    for (int row = 0; row < kRows; ++row) {
      double m = -INFINITY;
      for (int key = 0; key < kKeys; ++key) m = std::max(m, static_cast<double>(S(step, row, key)));
      if (m == -INFINITY) continue;
      if (step == 0) {
        reference[row] = m;
        continue;
      }
      const bool has_reference = reference[row] != -INFINITY;
      const double jump = (m - (has_reference ? reference[row] : 0.0)) * kLog2e;
      if (!has_reference || jump > 8.0) {
        want = std::max(want, std::abs(jump) < 100.0 ? 1 : 2);
        reference[row] = m;
      }
    }
    if (step > 0) EXPECT_EQ(cases[step], want) << "step " << step << " (0 kept, 1 rescaled, 2 recomputed)";
  }
  std::set<int> seen(cases.begin() + 1, cases.end());
  EXPECT_TRUE(seen.count(0)) << "the kept case ran";
  EXPECT_TRUE(seen.count(recompute_rows ? 2 : 1)) << (recompute_rows ? "the recomputed" : "the rescaled") << " case ran";
  // O / l and lse against the softmax in double over all steps.
  for (int row = 0; row < kRows; ++row) {
    double m = -INFINITY;
    for (int step = 0; step < kSteps; ++step)
      for (int key = 0; key < kKeys; ++key) m = std::max(m, static_cast<double>(S(step, row, key)));
    double l = 0.0, acc = 0.0;
    for (int step = 0; step < kSteps && m != -INFINITY; ++step)
      for (int key = 0; key < kKeys; ++key) {
        const double w = std::exp(static_cast<double>(S(step, row, key)) - m);
        l += w;
        acc += w * values[step * kKeys + key];
      }
    const double want_o = l > 0.0 ? acc / l : 0.0;
    const double want_lse = l > 0.0 ? m + std::log(l) : -INFINITY;
    EXPECT_TRUE(gpu_test::near(out[row], want_o, 1e-4, 1e-5)) << "O row " << row << ": got " << out[row] << ", want " << want_o;
    if (want_lse == -INFINITY) {
      EXPECT_EQ(lse[row], -kInf) << "lse row " << row;
    } else {
      EXPECT_TRUE(gpu_test::near(lse[row], want_lse, 1e-5, 1e-4)) << "lse row " << row << ": got " << lse[row] << ", want " << want_lse;
    }
  }
}

TEST(PrimitivesForwardSteps, SpeculativeSoftmaxKeptAndRescaled) { check_speculative_softmax<true>(false); }
TEST(PrimitivesForwardSteps, SpeculativeSoftmaxRecomputed) { check_speculative_softmax<true>(true); }
// The vote on each lane's largest P (the dropout kernels' form).
TEST(PrimitivesForwardSteps, SpeculativeSoftmaxMaxVoteKeptAndRescaled) {
  check_speculative_softmax<false>(false);
}
TEST(PrimitivesForwardSteps, SpeculativeSoftmaxMaxVoteRecomputed) { check_speculative_softmax<false>(true); }

// ---- apply_mask and apply_softcap ------------------------------------------------------------

template <typename Traits>
__global__ void mask_softcap_kernel(ForwardParams p, std::int64_t row0, std::int64_t key0,
                                    const float* in, bool softcap, float* out) {
  constexpr int kKeys = Traits::kBlockN;
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  float s[Traits::kMTiles][Traits::kNTiles][4];
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
    for (int nt = 0; nt < Traits::kNTiles; ++nt)
      for (int c = 0; c < 4; ++c) s[mt][nt][c] = in[view_row(mt, c, g) * kKeys + view_col(nt, c, t)];
  if (softcap) {
    apply_softcap<Traits>(s, p);
  } else {
    apply_mask<Traits>(s, p, row0, key0, lane);
  }
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
    for (int nt = 0; nt < Traits::kNTiles; ++nt)
      for (int c = 0; c < 4; ++c) out[view_row(mt, c, g) * kKeys + view_col(nt, c, t)] = s[mt][nt][c];
}

using MaskTraits = StepTraits<2, 4, 2, false>;  // 32 rows x 32 keys

struct MaskCase {
  const char* name;
  detail::Mask mask;
  std::int64_t k_len, row0, key0;
};

TEST(PrimitivesForwardSteps, ApplyMask) {
  FLASHPP_SKIP_BELOW_SM80();
  using detail::kNoLimit;
  const MaskCase cases[] = {
      {"causal top-left, diagonal tile", {0, kNoLimit, 0}, 1000, 32, 32},
      {"causal bottom-right (Nq 40, Nk 100)", {60, kNoLimit, 0}, 100, 0, 64},
      {"window left 5 right 3", {0, 5, 3}, 1000, 64, 48},
      {"no mask, tile past Nk = 50", {0, kNoLimit, kNoLimit}, 50, 0, 32},
      {"causal, tile entirely above the diagonal", {0, kNoLimit, 0}, 1000, 0, 64},
      {"window, tile entirely left of the band", {0, 2, 2}, 1000, 96, 0},
      {"window, tile entirely right of the band", {0, 2, 2}, 1000, 0, 64},
  };
  constexpr int kN = 32 * 32;
  DeviceBuffer din(kN * 4), dout(kN * 4);
  FLASHPP_ALLOC_OK(din);
  FLASHPP_ALLOC_OK(dout);
  std::vector<float> in(kN);
  for (int i = 0; i < kN; ++i) in[i] = 0.5f + static_cast<float>(i % 7);
  din.upload(in);
  for (const MaskCase& mc : cases) {
    ForwardParams p{};
    p.mask = mc.mask;
    p.k_len = mc.k_len;
    p.q_len = 1 << 20;
    dout.fill_bytes(0xFF);
    mask_softcap_kernel<MaskTraits><<<1, 32>>>(p, mc.row0, mc.key0,
                                               static_cast<const float*>(din.data()), false,
                                               static_cast<float*>(dout.data()));
    FLASHPP_LAUNCH_OK();
    const std::vector<float> out = dout.download<float>(kN);
    int errors = 0;
    for (int r = 0; r < 32; ++r)
      for (int k = 0; k < 32; ++k) {
        const std::int64_t i = mc.row0 + r, j = mc.key0 + k;
        const bool visible = mc.mask.visible(i, j) && j < mc.k_len;
        const float want = visible ? in[r * 32 + k] : -kInf;
        const float got = out[r * 32 + k];
        if (got != want && ++errors <= 10) {
          ADD_FAILURE() << mc.name << ": (" << i << ", " << j << ") got " << got << ", want "
                        << want;
        }
      }
    EXPECT_EQ(errors, 0) << mc.name;
  }
}

TEST(PrimitivesForwardSteps, ApplySoftcap) {
  FLASHPP_SKIP_BELOW_SM80();
  constexpr int kN = 32 * 32;
  std::vector<float> in(kN);
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> dist(-400.0f, 400.0f);
  for (float& x : in) x = dist(rng);
  DeviceBuffer din(kN * 4), dout(kN * 4);
  FLASHPP_ALLOC_OK(din);
  FLASHPP_ALLOC_OK(dout);
  din.upload(in);
  dout.fill_bytes(0xFF);
  ForwardParams p{};
  p.scale = 0.125f;
  p.softcap = 30.0f;
  mask_softcap_kernel<MaskTraits><<<1, 32>>>(p, 0, 0, static_cast<const float*>(din.data()), true,
                                             static_cast<float*>(dout.data()));
  FLASHPP_LAUNCH_OK();
  const std::vector<float> out = dout.download<float>(kN);
  const float inner = p.scale / p.softcap, outer = p.softcap / p.scale;
  for (int i = 0; i < kN; ++i) {
    const double want = static_cast<double>(outer) * std::tanh(static_cast<double>(in[i]) * inner);
    EXPECT_TRUE(gpu_test::near(out[i], want, 1e-5, 1e-4))
        << "element " << i << ": got " << out[i] << ", want " << want;
  }
}

// ---- write_output ----------------------------------------------------------------------------

// Two warps of 32 rows each over a 64-row query tile; D = 64 instantiated.
using OutputTraits = StepTraits<2, 4, 8, false, 64>;

// o_acc [64][64], row_max [64], sum partials [64][4] (one per lane t of the row's quad).
__global__ void write_output_kernel(ForwardParams p, std::int64_t b, std::int64_t h,
                                    std::int64_t m0, const float* o_acc, const float* row_max_in,
                                    const float* sum_in) {
  using Traits = OutputTraits;
  using QTile = Traits::QTile;  // the block's 64 x 64 tile
  __shared__ __align__(128) __half q_smem[QTile::kElements];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int warp_row0 = warp * Traits::kRowsPerWarp;
  float o[Traits::kMTiles][Traits::kDTiles][4], row_max[Traits::kMTiles][2],
      row_sum[Traits::kMTiles][2];
  for (int mt = 0; mt < Traits::kMTiles; ++mt) {
    for (int dt = 0; dt < Traits::kDTiles; ++dt)
      for (int c = 0; c < 4; ++c)
        o[mt][dt][c] = o_acc[(warp_row0 + view_row(mt, c, g)) * 64 + view_col(dt, c, t)];
    for (int hh = 0; hh < 2; ++hh) {
      const int row = warp_row0 + mt * 16 + g + 8 * hh;
      row_max[mt][hh] = row_max_in[row];
      row_sum[mt][hh] = sum_in[row * 4 + t];
    }
  }
  write_output<Traits>(o, row_max, row_sum, p, b, h, m0, warp_row0, lane, q_smem);
}

// O [B=2][N=80][H=3][64 allocated, head_dim 48], lse [B][H][N]: the query tile at m0 = 32 of
// (b 1, h 2) has rows 32..79 inside the sequence and 80..95 past it.
void check_write_output(float dropout_p) {
  FLASHPP_SKIP_BELOW_SM80();
  using QTile = OutputTraits::QTile;
  static_assert(QTile::kRowCount == 64 && QTile::kChunks == 8, "two warps' rows, 64 columns");
  constexpr int kB = 2, kN = 80, kH = 3, kDAlloc = 64, kHeadDim = 48, kRows = 64;
  constexpr std::int64_t b = 1, h = 2, m0 = 32;
  std::mt19937 rng(29);
  std::uniform_int_distribution<int> dist(-64, 64), part(1, 40);
  std::vector<float> o_acc(kRows * 64), row_max(kRows), sums(kRows * 4);
  for (float& x : o_acc) x = static_cast<float>(dist(rng)) / 16.0f;
  for (int r = 0; r < kRows; ++r) {
    row_max[r] = static_cast<float>(dist(rng)) / 4.0f;
    for (int t = 0; t < 4; ++t) sums[r * 4 + t] = static_cast<float>(part(rng)) / 8.0f;
  }
  for (int t = 0; t < 4; ++t) sums[5 * 4 + t] = 0.0f;  // row 5 saw no key: O = 0, lse = -inf
  row_max[5] = -kInf;

  const std::size_t o_elems = static_cast<std::size_t>(kB) * kN * kH * kDAlloc;
  const std::size_t lse_elems = static_cast<std::size_t>(kB) * kH * kN;
  DeviceBuffer dout(o_elems * 2), dlse(lse_elems * 4), dacc(o_acc.size() * 4), dmax(kRows * 4),
      dsum(sums.size() * 4);
  for (const DeviceBuffer* buf : {&dout, &dlse, &dacc, &dmax, &dsum}) ASSERT_TRUE(buf->ok());
  dacc.upload(o_acc);
  dmax.upload(row_max);
  dsum.upload(sums);
  dout.fill_bytes(0xFF);
  dlse.fill_bytes(0xFF);

  ForwardParams p{};
  p.o = dout.data();
  p.o_strides = RowStrides{kN * kH * kDAlloc, kH * kDAlloc, kDAlloc};
  p.lse = static_cast<float*>(dlse.data());
  p.lse_stride_batch = kH * kN;
  p.lse_stride_head = kN;
  p.lse_stride_row = 1;
  p.q_len = kN;
  p.k_len = 100;
  p.q_heads = kH;
  p.head_dim = kHeadDim;
  p.scale = 0.125f;
  p.dropout = detail::make_dropout_params(dropout_p, 1234, 0);
  write_output_kernel<<<1, 64>>>(p, b, h, m0, static_cast<const float*>(dacc.data()),
                                 static_cast<const float*>(dmax.data()),
                                 static_cast<const float*>(dsum.data()));
  FLASHPP_LAUNCH_OK();
  const std::vector<std::uint16_t> out = dout.download<std::uint16_t>(o_elems);
  const std::vector<float> lse = dlse.download<float>(lse_elems);
  const float keep_scale = p.dropout.threshold != 0 ? p.dropout.keep_scale : 1.0f;
  int errors = 0;
  for (int bb = 0; bb < kB; ++bb)
    for (int i = 0; i < kN; ++i)
      for (int hh = 0; hh < kH; ++hh)
        for (int d = 0; d < kDAlloc; ++d) {
          const std::uint16_t got = out[((static_cast<std::size_t>(bb) * kN + i) * kH + hh) * kDAlloc + d];
          const int r = i - static_cast<int>(m0);
          const bool written = bb == b && hh == h && r >= 0 && r < kRows && d < kHeadDim;
          if (!written) {
            if (got != kPoison16 && ++errors <= 10) {
              ADD_FAILURE() << "O (" << bb << ", " << i << ", " << hh << ", " << d
                            << ") outside the tile was written";
            }
            continue;
          }
          const float* s = &sums[r * 4];
          const float sum = (s[0] + s[1]) + (s[2] + s[3]);
          const float factor = sum > 0.0f ? keep_scale / sum : 0.0f;
          const float want = gpu_test::float_of<__half>(gpu_test::bits_of<__half>(o_acc[r * 64 + d] * factor));
          const float g = gpu_test::float_of<__half>(got);
          if (!gpu_test::near(g, want, 1e-3, 1e-6) && ++errors <= 10) {
            ADD_FAILURE() << "O row " << i << " d " << d << ": got " << g << ", want " << want;
          }
        }
  for (int bb = 0; bb < kB; ++bb)
    for (int hh = 0; hh < kH; ++hh)
      for (int i = 0; i < kN; ++i) {
        const float got = lse[(static_cast<std::size_t>(bb) * kH + hh) * kN + i];
        const int r = i - static_cast<int>(m0);
        if (!(bb == b && hh == h && r >= 0 && r < kRows)) {
          if (!std::isnan(got) && ++errors <= 10) {
            ADD_FAILURE() << "lse (" << bb << ", " << hh << ", " << i << ") was written";
          }
          continue;
        }
        const float* s = &sums[r * 4];
        const double sum = (s[0] + s[1]) + (s[2] + s[3]);
        const double want = sum > 0.0 ? static_cast<double>(row_max[r]) * p.scale + std::log(sum) : -kInf;
        if (!gpu_test::near(got, want, 1e-5, 1e-5) && ++errors <= 10) {
          ADD_FAILURE() << "lse row " << i << ": got " << got << ", want " << want;
        }
      }
  EXPECT_EQ(errors, 0);
}

TEST(PrimitivesForwardSteps, WriteOutput) { check_write_output(0.0f); }
TEST(PrimitivesForwardSteps, WriteOutputWithDropoutScale) { check_write_output(0.25f); }

// =============================================================================================
// Dropout keep decisions (common/dropout_signs.cuh) against src/common/philox.hpp on the CPU
// =============================================================================================

// keep_mask / keep_mask_pair of sign words made by detail::dropout_keep_signs.
__global__ void keep_mask_kernel(const std::uint32_t* words, int count, detail::DropoutParams d,
                                 std::uint32_t* masks, std::uint32_t* pair_masks) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const std::uint32_t signs = detail::dropout_keep_signs(words[i], d);
    const std::uint32_t other = detail::dropout_keep_signs(words[(i + 1) % count], d);
    for (unsigned byte = 0; byte < 4; ++byte) {
      masks[i * 4 + byte] = keep_mask(signs, byte);
      pair_masks[i * 4 + byte] = keep_mask_pair(signs, other, byte);
    }
  }
}

TEST(PrimitivesDropoutSigns, KeepMasksFromSignBits) {
  FLASHPP_SKIP_BELOW_SM80();
  std::vector<std::uint32_t> words(256);
  std::mt19937 rng(31);
  for (auto& w : words) w = rng();
  for (int i = 0; i < 64; ++i) {
    // Every byte value somewhere, thresholds' neighbours included.
    words[i] = static_cast<std::uint32_t>(4 * i) | (static_cast<std::uint32_t>(4 * i + 1) << 8) |
               (static_cast<std::uint32_t>(4 * i + 2) << 16) |
               (static_cast<std::uint32_t>(4 * i + 3) << 24);
  }
  const int count = static_cast<int>(words.size());
  DeviceBuffer dwords(words.size() * 4), dmasks(words.size() * 16), dpairs(words.size() * 16);
  FLASHPP_ALLOC_OK(dwords);
  FLASHPP_ALLOC_OK(dmasks);
  FLASHPP_ALLOC_OK(dpairs);
  dwords.upload(words);
  for (const int threshold : {1, 26, 77, 128, 129, 200, 255}) {
    const detail::DropoutParams d =
        detail::make_dropout_params(static_cast<float>(threshold) / 256.0f, 99, 7);
    ASSERT_EQ(d.threshold, static_cast<std::uint32_t>(threshold));
    dmasks.fill_bytes(0xAB);
    dpairs.fill_bytes(0xAB);
    keep_mask_kernel<<<1, 64>>>(static_cast<const std::uint32_t*>(dwords.data()), count, d,
                                static_cast<std::uint32_t*>(dmasks.data()),
                                static_cast<std::uint32_t*>(dpairs.data()));
    FLASHPP_LAUNCH_OK();
    const auto masks = dmasks.download<std::uint32_t>(words.size() * 4);
    const auto pairs = dpairs.download<std::uint32_t>(words.size() * 4);
    int errors = 0;
    for (int i = 0; i < count; ++i)
      for (unsigned byte = 0; byte < 4; ++byte) {
        const bool keep_lo = ((words[i] >> (8 * byte)) & 0xFFu) >= d.threshold;
        const bool keep_hi = ((words[(i + 1) % count] >> (8 * byte)) & 0xFFu) >= d.threshold;
        const std::uint32_t want = keep_lo ? 0xFFFFFFFFu : 0u;
        const std::uint32_t want_pair = (keep_lo ? 0x0000FFFFu : 0u) | (keep_hi ? 0xFFFF0000u : 0u);
        if ((masks[i * 4 + byte] != want || pairs[i * 4 + byte] != want_pair) && ++errors <= 10) {
          ADD_FAILURE() << "threshold " << threshold << ", word 0x" << std::hex << words[i]
                        << ", byte " << byte << ": mask 0x" << masks[i * 4 + byte] << " (want 0x"
                        << want << "), pair 0x" << pairs[i * 4 + byte] << " (want 0x"
                        << want_pair << ")" << std::dec;
        }
      }
    EXPECT_EQ(errors, 0) << "threshold " << threshold;
  }
}

// The forward's layout (queries as rows): dropout_signs + apply_dropout_signs on packed P
// fragments, and apply_dropout_per_element on float scores, for a 32-row x 64-key tile.
using DropoutTraits = StepTraits<2, 8, 2, false>;

__device__ __forceinline__ std::uint16_t dropout_pattern(int row, int key) {
  return static_cast<std::uint16_t>(row * 64 + key + 1);
}

__global__ void forward_dropout_kernel(ForwardParams p, std::uint32_t bh, std::int64_t row0,
                                       std::int64_t key0, std::uint16_t* packed_out,
                                       float* per_element_out) {
  using Traits = DropoutTraits;
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  DropoutSigns<Traits> keep;
  dropout_signs<Traits>(keep, p, bh, row0, key0, lane);
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
    for (int kk = 0; kk < Traits::kNTiles / 2; ++kk) {
      // Registers 0..3: (row g, keys 16kk + 2t..), (g + 8, same), (g, 16kk + 8 + 2t..), (g + 8, same).
      const int rows[4] = {mt * 16 + g, mt * 16 + g + 8, mt * 16 + g, mt * 16 + g + 8};
      const int keys[4] = {16 * kk + 2 * t, 16 * kk + 2 * t, 16 * kk + 8 + 2 * t, 16 * kk + 8 + 2 * t};
      std::uint32_t a[4];
      for (int i = 0; i < 4; ++i)
        a[i] = static_cast<std::uint32_t>(dropout_pattern(rows[i], keys[i])) |
               (static_cast<std::uint32_t>(dropout_pattern(rows[i], keys[i] + 1)) << 16);
      apply_dropout_signs<Traits>(a, keep, mt, kk);
      for (int i = 0; i < 4; ++i) {
        packed_out[rows[i] * 64 + keys[i]] = static_cast<std::uint16_t>(a[i] & 0xFFFFu);
        packed_out[rows[i] * 64 + keys[i] + 1] = static_cast<std::uint16_t>(a[i] >> 16);
      }
    }
  float s[Traits::kMTiles][Traits::kNTiles][4];
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
    for (int nt = 0; nt < Traits::kNTiles; ++nt)
      for (int c = 0; c < 4; ++c) s[mt][nt][c] = 1.0f + view_row(mt, c, g) * 64 + view_col(nt, c, t);
  apply_dropout_per_element<Traits>(s, p, bh, row0, key0, lane);
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
    for (int nt = 0; nt < Traits::kNTiles; ++nt)
      for (int c = 0; c < 4; ++c)
        per_element_out[view_row(mt, c, g) * 64 + view_col(nt, c, t)] = s[mt][nt][c];
}

void check_forward_dropout(float drop_p) {
  FLASHPP_SKIP_BELOW_SM80();
  constexpr std::uint32_t bh = 7;
  constexpr std::int64_t row0 = 4096 + 48, key0 = 96;  // multiples of 16 and 32
  ForwardParams p{};
  p.dropout = detail::make_dropout_params(drop_p, 0x0123456789ABCDEFull, (5ull << 32) + 77);
  DeviceBuffer dpacked(32 * 64 * 2), dfloat(32 * 64 * 4);
  FLASHPP_ALLOC_OK(dpacked);
  FLASHPP_ALLOC_OK(dfloat);
  dpacked.fill_bytes(0xFF);
  dfloat.fill_bytes(0xFF);
  forward_dropout_kernel<<<1, 32>>>(p, bh, row0, key0, static_cast<std::uint16_t*>(dpacked.data()),
                                    static_cast<float*>(dfloat.data()));
  FLASHPP_LAUNCH_OK();
  const auto packed = dpacked.download<std::uint16_t>(32 * 64);
  const auto per_element = dfloat.download<float>(32 * 64);
  int errors = 0, kept = 0;
  for (int r = 0; r < 32; ++r)
    for (int k = 0; k < 64; ++k) {
      const bool keep = detail::dropout_keep(p.dropout, bh, static_cast<std::uint32_t>(row0 + r),
                                             static_cast<std::uint32_t>(key0 + k));
      kept += keep;
      const std::uint16_t want = keep ? static_cast<std::uint16_t>(r * 64 + k + 1) : 0;
      const float want_f = keep ? 1.0f + r * 64 + k : 0.0f;
      if ((packed[r * 64 + k] != want || per_element[r * 64 + k] != want_f) && ++errors <= 10) {
        ADD_FAILURE() << "(" << row0 + r << ", " << key0 + k << "): keep " << keep
                      << ", packed 0x" << std::hex << packed[r * 64 + k] << std::dec
                      << ", per element " << per_element[r * 64 + k];
      }
    }
  EXPECT_EQ(errors, 0);
  // Not a test of Philox, just that the case is not degenerate.
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 32 * 64);
}

TEST(PrimitivesDropoutSigns, ForwardLayout) { check_forward_dropout(0.3f); }
// threshold > 128: dropout_keep_signs takes its complemented path.
TEST(PrimitivesDropoutSigns, ForwardLayoutHighDropRate) { check_forward_dropout(0.8f); }

// The backward's transposed layout (keys as rows), as the sm90 backward's dropout_factors uses
// share_dropout_calls<2> and keep_mask: lane (g, t) holds keys key0 + g + 8 (c / 2) x queries
// m0 + 8 nt + 2t + c % 2. Output [16 keys][kQTiles * 8 queries]: keep_scale or 0.
template <int kQTiles>
__global__ void transposed_dropout_kernel(detail::DropoutParams d, std::uint32_t bh,
                                          std::int64_t m0, std::int64_t key0, float* out) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  const bool odd = (g & 1) != 0;
  const auto j = static_cast<std::uint32_t>(key0 + g);
  const std::uint32_t kept = __float_as_uint(d.keep_scale);
  for (int q = 0; q < kQTiles / 4; ++q) {
    const auto i = static_cast<std::uint32_t>(m0 + 32 * q + (odd ? 16 : 0) + 2 * t);
    const KeepSigns keep = share_dropout_calls<2>(detail::dropout_random_bytes(d, bh, i, j), odd, d);
    for (int nt = 4 * q; nt < 4 * q + 4; ++nt) {
      const std::uint32_t* w = (nt & 2) ? keep.b : keep.a;
      for (int c = 0; c < 4; ++c) {
        const float factor =
            __uint_as_float(keep_mask(w[c & 1], 2u * (nt & 1) + (c >> 1)) & kept);
        out[(g + 8 * (c >> 1)) * (kQTiles * 8) + 8 * nt + 2 * t + (c & 1)] = factor;
      }
    }
  }
}

void check_transposed_dropout(float drop_p) {
  FLASHPP_SKIP_BELOW_SM80();
  constexpr int kQTiles = 8, kQueries = kQTiles * 8;
  constexpr std::uint32_t bh = 3;
  constexpr std::int64_t m0 = 2048 + 64, key0 = 160;  // multiples of 32 and 16
  const detail::DropoutParams d = detail::make_dropout_params(drop_p, 42, 0x900000011ull);
  DeviceBuffer dout(16 * kQueries * 4);
  FLASHPP_ALLOC_OK(dout);
  dout.fill_bytes(0xFF);
  transposed_dropout_kernel<kQTiles><<<1, 32>>>(d, bh, m0, key0, static_cast<float*>(dout.data()));
  FLASHPP_LAUNCH_OK();
  const auto out = dout.download<float>(16 * kQueries);
  int errors = 0;
  for (int k = 0; k < 16; ++k)
    for (int q = 0; q < kQueries; ++q) {
      const bool keep = detail::dropout_keep(d, bh, static_cast<std::uint32_t>(m0 + q),
                                             static_cast<std::uint32_t>(key0 + k));
      const float want = keep ? d.keep_scale : 0.0f;
      const float got = out[k * kQueries + q];
      if (got != want && ++errors <= 10) {
        ADD_FAILURE() << "query " << m0 + q << ", key " << key0 + k << ": got " << got
                      << ", want " << want;
      }
    }
  EXPECT_EQ(errors, 0);
}

TEST(PrimitivesDropoutSigns, TransposedLayout) { check_transposed_dropout(0.1f); }
TEST(PrimitivesDropoutSigns, TransposedLayoutHighDropRate) { check_transposed_dropout(0.6f); }

// =============================================================================================
// The dQ accumulator's fragment-ordered blocks (common/dq_accum.cuh)
// =============================================================================================

// Value of dQ accumulator element (bh, row, col): exact in float32, also doubled plus 0.25.
inline float dq_value(int bh, int row, int col) {
  return static_cast<float>(bh * 10000 + row * 100 + col + 1);
}

// Grid (col blocks, row blocks, bh * 2): every fragment is added by two blocks (the atomics must
// accumulate). Block (0, 0, 0) also reports the vector width and slot function it was built with.
__global__ void dq_accum_kernel(BackwardParams p, int* vector_out, int* slots_out) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  const int col_block = blockIdx.x, row_block = blockIdx.y;
  const int bh = blockIdx.z / 2;
  float c[4];
  for (int e = 0; e < 4; ++e) {
    const int row = 16 * row_block + g + 8 * (e >> 1), col = 8 * col_block + 2 * t + (e & 1);
    c[e] = static_cast<float>(bh * 10000 + row * 100 + col + 1);
  }
  dq_accum_add_fragment(dq_accum_block(p, bh, row_block, col_block, p.accum_width), lane, c);
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
    if (lane == 0) *vector_out = kDqAccumVector;
    for (int e = 0; e < 4; ++e) slots_out[lane * 4 + e] = dq_accum_slot(lane, e);
  }
}

TEST(PrimitivesDqAccum, FragmentBlocksAndSlots) {
  FLASHPP_SKIP_BELOW_SM80();
  constexpr int kBh = 2, kRowsPadded = 48, kWidth = 32;
  constexpr int kFloats = kBh * kRowsPadded * kWidth;
  DeviceBuffer dacc(kFloats * 4), dvector(4), dslots(32 * 4 * 4);
  FLASHPP_ALLOC_OK(dacc);
  FLASHPP_ALLOC_OK(dvector);
  FLASHPP_ALLOC_OK(dslots);
  // An accumulator starts from zero; 0.25 instead makes an untouched element show.
  dacc.upload(std::vector<float>(kFloats, 0.25f));
  dvector.fill_bytes(0xFF);
  dslots.fill_bytes(0xFF);
  BackwardParams p{};
  p.dq_accum = static_cast<float*>(dacc.data());
  p.rows_padded = kRowsPadded;
  p.accum_width = kWidth;
  dq_accum_kernel<<<dim3(kWidth / 8, kRowsPadded / 16, 2 * kBh), 32>>>(
      p, static_cast<int*>(dvector.data()), static_cast<int*>(dslots.data()));
  FLASHPP_LAUNCH_OK();
  const int vector = dvector.download<int>(1)[0];
  ASSERT_TRUE(vector == 1 || vector == 4) << "kDqAccumVector " << vector;
  // sm90+ code: lane-major (c of lane l at 4l + c); older: element-major (32c + l).
  auto slot = [&](int lane, int e) { return vector == 4 ? 4 * lane + e : 32 * e + lane; };
  const auto slots = dslots.download<int>(32 * 4);
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e)
      EXPECT_EQ(slots[lane * 4 + e], slot(lane, e)) << "dq_accum_slot(" << lane << ", " << e << ")";
  const auto acc = dacc.download<float>(kFloats);
  std::vector<int> hits(kFloats, 0);
  int errors = 0;
  for (int bh = 0; bh < kBh; ++bh)
    for (int row = 0; row < kRowsPadded; ++row)
      for (int col = 0; col < kWidth; ++col) {
        const int block = (bh * (kRowsPadded / 16) + row / 16) * (kWidth / 8) + col / 8;
        const int r = row % 16, lane = 4 * (r % 8) + (col % 8) / 2, e = 2 * (r / 8) + col % 2;
        const int pos = block * 128 + slot(lane, e);
        ++hits[pos];
        const float want = 0.25f + 2.0f * dq_value(bh, row, col);
        if (acc[pos] != want && ++errors <= 10) {
          ADD_FAILURE() << "dQ accumulator (" << bh << ", " << row << ", " << col << ") at " << pos
                        << ": got " << acc[pos] << ", want " << want;
        }
      }
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), kFloats) << "the layout is not a permutation";
}

}  // namespace
}  // namespace flashpp::cuda
