// The element-wise steps between the tile products: soft-capping, masking, the online softmax of
// the forward, and the probability / score-gradient recomputation of the backward.
//
// Two tile orientations occur (see flash_forward.cpp / flash_backward.cpp for why):
//   key-major   T[c][r]: one row per key c, the queries r along the vector lanes
//               (the forward, and the dQ pass of the backward);
//   query-major T[r][c]: one row per query r, the keys c along the lanes (the dK/dV pass).
// A per-query statistic (running max, lse, D = rowsum(dO*O)) is therefore either a vector over
// the lanes (key-major) or one scalar per row (query-major). The row helpers take it as
// `QueryStat`: a pointer and whether it varies along the lanes.
#pragma once

#include <cstdint>
#include <limits>

#include "../common/mask.hpp"
#include "vector_math.hpp"

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct QueryStat {
  const float* values;  // per lane (values[lane]) or one scalar (values[0])
  bool per_lane;
  float at(std::int64_t lane) const { return per_lane ? values[lane] : values[0]; }
#if defined(__AVX512F__)
  __m512 load(std::int64_t lane) const {
    return per_lane ? _mm512_loadu_ps(values + lane) : _mm512_set1_ps(values[0]);
  }
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 load(std::int64_t lane) const {
    return per_lane ? _mm256_loadu_ps(values + lane) : _mm256_set1_ps(values[0]);
  }
#endif
};

// ---- scores -----------------------------------------------------------------------------------

// s = cap * tanh(s / cap) on rows x cols of a tile.
inline void apply_softcap(float* s, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                          float cap) {
  const float inv_cap = 1.0f / cap;
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = s + r * ld;
    std::int64_t c = 0;
#if defined(__AVX512F__)
    const __m512 vcap = _mm512_set1_ps(cap), vinv = _mm512_set1_ps(inv_cap);
    for (; c + 16 <= cols; c += 16) {
      const __m512 x = _mm512_loadu_ps(row + c);
      _mm512_storeu_ps(row + c, _mm512_mul_ps(vcap, tanh_ps(_mm512_mul_ps(x, vinv))));
    }
#elif defined(__AVX2__) && defined(__FMA__)
    const __m256 vcap = _mm256_set1_ps(cap), vinv = _mm256_set1_ps(inv_cap);
    for (; c + 8 <= cols; c += 8) {
      const __m256 x = _mm256_loadu_ps(row + c);
      _mm256_storeu_ps(row + c, _mm256_mul_ps(vcap, tanh_ps(_mm256_mul_ps(x, vinv))));
    }
#endif
    for (; c < cols; ++c) row[c] = cap * tanh_scalar(row[c] * inv_cap);
  }
}

// Sets hidden entries of a key-major tile St[c][r] (keys j0+c, queries i0+r) to -inf.
// Query i sees key j iff j - shift - right <= i <= j - shift + left.
inline void apply_tile_mask_key_major(float* st, std::int64_t ld, std::int64_t kv_rows,
                                      std::int64_t q_cols, std::int64_t i0, std::int64_t j0,
                                      const detail::Mask& mask) {
  for (std::int64_t c = 0; c < kv_rows; ++c) {
    const std::int64_t j = j0 + c;
    const std::int64_t first = j - mask.shift - mask.right - i0;  // first visible r
    const std::int64_t last = j - mask.shift + mask.left - i0;    // last visible r
    float* row = st + c * ld;
    const std::int64_t hide_below = first < 0 ? 0 : (first > q_cols ? q_cols : first);
    for (std::int64_t r = 0; r < hide_below; ++r) row[r] = kNegInf;
    for (std::int64_t r = (last + 1 < 0 ? 0 : last + 1); r < q_cols; ++r) row[r] = kNegInf;
  }
}

// Sets hidden entries of a query-major tile S[r][c] (queries i0+r, keys j0+c) to -inf.
inline void apply_tile_mask_query_major(float* s, std::int64_t ld, std::int64_t q_rows,
                                        std::int64_t kv_cols, std::int64_t i0, std::int64_t j0,
                                        const detail::Mask& mask) {
  for (std::int64_t r = 0; r < q_rows; ++r) {
    const std::int64_t i = i0 + r;
    const std::int64_t first = i + mask.shift - mask.left - j0;  // first visible c
    const std::int64_t last = i + mask.shift + mask.right - j0;  // last visible c
    float* row = s + r * ld;
    const std::int64_t hide_below = first < 0 ? 0 : (first > kv_cols ? kv_cols : first);
    for (std::int64_t c = 0; c < hide_below; ++c) row[c] = kNegInf;
    for (std::int64_t c = (last + 1 < 0 ? 0 : last + 1); c < kv_cols; ++c) row[c] = kNegInf;
  }
}

// ---- forward: online softmax over a key-major tile -----------------------------------------------

