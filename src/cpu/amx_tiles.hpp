// The AMX-BF16 tile operations the bf16 engines use, as named wrappers: configure/release the
// tile state, zero/load/store a tile, and tdpbf16ps. Everything AMX in flashpp goes through
// these six calls (forward_bf16.cpp, backward_bf16.cpp), so that one switch replaces them:
//
//   FLASHPP_AMX_EMULATION=1   a plain C++ emulation of exactly these operations (the tile
//                             registers are a per-thread array), compiled into the
//                             `amx_emulated` kernel level (AVX2 flags, CMakeLists.txt) and
//                             chosen by FLASHPP_CPU_ISA=amx_emulated. It lets the AMX engines'
//                             whole loop (tiling, packing, softmax, accumulation) run and be
//                             checked against the float64 oracle on machines without AMX.
//   otherwise                 the real instructions (-mamx-tile -mamx-bf16).
//
// Tile shape: every tile is configured as 16 rows x 64 bytes (palette 1); that is the only
// shape the engines use. A: 16 rows x 32 bf16. B: 16 rows of 16 "VNNI" words, word (k/2, n) =
// bf16 B[k][n] | bf16 B[k+1][n] << 16 (pairs along the reduction dimension). C: 16 x 16 float32.
//
// Numerics of tdpbf16ps (Intel SDM), which the emulation follows: for each C element,
//   c += a[2k] * b[2k] ; c += a[2k+1] * b[2k+1]   for k = 0..15 in order,
// every bf16 product exact in float32 (8-bit significands), each addition rounded to nearest
// even in float32; denormal inputs read as zero and denormal results flushed to zero. (Whether
// the hardware rounds after each addition or once per pair is not documented in a way that
// matters here: the tests' limits are far above either.)
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if !FLASHPP_AMX_EMULATION
#include <immintrin.h>
#endif

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

#if FLASHPP_AMX_EMULATION

inline constexpr bool kAmxEmulated = true;

// The eight tile registers of the calling thread, and whether it has configured them (a tile
// instruction before ldtilecfg faults on the hardware; the emulation aborts instead). One
// instance per thread for the whole library (an inline variable: every translation unit of
// the level shares it, as they share the hardware's tiles).
struct EmulatedTileFile {
  alignas(64) unsigned char bytes[8][16][64];
  bool configured;
};
inline thread_local EmulatedTileFile emulated_tiles{};

inline void require_tile_config(const char* op) {
  if (!emulated_tiles.configured) {
    std::fprintf(stderr, "flashpp AMX emulation: %s before tile_configure on this thread\n", op);
    std::abort();
  }
}
inline float bf16_operand(std::uint16_t bits) {
  // denormal inputs (exponent 0) read as zero, as tdpbf16ps does
  const std::uint32_t u = (bits & 0x7F80u) == 0 ? (std::uint32_t(bits) & 0x8000u) << 16
                                                : std::uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline float flush_denormal(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7F800000u) == 0) u &= 0x80000000u;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

inline void tile_configure() { emulated_tiles.configured = true; }
inline void tile_release() { emulated_tiles.configured = false; }
template <int T>
inline void tile_zero() {
  require_tile_config("tilezero");
  std::memset(emulated_tiles.bytes[T], 0, sizeof emulated_tiles.bytes[T]);
}
template <int T>
inline void tile_load(const void* base, std::int64_t stride_bytes) {
  require_tile_config("tileloadd");
  for (int r = 0; r < 16; ++r) {
    std::memcpy(emulated_tiles.bytes[T][r], static_cast<const char*>(base) + r * stride_bytes, 64);
  }
}
template <int T>
inline void tile_store(void* base, std::int64_t stride_bytes) {
  require_tile_config("tilestored");
  for (int r = 0; r < 16; ++r) {
    std::memcpy(static_cast<char*>(base) + r * stride_bytes, emulated_tiles.bytes[T][r], 64);
  }
}
// C (16 x 16 float32) += A (16 x 32 bf16) . B (16 x 16 VNNI words).
template <int C, int A, int B>
inline void tile_dpbf16ps() {
  static_assert(C != A && C != B && A != B, "tdpbf16ps: three distinct tiles");
  require_tile_config("tdpbf16ps");
  // B read once: the even and odd elements of each pair, as float32
  float b_even[16][16], b_odd[16][16];
  for (int k2 = 0; k2 < 16; ++k2) {
    std::uint16_t b_bits[32];
    std::memcpy(b_bits, emulated_tiles.bytes[B][k2], 64);
    for (int n = 0; n < 16; ++n) {
      b_even[k2][n] = bf16_operand(b_bits[2 * n]);
      b_odd[k2][n] = bf16_operand(b_bits[2 * n + 1]);
    }
  }
  for (int m = 0; m < 16; ++m) {
    float c[16], a[32];
    std::uint16_t a_bits[32];
    std::memcpy(c, emulated_tiles.bytes[C][m], 64);
    std::memcpy(a_bits, emulated_tiles.bytes[A][m], 64);
    for (int k = 0; k < 32; ++k) a[k] = bf16_operand(a_bits[k]);
    for (int k2 = 0; k2 < 16; ++k2) {
      for (int n = 0; n < 16; ++n) {
        // two roundings, (c + a0 b0) + a1 b1; the products are exact in float32
        const float x = c[n] + a[2 * k2] * b_even[k2][n];
        c[n] = x + a[2 * k2 + 1] * b_odd[k2][n];
      }
    }
    for (int n = 0; n < 16; ++n) c[n] = flush_denormal(c[n]);
    std::memcpy(emulated_tiles.bytes[C][m], c, 64);
  }
}

