// The backward's main kernel: one thread block per (key tile, batch, kv head).
//
// The block loads its K_j and V_j tile once and keeps it in shared memory, then walks every
// (query head of the kv head's group, query tile) pair that can see the tile, two stages deep
// (each step's Q, dO, lse, delta: cp.async by every thread, or on sm90 bulk copies issued by one
// thread, tma.cuh):
//
//   A. S^T = K_j Q_i^T,  dP^T = V_j dO_i^T          (each warp: 16 or 32 keys x some queries)
//   B. P~^T, dS^T element-wise (score_gradient.cuh), packed to 16 bits; dS^T (and P~^T when
//      other warps need it) goes to shared memory (stmatrix on sm90)
//   C. dV_j += P~^T dO_i,  dK_j += dS^T Q_i          (each warp: its keys x some head columns,
//                                                     accumulated in registers over the walk)
//   D. dQ_i += dS K_j, added with float32 atomics into the fragment-ordered workspace
//      (dq_accum.cuh; skipped in deterministic mode, where bwd_dq_kernel computes dQ)
//
// Computing S transposed (keys as rows) puts each warp's keys in the same rows for A and C:
// packed P~^T and dS^T accumulators are exactly the A fragments of C, so where a warp owns all
// query columns they never go through shared memory, and C needs no barrier. With 32 keys per
// warp ("wide", tile_config.hpp) two warps share a key group and exchange them through shared memory.
// Two barriers per step: tiles landed / previous step done, and P~^T, dS^T complete before C or D.
//
// GQA: the block loops over the Hq/Hkv query heads of its kv head itself, so dK and dV sum over
// the group in registers, in a fixed order, with no extra memory and no second reduction pass.
//
// Split last wave (tail_split.hpp, unmasked and non-deterministic only): the units of a small last
// wave are walked by several blocks, each over a range of the steps; they add their dK, dV into
// float32 sums (split_unit.cuh), which the postprocess writes out as dK, dV.
#pragma once

#include <cstdint>

#include "../../common/block_order.cuh"
#include "../../common/math.cuh"
#include "../../ptx/mma.cuh"
#include "../../common/swizzle.cuh"
#include "../../common/swizzled_fragments.cuh"
#include "../../ptx/tma.cuh"
#include "tile_config.hpp"
#include "../../common/dq_accum.cuh"
#include "../../common/backward_params.hpp"
#include "score_gradient.cuh"
#include "../../common/split_unit.cuh"
#include "../../common/tail_split.hpp"
#include "tile_io.cuh"
#include "../../common/tile_range.hpp"
#include "../../common/poison.cuh"
#include "../../common/sector_store.cuh"

namespace flashpp::cuda::sm80 {

// 16-row tiles per warp in step D where the shape allows 2 (tuning knob; docs/perf-notes.md).
#ifndef FLASHPP_BWD_DQ_ROW_TILES
#define FLASHPP_BWD_DQ_ROW_TILES 2
#endif


template <typename Element_, int kHeadDim_>
struct MainKernelShape {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  using Tile = MainTile<kHeadDim>;
  static constexpr int kKeyRows = Tile::kKeyRows;
  static constexpr int kQueryRows = Tile::kQueryRows;
  static constexpr int kWarps = Tile::kWarps;
  static constexpr int kThreads = 32 * kWarps;

  using KvTile = SwizzledTile<kKeyRows, kHeadDim>;
  using QTile = SwizzledTile<kQueryRows, kHeadDim>;
  using ScoreTile = SwizzledTile<kKeyRows, kQueryRows>;  // P~^T and dS^T: [key][query]

  // Warp grid of steps A-C: kKeysPerWarp keys (kKeyTiles 16-row mma tiles) per warp row, the
  // remaining warps split the columns.
  static constexpr int kKeysPerWarp = Tile::kKeysPerWarp;
  static constexpr int kKeyTiles = kKeysPerWarp / 16;
  static constexpr int kKeyWarps = kKeyRows / kKeysPerWarp;
  static constexpr int kColumnWarps = kWarps / kKeyWarps;
  static constexpr int kScoreCols = kQueryRows / kColumnWarps;  // S^T columns of one warp
  static constexpr int kGradCols = kHeadDim / kColumnWarps;     // dK/dV columns of one warp
  // Warp grid of step D: kDqRowTiles 16-row tiles per warp row (2 where every warp's dQ tile is
  // still at least 32x32, e.g. at D=64 and D=128: 4 ldmatrix per 8 mma instead of 5 per 8).
  static constexpr int kDqRowTiles =
      FLASHPP_BWD_DQ_ROW_TILES > 1 && kHeadDim >= 64 && kQueryRows >= 64 &&
              kHeadDim * kQueryRows / (32 * kWarps) >= 32 ? 2 : 1;
  static constexpr int kDqRowWarps = kQueryRows / (16 * kDqRowTiles);
  static constexpr int kDqColWarps = kWarps / kDqRowWarps;
  static constexpr int kDqCols = kHeadDim / kDqColWarps;

  static_assert(kKeyWarps * kColumnWarps == kWarps && kDqRowWarps * kDqColWarps == kWarps);

