// Deterministic mode's dQ kernel: one thread block per (query tile, batch, query head).
//
// The main kernel's dQ comes from float32 atomics whose order varies run to run. Here a block
// owns its query tile outright and walks the key tiles in a fixed order, recomputing S, P and dS
// (the recomputation costs about as much as the main kernel's A and B steps), and accumulates
//   dQ_i = scale * sum_j dS_ij K_j
// in registers before writing it once: bit-identical results with no atomics and no workspace
// beyond D and lse. Each warp owns 16 query rows, so dS leaves the accumulators straight as the
// A operand of dS K (the C fragments of two 8-column tiles are one A fragment).
#pragma once

#include <cstdint>

#include "../../common/math.cuh"
#include "../../ptx/mma.cuh"
#include "../../common/swizzle.cuh"
#include "../../common/swizzled_fragments.cuh"
#include "tile_config.hpp"
#include "../../common/backward_params.hpp"
#include "score_gradient.cuh"
#include "tile_io.cuh"
#include "../../common/tile_range.hpp"
#include "../../common/poison.cuh"
#include "../../common/sector_store.cuh"

namespace flashpp::cuda::sm80 {

template <typename Element_, int kHeadDim_>
struct DqKernelShape {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  using Tile = DqTile<kHeadDim>;
  static constexpr int kQueryRows = Tile::kQueryRows;
  static constexpr int kKeyRows = Tile::kKeyRows;
  static constexpr int kWarps = Tile::kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static_assert(kQueryRows == 16 * kWarps, "one 16-row block per warp");
  static_assert(kKeyRows % 16 == 0);

  using QTile = SwizzledTile<kQueryRows, kHeadDim>;
  using KvTile = SwizzledTile<kKeyRows, kHeadDim>;

