// The single-pass schedule of the CPU backward: one task per (batch, kv head).
//
// A task owns every output its kv head touches: dK and dV of the kv head (float32 accumulators
// of Nk x D each, per thread) and dQ of its query heads. It walks the query heads of its group,
// their query tiles, and for each query tile the key tiles:
//
//   S^T = K_j (scale Q_i)^T, dP^T = V_j dO_i^T          key-major, queries along the lanes
//   P, P~, dS^T                                           (backward_steps.hpp)
//   dQ_i += dS K_j      dV_j += P~^T dO_i      dK_j += dS^T Q_i
//
// Five tile products per pair instead of the two-pass schedule's seven, and still
// deterministic: every accumulator is owned by one task, which adds into it in a fixed order.
// The price is the Nk x D pair of accumulators per thread, and parallelism over B x Hkv only;
// flash_backward.cpp picks this schedule when B x Hkv spreads evenly over the threads and the
// accumulators are small.
#include <algorithm>
#include <atomic>

#include "../backward_steps.hpp"
#include "../cpu_backend.hpp"
#include "../key_major_pair.hpp"
#include "../tile_config.hpp"
#include "../tile_dropout.hpp"
#include "../tile_gemm.hpp"
#include "../tile_io.hpp"
#include "../tile_scratch.hpp"
#include "../tile_softmax.hpp"

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {
namespace {

struct KvHeadScratch {
  KvHeadScratch(std::int64_t D, std::int64_t Nk)
      : q_t(D * kQueryLd), dout_t(D * kQueryLd), q(kQueryTile * D), dout(kQueryTile * D),
        k(kKeyTile * D), v(kKeyTile * D), s(kKeyTile * kQueryLd), p(kKeyTile * kQueryLd),
        p_drop(kKeyTile * kQueryLd), dp(kKeyTile * kQueryLd), z(kKeyTile * kQueryLd),
        dq(kQueryTile * D), dk(Nk * D), dv(Nk * D), lse(kQueryTile), d_rows(kQueryTile),
        row(D) {}
  ScratchTile q_t, dout_t;          // [D][kQueryLd]: scale * Q_i^T, dO_i^T
  ScratchTile q, dout;              // [kQueryTile][D]: Q_i, dO_i as float32 rows
  ScratchTile k, v;                 // [kKeyTile][D]
  ScratchTile s, p, p_drop, dp, z;  // [kKeyTile][kQueryLd] key-major
  ScratchTile dq;                   // [kQueryTile][D]
  ScratchTile dk, dv;               // [Nk][D] accumulators of the kv head
  ScratchTile lse, d_rows;
  ScratchTile row;
};

// One query tile of query head h against every visible key tile.
void backward_query_tile_pairs(const detail::BackwardArgs& a, const float* d_rows,
                               std::int64_t b, std::int64_t h, std::int64_t i0,
                               KvHeadScratch& w) {
  const detail::Problem& p = a.problem;
  const std::int64_t D = p.D;
  const std::int64_t hk = h / p.heads_per_kv();
  const std::int64_t q_rows = std::min(kQueryTile, p.Nq - i0);
  const std::int64_t q_cols = round_up(q_rows, 16);
  const std::int64_t ld = kQueryLd;
  const auto bh = static_cast<std::uint32_t>(b * p.Hq + h);
  load_tile_transposed(a.q, b, i0, q_rows, h, D, w.q_t.get(), ld, q_cols, w.row.get(),
                       p.scale * kLog2e);  // S in base-2 units (probabilities_row)
  load_tile_transposed(a.dout, b, i0, q_rows, h, D, w.dout_t.get(), ld, q_cols, w.row.get());
  const float* q = tile_rows_f32(a.q, b, i0, q_rows, h, D, w.q.get());
  const float* dout = tile_rows_f32(a.dout, b, i0, q_rows, h, D, w.dout.get());
  load_lse(a, b, h, i0, q_rows, q_cols, w.lse.get());
  load_output_dot(d_rows, p, b, h, i0, q_rows, q_cols, w.d_rows.get());
  std::fill(w.dq.get(), w.dq.get() + q_rows * D, 0.0f);

  const bool masked = p.mask.active();
  const bool dropout = p.dropout.enabled();
  PairTiles t{w.s.get(), w.p.get(), w.p_drop.get(), w.dp.get(), w.z.get()};
  const float* p_tilde = dropout ? t.p_drop : t.p;
  for (std::int64_t j0 = 0; j0 < p.Nk; j0 += kKeyTile) {
    const std::int64_t j1 = std::min(j0 + kKeyTile, p.Nk);
    if (masked && p.mask.tile_fully_hidden(i0, i0 + q_rows, j0, j1)) continue;
    const std::int64_t kv_rows = j1 - j0;
    const float* k = tile_rows_f32(a.k, b, j0, kv_rows, hk, D, w.k.get());
    const float* v = tile_rows_f32(a.v, b, j0, kv_rows, hk, D, w.v.get());
    key_major_score_gradients(p, t, ld, k, v, kv_rows, w.q_t.get(), w.dout_t.get(), q_rows, q_cols,
                              i0, j0, bh, w.lse.get(), w.d_rows.get());

    // dQ[r][:] += sum_c dS^T[c][r] K[c][:]           (scale applied on store)
    tile_gemm<ALayout::col_major>(q_rows, D, kv_rows, t.dp, ld, k, D, w.dq.get(), D, true);
    // dV[c][:] += sum_r P~^T[c][r] dO[r][:];  dK[c][:] += sum_r dS^T[c][r] Q[r][:]
    tile_gemm<ALayout::row_major>(kv_rows, D, q_rows, p_tilde, ld, dout, D, w.dv.get() + j0 * D, D,
                                  true);
    tile_gemm<ALayout::row_major>(kv_rows, D, q_rows, t.dp, ld, q, D, w.dk.get() + j0 * D, D, true);
  }
  store_tile_rows(w.dq.get(), D, a.dq, b, i0, q_rows, h, D, p.scale);
}

}  // namespace

void backward_per_kv_head(const detail::BackwardArgs& a, const float* d_rows) {
  const detail::Problem& p = a.problem;
  const std::int64_t tasks = p.B * p.Hkv;
  const std::int64_t hpk = p.heads_per_kv();
  std::atomic<bool> out_of_memory{false};
#pragma omp parallel
  {
    const auto scratch = make_thread_scratch<KvHeadScratch>(out_of_memory, p.D, p.Nk);
#pragma omp barrier
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < tasks; ++t) {
      if (out_of_memory) continue;
      const std::int64_t b = t / p.Hkv, hk = t % p.Hkv;
      KvHeadScratch& w = *scratch;
      std::fill(w.dk.get(), w.dk.get() + p.Nk * p.D, 0.0f);
      std::fill(w.dv.get(), w.dv.get() + p.Nk * p.D, 0.0f);
      for (std::int64_t h = hk * hpk; h < (hk + 1) * hpk; ++h) {
        for (std::int64_t i0 = 0; i0 < p.Nq; i0 += kQueryTile) {
          backward_query_tile_pairs(a, d_rows, b, h, i0, w);
        }
      }
      store_tile_rows(w.dk.get(), p.D, a.dk, b, 0, p.Nk, hk, p.D, p.scale);
      store_tile_rows(w.dv.get(), p.D, a.dv, b, 0, p.Nk, hk, p.D);
    }
  }
  throw_if_out_of_memory(out_of_memory, "flashpp::backward");
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