  // At small head dims the warp's K and V rows fit in registers as A fragments for the whole
  // walk (2 x kHeadDim / 4 registers), which removes their ldmatrix from every step A. Measured
  // (H200, fp16): +1..3% at D=32; at D=64 no gain (it cost 24 bytes of spills), so D=32 only.
  static constexpr bool kKvInRegisters = kHeadDim <= 32 && kKeyTiles == 1;
  static constexpr int kKvFragments = kKvInRegisters ? kHeadDim / 16 : 1;
  static_assert(kScoreCols % 16 == 0 && kGradCols % 16 == 0 && kDqCols % 16 == 0);

  // Shared memory, in bytes (every part a multiple of 16 bytes).
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKOffset + KvTile::kBytes;
  static constexpr int kQOffset = kVOffset + KvTile::kBytes;           // [2 stages]
  static constexpr int kDoOffset = kQOffset + 2 * QTile::kBytes;       // [2 stages]
  static constexpr int kPOffset = kDoOffset + 2 * QTile::kBytes;
  static constexpr int kDsOffset = kPOffset + ScoreTile::kBytes;
  static constexpr int kLseOffset = kDsOffset + ScoreTile::kBytes;     // [2 stages][kQueryRows]
  static constexpr int kDeltaOffset = kLseOffset + 2 * kQueryRows * 4;  // [2 stages][kQueryRows]
  static constexpr int kBarrierOffset = kDeltaOffset + 2 * kQueryRows * 4;  // [2 stages] mbarriers
  static constexpr int kSmemBytes = kBarrierOffset + 2 * 8;
  static_assert(kSmemBytes <= 163 * 1024, "one table for every sm80+ GPU: A100's per-block limit");

  // sm90 with 64-column panels (D a multiple of 64): a step's Q, dO, lse and delta arrive by bulk
  // copies (tma.cuh) issued by one thread, this many bytes in all. The Q/dO tiles then start on
  // 1024-byte boundaries, as the copy engine's 128-byte swizzle needs.
  static constexpr bool kBulkCopies = kTmaAvailable && QTile::kPanelChunks == 8;
  static constexpr std::uint32_t kStepBytes = 2 * QTile::kBytes + 2 * kQueryRows * 4;
  static_assert((kQOffset % 1024 == 0 && QTile::kBytes % 1024 == 0) || QTile::kPanelChunks != 8);
};

// Element (row, col) of a swizzled tile, col even: the 32-bit word holding (col, col + 1).
template <typename Tile, typename Element>
__device__ __forceinline__ std::uint32_t* pair_address(Element* tile, int row, int col) {
  return reinterpret_cast<std::uint32_t*>(tile + Tile::offset(row, col & ~7) + (col & 7));
}

// FLASHPP_BWD_TMA=0 (compile definition) keeps cp.async for every tile on sm90 too, and
// FLASHPP_BWD_STMATRIX=0 the 4-byte stores of P~^T/dS^T (comparisons).
#ifndef FLASHPP_BWD_TMA
#define FLASHPP_BWD_TMA 1
#endif
#ifndef FLASHPP_BWD_STMATRIX
#define FLASHPP_BWD_STMATRIX 1
#endif

// ---------------------------------------------------------------------------------------------
// Plumbing: shared memory, the walk over query steps and its copies
// ---------------------------------------------------------------------------------------------

// The main kernel's shared memory (offsets: MainKernelShape); Q, dO, lse, delta and the
// mbarrier come in two stages.
template <typename Shape>
struct MainSmem {
  using Element = typename Shape::Element;
  unsigned char* base;
  __device__ __forceinline__ Element* k() const { return at<Element>(Shape::kKOffset); }
  __device__ __forceinline__ Element* v() const { return at<Element>(Shape::kVOffset); }
  __device__ __forceinline__ Element* p() const { return at<Element>(Shape::kPOffset); }
  __device__ __forceinline__ Element* ds() const { return at<Element>(Shape::kDsOffset); }
  __device__ __forceinline__ Element* q(int stage) const {
    return at<Element>(Shape::kQOffset + stage * Shape::QTile::kBytes);
  }
  __device__ __forceinline__ Element* dout(int stage) const {
    return at<Element>(Shape::kDoOffset + stage * Shape::QTile::kBytes);
  }
  __device__ __forceinline__ float* lse(int stage) const {
    return at<float>(Shape::kLseOffset) + stage * Shape::kQueryRows;
  }
  __device__ __forceinline__ float* delta(int stage) const {
    return at<float>(Shape::kDeltaOffset) + stage * Shape::kQueryRows;
  }
  __device__ __forceinline__ std::uint64_t* bar(int stage) const {
    return at<std::uint64_t>(Shape::kBarrierOffset) + stage;
  }

 private:
  template <typename T>
  __device__ __forceinline__ T* at(int offset) const {
    return reinterpret_cast<T*>(base + offset);
  }
};

// A step's (query head, query tile); the walk advances it by one query tile, then one head.
struct StepPosition {
  std::int64_t head, tile;
};

// The copies of one step: Q_i, dO_i, lse_i, delta_i into stage `stage`.
template <typename Shape>
struct QueryStepLoader {
  using Element = typename Shape::Element;
  using QTile = typename Shape::QTile;
  static constexpr int kQueryRows = Shape::kQueryRows;
  const BackwardParams& p;
  MainSmem<Shape> smem;
  const Element* q;
  const Element* dout;
  std::int64_t batch;
  int head_dim, tid;
  bool bulk_copies;

