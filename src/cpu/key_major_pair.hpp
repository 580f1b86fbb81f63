// The key-major middle of a (query tile, key tile) pair in the float32 backward, shared by the dQ
// pass of the two-pass schedule (flash_backward.cpp) and the single-pass schedule
// (backward_per_kv_head.cpp): scores, masks and score gradients, with queries along the lanes.
#pragma once

#include <cstdint>

#include "../api/problem.hpp"
#include "backward_steps.hpp"
#include "tile_dropout.hpp"
#include "tile_gemm.hpp"
#include "tile_softmax.hpp"

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

// Key rows j0 .. j0+kv_rows-1 (k, v: rows D apart) against the query tile at i0 (q_t = (c Q)^T
// with c = scale log2(e), dout_t = dO^T; ld floats a row, q_cols lanes computed):
//   S^T = K (c Q)^T, then softcap and the mask where the tile crosses it;  dP^T = V dO^T;
//   then P, P~ and dS^T into t (probabilities_and_score_gradient; lse, d_rows per lane).
inline void key_major_score_gradients(const detail::Problem& p, PairTiles& t, std::int64_t ld,
                                      const float* k, const float* v, std::int64_t kv_rows,
                                      const float* q_t, const float* dout_t, std::int64_t q_rows,
                                      std::int64_t q_cols, std::int64_t i0, std::int64_t j0,
                                      std::uint32_t bh, const float* lse, const float* d_rows) {
  const std::int64_t D = p.D;
  tile_gemm<ALayout::row_major>(kv_rows, q_cols, D, k, D, q_t, ld, t.s, ld, false);
  if (p.softcap > 0.0f) apply_softcap(t.s, ld, kv_rows, q_cols, p.softcap * kLog2e);
  if (p.mask.active() && !p.mask.tile_fully_visible(i0, i0 + q_rows, j0, j0 + kv_rows)) {
    apply_tile_mask_key_major(t.s, ld, kv_rows, q_cols, i0, j0, p.mask);
  }
  tile_gemm<ALayout::row_major>(kv_rows, q_cols, D, v, D, dout_t, ld, t.dp, ld, false);
  if (p.dropout.enabled()) dropout_factors_key_major(t.z, ld, kv_rows, q_rows, i0, j0, bh, p.dropout);
  probabilities_and_score_gradient(p, t, ld, kv_rows, q_cols, false, lse, d_rows);
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
