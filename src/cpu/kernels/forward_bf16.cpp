// The bf16 forward on the CPU's bf16 matrix units: compiled twice (CMakeLists.txt), as the
// AVX512-BF16 engine (vdpbf16ps: 16 lanes x 2-element dot products into float32) and as the
// AMX engine (tdpbf16ps: 16 x 16 float32 tiles += 16 x 32 bf16 times 32 x 16 bf16). Both run
// the same FlashAttention-2 loop; only the two tile products differ (bf16_tile_product).
//
// Orientation: query-major (queries are rows, keys along the lanes), unlike the float32
// kernels, because both products then take their A operand as plain bf16 rows:
//   S   = Q_i K_j^T      A = Q_i rows (the input's bf16, copied),  B = K_j^T packed
//   O  += P~ V_j         A = P~ rows (float32 probabilities rounded to bf16), B = V_j packed
// B operands are in the "VNNI" layout both instructions read: 32-bit words holding a pair of
// bf16 consecutive along the reduction dimension, row = pair index, column = output column.
// K^T and V are packed into it once per call for the whole kv head (a pre-pass, parallel over
// kv heads x key tiles; as much memory as K and V in bf16), so every query tile streams packed
// tiles without transposing anything.
//
// Accuracy: the scores and the softmax statistics (m, l, lse) are float32 from bf16 inputs,
// exact products with float32 accumulation; the one extra rounding is P~ to bf16 before
// the P~V product (relative 2^-9 per probability, unbiased: O's error stays at the level of
// its own bf16 storage rounding; l is summed from the unrounded probabilities, as the GPU
// kernels do).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include <immintrin.h>