  // cp.async by every thread.
  __device__ __forceinline__ void load(StepPosition pos, int stage) const {
    const std::int64_t h = pos.head;
    const std::int64_t i0 = pos.tile * kQueryRows;
    load_rows_async<QTile, Shape::kThreads>(smem.q(stage),
                                            q + batch * p.q_strides.batch + h * p.q_strides.head,
                                            p.q_strides.row, i0, p.q_len, head_dim, tid);
    load_rows_async<QTile, Shape::kThreads>(
        smem.dout(stage), dout + batch * p.dout_strides.batch + h * p.dout_strides.head,
        p.dout_strides.row, i0, p.q_len, head_dim, tid);
    const std::int64_t row_base = (batch * p.q_heads + h) * p.rows_padded + i0;
    load_floats_async<kQueryRows, Shape::kThreads>(smem.lse(stage), p.lse_log2 + row_base, tid);
    load_floats_async<kQueryRows, Shape::kThreads>(smem.delta(stage), p.delta + row_base, tid);
  }

  // The same step by bulk copies (sm90): issued by thread 0 alone, completing on the stage's
  // mbarrier. Rows past q_len and columns past head_dim arrive as zeros (the maps' bounds).
  __device__ __forceinline__ void issue_bulk(StepPosition pos, int stage) const {
    std::uint64_t* bar = smem.bar(stage);
    mbarrier_expect_bytes(bar, Shape::kStepBytes);
    const int i0 = static_cast<int>(pos.tile * kQueryRows);
    const int h = static_cast<int>(pos.head), b = static_cast<int>(batch);
#pragma unroll
    for (int panel = 0; panel < QTile::kChunks / QTile::kPanelChunks; ++panel) {
      tma_load_4d(smem.q(stage) + panel * QTile::kPanelElements, &p.q_map, 64 * panel, i0, h, b,
                  bar);
      tma_load_4d(smem.dout(stage) + panel * QTile::kPanelElements, &p.dout_map, 64 * panel, i0,
                  h, b, bar);
    }
    const std::int64_t row_base = (batch * p.q_heads + pos.head) * p.rows_padded + i0;
    bulk_load(smem.lse(stage), p.lse_log2 + row_base, kQueryRows * 4, bar);
    bulk_load(smem.delta(stage), p.delta + row_base, kQueryRows * 4, bar);
  }

  __device__ __forceinline__ void start(StepPosition pos, int stage) const {
    if (!bulk_copies) {
      load(pos, stage);
    } else if (tid == 0) {
      issue_bulk(pos, stage);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The steps (fragment layouts: see ptx/mma.cuh and ptx/ldmatrix.cuh)
// ---------------------------------------------------------------------------------------------

template <typename Shape>
using ScoreAccumulator = float[Shape::kKeyTiles][Shape::kScoreCols / 8][4];
template <typename Shape>
using ScoreFragments = std::uint32_t[Shape::kKeyTiles][Shape::kScoreCols / 16][4];
template <typename Shape>
using GradAccumulator = float[Shape::kKeyTiles][Shape::kGradCols / 8][4];

// A. S^T = K_j Q_i^T and dP^T = V_j dO_i^T for the warp's keys x kScoreCols queries, one pass
// over the head dim for both. K and V come as A fragments from shared memory, or from
// registers (k_frag, v_frag) where Shape::kKvInRegisters.
template <typename Shape>
__device__ __forceinline__ void compute_scores_and_dp(
    ScoreAccumulator<Shape>& s_acc, ScoreAccumulator<Shape>& dp_acc,
    const FragmentReader<typename Shape::KvTile, Operand::a_mk>& k_as_a,
    const FragmentReader<typename Shape::KvTile, Operand::a_mk>& v_as_a,
    const std::uint32_t (&k_frag)[Shape::kKvFragments][4],
    const std::uint32_t (&v_frag)[Shape::kKvFragments][4],
    const FragmentReader<typename Shape::QTile, Operand::b_nk>& q_as_b,
    const FragmentReader<typename Shape::QTile, Operand::b_nk>& do_as_b, int key_row0,
    int score_col0) {
  using Element = typename Shape::Element;
  constexpr int kMt = Shape::kKeyTiles;
#pragma unroll
  for (int k0 = 0; k0 < Shape::kHeadDim; k0 += 16) {
    std::uint32_t a_k[kMt][4], a_v[kMt][4];
    if constexpr (Shape::kKvInRegisters) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        a_k[0][r] = k_frag[k0 / 16][r];
        a_v[0][r] = v_frag[k0 / 16][r];
      }
    } else {
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        k_as_a.load(a_k[mt], key_row0 + 16 * mt, k0);
        v_as_a.load(a_v[mt], key_row0 + 16 * mt, k0);
      }
    }
#pragma unroll
    for (int n = 0; n < Shape::kScoreCols / 16; ++n) {
      std::uint32_t b_q[4], b_do[4];
      q_as_b.load(b_q, score_col0 + 16 * n, k0);
      do_as_b.load(b_do, score_col0 + 16 * n, k0);
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        mma_m16n8k16<Element>(s_acc[mt][2 * n], a_k[mt], {b_q[0], b_q[1]});
        mma_m16n8k16<Element>(s_acc[mt][2 * n + 1], a_k[mt], {b_q[2], b_q[3]});
        mma_m16n8k16<Element>(dp_acc[mt][2 * n], a_v[mt], {b_do[0], b_do[1]});
        mma_m16n8k16<Element>(dp_acc[mt][2 * n + 1], a_v[mt], {b_do[2], b_do[3]});
      }
    }
  }
}