  static constexpr int kQOffset = 0;
  static constexpr int kDoOffset = kQOffset + QTile::kBytes;
  static constexpr int kKOffset = kDoOffset + QTile::kBytes;    // [2 stages]
  static constexpr int kVOffset = kKOffset + 2 * KvTile::kBytes;  // [2 stages]
  static constexpr int kSmemBytes = kVOffset + 2 * KvTile::kBytes;
};

// The dQ kernel's steps; each warp owns 16 query rows (row0 .. row0 + 15 of the tile) and all
// kKeyRows keys of the current key tile.
namespace dq {

template <typename Shape>
using RowAccumulator = float[Shape::kKeyRows / 8][4];

// S = Q K^T and dP = dO V^T for the warp's 16 rows x kKeyRows keys.
template <typename Shape>
__device__ __forceinline__ void compute_scores_and_dp(
    RowAccumulator<Shape>& s_acc, RowAccumulator<Shape>& dp_acc,
    const FragmentReader<typename Shape::QTile, Operand::a_mk>& q_as_a,
    const FragmentReader<typename Shape::QTile, Operand::a_mk>& do_as_a,
    const FragmentReader<typename Shape::KvTile, Operand::b_nk>& k_as_b,
    const FragmentReader<typename Shape::KvTile, Operand::b_nk>& v_as_b, int row0) {
  using Element = typename Shape::Element;
#pragma unroll
  for (int k0 = 0; k0 < Shape::kHeadDim; k0 += 16) {
    std::uint32_t a_q[4], a_do[4];
    q_as_a.load(a_q, row0, k0);
    do_as_a.load(a_do, row0, k0);
#pragma unroll
    for (int n = 0; n < Shape::kKeyRows / 16; ++n) {
      std::uint32_t b_k[4], b_v[4];
      k_as_b.load(b_k, 16 * n, k0);
      v_as_b.load(b_v, 16 * n, k0);
      mma_m16n8k16<Element>(s_acc[2 * n], a_q, {b_k[0], b_k[1]});
      mma_m16n8k16<Element>(s_acc[2 * n + 1], a_q, {b_k[2], b_k[3]});
      mma_m16n8k16<Element>(dp_acc[2 * n], a_do, {b_v[0], b_v[1]});
      mma_m16n8k16<Element>(dp_acc[2 * n + 1], a_do, {b_v[2], b_v[3]});
    }
  }
}

// P = exp(S - L), dS = P o (dP - D) element by element (score_gradient.cuh), dS in place of S.
// Element e of the thread: 8-key block e / 4, row g + 8 * ((e / 2) % 2), key 2t + e % 2 (the
// mma accumulator layout). Query rows [i0 + row0, +16), keys [j0, j0 + kKeyRows) of the tensor.
template <typename Shape>
__device__ __forceinline__ void score_gradients(RowAccumulator<Shape>& s_acc,
                                                const RowAccumulator<Shape>& dp_acc,
                                                const BackwardParams& p,
                                                std::int64_t i0, std::int64_t j0, int row0,
                                                bool element_mask, std::uint32_t keep_bits,
                                                const float (&lse_log2)[2],
                                                const float (&delta)[2], int g, int t) {
  constexpr int kKeyRows = Shape::kKeyRows;
  with_score_flags<true>(p.softcap > 0.0f, element_mask, p.dropout.threshold != 0,
                   [&](auto softcap_flag, auto mask_flag, auto dropout_flag) {
    constexpr bool kSoftcap = decltype(softcap_flag)::value;
    constexpr bool kMasked = decltype(mask_flag)::value;
    constexpr bool kDropout = decltype(dropout_flag)::value;
#pragma unroll
    for (int n = 0; n < kKeyRows / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e / 2;
        const std::int64_t i = i0 + row0 + g + 8 * half;
        const std::int64_t j = j0 + 8 * n + 2 * t + (e & 1);
        const bool visible = !kMasked || element_visible(p.mask, p.k_len, i, j);
        s_acc[n][e] = score_gradient<kSoftcap, kDropout>(p, s_acc[n][e], dp_acc[n][e], lse_log2[half],
                                               delta[half], visible, (keep_bits >> (4 * n + e)) & 1u)
                          .ds;
      }
    }
  });
}

// dQ += dS K: dS from registers (two 8-key accumulator tiles = one 16-key A fragment).
template <typename Shape>
__device__ __forceinline__ void accumulate_dq(
    float (&dq_acc)[Shape::kHeadDim / 8][4], const RowAccumulator<Shape>& ds,
    const FragmentReader<typename Shape::KvTile, Operand::b_kn>& k_as_b_kn) {
  using Element = typename Shape::Element;
#pragma unroll
  for (int kk = 0; kk < Shape::kKeyRows / 16; ++kk) {
    const std::uint32_t a_ds[4] = {
        pack_pair<Element>(ds[2 * kk][0], ds[2 * kk][1]),
        pack_pair<Element>(ds[2 * kk][2], ds[2 * kk][3]),
        pack_pair<Element>(ds[2 * kk + 1][0], ds[2 * kk + 1][1]),
        pack_pair<Element>(ds[2 * kk + 1][2], ds[2 * kk + 1][3])};
#pragma unroll
    for (int n = 0; n < Shape::kHeadDim / 16; ++n) {
      std::uint32_t b_k[4];
      k_as_b_kn.load(b_k, 16 * kk, 16 * n);
      mma_m16n8k16<Element>(dq_acc[2 * n], a_ds, {b_k[0], b_k[1]});
      mma_m16n8k16<Element>(dq_acc[2 * n + 1], a_ds, {b_k[2], b_k[3]});
    }
  }
}

// scale * dQ, written once (rows past Nq and columns past the true head dim are dropped), in
// whole 32-byte sectors (common/sector_store.cuh; head_dim is a multiple of 8, so an 8-column tile
// is stored whole or not at all).
template <typename Shape>
__device__ __forceinline__ void write_dq(const float (&dq_acc)[Shape::kHeadDim / 8][4],
                                         const BackwardParams& p, std::int64_t batch,
                                         std::int64_t head, std::int64_t i0, int row0,
                                         int head_dim, int g, int t) {
  using Element = typename Shape::Element;
  auto* dq = static_cast<Element*>(p.dq) + batch * p.dq_strides.batch + head * p.dq_strides.head +
             sector_store_column(t);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const std::int64_t i = i0 + row0 + g + 8 * half;
    const bool row_in = i < p.q_len;
    Element* dq_row = dq + (row_in ? i * p.dq_strides.row : 0);
    store_accumulator_row(dq_row, dq_acc, half, p.scale, head_dim / 8, row_in, t);
  }
}

}  // namespace dq

