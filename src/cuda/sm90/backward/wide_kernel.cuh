// The sm90 backward at wide head dims (192, 256): dK and dV accumulated transposed.
//
// At these head dims the kernel of kernel.cuh does not fit: a consumer owning 64 keys holds dK and
// dV of 64 keys x D columns in registers (2 x D / 2 floats a thread: 256 at D=256, beside S^T and
// dP^T), and K, V of 128 keys with two Q/dO stages take 256 KB of shared memory. This kernel keeps
// the producer and the block's walk of kernel.cuh (backward_block, load_backward_tiles, the same
// shared-memory accessors) and changes the consumers' split of the work:
//   one block owns 64 keys (kBlockN); a step is 64 queries (kBlockM); both consumers see all 64
//   keys, and per step
//     S^T = K Q^T, dP^T = V dO^T        consumer c the 32 queries [32c, 32c + 32) of the step
//     P^T, dS^T                          its 64 keys x 32 queries, in registers, as in kernel.cuh
//     P~^T, dS^T -> shared memory        both halves meet in one 64 x 64 tile each
//     dV^T += dO^T P~   (consumer 0)     the accumulators are head-dim rows x keys: 64 rows per
//     dK^T += Q^T dS    (consumer 1)     panel of the head dim, so a thread holds D / 2 floats
//     dQ = dS K                          consumer 0 the first half of dQ's columns (whole panels),
//                                        consumer 1 the rest; 16-byte reds into the accumulator
//   (the head-dim rows of dV^T / dK^T are the M of the product: FlashAttention-3's "swapped" dK/dV
//   at D=256). P~^T and dS^T go through two buffers, alternating by step: a consumer writes step
//   i's halves only after both consumers have passed step i-1's meeting, so after their step i-2
//   products that read the buffer have completed.
// Shared memory at D=256: K, V 64 KB, two Q/dO stages 128 KB, the P~^T/dS^T buffers 32 KB. After
// the last step the Q and dO stages hold dV and dK on their way out (kStagedStores).
// Dropout: the decisions of kernel.cuh (dropout_decisions on this consumer's 32-query half). No
// deterministic mode and no softcap here (backward_dispatch.cu sends those to the sm80 family).
#pragma once

#include "../../ptx/ldmatrix.cuh"
#include "kernel.cuh"