// The dropout decisions of the thread's elements of a step (dropout_keep_bits; all kept in the
// plain kernel). Element e: key tile mt = e / (kScoreCols / 2), and within it
// (e' = e % (kScoreCols / 2)) 8-column block e' / 4, key row g + 8 * ((e' / 2) % 2), query
// column 2t + e' % 2 (the mma accumulator layout).
template <typename Shape, bool kExtras>
__device__ __forceinline__ auto step_keep_bits(const BackwardParams& p, std::uint32_t bh,
                                               std::int64_t i0, std::int64_t j0, int key_row0,
                                               int score_col0, int g, int t) {
  constexpr int kTileElements = Shape::kScoreCols / 2;  // per thread and key tile
  return dropout_keep_bits<Shape::kKeyTiles * kTileElements, kExtras>(
      p, bh, [&](int e, std::int64_t& i, std::int64_t& j) {
        const int mt = e / kTileElements, el = e % kTileElements;
        i = i0 + score_col0 + 8 * (el / 4) + 2 * t + (el % 2);
        j = j0 + key_row0 + 16 * mt + g + 8 * ((el / 2) % 2);
      });
}

// B. P~^T and dS^T element by element (score_gradient.cuh), packed to 16 bits: two 8-column
// blocks of accumulators are exactly one A fragment of the next products, so when a warp owns
// all query columns (kColumnWarps == 1) P~^T never leaves registers and dS^T goes to shared
// memory only for the dQ product. `lse_log2`, `delta`: the step's rows in shared memory;
// `band`, `lane_band`: the mask as bounds on key row - query column (element_mask: the step
// needs the test); `keep_bits`: step_keep_bits.
template <typename Shape, bool kExtras, bool kStoreFragments, typename Bits>
__device__ __forceinline__ void recompute_p_and_ds(
    ScoreFragments<Shape>& p_frag, ScoreFragments<Shape>& ds_frag,
    const ScoreAccumulator<Shape>& s_acc, const ScoreAccumulator<Shape>& dp_acc,
    const BackwardParams& p, const float* lse_log2, const float* delta, bool element_mask,
    const TileBand& band, int lane_band, Bits keep_bits, const MainSmem<Shape>& smem,
    int key_row0, int score_col0, int g, int t) {
  using Element = typename Shape::Element;
  using ScoreTile = typename Shape::ScoreTile;
  constexpr int kMt = Shape::kKeyTiles;
  constexpr int kTileElements = Shape::kScoreCols / 2;  // per thread and key tile
  with_score_flags<kExtras>(p.softcap > 0.0f, element_mask, p.dropout.threshold != 0,
                   [&](auto softcap_flag, auto mask_flag, auto dropout_flag) {
    constexpr bool kSoftcap = decltype(softcap_flag)::value;
    constexpr bool kMasked = decltype(mask_flag)::value;
    constexpr bool kDropout = decltype(dropout_flag)::value;
#pragma unroll
    for (int n = 0; n < Shape::kScoreCols / 8; ++n) {
      const int col = score_col0 + 8 * n + 2 * t;  // query within the tile (and col + 1)
      const float2 lse_pair = *reinterpret_cast<const float2*>(lse_log2 + col);
      const float2 delta_pair = *reinterpret_cast<const float2*>(delta + col);
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float p_dropped[2], ds[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int e = mt * kTileElements + 4 * n + 2 * half + c;
            // row - col - c = lane_band + 16 mt + 8 half - 8 n - c
            const int rel = lane_band + 16 * mt + 8 * half - 8 * n - c;
            const int key_row = key_row0 + 16 * mt + 8 * half + g;
            const bool visible =
                !kMasked || (rel >= band.lo && rel <= band.hi && key_row < band.key_rows);
            const ScoreGradient sg = score_gradient<kSoftcap, kDropout>(
                p, s_acc[mt][n][2 * half + c], dp_acc[mt][n][2 * half + c],
                c ? lse_pair.y : lse_pair.x, c ? delta_pair.y : delta_pair.x, visible,
                (keep_bits >> e) & 1u);
            p_dropped[c] = sg.p_dropped;
            ds[c] = sg.ds;
          }
          // a0/a1 hold rows g/g+8 of the first 8 columns, a2/a3 of the second.
          const int reg = (n % 2) * 2 + half;
          p_frag[mt][n / 2][reg] = pack_pair<Element>(p_dropped[0], p_dropped[1]);
          ds_frag[mt][n / 2][reg] = pack_pair<Element>(ds[0], ds[1]);
          if constexpr (!kStoreFragments) {
            const int row = key_row0 + 16 * mt + g + 8 * half;  // key within the tile
            *pair_address<ScoreTile>(smem.ds(), row, col) = ds_frag[mt][n / 2][reg];
            if constexpr (Shape::kColumnWarps > 1) {
              *pair_address<ScoreTile>(smem.p(), row, col) = p_frag[mt][n / 2][reg];
            }
          }
        }
      }
    }
  });
}