template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(DqKernelShape<Element, kHeadDim>::kThreads)
    bwd_dq_kernel(const BackwardParams p) {
  using Shape = DqKernelShape<Element, kHeadDim>;
  using QTile = typename Shape::QTile;
  using KvTile = typename Shape::KvTile;
  constexpr int kQueryRows = Shape::kQueryRows;
  constexpr int kKeyRows = Shape::kKeyRows;
  constexpr int kThreads = Shape::kThreads;

  extern __shared__ __align__(128) unsigned char smem[];
  poison_dynamic_smem(smem);  // test builds only (poison.cuh)
  Element* s_q = reinterpret_cast<Element*>(smem + Shape::kQOffset);
  Element* s_do = reinterpret_cast<Element*>(smem + Shape::kDoOffset);
  auto s_k = [&](int stage) {
    return reinterpret_cast<Element*>(smem + Shape::kKOffset + stage * KvTile::kBytes);
  };
  auto s_v = [&](int stage) {
    return reinterpret_cast<Element*>(smem + Shape::kVOffset + stage * KvTile::kBytes);
  };

  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int g = lane / 4;
  const int t = lane % 4;

  const std::int64_t query_tiles = (p.q_len + kQueryRows - 1) / kQueryRows;
  const std::int64_t query_tile = blockIdx.x % query_tiles;
  const std::int64_t head = (blockIdx.x / query_tiles) % p.q_heads;
  const std::int64_t batch = blockIdx.x / query_tiles / p.q_heads;
  const std::int64_t kv_head = head / p.heads_per_kv;
  const std::int64_t i0 = query_tile * kQueryRows;
  const std::int64_t i1 = i0 + kQueryRows < p.q_len ? i0 + kQueryRows : p.q_len;
  const int head_dim = static_cast<int>(p.head_dim);

  // The key tiles rows [i0, i1) see (common/tile_range.hpp); the element test per tile below.
  const KeyTileRange keys = key_tile_range(p.mask, p.k_len, i0, i1, kKeyRows);
  const std::int64_t first_key_tile = keys.begin;
  const std::int64_t key_tiles = keys.end - keys.begin;

  const auto* k = static_cast<const Element*>(p.k) + batch * p.k_strides.batch +
                  kv_head * p.k_strides.head;
  const auto* v = static_cast<const Element*>(p.v) + batch * p.v_strides.batch +
                  kv_head * p.v_strides.head;
  auto load_key_tile = [&](std::int64_t step, int stage) {
    const std::int64_t j0 = (first_key_tile + step) * kKeyRows;
    load_rows_async<KvTile, kThreads>(s_k(stage), k, p.k_strides.row, j0, p.k_len, head_dim, tid);
    load_rows_async<KvTile, kThreads>(s_v(stage), v, p.v_strides.row, j0, p.k_len, head_dim, tid);
  };

  load_rows_async<QTile, kThreads>(
      s_q, static_cast<const Element*>(p.q) + batch * p.q_strides.batch + head * p.q_strides.head,
      p.q_strides.row, i0, p.q_len, head_dim, tid);
  load_rows_async<QTile, kThreads>(
      s_do,
      static_cast<const Element*>(p.dout) + batch * p.dout_strides.batch + head * p.dout_strides.head,
      p.dout_strides.row, i0, p.q_len, head_dim, tid);
  if (key_tiles > 0) load_key_tile(0, 0);
  cp_async_commit();

  // The warp's rows: lse and D of rows g and g + 8 of its 16-row block.
  const int row0 = 16 * warp;
  const std::int64_t row_base = (batch * p.q_heads + head) * p.rows_padded + i0 + row0;
  const float lse_log2[2] = {p.lse_log2[row_base + g], p.lse_log2[row_base + g + 8]};
  const float delta[2] = {p.delta[row_base + g], p.delta[row_base + g + 8]};
  const auto bh = static_cast<std::uint32_t>(batch * p.q_heads + head);

  float dq_acc[kHeadDim / 8][4] = {};
  const FragmentReader<QTile, Operand::a_mk> q_as_a(s_q, lane), do_as_a(s_do, lane);

  for (std::int64_t step = 0; step < key_tiles; ++step) {
    const int stage = static_cast<int>(step & 1);
    cp_async_wait<0>();
    __syncthreads();  // this tile has landed; every warp is done with the previous one
    if (step + 1 < key_tiles) load_key_tile(step + 1, stage ^ 1);
    cp_async_commit();
    const FragmentReader<KvTile, Operand::b_nk> k_as_b(s_k(stage), lane), v_as_b(s_v(stage), lane);
    const FragmentReader<KvTile, Operand::b_kn> k_as_b_kn(s_k(stage), lane);
    const std::int64_t j0 = (first_key_tile + step) * kKeyRows;
    const std::int64_t j1 = j0 + kKeyRows < p.k_len ? j0 + kKeyRows : p.k_len;

    // S = Q K^T, dP = dO V^T
    float s_acc[kKeyRows / 8][4] = {};
    float dp_acc[kKeyRows / 8][4] = {};
    dq::compute_scores_and_dp<Shape>(s_acc, dp_acc, q_as_a, do_as_a, k_as_b, v_as_b, row0);

    // P = exp(S - L), dS = P o (dP - D), in place of S
    const bool element_mask = tile_needs_element_test(p.mask, i0, i1, j0, j1, kKeyRows);
    const std::uint32_t keep_bits = dropout_keep_bits<kKeyRows / 2, true>(
        p, bh, [&](int e, std::int64_t& i, std::int64_t& j) {
          i = i0 + row0 + g + 8 * ((e / 2) % 2);
          j = j0 + 8 * (e / 4) + 2 * t + (e % 2);
        });
    dq::score_gradients<Shape>(s_acc, dp_acc, p, i0, j0, row0, element_mask, keep_bits, lse_log2,
                               delta, g, t);

    // dQ += dS K
    dq::accumulate_dq<Shape>(dq_acc, s_acc, k_as_b_kn);
  }

  // dQ *= scale
  dq::write_dq<Shape>(dq_acc, p, batch, head, i0, row0, head_dim, g, t);
}

}  // namespace flashpp::cuda::sm80