namespace flashpp::cuda::sm90 {

// Across steps (1): the next step's S^T and dP^T (one wgmma group) are issued as soon as this
// step's dQ product has landed, and run behind its dV^T / dK^T product while the consumers add dQ
// and release the step; 0: each step issues its own S^T and dP^T at its top; -1: by head dim, on
// at 192 only (H100, session 18 run 3, bf16 N=8192: +27% / +30% at D=192, -6% / -4% at 256).
#ifndef FLASHPP_SM90_BWD_WIDE_PIPELINE
#define FLASHPP_SM90_BWD_WIDE_PIPELINE -1
#endif
// dQ into the float32 accumulator staged in shared memory and added by bulk reduce-adds (1), where
// the staging areas fit (D=192), or by 16-byte reds from registers (0).
#ifndef FLASHPP_SM90_BWD_WIDE_DQ_BULK
#define FLASHPP_SM90_BWD_WIDE_DQ_BULK 0
#endif

template <typename Element_, int kHeadDim_, bool kDropout_ = false>
struct Sm90WideBackwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim % 64 == 0 && kHeadDim >= 128, "whole 64-column panels");
  static constexpr bool kDeterministic = false;
  static constexpr bool kDqWriter = false;  // kernel.cuh's deterministic writers
  static constexpr bool kDropout = kDropout_;
  static constexpr bool kWide = true;
  static constexpr bool kDqTransposed = false;  // kernel.cuh's dQ^T at D=64
  static constexpr bool kPaired = false;
  static constexpr bool kSplit = false;   // (kernel.cuh's split last wave: not here)
  static constexpr bool kDqAccumTransposed = false;
  static constexpr int kPaddedHeadDim = kHeadDim;
  static constexpr int kPanels = kHeadDim / 64;
  static constexpr int kConsumers = 2;
  static constexpr int kBlockN = 64;                       // keys per block
  static constexpr int kBlockM = 64;                       // queries per step
  static constexpr int kQueries = kBlockM / kConsumers;    // S^T columns of one consumer
  static constexpr int kQTiles = kQueries / 8;             // its 8-query column tiles
  static constexpr int kKeyTiles = kBlockN / 8;            // 8-key column tiles of dV^T, dK^T
  static constexpr int kStages = 2;                        // Q/dO/lse/delta ring depth
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // dQ's columns: consumer 0 the first kDqColumns0 (whole panels), consumer 1 the others.
  static constexpr int kDqColumns0 = (kPanels + 1) / 2 * 64;
  static constexpr int kDqColumns1 = kHeadDim - kDqColumns0;

  using KTile = SwizzledTile<kBlockN, kHeadDim>;
  using QTile = SwizzledTile<kBlockM, kHeadDim>;
  static constexpr int kKPanelBytes = kBlockN * 128;
  static constexpr int kQPanelBytes = kBlockM * 128;
  // One 64-key x 64-query tile (one 128-byte-swizzled panel); a buffer holds P~^T, then dS^T
  // (BackwardShared::ds(buffer, 0) and ds(buffer, 1)).
  static constexpr int kDsBytes = kBlockN * kBlockM * 2;
  static constexpr int kDsBufferBytes = 2 * kDsBytes;

  // Byte offsets in shared memory (every tile 1024-byte aligned).
  static constexpr int kK = 0;
  static constexpr int kV = kK + KTile::kBytes;
  static constexpr int kQ = kV + KTile::kBytes;
  static constexpr int kDo = kQ + kStages * QTile::kBytes;
  static constexpr int kDs = kDo + kStages * QTile::kBytes;
  static constexpr int kLseBytes = kStages * kBlockM * 4;  // per array
  static constexpr int kBarrierCount = 1 + 2 * kStages;     // K/V full; per stage step full, empty
  static constexpr int kDqStage = kDs + 2 * kDsBufferBytes;
  // dQ staging for the bulk reduce-adds: a warp's 16 rows x its consumer's columns, consumer 0's
  // four warps first (add_warp_dq).
  static constexpr int kDqStageWarpBytes0 = kDqColumns0 / 8 * kDqAccumBlockFloats * 4;
  static constexpr int kDqStageWarpBytes1 = kDqColumns1 / 8 * kDqAccumBlockFloats * 4;
  static constexpr int kDqStageBytes = 4 * (kDqStageWarpBytes0 + kDqStageWarpBytes1);
  static constexpr int kFixedBytes = kDqStage + 2 * kLseBytes + 8 * kBarrierCount;
  static constexpr bool kDqBulk =
      FLASHPP_SM90_BWD_WIDE_DQ_BULK != 0 && kFixedBytes + kDqStageBytes <= 227 * 1024;
  static constexpr bool kPipeline =
      FLASHPP_SM90_BWD_WIDE_PIPELINE < 0 ? kHeadDim < 256 : FLASHPP_SM90_BWD_WIDE_PIPELINE != 0;
  static constexpr int kLse = kDqStage + (kDqBulk ? kDqStageBytes : 0);
  static constexpr int kDelta = kLse + kLseBytes;
  static constexpr int kBarriers = kDelta + kLseBytes;
  static constexpr int kSmemBytes = kBarriers + 8 * kBarrierCount;

  // dV and dK leave through shared memory in whole sectors (store_transposed_key_gradients), or
  // element by element from the accumulators. Session 23 (H200): at D=256 the stores took 3.2k
  // cycles a block instead of 12.6k (+1..+5% a call); at D=192 ptxas then serialised the step's
  // products (C7511), and giving consumer 0 fewer dQ columns to make room cost 4-7%.
  static constexpr bool kStagedStores = kHeadDim != 192;

  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static_assert(ptx::register_split_fits(kProducerRegisters, kConsumers, kConsumerRegisters));
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one Hopper block");
};

