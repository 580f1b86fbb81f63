// The tiled FlashAttention-2 backward on the CPU: deterministic, no floating-point atomics.
//
//   step 0  D_i = rowsum(dO_i * O_i) for every query row (stored in the workspace)
// then one of two schedules: the single pass of backward_per_kv_head.cpp when B x Hkv tasks
// keep every thread busy (see use_per_kv_head_schedule), otherwise the two passes here:
//   pass 1  one task per (batch, kv head, key tile j): dK_j and dV_j accumulate in per-thread
//           scratch while the task walks every query head of its group and every query tile i;
//           each element of dK/dV is therefore summed by one thread in a fixed order.
//   pass 2  one task per (batch, query head, query tile i): dQ_i accumulates while the task
//           walks the key tiles.
//
// Both passes recompute P = exp(S - lse) and dS = P * (dP~ - D) for their tile pairs (pass 2
// repeats S and dP: 7 tile products per pair instead of 5). That is the price of determinism
// without a dQ accumulator of size Nq x D per key tile; in exchange every pass parallelises over
// batch x heads x tiles and needs only O(tile) memory per thread.
//
// Tile orientation is chosen per pass so that nothing is transposed in an inner loop:
//   pass 1 (key tile fixed): K_j^T and V_j^T are transposed once per task; per query tile the
//     query-major S = Q K_j^T and dP = dO V_j^T have keys along the lanes, and
//     dV += P~^T dO, dK += dS^T Q read P~ and dS column-wise (A col-major) and Q, dO rows.
//   pass 2 (query tile fixed): Q_i^T and dO_i^T are transposed once per task; per key tile the
//     key-major S^T = K Q_i^T, dP^T = V dO_i^T have queries along the lanes, and
//     dQ += dS K reads dS^T column-wise and K rows.
// Row tiles (Q, dO, K, V) are contiguous float32 copies, as in the forward.
#include <algorithm>
#include <atomic>
#include <cmath>

#include <omp.h>

