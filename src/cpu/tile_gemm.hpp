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
// Without AVX-512 a plain loop nest is used (the compiler vectorises its inner loop).
#pragma once

#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace flashpp::cpu {

enum class ALayout { row_major, col_major };

#if defined(__AVX512F__)

namespace gemm_detail {


template <ALayout layout>
inline float a_element(const float* a, std::int64_t lda, int m, std::int64_t k) {
  return layout == ALayout::row_major ? a[m * lda + k] : a[k * lda + m];
}

// C block of ROWS x (VECS*16) columns; the last vector is masked with `tail`.
template <ALayout layout, int ROWS, int VECS>
inline void micro_kernel(std::int64_t K, const float* a, std::int64_t lda, const float* b,
                         std::int64_t ldb, float* c, std::int64_t ldc, __mmask16 tail,
                         bool accumulate) {
  __m512 acc[ROWS][VECS];
#pragma GCC unroll 8
  for (int m = 0; m < ROWS; ++m) {
#pragma GCC unroll 4
    for (int v = 0; v < VECS; ++v) {
      const __mmask16 mask = v == VECS - 1 ? tail : __mmask16(0xFFFF);
      acc[m][v] = accumulate ? _mm512_maskz_loadu_ps(mask, c + m * ldc + v * 16)
                             : _mm512_setzero_ps();
    }
  }
  for (std::int64_t k = 0; k < K; ++k) {
    __m512 bk[VECS];
#pragma GCC unroll 4
    for (int v = 0; v < VECS; ++v) {
      const __mmask16 mask = v == VECS - 1 ? tail : __mmask16(0xFFFF);
      bk[v] = _mm512_maskz_loadu_ps(mask, b + k * ldb + v * 16);
    }
#pragma GCC unroll 8
    for (int m = 0; m < ROWS; ++m) {
      const __m512 am = _mm512_set1_ps(a_element<layout>(a, lda, m, k));
#pragma GCC unroll 4
      for (int v = 0; v < VECS; ++v) acc[m][v] = _mm512_fmadd_ps(am, bk[v], acc[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < ROWS; ++m) {
#pragma GCC unroll 4
    for (int v = 0; v < VECS; ++v) {
      const __mmask16 mask = v == VECS - 1 ? tail : __mmask16(0xFFFF);
      _mm512_mask_storeu_ps(c + m * ldc + v * 16, mask, acc[m][v]);
    }
  }
}

template <ALayout layout, int ROWS, int MAX_VECS>
inline void micro_kernel_rows(int vecs, std::int64_t K, const float* a, std::int64_t lda,
                              const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
                              __mmask16 tail, bool accumulate) {
  if constexpr (MAX_VECS > 1) {
    if (vecs < MAX_VECS) {
      micro_kernel_rows<layout, ROWS, MAX_VECS - 1>(vecs, K, a, lda, b, ldb, c, ldc, tail,
                                                    accumulate);
      return;
    }
  }
  micro_kernel<layout, ROWS, MAX_VECS>(K, a, lda, b, ldb, c, ldc, tail, accumulate);
}

// Edge blocks: `rows` <= MAX_ROWS rows and `vecs` <= MAX_VECS vectors, picked by recursion
// over the template arguments.
template <ALayout layout, int MAX_ROWS, int MAX_VECS>
inline void micro_kernel_any(int rows, int vecs, std::int64_t K, const float* a, std::int64_t lda,
                             const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
                             __mmask16 tail, bool accumulate) {
  if constexpr (MAX_ROWS > 1) {
    if (rows < MAX_ROWS) {
      micro_kernel_any<layout, MAX_ROWS - 1, MAX_VECS>(rows, vecs, K, a, lda, b, ldb, c, ldc,
                                                       tail, accumulate);
      return;
    }
  }
  micro_kernel_rows<layout, MAX_ROWS, MAX_VECS>(vecs, K, a, lda, b, ldb, c, ldc, tail,
                                                accumulate);
}

}  // namespace gemm_detail

// The register block of one micro-kernel: kRows rows x kVectors 16-float vectors of C, at most
// 24 accumulators so that B's vectors and A's broadcast fit the other 8 zmm registers. 6 x 64 was
// the fastest measured (8 x 48 on par, 12 x 32 far slower); see docs/cpu-backend.md.
template <int ROWS, int VECS>
struct BlockShape {
  static constexpr int kRows = ROWS;
  static constexpr int kVectors = VECS;
};
using WideBlock = BlockShape<6, 4>;

// C = A B (accumulate == false) or C += A B (accumulate == true). With K == 0 and
// accumulate == false, C is zeroed.
template <ALayout layout, typename Shape = WideBlock>
inline void tile_gemm(std::int64_t M, std::int64_t N, std::int64_t K, const float* a,
                      std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                      std::int64_t ldc, bool accumulate) {
  using namespace gemm_detail;
  constexpr int kRows = Shape::kRows, kVectors = Shape::kVectors;
  constexpr std::int64_t kCols = kVectors * 16;
  // Column blocks outside, then chunks of K, then row blocks: the kDepth x kCols panel of B
  // (16 KiB) stays in L1 while every row block of A streams past it; C is
  // reloaded once per chunk, which costs little next to kDepth steps of FMAs.
  constexpr std::int64_t kDepth = 4096 / kCols;
  for (std::int64_t n0 = 0; n0 < N; n0 += kCols) {
    const std::int64_t cols = N - n0 < kCols ? N - n0 : kCols;
    const int vecs = static_cast<int>((cols + 15) / 16);
    const int tail_count = static_cast<int>(cols - (vecs - 1) * 16);
    const __mmask16 tail = static_cast<__mmask16>((1u << tail_count) - 1u);
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
        if (rows == kRows && vecs == kVectors) {
          micro_kernel<layout, kRows, kVectors>(depth, a_block, lda, b_chunk, ldb, c_block, ldc,
                                                tail, acc);
        } else {
          micro_kernel_any<layout, kRows, kVectors>(rows, vecs, depth, a_block, lda, b_chunk, ldb,
                                                    c_block, ldc, tail, acc);
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

}  // namespace flashpp::cpu
