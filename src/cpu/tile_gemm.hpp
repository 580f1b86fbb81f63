// The one matrix product every step of the CPU FlashAttention uses:
//
//     C[M x N]  (= or +=)  A[M x K] . B[K x N]          all float32
//
// B and C are row-major (contiguous rows, leading dimensions ldb / ldc). A is read one element at
// a time and broadcast, so it may be stored either way: row-major (element (m, k) at
// a[m*lda + k]) or column-major (element (m, k) at a[k*lda + m]). That freedom is what lets the
// forward and backward avoid transposing anything inside their inner loops: S^T = K Q^T reads
// K row-major, O += P V reads P^T column-major, dV += P^T dO reads P row-major, and so on.
//
// AVX-512: a register-blocked micro-kernel holds a kRows x (kVectors*16) block of C in 24 zmm
// accumulators; per step of k it loads kVectors vectors of B, broadcasts kRows elements of A and
// issues kRows*kVectors FMAs (24 FMAs for 10 loads, enough to keep both FMA ports busy). The
// last vector of a row is loaded and stored under a mask, so N needs no padding.
// AVX2 builds run the same micro-kernel on 8-lane ymm registers (6 x 2 vectors); builds
// without either use a plain loop nest (the compiler vectorises its inner loop).
#pragma once

#include <cstdint>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

enum class ALayout { row_major, col_major };

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))

namespace gemm_detail {

// The vector operations the micro-kernel needs, for the widest registers of this build.
// A "tail" describes which lanes of a row's last vector are real columns.
#if defined(__AVX512F__)
struct Simd {
  using Reg = __m512;
  using Tail = __mmask16;
  static constexpr int kLanes = 16;
  static Tail tail_of(int count) { return static_cast<Tail>((1u << count) - 1u); }
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static Reg load(const float* p, Tail t) { return _mm512_maskz_loadu_ps(t, p); }
  static void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, Tail t, Reg v) { _mm512_mask_storeu_ps(p, t, v); }
  static Reg broadcast(float x) { return _mm512_set1_ps(x); }
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
};
#else
struct Simd {
  using Reg = __m256;
  using Tail = __m256i;
  static constexpr int kLanes = 8;
  static Tail tail_of(int count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static Reg load(const float* p, Tail t) { return _mm256_maskload_ps(p, t); }
  static void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, Tail t, Reg v) { _mm256_maskstore_ps(p, t, v); }
  static Reg broadcast(float x) { return _mm256_set1_ps(x); }
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
};
#endif
using Reg = Simd::Reg;
using Tail = Simd::Tail;
constexpr int kLanes = Simd::kLanes;

template <ALayout layout>
inline float a_element(const float* a, std::int64_t lda, int m, std::int64_t k) {
  return layout == ALayout::row_major ? a[m * lda + k] : a[k * lda + m];
}