#include "../cpu_backend.hpp"
#include "../tile_config.hpp"
#include "../tile_dropout.hpp"
#include "../tile_gemm.hpp"
#include "../tile_io.hpp"
#include "../tile_scratch.hpp"
#include "../tile_softmax.hpp"
#include "../backward_steps.hpp"
#include "../key_major_pair.hpp"

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {
namespace {

// ---- pass 1: dK, dV per key tile -----------------------------------------------------------------

struct KeyTileScratch {
  KeyTileScratch(std::int64_t D)
      : k_t(D * kBwdKeyLd), v_t(D * kBwdKeyLd), q(kBwdQueryTile * D), dout(kBwdQueryTile * D),
        s(kBwdQueryTile * kBwdKeyLd), p(kBwdQueryTile * kBwdKeyLd),
        p_drop(kBwdQueryTile * kBwdKeyLd), dp(kBwdQueryTile * kBwdKeyLd),
        z(kBwdQueryTile * kBwdKeyLd), dk(kBwdKeyTile * D), dv(kBwdKeyTile * D),
        lse(kBwdQueryTile), d_rows(kBwdQueryTile), row(D) {}
  ScratchTile k_t, v_t;          // [D][kBwdKeyLd]
  ScratchTile q, dout;           // [kBwdQueryTile][D] float32 copies
  ScratchTile s, p, p_drop, dp, z;  // [kBwdQueryTile][kBwdKeyLd] query-major
  ScratchTile dk, dv;            // [kBwdKeyTile][D] accumulators
  ScratchTile lse, d_rows;
  ScratchTile row;
};

void backward_key_tile(const detail::BackwardArgs& a, const float* d_rows, std::int64_t b,
                       std::int64_t hk, std::int64_t j0, std::int64_t key_tile,
                       KeyTileScratch& w) {
  const detail::Problem& p = a.problem;
  const std::int64_t D = p.D;
  const std::int64_t kv_rows = std::min(key_tile, p.Nk - j0);
  const std::int64_t kv_cols = round_up(kv_rows, 16);
  const std::int64_t ld = kBwdKeyLd;
  // The scale folds into K^T (it is used only for S), with log2(e): S = Q (c K)^T in the base-2
  // units of probabilities_row, c = scale log2(e).
  load_tile_transposed(a.k, b, j0, kv_rows, hk, D, w.k_t.get(), ld, kv_cols, w.row.get(),
                       p.scale * kLog2e);
  load_tile_transposed(a.v, b, j0, kv_rows, hk, D, w.v_t.get(), ld, kv_cols, w.row.get());
  std::fill(w.dk.get(), w.dk.get() + kv_rows * D, 0.0f);
  std::fill(w.dv.get(), w.dv.get() + kv_rows * D, 0.0f);

  const bool masked = p.mask.active();
  const bool dropout = p.dropout.enabled();
  PairTiles t{w.s.get(), w.p.get(), w.p_drop.get(), w.dp.get(), w.z.get()};
  const float* p_tilde = dropout ? t.p_drop : t.p;
  const std::int64_t hpk = p.heads_per_kv();
  for (std::int64_t h = hk * hpk; h < (hk + 1) * hpk; ++h) {
    const auto bh = static_cast<std::uint32_t>(b * p.Hq + h);
    for (std::int64_t i0 = 0; i0 < p.Nq; i0 += kBwdQueryTile) {
      const std::int64_t q_rows = std::min(kBwdQueryTile, p.Nq - i0);
      if (masked && p.mask.tile_fully_hidden(i0, i0 + q_rows, j0, j0 + kv_rows)) continue;
      // Contiguous float32 rows: in place where they are, else copies (rows of the caller's
      // layout may lie a page apart; each is read by many micro-kernel blocks).
      const float* q = tile_rows_f32(a.q, b, i0, q_rows, h, D, w.q.get());
      const float* dout = tile_rows_f32(a.dout, b, i0, q_rows, h, D, w.dout.get());
      load_lse(a, b, h, i0, q_rows, q_rows, w.lse.get());
      load_output_dot(d_rows, p, b, h, i0, q_rows, q_rows, w.d_rows.get());

      // S = Q (scale K)^T (then softcap, mask), dP = dO V^T: query-major, keys along the lanes.
      tile_gemm<ALayout::row_major>(q_rows, kv_cols, D, q, D, w.k_t.get(), ld, t.s, ld, false);
      if (p.softcap > 0.0f) apply_softcap(t.s, ld, q_rows, kv_cols, p.softcap * kLog2e);
      if (masked && !p.mask.tile_fully_visible(i0, i0 + q_rows, j0, j0 + kv_rows)) {
        apply_tile_mask_query_major(t.s, ld, q_rows, kv_cols, i0, j0, p.mask);
      }
      tile_gemm<ALayout::row_major>(q_rows, kv_cols, D, dout, D, w.v_t.get(), ld, t.dp,
                                    ld, false);
      if (dropout) dropout_factors_query_major(t.z, ld, q_rows, kv_rows, i0, j0, bh, p.dropout);
      probabilities_and_score_gradient(p, t, ld, q_rows, kv_cols, true, w.lse.get(),
                                       w.d_rows.get());

      // dV[c][:] += sum_r P~[r][c] dO[r][:];  dK[c][:] += sum_r dS[r][c] Q[r][:] (scale later)
      tile_gemm<ALayout::col_major>(kv_rows, D, q_rows, p_tilde, ld, dout, D,
                                    w.dv.get(), D, true);
      tile_gemm<ALayout::col_major>(kv_rows, D, q_rows, t.dp, ld, q, D, w.dk.get(), D,
                                    true);
    }
  }
  store_tile_rows(w.dk.get(), D, a.dk, b, j0, kv_rows, hk, D, p.scale);
  store_tile_rows(w.dv.get(), D, a.dv, b, j0, kv_rows, hk, D);
}

// ---- pass 2: dQ per query tile -------------------------------------------------------------------

struct QueryTileScratch {
  QueryTileScratch(std::int64_t D)
      : q_t(D * kQueryLd), dout_t(D * kQueryLd), k(kKeyTile * D), v(kKeyTile * D),
        s(kKeyTile * kQueryLd), p(kKeyTile * kQueryLd), dp(kKeyTile * kQueryLd),
        z(kKeyTile * kQueryLd), dq(kQueryTile * D), lse(kQueryTile), d_rows(kQueryTile),
        row(D) {}
  ScratchTile q_t, dout_t;    // [D][kQueryLd]
  ScratchTile k, v;           // [kKeyTile][D] float32 copies
  ScratchTile s, p, dp, z;    // [kKeyTile][kQueryLd] key-major
  ScratchTile dq;             // [kQueryTile][D] accumulator
  ScratchTile lse, d_rows;
  ScratchTile row;
};

void backward_query_tile(const detail::BackwardArgs& a, const float* d_rows, std::int64_t b,
                         std::int64_t h, std::int64_t i0, std::int64_t query_tile,
                         QueryTileScratch& w) {
  const detail::Problem& p = a.problem;
  const std::int64_t D = p.D;
  const std::int64_t hk = h / p.heads_per_kv();
  const std::int64_t q_rows = std::min(query_tile, p.Nq - i0);
  const std::int64_t q_cols = round_up(q_rows, 16);
  const std::int64_t ld = kQueryLd;
  const auto bh = static_cast<std::uint32_t>(b * p.Hq + h);
  load_tile_transposed(a.q, b, i0, q_rows, h, D, w.q_t.get(), ld, q_cols, w.row.get(),
                       p.scale * kLog2e);  // base 2, as in pass 1
  load_tile_transposed(a.dout, b, i0, q_rows, h, D, w.dout_t.get(), ld, q_cols, w.row.get());
  load_lse(a, b, h, i0, q_rows, q_cols, w.lse.get());
  load_output_dot(d_rows, p, b, h, i0, q_rows, q_cols, w.d_rows.get());
  std::fill(w.dq.get(), w.dq.get() + q_rows * D, 0.0f);

  const bool masked = p.mask.active();
  // P~ is only needed for dV, which pass 1 computes: no p_drop here.
  PairTiles t{w.s.get(), w.p.get(), nullptr, w.dp.get(), w.z.get()};
  for (std::int64_t j0 = 0; j0 < p.Nk; j0 += kKeyTile) {
    const std::int64_t j1 = std::min(j0 + kKeyTile, p.Nk);
    if (masked && p.mask.tile_fully_hidden(i0, i0 + q_rows, j0, j1)) continue;
    const std::int64_t kv_rows = j1 - j0;
    const float* k = tile_rows_f32(a.k, b, j0, kv_rows, hk, D, w.k.get());
    const float* v = tile_rows_f32(a.v, b, j0, kv_rows, hk, D, w.v.get());
    // S^T = K (c Q)^T (then softcap, mask), dP^T = V dO^T: key-major, queries along lanes.
    key_major_score_gradients(p, t, ld, k, v, kv_rows, w.q_t.get(), w.dout_t.get(), q_rows, q_cols,
                              i0, j0, bh, w.lse.get(), w.d_rows.get());

    // dQ[r][:] += sum_c dS^T[c][r] K[c][:]  (scale later)
    tile_gemm<ALayout::col_major>(q_rows, D, kv_rows, t.dp, ld, k, D, w.dq.get(), D, true);
  }
  store_tile_rows(w.dq.get(), D, a.dq, b, i0, q_rows, h, D, p.scale);
}

// The single-pass schedule (backward_per_kv_head.cpp) does 5 tile products per pair instead
// of 7, but parallelises over B x Hkv only and keeps Nk x D float32 accumulators for dK and dV
// per thread. Use it when those tasks balance over the threads (many of them, or a multiple of
// the thread count, each equally expensive) and the accumulators stay small.
bool use_per_kv_head_schedule(const detail::Problem& p) {
  const std::int64_t threads = omp_get_max_threads();
  const std::int64_t tasks = p.B * p.Hkv;
  const bool balanced = tasks >= 4 * threads || tasks % threads == 0;
  const bool small = 2 * p.Nk * p.D * static_cast<std::int64_t>(sizeof(float)) <= (64 << 20);
  return balanced && small;
}

}  // namespace

// d_rows: B x Hq x Nq floats for D = rowsum(dO * O) (src/cpu/dispatch.cpp provides them).
void flash_backward(const detail::BackwardArgs& a, float* d_rows) {
  const detail::Problem& p = a.problem;
  if (p.B == 0 || p.Hq == 0) return;
  compute_output_dot(a, d_rows);

  if (use_per_kv_head_schedule(p)) {
    backward_per_kv_head(a, d_rows);
    return;
  }

  // Pass 1: dK, dV. With Nq == 0 every task still runs and writes zeros.
  const std::int64_t key_tile = choose_tile(kBwdKeyTile, p.B * p.Hkv, p.Nk);
  const std::int64_t k_tiles = (p.Nk + key_tile - 1) / key_tile;
  const std::int64_t k_tasks = p.B * p.Hkv * k_tiles;
  // Pass 2: dQ. With Nk == 0 every task writes zeros.
  const std::int64_t query_tile = choose_tile(kQueryTile, p.B * p.Hq, p.Nq);
  const std::int64_t q_tiles = (p.Nq + query_tile - 1) / query_tile;
  const std::int64_t q_tasks = p.B * p.Hq * q_tiles;
  std::atomic<bool> out_of_memory{false};
#pragma omp parallel
  {
    {
      const auto scratch = make_thread_scratch<KeyTileScratch>(out_of_memory, p.D);
#pragma omp barrier
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t t = 0; t < k_tasks; ++t) {
        if (out_of_memory) continue;
        const std::int64_t tile = t % k_tiles, bhk = t / k_tiles;
        backward_key_tile(a, d_rows, bhk / p.Hkv, bhk % p.Hkv, tile * key_tile, key_tile,
                          *scratch);
      }
    }
    {
      const auto scratch = make_thread_scratch<QueryTileScratch>(out_of_memory, p.D);
#pragma omp barrier
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t t = 0; t < q_tasks; ++t) {
        if (out_of_memory) continue;
        const std::int64_t tile = q_tiles - 1 - t % q_tiles, bh = t / q_tiles;  // longest first
        backward_query_tile(a, d_rows, bh / p.Hq, bh % p.Hq, tile * query_tile, query_tile,
                            *scratch);
      }
    }
  }
  throw_if_out_of_memory(out_of_memory, "flashpp::backward");
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
