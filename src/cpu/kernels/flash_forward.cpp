// The tiled FlashAttention-2 forward on the CPU.
//
// One task = one query tile of one (batch, head); OpenMP hands tasks to threads dynamically
// (causal tiles differ in cost). A task keeps its query tile, running statistics and output
// accumulator in per-thread scratch and walks the key/value tiles of its kv head:
//
//   St  = K_j (c Q_i)^T              key-major: keys are rows, queries are the vector lanes;
//                                    c = scale * log2(e): the softmax runs in base 2
//   St  = softcap(St), masked -> -inf   (only on tiles that cross the mask boundary)
//   online_softmax_update: m, l, alpha per query lane; St becomes P~ = 2^(St - m')
//   rescale_output: O *= alpha;   dropout: P~ *= z;   O += P~ V_j
//
// Why key-major: with queries along the lanes the softmax statistics are plain vectors (no
// horizontal reductions), Q^T is transposed once per task instead of K once per tile product,
// and both products read K and V as rows (see tile_gemm.hpp).
#include <atomic>

#include "../cpu_backend.hpp"
#include "../forward_output.hpp"
#include "../tile_config.hpp"
#include "../tile_dropout.hpp"
#include "../tile_gemm.hpp"
#include "../tile_io.hpp"
#include "../tile_scratch.hpp"
#include "../tile_softmax.hpp"

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {
namespace {

// Per-thread scratch of the forward.
struct ForwardScratch {
  explicit ForwardScratch(std::int64_t D)
      : q_t(D * kQueryLd),
        k(kKeyTile * D),
        v(kKeyTile * D),
        s_t(kKeyTile * kQueryLd),
        z_t(kKeyTile * kQueryLd),
        o(kQueryTile * D),
        m(kQueryTile),
        l(kQueryTile),
        alpha(kQueryTile),
        row(D) {}
  ScratchTile q_t;    // [D][kQueryLd]  scale * Q_i, transposed
  ScratchTile k, v;   // [kKeyTile][D]  K_j, V_j as float32
  ScratchTile s_t;    // [kKeyTile][kQueryLd]  scores, then probabilities
  ScratchTile z_t;    // [kKeyTile][kQueryLd]  dropout factors
  ScratchTile o;      // [kQueryTile][D]  unnormalised output
  ScratchTile m, l, alpha;
  ScratchTile row;    // one converted row
};

void forward_query_tile(const detail::ForwardArgs& a, std::int64_t b, std::int64_t h,
                        std::int64_t i0, std::int64_t query_tile, ForwardScratch& s) {
  const detail::Problem& p = a.problem;
  const std::int64_t D = p.D;
  const std::int64_t hk = h / p.heads_per_kv();
  const std::int64_t q_rows = std::min(query_tile, p.Nq - i0);
  const std::int64_t q_cols = round_up(q_rows, 16);  // lanes computed (padding lanes are zero)
  const auto bh = static_cast<std::uint32_t>(b * p.Hq + h);

  // The scale, and log2(e) for the base-2 softmax, fold into Q once: St = K (c Q)^T.
  load_tile_transposed(a.q, b, i0, q_rows, h, D, s.q_t.get(), kQueryLd, q_cols, s.row.get(),
                       p.scale * kLog2e);
  for (std::int64_t r = 0; r < kQueryTile; ++r) {
    s.m.get()[r] = kNegInf;
    s.l.get()[r] = 0.0f;
  }
  for (std::int64_t x = 0; x < q_rows * D; ++x) s.o.get()[x] = 0.0f;

  const bool masked = p.mask.active();
  for (std::int64_t j0 = 0; j0 < p.Nk; j0 += kKeyTile) {
    const std::int64_t j1 = std::min(j0 + kKeyTile, p.Nk);
    if (masked && p.mask.tile_fully_hidden(i0, i0 + q_rows, j0, j1)) continue;
    const std::int64_t kv_rows = j1 - j0;
    // K_j, V_j as contiguous float32 rows: read in place when they are ([B, H, N, D] float32),
    // else copied (and converted): the caller's rows may lie a page apart ([B, N, H, D] layout),
    // and both products walk them many times.
    const float* k = tile_rows_f32(a.k, b, j0, kv_rows, hk, D, s.k.get());
    const float* v = tile_rows_f32(a.v, b, j0, kv_rows, hk, D, s.v.get());

    float* st = s.s_t.get();
    tile_gemm<ALayout::row_major>(kv_rows, q_cols, D, k, D, s.q_t.get(), kQueryLd, st,
                                  kQueryLd, false);
    // cap tanh(x / cap) in base-2 units: the same with cap * log2(e)
    if (p.softcap > 0.0f) apply_softcap(st, kQueryLd, kv_rows, q_cols, p.softcap * kLog2e);
    if (masked && !p.mask.tile_fully_visible(i0, i0 + q_rows, j0, j1)) {
      apply_tile_mask_key_major(st, kQueryLd, kv_rows, q_cols, i0, j0, p.mask);
    }
    online_softmax_update(st, kQueryLd, kv_rows, q_cols, s.m.get(), s.l.get(), s.alpha.get());
    rescale_output(s.o.get(), D, q_rows, D, s.alpha.get());
    if (p.dropout.enabled()) {
      // l was summed before this: the lse (and the normalisation) ignore dropout.
      float* z = s.z_t.get();
      dropout_factors_key_major(z, kQueryLd, kv_rows, q_rows, i0, j0, bh, p.dropout);
      for (std::int64_t c = 0; c < kv_rows; ++c) {
        multiply_row(st + c * kQueryLd, z + c * kQueryLd, st + c * kQueryLd, q_rows);
      }
    }
    // O[r][:] += sum_c P~t[c][r] V[c][:]: P~ read column-major from the key-major tile.
    tile_gemm<ALayout::col_major>(q_rows, D, kv_rows, st, kQueryLd, v, D, s.o.get(), D,
                                  true);
  }
  store_forward_rows(a, b, h, i0, q_rows, s.o.get(), a.problem.D, s.m.get(), s.l.get());
}

}  // namespace

void flash_forward(const detail::ForwardArgs& a) {
  const detail::Problem& p = a.problem;
  if (p.B == 0 || p.Hq == 0 || p.Nq == 0) return;
  const std::int64_t query_tile = choose_tile(kQueryTile, p.B * p.Hq, p.Nq);
  const std::int64_t q_tiles = (p.Nq + query_tile - 1) / query_tile;
  const std::int64_t tasks = p.B * p.Hq * q_tiles;
  std::atomic<bool> out_of_memory{false};
#pragma omp parallel
  {
    const auto scratch = make_thread_scratch<ForwardScratch>(out_of_memory, p.D);
#pragma omp barrier
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t t = 0; t < tasks; ++t) {
      if (out_of_memory) continue;
      // Last query tiles first: under a causal mask they see the most keys, and handing out the
      // longest tasks first keeps the threads' finishing times close.
      const std::int64_t tile = q_tiles - 1 - t % q_tiles;
      const std::int64_t bh = t / q_tiles;
      forward_query_tile(a, bh / p.Hq, bh % p.Hq, tile * query_tile, query_tile, *scratch);
    }
  }
  throw_if_out_of_memory(out_of_memory, "flashpp::forward");
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