// C block of ROWS x (VECS*kLanes) columns; with PARTIAL the last vector is masked with `tail`
// (plain loads and stores otherwise: AVX2's masked moves are slower than plain ones).
template <ALayout layout, int ROWS, int VECS, bool PARTIAL>
inline void micro_kernel(std::int64_t K, const float* a, std::int64_t lda, const float* b,
                         std::int64_t ldb, float* c, std::int64_t ldc, Tail tail,
                         bool accumulate) {
  Reg acc[ROWS][VECS];
#pragma GCC unroll 8
  for (int m = 0; m < ROWS; ++m) {
#pragma GCC unroll 4
    for (int v = 0; v < VECS; ++v) {
      const float* p = c + m * ldc + v * kLanes;
      acc[m][v] = !accumulate                     ? Simd::zero()
                  : (PARTIAL && v == VECS - 1)    ? Simd::load(p, tail)
                                                  : Simd::load(p);
    }
  }
  for (std::int64_t k = 0; k < K; ++k) {
    Reg bk[VECS];
#pragma GCC unroll 4
    for (int v = 0; v < VECS; ++v) {
      const float* p = b + k * ldb + v * kLanes;
      bk[v] = (PARTIAL && v == VECS - 1) ? Simd::load(p, tail) : Simd::load(p);
    }
#pragma GCC unroll 8
    for (int m = 0; m < ROWS; ++m) {
      const Reg am = Simd::broadcast(a_element<layout>(a, lda, m, k));
#pragma GCC unroll 4
      for (int v = 0; v < VECS; ++v) acc[m][v] = Simd::fmadd(am, bk[v], acc[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < ROWS; ++m) {
#pragma GCC unroll 4
    for (int v = 0; v < VECS; ++v) {
      float* p = c + m * ldc + v * kLanes;
      if (PARTIAL && v == VECS - 1) {
        Simd::store(p, tail, acc[m][v]);
      } else {
        Simd::store(p, acc[m][v]);
      }
    }
  }
}

template <ALayout layout, int ROWS, int MAX_VECS>
inline void micro_kernel_rows(int vecs, std::int64_t K, const float* a, std::int64_t lda,
                              const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
                              Tail tail, bool partial, bool accumulate) {
  if constexpr (MAX_VECS > 1) {
    if (vecs < MAX_VECS) {
      micro_kernel_rows<layout, ROWS, MAX_VECS - 1>(vecs, K, a, lda, b, ldb, c, ldc, tail,
                                                    partial, accumulate);
      return;
    }
  }
  if (partial) {
    micro_kernel<layout, ROWS, MAX_VECS, true>(K, a, lda, b, ldb, c, ldc, tail, accumulate);
  } else {
    micro_kernel<layout, ROWS, MAX_VECS, false>(K, a, lda, b, ldb, c, ldc, tail, accumulate);
  }
}

// Edge blocks: `rows` <= MAX_ROWS rows and `vecs` <= MAX_VECS vectors, picked by recursion
// over the template arguments.
template <ALayout layout, int MAX_ROWS, int MAX_VECS>
inline void micro_kernel_any(int rows, int vecs, std::int64_t K, const float* a, std::int64_t lda,
                             const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
                             Tail tail, bool partial, bool accumulate) {
  if constexpr (MAX_ROWS > 1) {
    if (rows < MAX_ROWS) {
      micro_kernel_any<layout, MAX_ROWS - 1, MAX_VECS>(rows, vecs, K, a, lda, b, ldb, c, ldc,
                                                       tail, partial, accumulate);
      return;
    }
  }
  micro_kernel_rows<layout, MAX_ROWS, MAX_VECS>(vecs, K, a, lda, b, ldb, c, ldc, tail, partial,
                                                accumulate);
}

}  // namespace gemm_detail

// The register block of one micro-kernel: kRows rows x kVectors vectors of C. AVX-512: 6 x 4
// zmm = 24 accumulators, B's vectors and A's broadcast in the other 8 of 32 registers; 6 x 64
// was the fastest measured (8 x 48 on par, 12 x 32 far slower); see docs/cpu-backend.md.
// AVX2: 6 x 2 ymm = 12 accumulators + 2 of B + 1 broadcast of 16 registers (the classic 6 x 16).
template <int ROWS, int VECS>
struct BlockShape {
  static constexpr int kRows = ROWS;
  static constexpr int kVectors = VECS;
};
#if defined(__AVX512F__)
using WideBlock = BlockShape<6, 4>;
#else
using WideBlock = BlockShape<6, 2>;
#endif

// C = A B (accumulate == false) or C += A B (accumulate == true). With K == 0 and
// accumulate == false, C is zeroed.
template <ALayout layout, typename Shape = WideBlock>
inline void tile_gemm(std::int64_t M, std::int64_t N, std::int64_t K, const float* a,
                      std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                      std::int64_t ldc, bool accumulate) {
  using namespace gemm_detail;
  constexpr int kRows = Shape::kRows, kVectors = Shape::kVectors;
  constexpr std::int64_t kCols = kVectors * kLanes;
  // Column blocks outside, then chunks of K, then row blocks: the kDepth x kCols panel of B
  // (16 KiB) stays in L1 while every row block of A streams past it; C is
  // reloaded once per chunk, which costs little next to kDepth steps of FMAs.
  constexpr std::int64_t kDepth = 4096 / kCols;
  for (std::int64_t n0 = 0; n0 < N; n0 += kCols) {
    const std::int64_t cols = N - n0 < kCols ? N - n0 : kCols;
    const int vecs = static_cast<int>((cols + kLanes - 1) / kLanes);
    const int tail_count = static_cast<int>(cols - (vecs - 1) * kLanes);
    const bool partial = tail_count != kLanes;
    const Tail tail = Simd::tail_of(tail_count);
    std::int64_t k0 = 0;
    do {  // at least once, so that K == 0 still zeroes C
      const std::int64_t depth = K - k0 < kDepth ? K - k0 : kDepth;
      const bool acc = accumulate || k0 > 0;
      const float* a_chunk = layout == ALayout::row_major ? a + k0 : a + k0 * lda;
      const float* b_chunk = b + k0 * ldb + n0;
      for (std::int64_t m0 = 0; m0 < M; m0 += kRows) {
        const int rows = static_cast<int>(M - m0 < kRows ? M - m0 : kRows);
        const float* a_block = layout == ALayout::row_major ? a_chunk + m0 * lda : a_chunk + m0;
        float* c_block = c + m0 * ldc + n0;
        if (rows == kRows && vecs == kVectors && !partial) {
          micro_kernel<layout, kRows, kVectors, false>(depth, a_block, lda, b_chunk, ldb, c_block,
                                                       ldc, tail, acc);
        } else {
          micro_kernel_any<layout, kRows, kVectors>(rows, vecs, depth, a_block, lda, b_chunk, ldb,
                                                    c_block, ldc, tail, partial, acc);
        }
      }
      k0 += depth;
    } while (k0 < K);
  }
}

#else  // portable fallback: the same contract, plain loops

struct WideBlock {};

template <ALayout layout, typename Shape = WideBlock>
inline void tile_gemm(std::int64_t M, std::int64_t N, std::int64_t K, const float* a,
                      std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                      std::int64_t ldc, bool accumulate) {
  for (std::int64_t m = 0; m < M; ++m) {
    float* crow = c + m * ldc;
    if (!accumulate) {
      for (std::int64_t n = 0; n < N; ++n) crow[n] = 0.0f;
    }
    for (std::int64_t k = 0; k < K; ++k) {
      const float am = layout == ALayout::row_major ? a[m * lda + k] : a[k * lda + m];
      const float* brow = b + k * ldb;
      for (std::int64_t n = 0; n < N; ++n) crow[n] += am * brow[n];
    }
  }
}

#endif

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