// acc (the 64 head-dim columns of one panel x the block's 64 keys) += X^T Y over the step's 64
// queries: X = dO or Q (that panel of the step's tile, read MN-major: its columns are acc's rows),
// Y^T = P~^T or dS^T (64 keys x 64 queries in shared memory, K-major).
template <typename Traits>
__device__ __forceinline__ void issue_transposed_key_gradient(float (&acc)[Traits::kKeyTiles][4],
                                                              const unsigned char* x_panel,
                                                              const unsigned char* y_t) {
  using Mma = ptx::WgmmaShape<Traits::kBlockN, typename Traits::Element>;
  const std::uint64_t a_desc = ptx::smem_descriptor<ptx::Major::mn>(x_panel, Traits::kQPanelBytes);
  const std::uint64_t b_desc = ptx::smem_descriptor<ptx::Major::k>(y_t, 0);
  auto& d = reinterpret_cast<float(&)[Traits::kBlockN / 2]>(acc);
#pragma unroll
  for (int kk = 0; kk < Traits::kBlockM / 16; ++kk) {
    Mma::template ss<1, 0>(d, ptx::advance_descriptor(a_desc, kk * 2048),
                           ptx::advance_descriptor(b_desc, kk * 32), 1);
  }
}

// This thread's part of a consumer's 64-key x 32-query half (S^T accumulator layout: keys
// warp * 16 + g + 8 (c / 2), queries 8 nt + 2t + c % 2) as 16-bit pairs into a 64 x 64 tile at
// query column `q0` (128-byte rows, the chunk index XORed with row % 8).
template <typename Traits>
__device__ __forceinline__ void store_half_tile(unsigned char* tile, const float (&x)[Traits::kQTiles][4],
                                                int q0, int warp, int g, int t) {
#pragma unroll
  for (int nt = 0; nt < Traits::kQTiles; ++nt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = warp * 16 + g + 8 * half, chunk = q0 / 8 + nt;
      const int offset = row * 128 + ((chunk ^ (row & 7)) * 16) + t * 4;
      *reinterpret_cast<std::uint32_t*>(tile + offset) =
          pack_pair<typename Traits::Element>(x[nt][2 * half], x[nt][2 * half + 1]);
    }
}

// One consumer's dV^T or dK^T (head-dim rows x the block's 64 keys, accumulator layout), times
// `scale`, out as dV or dK rows: transposed into `staging` (64 key rows of D elements, the 16-byte
// chunk index XORed with key % 8) by stmatrix, then whole 16-byte chunks of key rows to global
// memory, consecutive threads along a row (every 32-byte sector written by one instruction; element
// by element, the stores wrote each sector in 2-byte pieces). Rows at or past k_len and columns
// at or past head_dim stay unwritten. The consumer's 128 threads call it; named barrier 2 + consumer
// (1 is the consumers' halves barrier) orders the staging before the copy.
template <typename Traits>
__device__ __forceinline__ void store_transposed_key_gradients(
    const float (&grad_t)[Traits::kPanels][Traits::kKeyTiles][4], unsigned char* staging,
    float scale, typename Traits::Element* out, std::int64_t row_stride, const BackwardParams& p,
    std::int64_t n0, int consumer, int warp, int lane) {
  using Element = typename Traits::Element;
  constexpr int kChunks = Traits::kHeadDim / 8;  // 16-byte chunks of a key row
  constexpr int kPitch = Traits::kHeadDim * 2;
  static_assert(kChunks % 8 == 0, "the XOR swizzle stays within a row");
  const int matrix = lane / 8, row = lane % 8;
#pragma unroll
  for (int panel = 0; panel < Traits::kPanels; ++panel)
#pragma unroll
    for (int a = 0; a < Traits::kKeyTiles / 2; ++a) {
      // Matrices (key tile 2a + m / 2, head-dim rows 8 (m % 2) ..) of this warp's 16 rows.
      std::uint32_t r[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const float(&x)[4] = grad_t[panel][2 * a + m / 2];
        r[m] = pack_pair<Element>(x[2 * (m % 2)] * scale, x[2 * (m % 2) + 1] * scale);
      }
      const int key = (2 * a + matrix / 2) * 8 + row;
      const int chunk = panel * 8 + warp * 2 + matrix % 2;
      stmatrix_x4<true>(shared_address(staging + key * kPitch + ((chunk ^ (key & 7)) * 16)), r);
    }
  ptx::named_barrier_sync(2 + consumer, 128);
  const int col_chunks = p.head_dim / 8;
  for (int i = threadIdx.x % 128; i < Traits::kBlockN * kChunks; i += 128) {
    const int key = i / kChunks, chunk = i % kChunks;
    const std::int64_t j = n0 + key;
    if (j < p.k_len && chunk < col_chunks) {
      *reinterpret_cast<uint4*>(out + j * row_stride + chunk * 8) =
          *reinterpret_cast<const uint4*>(staging + key * kPitch + ((chunk ^ (key & 7)) * 16));
    }
  }
}

