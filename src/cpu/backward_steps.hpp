// Steps shared by the two schedules of the CPU backward (flash_backward.cpp and
// backward_per_kv_head.cpp): D = rowsum(dO * O), loading the per-query statistics of a tile,
// and the element-wise middle (P, P~, dS) of a (query tile, key tile) pair.
#pragma once

#include <atomic>
#include <cstdint>

#include "../api/problem.hpp"
#include "tile_io.hpp"
#include "tile_scratch.hpp"
#include "tile_softmax.hpp"

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

// ---- step 0: D = rowsum(dO * O) ------------------------------------------------------------------

// One converted row of O and of dO.
struct OutputRows {
  explicit OutputRows(std::int64_t D) : o(D), dout(D) {}
  ScratchTile o, dout;
};

// d_rows[(b * Hq + h) * Nq + i] = sum_d dO[b,i,h,d] * O[b,i,h,d]
inline void compute_output_dot(const detail::BackwardArgs& a, float* d_rows) {
  const detail::Problem& p = a.problem;
  const std::int64_t rows = p.B * p.Hq * p.Nq;
  std::atomic<bool> out_of_memory{false};
#pragma omp parallel
  {
    const auto w = make_thread_scratch<OutputRows>(out_of_memory, p.D);
#pragma omp barrier
#pragma omp for schedule(static)
    for (std::int64_t x = 0; x < rows; ++x) {
      if (out_of_memory) continue;
      const std::int64_t i = x % p.Nq, bh = x / p.Nq, h = bh % p.Hq, b = bh / p.Hq;
      float* o = w->o.get();
      float* dout = w->dout.get();
      convert_to_f32(element_ptr(a.o, detail::offset4(a.o, b, i, h, 0)), a.o.dtype, p.D, o);
      convert_to_f32(element_ptr(a.dout, detail::offset4(a.dout, b, i, h, 0)), a.dout.dtype, p.D,
                     dout);
      float sum = 0.0f;
      for (std::int64_t d = 0; d < p.D; ++d) sum += o[d] * dout[d];
      d_rows[x] = sum;
    }
  }
  throw_if_out_of_memory(out_of_memory, "flashpp::backward");
}

// lse of rows i0 .. i0+rows-1 as 2^(S - lse) wants it: in base-2 units (times log2(e)), -inf
// as +inf (see backward_lse_for_exp); lanes beyond `rows` get 0 so that padding lanes stay finite.
inline void load_lse(const detail::BackwardArgs& a, std::int64_t b, std::int64_t h, std::int64_t i0,
              std::int64_t rows, std::int64_t padded, float* out) {
  const float* lse = static_cast<const float*>(a.lse.data);
  for (std::int64_t r = 0; r < rows; ++r) {
    out[r] = backward_lse_for_exp(lse[detail::offset3(a.lse, b, h, i0 + r)]) * kLog2e;
  }
  for (std::int64_t r = rows; r < padded; ++r) out[r] = 0.0f;
}

inline void load_output_dot(const float* d_rows, const detail::Problem& p, std::int64_t b,
                     std::int64_t h, std::int64_t i0, std::int64_t rows, std::int64_t padded,
                     float* out) {
  const float* src = d_rows + (b * p.Hq + h) * p.Nq + i0;
  for (std::int64_t r = 0; r < rows; ++r) out[r] = src[r];
  for (std::int64_t r = rows; r < padded; ++r) out[r] = 0.0f;
}

// ---- the shared middle of both passes ------------------------------------------------------------

// Tiles of one (query tile, key tile) pair in one orientation: `rows` x `lanes`, leading
// dimension ld. s holds the (capped, masked) scores and is kept for the softcap derivative;
// p the probabilities P; p_drop (null when not wanted) receives P~ = P z with dropout on
// (without dropout P~ = P and callers read p); dp becomes dS; z holds the dropout factors.
struct PairTiles {
  float* s;
  float* p;
  float* p_drop;
  float* dp;
  float* z;
};

// From scores and dP already computed: P, P~ and dS for a tile whose per-query statistics
// are per row (query-major) or per lane (key-major).
inline void probabilities_and_score_gradient(const detail::Problem& p, PairTiles& t, std::int64_t ld,
                                      std::int64_t rows, std::int64_t lanes, bool query_major,
                                      const float* lse, const float* d_rows) {
  const bool dropout = p.dropout.enabled();
  const bool capped = p.softcap > 0.0f;
  const float inv_cap = capped ? 1.0f / (p.softcap * kLog2e) : 0.0f;  // s: base-2 units
  for (std::int64_t x = 0; x < rows; ++x) {
    const QueryStat lse_stat{query_major ? lse + x : lse, !query_major};
    const QueryStat d_stat{query_major ? d_rows + x : d_rows, !query_major};
    float* s = t.s + x * ld;
    float* prob = t.p + x * ld;
    probabilities_row(s, prob, lanes, lse_stat);
    const float* z = dropout ? t.z + x * ld : nullptr;
    if (dropout && t.p_drop != nullptr) multiply_row(prob, z, t.p_drop + x * ld, lanes);
    score_gradient_row(prob, t.dp + x * ld, z, capped ? s : nullptr, inv_cap, lanes, d_stat);
  }
}

// The single-pass schedule (backward_per_kv_head.cpp): one task per (batch, kv head).
void backward_per_kv_head(const detail::BackwardArgs& args, const float* d_rows);

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