// sm90: dS^T (and P~^T when other warps need it) leave as whole 16x16 fragments, one stmatrix
// each instead of eight 4-byte stores.
template <typename Shape>
__device__ __forceinline__ void store_score_fragments(
    const ScoreFragments<Shape>& p_frag, const ScoreFragments<Shape>& ds_frag,
    const FragmentReader<typename Shape::ScoreTile, Operand::a_mk>& p_as_a,
    const FragmentReader<typename Shape::ScoreTile, Operand::a_mk>& ds_as_a, int key_row0,
    int score_col0) {
#pragma unroll
  for (int mt = 0; mt < Shape::kKeyTiles; ++mt) {
#pragma unroll
    for (int kb = 0; kb < Shape::kScoreCols / 16; ++kb) {
      ds_as_a.store(ds_frag[mt][kb], key_row0 + 16 * mt, score_col0 + 16 * kb);
      if constexpr (Shape::kColumnWarps > 1) {
        p_as_a.store(p_frag[mt][kb], key_row0 + 16 * mt, score_col0 + 16 * kb);
      }
    }
  }
}

// C. dV_j += P~^T dO_i and dK_j += dS^T Q_i for the warp's keys x kGradCols columns (P~^T and
// dS^T from registers when the warp owns all query columns, else from shared memory).
template <typename Shape>
__device__ __forceinline__ void accumulate_dv_dk(
    GradAccumulator<Shape>& dv_acc, GradAccumulator<Shape>& dk_acc,
    const ScoreFragments<Shape>& p_frag, const ScoreFragments<Shape>& ds_frag,
    const FragmentReader<typename Shape::ScoreTile, Operand::a_mk>& p_as_a,
    const FragmentReader<typename Shape::ScoreTile, Operand::a_mk>& ds_as_a,
    const FragmentReader<typename Shape::QTile, Operand::b_kn>& do_as_b_kn,
    const FragmentReader<typename Shape::QTile, Operand::b_kn>& q_as_b_kn, int key_row0,
    int grad_col0) {
  using Element = typename Shape::Element;
  constexpr int kMt = Shape::kKeyTiles;
#pragma unroll
  for (int kk = 0; kk < Shape::kQueryRows / 16; ++kk) {
    std::uint32_t a_p[kMt][4], a_ds[kMt][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) {
      if constexpr (Shape::kColumnWarps == 1) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          a_p[mt][r] = p_frag[mt][kk][r];
          a_ds[mt][r] = ds_frag[mt][kk][r];
        }
      } else {
        p_as_a.load(a_p[mt], key_row0 + 16 * mt, 16 * kk);
        ds_as_a.load(a_ds[mt], key_row0 + 16 * mt, 16 * kk);
      }
    }
#pragma unroll
    for (int n = 0; n < Shape::kGradCols / 16; ++n) {
      std::uint32_t b_do[4], b_q[4];
      do_as_b_kn.load(b_do, 16 * kk, grad_col0 + 16 * n);
      q_as_b_kn.load(b_q, 16 * kk, grad_col0 + 16 * n);
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        mma_m16n8k16<Element>(dv_acc[mt][2 * n], a_p[mt], {b_do[0], b_do[1]});
        mma_m16n8k16<Element>(dv_acc[mt][2 * n + 1], a_p[mt], {b_do[2], b_do[3]});
        mma_m16n8k16<Element>(dk_acc[mt][2 * n], a_ds[mt], {b_q[0], b_q[1]});
        mma_m16n8k16<Element>(dk_acc[mt][2 * n + 1], a_ds[mt], {b_q[2], b_q[3]});
      }
    }
  }
}