template <typename Traits>
__device__ __forceinline__ void consumer_backward_wide(const Sm90BackwardParams& params,
                                                       const BackwardShared<Traits>& smem,
                                                       const BackwardTile& tile, int consumer) {
  using Element = typename Traits::Element;
  const BackwardParams& p = params.args;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
  const int g = lane >> 2, t = lane & 3;
  constexpr int kHalvesBarrier = 1;                    // both consumers' P~^T and dS^T halves
  const int q0 = consumer * Traits::kQueries;          // this consumer's first query of a step
  const std::int64_t key0 = tile.n0 + warp * 16;       // this warp's first key (rows of S^T)
  constexpr int kDqTiles = Traits::kDqColumns0 / 8;
  const int dq_col0 = consumer == 0 ? 0 : Traits::kDqColumns0;

  // Consumer 0: dV^T, consumer 1: dK^T; one 64-row block per panel of the head dim.
  float grad_t[Traits::kPanels][Traits::kKeyTiles][4];
#pragma unroll
  for (int panel = 0; panel < Traits::kPanels; ++panel)
#pragma unroll
    for (int kt = 0; kt < Traits::kKeyTiles; ++kt)
#pragma unroll
      for (int c = 0; c < 4; ++c) grad_t[panel][kt][c] = 0.0f;

  // S^T and dP^T of this consumer's half of a step: two groups where P^T is computed while dP^T
  // runs; one with kPipeline, issued the step before.
  float s_t[Traits::kQTiles][4], dp_t[Traits::kQTiles][4];
  auto issue_scores = [&](int s) {
    ptx::wgmma_fence();
    issue_transposed_scores<Traits>(s_t, smem.k(), smem.q(s) + q0 * 128);
    if constexpr (!Traits::kPipeline) ptx::wgmma_commit();
    issue_transposed_scores<Traits>(dp_t, smem.v(), smem.dout(s) + q0 * 128);
    ptx::wgmma_commit();
  };
  auto wait_step = [&](int step) {
    mbarrier_wait(smem.step_full(step % Traits::kStages),
                  static_cast<std::uint32_t>(step / Traits::kStages) & 1u);
  };
  float* dq_stage = reinterpret_cast<float*>(smem.at(
      Traits::kDqStage + (consumer == 0 ? warp * Traits::kDqStageWarpBytes0
                                        : 4 * Traits::kDqStageWarpBytes0 + warp * Traits::kDqStageWarpBytes1)));

  FLASHPP_BWD_CONSUMER_STAMP(consumer_start, clock64());
  FLASHPP_BWD_CONSUMER_STAMP(steps, static_cast<std::uint64_t>(tile.steps));
  if (tile.steps > 0) {
    mbarrier_wait(smem.kv_full(), 0);
    FLASHPP_BWD_CONSUMER_STAMP(kv_ready, clock64());
    if constexpr (Traits::kPipeline) {
      wait_step(0);
      issue_scores(0);
    }
  }
  for (int step = 0; step < tile.steps; ++step) {
    const int s = step % Traits::kStages;
    const BackwardStep st = backward_step<Traits>(p, tile, step);
    const std::int64_t bh = tile.b * p.q_heads + st.h;
    if constexpr (Traits::kPipeline) {
      ptx::wgmma_wait<0>();
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kQTiles * 4]>(dp_t));
    } else {
      wait_step(step);
      issue_scores(s);
    }

    const bool needs_mask = tile.n0 + Traits::kBlockN > p.k_len ||
                            (p.mask.active() &&
                             !p.mask.tile_fully_visible(st.m0, st.m0 + Traits::kBlockM, tile.n0,
                                                        tile.n0 + Traits::kBlockN));
    StepKeepSigns<Traits> keep;
    if constexpr (Traits::kDropout) {
      keep = dropout_decisions<Traits>(p, static_cast<std::uint32_t>(bh), st.m0 + q0, key0, g, t);
    }
    auto factor = [&](int nt, int c) {
      return Traits::kDropout ? dropout_factor<Traits>(keep, nt, c, p.dropout.keep_scale) : 1.0f;
    };

    // recompute_p: P^T = exp2(S^T scale log2e - lse_log2), 0 where masked, in s_t.
    if constexpr (!Traits::kPipeline) ptx::wgmma_wait<1>();
    ptx::fence_registers(reinterpret_cast<float(&)[Traits::kQTiles * 4]>(s_t));
    auto recompute_p = [&](auto masked) {
#pragma unroll
      for (int nt = 0; nt < Traits::kQTiles; ++nt) {
        const float2 lse = *reinterpret_cast<const float2*>(smem.lse(s) + q0 + nt * 8 + 2 * t);
        recompute_probabilities<decltype(masked)::value>(s_t[nt], s_t[nt], lse, p, key0,
                                                         st.m0 + q0 + 8 * nt, g, t, false);
      }
    };
    if (needs_mask) {
      recompute_p(std::true_type{});
    } else {
      recompute_p(std::false_type{});
    }

    // score_gradient: dS^T = P^T o (dP^T z - delta) in dp_t; P~^T = P^T z in s_t.
    if constexpr (!Traits::kPipeline) ptx::wgmma_wait<0>();
    ptx::fence_registers(reinterpret_cast<float(&)[Traits::kQTiles * 4]>(dp_t));
