// The one tile product of the bf16 engines (forward_bf16.cpp, backward_bf16.cpp):
//
//   C[M][N] (= or +=) A[M][K] . B      bf16 operands, float32 accumulation
//
// A: bf16 row-major (lda elements). B: "VNNI" words, word (k/2, n) at b[(k/2) * ldb + n] =
// bf16 B[k][n] | bf16 B[k+1][n] << 16 (both instructions read B in pairs along the reduction
// dimension). C: float32 row-major (ldc). M, N and K are multiples of 32.
//
// Engines, by the level this file is compiled for (CMakeLists.txt):
//   amx            tdpbf16ps on AMX tiles (amx_tiles.hpp)
//   amx_emulated   the same code on the emulated tiles (amx_tiles.hpp, FLASHPP_AMX_EMULATION)
//   avx512bf16     vdpbf16ps: 16 lanes x 2-element dot products into float32
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AMX_BF16__) || FLASHPP_AMX_EMULATION
#include "amx_tiles.hpp"
#elif defined(__AVX512BF16__)
#include <immintrin.h>
#else
#error "bf16_product.hpp: compile with -mamx-bf16, -mavx512bf16 or FLASHPP_AMX_EMULATION=1"
#endif

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

#if defined(__AMX_BF16__) || FLASHPP_AMX_EMULATION

inline constexpr const char* kBf16Engine = kAmxEmulated ? "amx (emulated)" : "amx";

// Once per thread and call, before the first product (the tile state is per thread).
inline void bf16_engine_begin() { tile_configure(); }
inline void bf16_engine_end() { tile_release(); }

inline void bf16_tile_product(std::int64_t M, std::int64_t N, std::int64_t K,
                              const std::uint16_t* a, std::int64_t lda, const std::uint32_t* b,
                              std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  amx_tile_product(M, N, K, a, lda, b, ldb, c, ldc, accumulate);
}

#else  // AVX512-BF16

inline constexpr const char* kBf16Engine = "avx512bf16";

inline void bf16_engine_begin() {}
inline void bf16_engine_end() {}

inline std::uint32_t load_u32(const std::uint16_t* p) {
  std::uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// A 4 x (VECS*16) block of C: per pair of k, VECS loads of B, 4 broadcasts of an A pair,
// 4*VECS vdpbf16ps.
template <int VECS>
inline void dot_block(std::int64_t K, const std::uint16_t* a, std::int64_t lda,
                      const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc,
                      bool accumulate) {
  constexpr int kRows = 4;
  __m512 acc[kRows][VECS];
#pragma GCC unroll 4
  for (int m = 0; m < kRows; ++m) {
#pragma GCC unroll 4
    for (int v = 0; v < VECS; ++v) {
      acc[m][v] = accumulate ? _mm512_loadu_ps(c + m * ldc + v * 16) : _mm512_setzero_ps();
    }
  }
  for (std::int64_t k2 = 0; k2 < K / 2; ++k2) {
    __m512bh bk[VECS];
#pragma GCC unroll 4
    for (int v = 0; v < VECS; ++v) {
      bk[v] = (__m512bh)_mm512_loadu_si512(b + k2 * ldb + v * 16);
    }
#pragma GCC unroll 4
    for (int m = 0; m < kRows; ++m) {
      const __m512bh am = (__m512bh)_mm512_set1_epi32(static_cast<int>(load_u32(a + m * lda + 2 * k2)));
#pragma GCC unroll 4
      for (int v = 0; v < VECS; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], am, bk[v]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < kRows; ++m) {
#pragma GCC unroll 4
    for (int v = 0; v < VECS; ++v) _mm512_storeu_ps(c + m * ldc + v * 16, acc[m][v]);
  }
}

inline void bf16_tile_product(std::int64_t M, std::int64_t N, std::int64_t K,
                              const std::uint16_t* a, std::int64_t lda, const std::uint32_t* b,
                              std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  for (std::int64_t n0 = 0; n0 < N; n0 += 64) {
    const bool wide = N - n0 >= 64;
    for (std::int64_t m0 = 0; m0 < M; m0 += 4) {
      if (wide) {
        dot_block<4>(K, a + m0 * lda, lda, b + n0, ldb, c + m0 * ldc + n0, ldc, accumulate);
      } else {
        dot_block<2>(K, a + m0 * lda, lda, b + n0, ldb, c + m0 * ldc + n0, ldc, accumulate);
      }
    }
  }
}

#endif

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