// In base-2 units (St = scores times log2(e), see flash_forward.cpp): for each query lane r:
// m' = max(m, max_c St[c][r]); alpha = 2^(m - m'); St = 2^(St - m'); l = alpha * l + sum_c St.
// (exp2 skips exp's reduction by ln 2: ten instructions a vector against fourteen.) A lane that
// has seen only -inf keeps m' = -inf and uses 0 as its reference so that no inf - inf NaN
// appears; its probabilities are exactly 0.
inline void online_softmax_update(float* st, std::int64_t ld, std::int64_t kv_rows,
                                  std::int64_t q_cols, float* m, float* l, float* alpha) {
  std::int64_t r = 0;
#if defined(__AVX512F__)
  const __m512 neg_inf = _mm512_set1_ps(kNegInf);
  for (; r + 16 <= q_cols; r += 16) {
    __m512 m_new = _mm512_loadu_ps(m + r);
    for (std::int64_t c = 0; c < kv_rows; ++c) m_new = _mm512_max_ps(m_new, _mm512_loadu_ps(st + c * ld + r));
    const __mmask16 none = _mm512_cmp_ps_mask(m_new, neg_inf, _CMP_EQ_OQ);
    const __m512 ref = _mm512_mask_mov_ps(m_new, none, _mm512_setzero_ps());
    const __m512 a = exp2_ps(_mm512_sub_ps(_mm512_loadu_ps(m + r), ref));
    __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
    std::int64_t c = 0;
    for (; c + 2 <= kv_rows; c += 2) {  // two sums: the exp chain is long, keep two in flight
      float* p0 = st + c * ld + r;
      float* p1 = p0 + ld;
      const __m512 e0 = exp2_ps(_mm512_sub_ps(_mm512_loadu_ps(p0), ref));
      const __m512 e1 = exp2_ps(_mm512_sub_ps(_mm512_loadu_ps(p1), ref));
      _mm512_storeu_ps(p0, e0);
      _mm512_storeu_ps(p1, e1);
      sum0 = _mm512_add_ps(sum0, e0);
      sum1 = _mm512_add_ps(sum1, e1);
    }
    for (; c < kv_rows; ++c) {
      float* p0 = st + c * ld + r;
      const __m512 e0 = exp2_ps(_mm512_sub_ps(_mm512_loadu_ps(p0), ref));
      _mm512_storeu_ps(p0, e0);
      sum0 = _mm512_add_ps(sum0, e0);
    }
    const __m512 l_new = _mm512_fmadd_ps(a, _mm512_loadu_ps(l + r), _mm512_add_ps(sum0, sum1));
    _mm512_storeu_ps(l + r, l_new);
    _mm512_storeu_ps(m + r, m_new);
    _mm512_storeu_ps(alpha + r, a);
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  for (; r + 8 <= q_cols; r += 8) {
    __m256 m_new = _mm256_loadu_ps(m + r);
    for (std::int64_t c = 0; c < kv_rows; ++c) m_new = _mm256_max_ps(m_new, _mm256_loadu_ps(st + c * ld + r));
    const __m256 none = _mm256_cmp_ps(m_new, neg_inf, _CMP_EQ_OQ);
    const __m256 ref = _mm256_andnot_ps(none, m_new);
    const __m256 a = exp2_ps(_mm256_sub_ps(_mm256_loadu_ps(m + r), ref));
    __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
    std::int64_t c = 0;
    for (; c + 2 <= kv_rows; c += 2) {
      float* p0 = st + c * ld + r;
      float* p1 = p0 + ld;
      const __m256 e0 = exp2_ps(_mm256_sub_ps(_mm256_loadu_ps(p0), ref));
      const __m256 e1 = exp2_ps(_mm256_sub_ps(_mm256_loadu_ps(p1), ref));
      _mm256_storeu_ps(p0, e0);
      _mm256_storeu_ps(p1, e1);
      sum0 = _mm256_add_ps(sum0, e0);
      sum1 = _mm256_add_ps(sum1, e1);
    }
    for (; c < kv_rows; ++c) {
      float* p0 = st + c * ld + r;
      const __m256 e0 = exp2_ps(_mm256_sub_ps(_mm256_loadu_ps(p0), ref));
      _mm256_storeu_ps(p0, e0);
      sum0 = _mm256_add_ps(sum0, e0);
    }
    const __m256 l_new = _mm256_fmadd_ps(a, _mm256_loadu_ps(l + r), _mm256_add_ps(sum0, sum1));
    _mm256_storeu_ps(l + r, l_new);
    _mm256_storeu_ps(m + r, m_new);
    _mm256_storeu_ps(alpha + r, a);
  }
#endif
  for (; r < q_cols; ++r) {
    float m_new = m[r];
    for (std::int64_t c = 0; c < kv_rows; ++c) m_new = st[c * ld + r] > m_new ? st[c * ld + r] : m_new;
    const float ref = m_new == kNegInf ? 0.0f : m_new;
    const float a = exp2_scalar(m[r] - ref);
    float sum = 0.0f;
    for (std::int64_t c = 0; c < kv_rows; ++c) {
      const float e = exp2_scalar(st[c * ld + r] - ref);
      st[c * ld + r] = e;
      sum += e;
    }
    l[r] = a * l[r] + sum;
    m[r] = m_new;
    alpha[r] = a;
  }
}

// O[r][:] *= alpha[r]: the running output follows its running max.
inline void rescale_output(float* o, std::int64_t ld, std::int64_t q_rows, std::int64_t D,
                           const float* alpha) {
  for (std::int64_t r = 0; r < q_rows; ++r) {
    const float a = alpha[r];
    if (a == 1.0f) continue;  // max unchanged: nothing to do (common once the max settles)
    float* row = o + r * ld;
    for (std::int64_t d = 0; d < D; ++d) row[d] *= a;
  }
}

// ---- backward: probabilities and score gradients ------------------------------------------------

// A row of P = 2^(S - lse), S and lse in base-2 units (scores and lse times log2(e): the
// backward kernels fold log2(e) into their scaled operand and load_lse). lse = -inf (a row that
// sees no key) must be passed as +inf so that P = 0 there (see backward_lse_for_exp).
inline void probabilities_row(const float* s, float* p, std::int64_t n, QueryStat lse) {
  std::int64_t c = 0;
#if defined(__AVX512F__)
  for (; c + 16 <= n; c += 16) {
    _mm512_storeu_ps(p + c, exp2_ps(_mm512_sub_ps(_mm512_loadu_ps(s + c), lse.load(c))));
  }
#elif defined(__AVX2__) && defined(__FMA__)
  for (; c + 8 <= n; c += 8) {
    _mm256_storeu_ps(p + c, exp2_ps(_mm256_sub_ps(_mm256_loadu_ps(s + c), lse.load(c))));
  }
#endif
  for (; c < n; ++c) p[c] = exp2_scalar(s[c] - lse.at(c));
}

// A row of dS = P * (dP * z - D) * (1 - (S/cap)^2), written over dP.
//   z (dropout factors, 0 or 1/(1-p)) may be null: no dropout.
//   s (capped scores) may be null: no softcap.
inline void score_gradient_row(const float* p, float* dp, const float* z, const float* s,
                               float inv_cap, std::int64_t n, QueryStat d_stat) {
  std::int64_t c = 0;
#if defined(__AVX512F__)
  const __m512 vinv = _mm512_set1_ps(inv_cap), one = _mm512_set1_ps(1.0f);
  for (; c + 16 <= n; c += 16) {
    __m512 g = _mm512_loadu_ps(dp + c);
    if (z) g = _mm512_mul_ps(g, _mm512_loadu_ps(z + c));
    g = _mm512_mul_ps(_mm512_loadu_ps(p + c), _mm512_sub_ps(g, d_stat.load(c)));
    if (s) {
      // |S/cap| <= 1 for every real score; the clamp turns masked (-inf) scores into a zero
      // factor instead of 0 * inf = NaN.
      __m512 t = _mm512_mul_ps(_mm512_loadu_ps(s + c), vinv);
      t = _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(-1.0f)), one);
      g = _mm512_mul_ps(g, _mm512_fnmadd_ps(t, t, one));
    }
    _mm512_storeu_ps(dp + c, g);
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 vinv = _mm256_set1_ps(inv_cap), one = _mm256_set1_ps(1.0f);
  for (; c + 8 <= n; c += 8) {
    __m256 g = _mm256_loadu_ps(dp + c);
    if (z) g = _mm256_mul_ps(g, _mm256_loadu_ps(z + c));
    g = _mm256_mul_ps(_mm256_loadu_ps(p + c), _mm256_sub_ps(g, d_stat.load(c)));
    if (s) {  // the same clamp as above
      __m256 t = _mm256_mul_ps(_mm256_loadu_ps(s + c), vinv);
      t = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(-1.0f)), one);
      g = _mm256_mul_ps(g, _mm256_fnmadd_ps(t, t, one));
    }
    _mm256_storeu_ps(dp + c, g);
  }
#endif
  for (; c < n; ++c) {
    float g = dp[c];
    if (z) g *= z[c];
    g = p[c] * (g - d_stat.at(c));
    if (s) {
      float t = s[c] * inv_cap;
      t = t < -1.0f ? -1.0f : (t > 1.0f ? 1.0f : t);
      g *= 1.0f - t * t;
    }
    dp[c] = g;
  }
}

// out = a * b element-wise over a row (P~ = P * z).
inline void multiply_row(const float* a, const float* b, float* out, std::int64_t n) {
  for (std::int64_t c = 0; c < n; ++c) out[c] = a[c] * b[c];
}

// The lse as the backward's exp wants it: -inf (no visible key) becomes +inf, so that
// exp(S - lse) is 0 rather than exp(+inf).
inline float backward_lse_for_exp(float lse) {
  return lse == kNegInf ? std::numeric_limits<float>::infinity() : lse;
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