#pragma unroll
    for (int nt = 0; nt < Traits::kQTiles; ++nt) {
      const float2 delta = *reinterpret_cast<const float2*>(smem.delta(s) + q0 + nt * 8 + 2 * t);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const ScoreGradient grad = element_score_gradient<Traits::kDropout>(
            s_t[nt][c], dp_t[nt][c], (c & 1) ? delta.y : delta.x, factor(nt, c));
        s_t[nt][c] = grad.p_dropped;
        dp_t[nt][c] = grad.ds;
      }
    }

    // Both halves into this step's buffer, then meet the other consumer.
    const int buffer = step & 1;
    store_half_tile<Traits>(smem.ds(buffer, 0), s_t, q0, warp, g, t);
    store_half_tile<Traits>(smem.ds(buffer, 1), dp_t, q0, warp, g, t);
    ptx::fence_shared_to_async();
    ptx::named_barrier_sync(kHalvesBarrier, 128 * Traits::kConsumers);

    // This consumer's columns of dQ = dS K (first group), then accumulate_dv (consumer 0:
    // dO^T P~) or accumulate_dk (consumer 1: Q^T dS) (second group): dQ is added while the
    // second runs.
    float dq[kDqTiles][4];
    ptx::wgmma_fence();
    if constexpr (Traits::kDqColumns0 == Traits::kDqColumns1) {
      issue_query_gradient<Traits, Traits::kBlockN, Traits::kDqColumns0>(dq, smem.ds(buffer, 1),
                                                                         smem.k(), dq_col0);
    } else if (consumer == 0) {
      issue_query_gradient<Traits, Traits::kBlockN, Traits::kDqColumns0>(dq, smem.ds(buffer, 1),
                                                                         smem.k(), 0);
    } else {
      issue_query_gradient<Traits, Traits::kBlockN, Traits::kDqColumns1>(
          reinterpret_cast<float(&)[Traits::kDqColumns1 / 8][4]>(dq), smem.ds(buffer, 1), smem.k(),
          Traits::kDqColumns0);
    }
    ptx::wgmma_commit();
    const unsigned char* x = consumer == 0 ? smem.dout(s) : smem.q(s);
    const unsigned char* y_t = smem.ds(buffer, consumer);