// D. dQ_i += dS K_j (unscaled) for the warp's kDqRowTiles x 16 queries x kDqCols columns, added
// into the float32 accumulator: one fragment-ordered 16x8 block of it per accumulator fragment
// (dq_accum.cuh); accum_width == kHeadDim (workspace_layout), so from the warp's first block
// the others follow at compile-time offsets.
template <typename Shape>
__device__ __forceinline__ void accumulate_dq(
    const BackwardParams& p, std::int64_t bh, std::int64_t i0,
    const FragmentReader<typename Shape::ScoreTile, Operand::a_km>& ds_as_a_km,
    const FragmentReader<typename Shape::KvTile, Operand::b_kn>& k_as_b, int dq_row0,
    int dq_col0, int lane) {
  using Element = typename Shape::Element;
  constexpr int kDqMt = Shape::kDqRowTiles;
  constexpr int kHeadDim = Shape::kHeadDim;
  float dq_acc[kDqMt][Shape::kDqCols / 8][4] = {};
#pragma unroll
  for (int k0 = 0; k0 < Shape::kKeyRows; k0 += 16) {
    std::uint32_t a_ds[kDqMt][4];
#pragma unroll
    for (int mt = 0; mt < kDqMt; ++mt) ds_as_a_km.load(a_ds[mt], k0, dq_row0 + 16 * mt);
#pragma unroll
    for (int n = 0; n < Shape::kDqCols / 16; ++n) {
      std::uint32_t b_k[4];
      k_as_b.load(b_k, k0, dq_col0 + 16 * n);
#pragma unroll
      for (int mt = 0; mt < kDqMt; ++mt) {
        mma_m16n8k16<Element>(dq_acc[mt][2 * n], a_ds[mt], {b_k[0], b_k[1]});
        mma_m16n8k16<Element>(dq_acc[mt][2 * n + 1], a_ds[mt], {b_k[2], b_k[3]});
      }
    }
  }
  float* first_block = dq_accum_block(p, bh, (i0 + dq_row0) / 16, dq_col0 / 8, kHeadDim);
#pragma unroll
  for (int mt = 0; mt < kDqMt; ++mt) {
#pragma unroll
    for (int n = 0; n < Shape::kDqCols / 8; ++n) {
      dq_accum_add_fragment(first_block + (mt * (kHeadDim / 8) + n) * kDqAccumBlockFloats, lane,
                            dq_acc[mt][n]);
    }
  }
}

// Epilogue: dV and scale * dK, written once; a piece of a split unit adds them into the unit's
// float32 sums instead (split_unit.cuh; the postprocess writes those out). The piece is worked
// out again from blockIdx.x rather than kept live over the walk.
template <typename Shape>
__device__ __forceinline__ void write_dk_dv(const GradAccumulator<Shape>& dv_acc,
                                            const GradAccumulator<Shape>& dk_acc,
                                            const BackwardParams& p, std::int64_t batch,
                                            std::int64_t kv_head, std::int64_t j0, int key_row0,
                                            int grad_col0, int head_dim, int g, int t) {
  using Element = typename Shape::Element;
  constexpr int kHeadDim = Shape::kHeadDim;
  auto* dk = static_cast<Element*>(p.dk) + batch * p.dk_strides.batch + kv_head * p.dk_strides.head;
  auto* dv = static_cast<Element*>(p.dv) + batch * p.dv_strides.batch + kv_head * p.dv_strides.head;
  const bool split_piece = blockIdx.x >= p.split.whole_units;
  if (split_piece) {
    float* dv_sum = split_unit_sums(p, unit_piece(p.split, blockIdx.x).split_index);
#pragma unroll
    for (int mt = 0; mt < Shape::kKeyTiles; ++mt) {
#pragma unroll
      for (int n = 0; n < Shape::kGradCols / 8; ++n) {
        const int col = grad_col0 + 8 * n + 2 * t;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const std::int64_t j = j0 + key_row0 + 16 * mt + g + 8 * half;
          if (j >= p.k_len || col >= head_dim) continue;
          float* sum = dv_sum + (j - j0) * kHeadDim + col;
          add_pair(sum, dv_acc[mt][n][2 * half], dv_acc[mt][n][2 * half + 1]);
          add_pair(sum + Shape::kKeyRows * kHeadDim, dk_acc[mt][n][2 * half] * p.scale,
                   dk_acc[mt][n][2 * half + 1] * p.scale);
        }
      }
    }
    return;
  }
  // Whole units store, in whole 32-byte sectors (common/sector_store.cuh); head_dim is a
  // multiple of 8, so an 8-column tile is stored whole or not at all.
  const int col = grad_col0 + sector_store_column(t);
  const int col_tiles = (head_dim - grad_col0) / 8;  // this warp's tiles below head_dim