#include "../cpu_backend.hpp"
#include "../tile_dropout.hpp"
#include "../tile_io.hpp"
#include "../tile_scratch.hpp"
#include "../tile_softmax.hpp"

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {
namespace {

constexpr std::int64_t kQueryRows = 128;  // queries per task
constexpr std::int64_t kKeys = 64;        // keys per tile (the lanes of S: 4 vectors)

inline std::uint32_t load_u32(const std::uint16_t* p) {
  std::uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// ---- the tile product: C[M][N] (= or +=) A[M][K] . B ---------------------------------------------
// A: bf16 row-major (lda elements). B: VNNI words, word (k/2, n) at b[(k/2) * ldb + n].
// M, N and K are multiples of 32.

#if defined(__AMX_BF16__)

constexpr const char* kEngine = "amx";

// Tiles 0-3: a 32 x 32 block of C; 4, 5: two 16-row strips of A; 6, 7: two 16-column strips of B.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};

void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}
void release_tiles() { _tile_release(); }

void bf16_tile_product(std::int64_t M, std::int64_t N, std::int64_t K, const std::uint16_t* a,
                       std::int64_t lda, const std::uint32_t* b, std::int64_t ldb, float* c,
                       std::int64_t ldc, bool accumulate) {
  const long a_stride = lda * 2, b_stride = ldb * 4, c_stride = ldc * 4;
  for (std::int64_t m0 = 0; m0 < M; m0 += 32) {
    for (std::int64_t n0 = 0; n0 < N; n0 += 32) {
      float* c0 = c + m0 * ldc + n0;
      if (accumulate) {
        _tile_loadd(0, c0, c_stride);
        _tile_loadd(1, c0 + 16, c_stride);
        _tile_loadd(2, c0 + 16 * ldc, c_stride);
        _tile_loadd(3, c0 + 16 * ldc + 16, c_stride);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (std::int64_t k0 = 0; k0 < K; k0 += 32) {
        _tile_loadd(4, a + m0 * lda + k0, a_stride);
        _tile_loadd(5, a + (m0 + 16) * lda + k0, a_stride);
        _tile_loadd(6, b + (k0 / 2) * ldb + n0, b_stride);
        _tile_loadd(7, b + (k0 / 2) * ldb + n0 + 16, b_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c0, c_stride);
      _tile_stored(1, c0 + 16, c_stride);
      _tile_stored(2, c0 + 16 * ldc, c_stride);
      _tile_stored(3, c0 + 16 * ldc + 16, c_stride);
    }
  }
}

#else  // AVX512-BF16

constexpr const char* kEngine = "avx512bf16";

void configure_tiles() {}
void release_tiles() {}

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

void bf16_tile_product(std::int64_t M, std::int64_t N, std::int64_t K, const std::uint16_t* a,
                       std::int64_t lda, const std::uint32_t* b, std::int64_t ldb, float* c,
                       std::int64_t ldc, bool accumulate) {
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

// ---- packing K^T and V (once per call) -------------------------------------------------------------

struct PackedKv {
  std::int64_t Dp = 0, tiles = 0;
  std::int64_t tile_words = 0;  // per packed tile: Dp * kKeys / 2
  std::unique_ptr<std::uint32_t[], void (*)(void*)> words{nullptr, std::free};
  // K_j^T: word (d/2, c) at kt(...)[(d/2) * kKeys + c];  V_j: word (c/2, d) at v(...)[(c/2) * Dp + d]
  const std::uint32_t* kt(std::int64_t bhk, std::int64_t t) const {
    return words.get() + (bhk * tiles + t) * 2 * tile_words;
  }
  const std::uint32_t* v(std::int64_t bhk, std::int64_t t) const { return kt(bhk, t) + tile_words; }
};

void pack_tile(const detail::ForwardArgs& a, const PackedKv& pk, std::int64_t b, std::int64_t hk,
               std::int64_t t) {
  const detail::Problem& p = a.problem;
  const std::int64_t D = p.D, Dp = pk.Dp, j0 = t * kKeys;
  auto* kt = const_cast<std::uint32_t*>(pk.kt(b * p.Hkv + hk, t));
  auto* vv = const_cast<std::uint32_t*>(pk.v(b * p.Hkv + hk, t));
  auto element = [&](const TensorView& x, std::int64_t j, std::int64_t d) -> std::uint32_t {
    if (j >= p.Nk || d >= D) return 0;
    return static_cast<const std::uint16_t*>(element_ptr(x, detail::offset4(x, b, j, hk, 0)))[d];
  };
  for (std::int64_t c = 0; c < kKeys; ++c) {
    for (std::int64_t d2 = 0; d2 < Dp / 2; ++d2) {
      kt[d2 * kKeys + c] = element(a.k, j0 + c, 2 * d2) | (element(a.k, j0 + c, 2 * d2 + 1) << 16);
    }
  }
  for (std::int64_t c2 = 0; c2 < kKeys / 2; ++c2) {
    for (std::int64_t d = 0; d < Dp; ++d) {
      vv[c2 * Dp + d] = element(a.v, j0 + 2 * c2, d) | (element(a.v, j0 + 2 * c2 + 1, d) << 16);
    }
  }
}

// ---- one query tile -------------------------------------------------------------------------------

struct Bf16Scratch {
  explicit Bf16Scratch(std::int64_t Dp)
      : q(kQueryRows * Dp / 2), s(kQueryRows * kKeys), p(kQueryRows * kKeys / 2),
        z(kQueryRows * kKeys), o(kQueryRows * Dp), m(kQueryRows), l(kQueryRows) {
    // Dropout factors are written for the real keys of a tile only; the lanes beyond stay 0
    // (their probabilities are 0, and 0 * garbage could be NaN).
    std::memset(z.get(), 0, sizeof(float) * kQueryRows * kKeys);
  }
  ScratchTile q;  // [kQueryRows][Dp] bf16
  ScratchTile s;  // [kQueryRows][kKeys] float32 scores
  ScratchTile p;  // [kQueryRows][kKeys] bf16 probabilities
  ScratchTile z;  // [kQueryRows][kKeys] dropout factors
  ScratchTile o;  // [kQueryRows][Dp] unnormalised output
  ScratchTile m, l;
};

// Lanes [first, last] of a 64-key row that are visible, as 4 masks of 16.
inline void visible_lanes(std::int64_t first, std::int64_t last, __mmask16 out[4]) {
  for (int v = 0; v < 4; ++v) {
    const std::int64_t lo = std::max<std::int64_t>(first - 16 * v, 0);
    const std::int64_t hi = std::min<std::int64_t>(last - 16 * v, 15);
    out[v] = lo > hi ? __mmask16(0)
                     : static_cast<__mmask16>(((1u << (hi + 1)) - 1u) & ~((1u << lo) - 1u));
  }
}

void forward_query_tile(const detail::ForwardArgs& a, const PackedKv& pk, std::int64_t b,
                        std::int64_t h, std::int64_t i0, Bf16Scratch& w) {
  const detail::Problem& p = a.problem;
  const std::int64_t D = p.D, Dp = pk.Dp;
  const std::int64_t hk = h / p.heads_per_kv(), bhk = b * p.Hkv + hk;
  const std::int64_t q_rows = std::min(kQueryRows, p.Nq - i0);
  const std::int64_t m_rows = round_up(q_rows, 32);
  const auto bh = static_cast<std::uint32_t>(b * p.Hq + h);
  auto* q = reinterpret_cast<std::uint16_t*>(w.q.get());
  auto* pb = reinterpret_cast<std::uint16_t*>(w.p.get());
  float* s = w.s.get();
  float* o = w.o.get();
  float* m = w.m.get();
  float* l = w.l.get();
  std::memset(q, 0, sizeof(std::uint16_t) * m_rows * Dp);
  for (std::int64_t r = 0; r < q_rows; ++r) {
    std::memcpy(q + r * Dp, element_ptr(a.q, detail::offset4(a.q, b, i0 + r, h, 0)), D * 2);
  }
  std::memset(pb, 0, sizeof(std::uint16_t) * m_rows * kKeys);
  std::memset(o, 0, sizeof(float) * m_rows * Dp);
  for (std::int64_t r = 0; r < q_rows; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
  }

  const bool masked = p.mask.active();
  const bool capped = p.softcap > 0.0f;
  const __m512 vscale = _mm512_set1_ps(p.scale);
  const __m512 neg_inf = _mm512_set1_ps(kNegInf);
  for (std::int64_t t = 0; t < pk.tiles; ++t) {
    const std::int64_t j0 = t * kKeys, j1 = std::min(j0 + kKeys, p.Nk);
    if (masked && p.mask.tile_fully_hidden(i0, i0 + q_rows, j0, j1)) continue;
    const std::int64_t kv_rows = j1 - j0;
    const bool element_mask = masked && !p.mask.tile_fully_visible(i0, i0 + q_rows, j0, j1);

    bf16_tile_product(m_rows, kKeys, Dp, q, Dp, pk.kt(bhk, t), kKeys, s, kKeys, false);
    if (p.dropout.enabled()) {
      dropout_factors_query_major(w.z.get(), kKeys, q_rows, kv_rows, i0, j0, bh, p.dropout);
    }
    for (std::int64_t r = 0; r < q_rows; ++r) {
      float* srow = s + r * kKeys;
      __m512 x[4];
      for (int v = 0; v < 4; ++v) x[v] = _mm512_mul_ps(_mm512_loadu_ps(srow + 16 * v), vscale);
      if (capped) {
        const __m512 cap = _mm512_set1_ps(p.softcap), inv = _mm512_set1_ps(1.0f / p.softcap);
        for (int v = 0; v < 4; ++v) x[v] = _mm512_mul_ps(cap, tanh_ps(_mm512_mul_ps(x[v], inv)));
      }
      __mmask16 keep[4];
      if (element_mask) {
        const std::int64_t i = i0 + r;
        const std::int64_t first = std::max<std::int64_t>(i + p.mask.shift - p.mask.left - j0, 0);
        const std::int64_t last = std::min<std::int64_t>(i + p.mask.shift + p.mask.right - j0, kv_rows - 1);
        visible_lanes(first, last, keep);
      } else {
        visible_lanes(0, kv_rows - 1, keep);
      }
      __m512 tile_max = neg_inf;
      for (int v = 0; v < 4; ++v) {
        x[v] = _mm512_mask_mov_ps(neg_inf, keep[v], x[v]);
        tile_max = _mm512_max_ps(tile_max, x[v]);
      }
      const float m_old = m[r];
      const float m_new = std::max(m_old, _mm512_reduce_max_ps(tile_max));
      const float ref = m_new == kNegInf ? 0.0f : m_new;
      const float alpha = exp_scalar(m_old - ref);
      const __m512 vref = _mm512_set1_ps(ref);
      __m512 sum = _mm512_setzero_ps();
      for (int v = 0; v < 4; ++v) {
        x[v] = exp_ps(_mm512_sub_ps(x[v], vref));
        sum = _mm512_add_ps(sum, x[v]);
      }
      l[r] = alpha * l[r] + _mm512_reduce_add_ps(sum);  // before dropout: the lse ignores it
      m[r] = m_new;
      if (p.dropout.enabled()) {
        for (int v = 0; v < 4; ++v) {
          x[v] = _mm512_mul_ps(x[v], _mm512_loadu_ps(w.z.get() + r * kKeys + 16 * v));
        }
      }
      for (int v = 0; v < 4; ++v) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + r * kKeys + 16 * v),
                            (__m256i)_mm512_cvtneps_pbh(x[v]));
      }
      if (alpha != 1.0f) {
        float* orow = o + r * Dp;
        const __m512 va = _mm512_set1_ps(alpha);
        for (std::int64_t d = 0; d < Dp; d += 16) {
          _mm512_storeu_ps(orow + d, _mm512_mul_ps(_mm512_loadu_ps(orow + d), va));
        }
      }
    }
    bf16_tile_product(m_rows, Dp, kKeys, pb, kKeys, pk.v(bhk, t), Dp, o, Dp, true);
  }

  for (std::int64_t r = 0; r < q_rows; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    convert_from_f32(o + r * Dp, D, a.o.dtype,
                     element_ptr_mut(a.o, detail::offset4(a.o, b, i0 + r, h, 0)), inv);
  }
  if (a.write_lse && a.lse.data != nullptr) {
    float* lse = static_cast<float*>(a.lse.data);
    for (std::int64_t r = 0; r < q_rows; ++r) {
      lse[detail::offset3(a.lse, b, h, i0 + r)] =
          l[r] > 0.0f ? m[r] + std::log(l[r]) : -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace

void flash_forward_bf16(const detail::ForwardArgs& a) {
  const detail::Problem& p = a.problem;
  if (p.B == 0 || p.Hq == 0 || p.Nq == 0) return;
  PackedKv pk;
  pk.Dp = round_up(p.D, 32);
  pk.tiles = (p.Nk + kKeys - 1) / kKeys;
  pk.tile_words = pk.Dp * kKeys / 2;
  const std::int64_t kv_heads = p.B * p.Hkv;
  const std::size_t bytes =
      round_up(kv_heads * pk.tiles * 2 * pk.tile_words * 4, 64);
  if (bytes > 0) {
    pk.words.reset(static_cast<std::uint32_t*>(std::aligned_alloc(64, bytes)));
    if (!pk.words) throw_scratch_allocation_failure("flashpp::forward");
  }
  const std::int64_t pack_tasks = kv_heads * pk.tiles;
#pragma omp parallel for schedule(static)
  for (std::int64_t x = 0; x < pack_tasks; ++x) {
    const std::int64_t bhk = x / pk.tiles;
    pack_tile(a, pk, bhk / p.Hkv, bhk % p.Hkv, x % pk.tiles);
  }

  const std::int64_t q_tiles = (p.Nq + kQueryRows - 1) / kQueryRows;
  const std::int64_t tasks = p.B * p.Hq * q_tiles;
  std::atomic<bool> out_of_memory{false};
#pragma omp parallel
  {
    const auto scratch = make_thread_scratch<Bf16Scratch>(out_of_memory, pk.Dp);
#pragma omp barrier
    if (!out_of_memory) configure_tiles();
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < tasks; ++t) {
      if (out_of_memory) continue;
      const std::int64_t tile = q_tiles - 1 - t % q_tiles;  // longest (causal) first
      const std::int64_t bh = t / q_tiles;
      forward_query_tile(a, pk, bh / p.Hq, bh % p.Hq, tile * kQueryRows, *scratch);
    }
    if (!out_of_memory) release_tiles();
  }
  throw_if_out_of_memory(out_of_memory, "flashpp::forward");
  (void)kEngine;
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