#pragma unroll
    for (int panel = 0; panel < Traits::kPanels; ++panel)
      issue_transposed_key_gradient<Traits>(grad_t[panel], x + panel * Traits::kQPanelBytes, y_t);
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();
    ptx::fence_registers(reinterpret_cast<float(&)[kDqTiles * 4]>(dq));

    // accumulate_dq: this warp's 16 rows x this consumer's columns (add_warp_dq).
    const std::int64_t row_block = (st.m0 + warp * 16) / 16;
    if constexpr (kDqAdds) {
      if constexpr (Traits::kDqColumns0 == Traits::kDqColumns1) {
        add_warp_dq<Traits::kDqBulk>(p, bh, row_block, dq_col0 / 8, dq, dq_stage, lane);
      } else if (consumer == 0) {
        add_warp_dq<Traits::kDqBulk>(p, bh, row_block, 0, dq, dq_stage, lane);
      } else {
        add_warp_dq<Traits::kDqBulk>(p, bh, row_block, Traits::kDqColumns0 / 8,
                                     reinterpret_cast<const float(&)[Traits::kDqColumns1 / 8][4]>(dq),
                                     dq_stage, lane);
      }
    }

    // The next step's S^T and dP^T run behind this step's dV^T / dK^T. The last step issues its
    // own once more (from its buffers, which nothing refills; waited for after the loop): an
    // issue on every path keeps s_t and dp_t plain loop-carried values.
    if constexpr (Traits::kPipeline) {
      const bool more = step + 1 < tile.steps;
      if (more) wait_step(step + 1);
      issue_scores(more ? (step + 1) % Traits::kStages : s);
      ptx::wgmma_wait<1>();
    } else {
      ptx::wgmma_wait<0>();
    }
    ptx::fence_registers(reinterpret_cast<float(&)[Traits::kPanels * Traits::kBlockN / 2]>(grad_t));
    release_step(smem.step_empty(s), lane, 0);
    if (step == 0) FLASHPP_BWD_CONSUMER_STAMP(step0_done, clock64());
  }
  FLASHPP_BWD_CONSUMER_STAMP(loop_done, clock64());
  if constexpr (Traits::kPipeline) ptx::wgmma_wait<0>();
  // The last reduce-adds complete before the block ends (their source is this block's memory).
  if constexpr (Traits::kDqBulk) {
    if (lane == 0) bulk_wait<0>();
  }

  FLASHPP_BWD_CONSUMER_STAMP(dq_done, clock64());

  // dV (consumer 0) or dK = scale * dK^T's transpose (consumer 1).
  const bool is_dv = consumer == 0;
  Element* out = static_cast<Element*>(is_dv ? p.dv : p.dk) +
                 tile.b * (is_dv ? p.dv_strides.batch : p.dk_strides.batch) +
                 tile.h_kv * (is_dv ? p.dv_strides.head : p.dk_strides.head);
  const std::int64_t row_stride = is_dv ? p.dv_strides.row : p.dk_strides.row;
  const float scale = is_dv ? 1.0f : p.scale;
  if constexpr (Traits::kStagedStores) {
    // Every product that reads the Q and dO stages has completed in both consumers once they
    // meet here; then those stages hold the two 64-key tiles on their way out.
    ptx::named_barrier_sync(kHalvesBarrier, 128 * Traits::kConsumers);
    store_transposed_key_gradients<Traits>(grad_t, is_dv ? smem.q(0) : smem.dout(0), scale, out,
                                           row_stride, p, tile.n0, consumer, warp, lane);
  } else {
    // Element (head-dim column d, key j) of the accumulators, every key below k_len and column
    // below head_dim.
#pragma unroll
    for (int panel = 0; panel < Traits::kPanels; ++panel)
#pragma unroll
      for (int kt = 0; kt < Traits::kKeyTiles; ++kt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int d = panel * 64 + warp * 16 + g + 8 * (c >> 1);
          const std::int64_t j = tile.n0 + kt * 8 + 2 * t + (c & 1);
          if (j < p.k_len && d < p.head_dim) {
            const std::uint32_t pair = pack_pair<Element>(grad_t[panel][kt][c] * scale, 0.0f);
            *reinterpret_cast<std::uint16_t*>(out + j * row_stride + d) =
                static_cast<std::uint16_t>(pair & 0xFFFFu);
          }
        }
  }
  FLASHPP_BWD_CONSUMER_STAMP(stored, clock64());
  FLASHPP_BWD_CONSUMER_STAMP(end_ns, global_ns());
}

}  // namespace flashpp::cuda::sm90