#pragma unroll
  for (int mt = 0; mt < Shape::kKeyTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const std::int64_t j = j0 + key_row0 + 16 * mt + g + 8 * half;
      const bool row_in = j < p.k_len;
      Element* dk_row = dk + (row_in ? j * p.dk_strides.row : 0) + col;
      Element* dv_row = dv + (row_in ? j * p.dv_strides.row : 0) + col;
      store_accumulator_row(dv_row, dv_acc[mt], half, 1.0f, col_tiles, row_in, t);
      store_accumulator_row(dk_row, dk_acc[mt], half, p.scale, col_tiles, row_in, t);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------------

// kExtras: the instantiation that also handles softcap and dropout (tested per tile inside);
// the plain one leaves their code out, which saves it registers and spills (ptxas, sm_90a,
// D=128: 108 -> 56 bytes of spill stores).
template <typename Element, int kHeadDim, bool kExtras>
__global__ void __launch_bounds__(MainKernelShape<Element, kHeadDim>::kThreads,
                                  MainTile<kHeadDim>::kMinBlocksPerSm)
    bwd_main_kernel(const __grid_constant__ BackwardParams p, bool accumulate_dq_here) {
  using Shape = MainKernelShape<Element, kHeadDim>;
  using KvTile = typename Shape::KvTile;
  using QTile = typename Shape::QTile;
  using ScoreTile = typename Shape::ScoreTile;
  constexpr int kKeyRows = Shape::kKeyRows;
  constexpr int kQueryRows = Shape::kQueryRows;
  constexpr bool kStoreFragments = kStmatrixAvailable && FLASHPP_BWD_STMATRIX;

  // 1024-byte aligned: the bulk copies' 128-byte swizzle is a function of the shared address.
  extern __shared__ __align__(1024) unsigned char main_smem[];
  poison_dynamic_smem(main_smem);  // test builds only (poison.cuh)
  const MainSmem<Shape> smem{main_smem};

  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int g = lane / 4;  // accumulator row within a 16-row block (and g + 8)
  const int t = lane % 4;  // accumulator column pair within an 8-column block

  // Which (key tile, kv head, batch) this block owns: the key tiles of a (group of) head(s) are
  // neighbours in launch order, so they share the same Q/dO through L2; under a causal mask the
  // first key tiles (seen by the most queries) start first (common/block_order.cuh).
  // A block walks a whole unit or, in a split last wave (tail_split.hpp), a range of its steps.
  const std::int64_t key_tiles = (p.k_len + kKeyRows - 1) / kKeyRows;
  const UnitPiece piece = unit_piece(p.split, blockIdx.x);
  const BlockItem item = block_item(piece.unit, key_tiles, p.batch * p.kv_heads, p.heads_per_group);
  const std::int64_t key_tile = item.rank;
  const std::int64_t kv_head = item.head % p.kv_heads;
  const std::int64_t batch = item.head / p.kv_heads;
  const std::int64_t j0 = key_tile * kKeyRows;
  const std::int64_t j1 = j0 + kKeyRows < p.k_len ? j0 + kKeyRows : p.k_len;
  const int head_dim = static_cast<int>(p.head_dim);

  // The walk: every query head of the group x every query tile that sees this key tile.
  const RowRange rows = rows_seeing_keys(p.mask, j0, j1, p.q_len);
  const std::int64_t first_query_tile = rows.begin / kQueryRows;
  const std::int64_t query_tiles =
      rows.end > rows.begin ? (rows.end + kQueryRows - 1) / kQueryRows - first_query_tile : 0;
  const StepRange range = piece_steps(p.split, piece, query_tiles * p.heads_per_kv);
  const std::int64_t steps = range.end - range.begin;
  auto next_position = [&](StepPosition s) {
    return ++s.tile == first_query_tile + query_tiles
               ? StepPosition{s.head + 1, first_query_tile}
               : s;
  };
  const bool bulk_copies = Shape::kBulkCopies && FLASHPP_BWD_TMA && p.use_tma;
  const QueryStepLoader<Shape> loader{p, smem, static_cast<const Element*>(p.q),
                                      static_cast<const Element*>(p.dout), batch, head_dim, tid,
                                      bulk_copies};
  if (bulk_copies) {
    if (tid == 0) {
      mbarrier_init_single(smem.bar(0));
      mbarrier_init_single(smem.bar(1));
    }
    __syncthreads();
  }

  // K_j and V_j once, together with the first query step. A tile no query sees (causal,
  // windows) loads nothing and only writes its zero dK, dV.
  StepPosition pos{kv_head * p.heads_per_kv, first_query_tile};
  if (range.begin > 0) {  // query_tiles > 0 here
    pos = StepPosition{pos.head + range.begin / query_tiles,
                       first_query_tile + range.begin % query_tiles};
  }
  if (steps > 0) {
    load_rows_async<KvTile, Shape::kThreads>(
        smem.k(), static_cast<const Element*>(p.k) + batch * p.k_strides.batch + kv_head * p.k_strides.head,
        p.k_strides.row, j0, p.k_len, head_dim, tid);
    load_rows_async<KvTile, Shape::kThreads>(
        smem.v(), static_cast<const Element*>(p.v) + batch * p.v_strides.batch + kv_head * p.v_strides.head,
        p.v_strides.row, j0, p.k_len, head_dim, tid);
    if (!bulk_copies) {
      loader.load(pos, 0);
    } else if (tid == 0) {
      loader.issue_bulk(pos, 0);
    }
  }
  cp_async_commit();

  // Warp placement in steps A-C.
  const int key_warp = warp % Shape::kKeyWarps;
  const int col_warp = warp / Shape::kKeyWarps;
  const int key_row0 = Shape::kKeysPerWarp * key_warp;  // the warp's first key within the tile
  const int score_col0 = col_warp * Shape::kScoreCols;
  const int grad_col0 = col_warp * Shape::kGradCols;
  // Warp placement in step D.
  const int dq_row0 = 16 * Shape::kDqRowTiles * (warp % Shape::kDqRowWarps);
  const int dq_col0 = (warp / Shape::kDqRowWarps) * Shape::kDqCols;

  float dv_acc[Shape::kKeyTiles][Shape::kGradCols / 8][4] = {};
  float dk_acc[Shape::kKeyTiles][Shape::kGradCols / 8][4] = {};

  // K and V stay put for the whole walk, so their readers are built once.
  const FragmentReader<KvTile, Operand::a_mk> k_as_a(smem.k(), lane), v_as_a(smem.v(), lane);
  const FragmentReader<KvTile, Operand::b_kn> k_as_b(smem.k(), lane);
  const FragmentReader<ScoreTile, Operand::a_mk> p_as_a(smem.p(), lane), ds_as_a(smem.ds(), lane);
  const FragmentReader<ScoreTile, Operand::a_km> ds_as_a_km(smem.ds(), lane);

  // Shape::kKvInRegisters: the warp's K and V rows as A fragments, loaded once for the walk.
  std::uint32_t k_frag[Shape::kKvFragments][4], v_frag[Shape::kKvFragments][4];
  if (Shape::kKvInRegisters && steps > 0) {  // block-uniform: the barrier inside is safe
    cp_async_wait<0>();
    __syncthreads();  // K and V have landed
#pragma unroll
    for (int f = 0; f < Shape::kKvFragments; ++f) {
      k_as_a.load(k_frag[f], key_row0, 16 * f);
      v_as_a.load(v_frag[f], key_row0, 16 * f);
    }
  }

  for (std::int64_t step = 0; step < steps; ++step) {
    const int stage = static_cast<int>(step & 1);
    cp_async_wait<0>();
    __syncthreads();  // this step's tiles have landed; every warp is done with the last step
    const StepPosition next = next_position(pos);
    if (step + 1 < steps) {
      if (!bulk_copies) {
        loader.load(next, stage ^ 1);
      } else if (tid == 0) {
        loader.issue_bulk(next, stage ^ 1);
      }
    }
    cp_async_commit();
    // Stage `stage` is used for the (step / 2)-th time: its barrier's phase parity.
    if (bulk_copies) mbarrier_wait(smem.bar(stage), static_cast<std::uint32_t>(step >> 1) & 1u);

    const std::int64_t h = pos.head;
    const std::int64_t i0 = pos.tile * kQueryRows;
    pos = next;
    const FragmentReader<QTile, Operand::b_nk> q_as_b(smem.q(stage), lane),
        do_as_b(smem.dout(stage), lane);
    const FragmentReader<QTile, Operand::b_kn> q_as_b_kn(smem.q(stage), lane),
        do_as_b_kn(smem.dout(stage), lane);

    // A. S^T = K Q^T, dP^T = V dO^T
    ScoreAccumulator<Shape> s_acc = {};
    ScoreAccumulator<Shape> dp_acc = {};
    compute_scores_and_dp<Shape>(s_acc, dp_acc, k_as_a, v_as_a, k_frag, v_frag, q_as_b, do_as_b,
                                 key_row0, score_col0);

    // B. P = exp(S - L) (dropout: P~), dS = P o (dP - D). The mask rule
    // -left <= (j0 + row) - (i0 + col) - shift <= right, turned once per step into 32-bit bounds
    // on row - col (common/tile_range.hpp), so that an element's test is integer compares
    // against a lane constant plus a compile-time offset; and the key bound row < Nk - j0.
    const std::int64_t i1 = i0 + kQueryRows < p.q_len ? i0 + kQueryRows : p.q_len;
    const bool element_mask = tile_needs_element_test(p.mask, i0, i1, j0, j1, kKeyRows);
    const TileBand band = tile_band<kKeyRows, kQueryRows>(p.mask, j0, j1, i0);
    const int lane_band = key_row0 - score_col0 + g - 2 * t;  // row - col of the lane's element 0
    const auto bh = static_cast<std::uint32_t>(batch * p.q_heads + h);
    const auto keep_bits =
        step_keep_bits<Shape, kExtras>(p, bh, i0, j0, key_row0, score_col0, g, t);
    ScoreFragments<Shape> p_frag;   // A fragments of P~^T
    ScoreFragments<Shape> ds_frag;  // A fragments of dS^T
    recompute_p_and_ds<Shape, kExtras, kStoreFragments>(
        p_frag, ds_frag, s_acc, dp_acc, p, smem.lse(stage), smem.delta(stage), element_mask, band,
        lane_band, keep_bits, smem, key_row0, score_col0, g, t);
    if constexpr (kStoreFragments) {
      store_score_fragments<Shape>(p_frag, ds_frag, p_as_a, ds_as_a, key_row0, score_col0);
    }
    // When the warp owns all query columns, step C reads only its own registers and the Q/dO
    // tiles that were complete at the top of the step, so it runs before the barrier: warps that
    // finish B early start their tensor-core work while the others are still in B.
    if constexpr (Shape::kColumnWarps > 1) __syncthreads();  // P~^T, dS^T complete

    // C. dV += P~^T dO, dK += dS^T Q
    accumulate_dv_dk<Shape>(dv_acc, dk_acc, p_frag, ds_frag, p_as_a, ds_as_a, do_as_b_kn,
                            q_as_b_kn, key_row0, grad_col0);

    if constexpr (Shape::kColumnWarps == 1) __syncthreads();  // dS^T complete

    // D. dQ += dS K (skipped in deterministic mode, where bwd_dq_kernel computes dQ)
    if (accumulate_dq_here) {
      accumulate_dq<Shape>(p, batch * p.q_heads + h, i0, ds_as_a_km, k_as_b, dq_row0, dq_col0,
                           lane);
    }
  }

  // dV, scale * dK
  write_dk_dv<Shape>(dv_acc, dk_acc, p, batch, kv_head, j0, key_row0, grad_col0, head_dim, g, t);
}

}  // namespace flashpp::cuda::sm80