#else  // the hardware

inline constexpr bool kAmxEmulated = false;

// ldtilecfg's 64-byte operand (palette 1).
struct alignas(64) AmxTileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};

// Once per thread before its first tile instruction (the tile state is per thread).
inline void tile_configure() {
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}
inline void tile_release() { _tile_release(); }
// GCC's tile intrinsics paste their tile number into the instruction text, so each tile number
// used gets its own explicit specialisation (a literal, not a template parameter).
template <int T> void tile_zero();
template <int T> void tile_load(const void* base, std::int64_t stride_bytes);
template <int T> void tile_store(void* base, std::int64_t stride_bytes);
template <int C, int A, int B> void tile_dpbf16ps();
#define FLASHPP_AMX_TILE(T)                                                              \
  template <> inline void tile_zero<T>() { _tile_zero(T); }                              \
  template <> inline void tile_load<T>(const void* base, std::int64_t stride_bytes) {    \
    _tile_loadd(T, base, static_cast<long>(stride_bytes));                               \
  }                                                                                      \
  template <> inline void tile_store<T>(void* base, std::int64_t stride_bytes) {         \
    _tile_stored(T, base, static_cast<long>(stride_bytes));                              \
  }
FLASHPP_AMX_TILE(0)
FLASHPP_AMX_TILE(1)
FLASHPP_AMX_TILE(2)
FLASHPP_AMX_TILE(3)
FLASHPP_AMX_TILE(4)
FLASHPP_AMX_TILE(5)
FLASHPP_AMX_TILE(6)
FLASHPP_AMX_TILE(7)
#undef FLASHPP_AMX_TILE
#define FLASHPP_AMX_DPBF16PS(C, A, B) \
  template <> inline void tile_dpbf16ps<C, A, B>() { _tile_dpbf16ps(C, A, B); }
FLASHPP_AMX_DPBF16PS(0, 4, 6)
FLASHPP_AMX_DPBF16PS(1, 4, 7)
FLASHPP_AMX_DPBF16PS(2, 5, 6)
FLASHPP_AMX_DPBF16PS(3, 5, 7)
#undef FLASHPP_AMX_DPBF16PS

#endif

// C[M][N] (= or +=) A[M][K] . B on the tiles: A bf16 row-major (lda elements), B VNNI words,
// word (k/2, n) at b[(k/2) * ldb + n], C float32 (ldc). M, N and K multiples of 32.
// Tiles 0-3 hold a 32 x 32 block of C, 4-5 two 16-row strips of A, 6-7 two 16-column strips of B.
inline void amx_tile_product(std::int64_t M, std::int64_t N, std::int64_t K, const std::uint16_t* a,
                             std::int64_t lda, const std::uint32_t* b, std::int64_t ldb, float* c,
                             std::int64_t ldc, bool accumulate) {
  const std::int64_t a_stride = lda * 2, b_stride = ldb * 4, c_stride = ldc * 4;
  for (std::int64_t m0 = 0; m0 < M; m0 += 32) {
    for (std::int64_t n0 = 0; n0 < N; n0 += 32) {
      float* c0 = c + m0 * ldc + n0;
      if (accumulate) {
        tile_load<0>(c0, c_stride);
        tile_load<1>(c0 + 16, c_stride);
        tile_load<2>(c0 + 16 * ldc, c_stride);
        tile_load<3>(c0 + 16 * ldc + 16, c_stride);
      } else {
        tile_zero<0>();
        tile_zero<1>();
        tile_zero<2>();
        tile_zero<3>();
      }
      for (std::int64_t k0 = 0; k0 < K; k0 += 32) {
        tile_load<4>(a + m0 * lda + k0, a_stride);
        tile_load<5>(a + (m0 + 16) * lda + k0, a_stride);
        tile_load<6>(b + (k0 / 2) * ldb + n0, b_stride);
        tile_load<7>(b + (k0 / 2) * ldb + n0 + 16, b_stride);
        tile_dpbf16ps<0, 4, 6>();
        tile_dpbf16ps<1, 4, 7>();
        tile_dpbf16ps<2, 5, 6>();
        tile_dpbf16ps<3, 5, 7>();
      }
      tile_store<0>(c0, c_stride);
      tile_store<1>(c0 + 16, c_stride);
      tile_store<2>(c0 + 16 * ldc, c_stride);
      tile_store<3>(c0 + 16 * ldc + 16, c_stride);
    }
  }
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
