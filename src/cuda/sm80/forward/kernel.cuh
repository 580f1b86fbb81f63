// The FlashAttention-2 forward for sm80+ (Ampere, Ada, and Hopper through mma.sync).
//
// One thread block computes one query tile (block_m rows) of one (batch, head):
//   1. the Q tile is copied to shared memory once;
//   2. K/V tiles of block_n keys stream through a ring of `stages` shared-memory buffers with
//      cp.async, the next tiles loading while the current one is used;
//   3. per K/V tile, each warp computes its rows of S = Q K^T with mma.sync into registers, masks
//      (only on tiles that need it), updates the running row max and sum (online softmax, exp2
//      with scale*log2(e) folded in), converts P to 16 bits in registers and adds P V into the
//      float32 O accumulator, also in registers;
//   4. O is divided by the row sum and stored; lse = max*scale + ln(sum) is stored.
// Tiles that the mask hides entirely are never visited; rows that see no key give O = 0 and
// lse = -inf.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "../../common/block_order.cuh"
#include "../../ptx/cp_async.cuh"
#include "../../ptx/ldmatrix.cuh"
#include "../../common/math.cuh"
#include "../../ptx/mma.cuh"
#include "../../common/swizzle.cuh"
#include "../../common/swizzled_fragments.cuh"
#include "../../common/tile_copy.cuh"
#include "../../common/tile_range.hpp"
#include "../../common/warp_reduce.cuh"
#include "../../common/forward_params.hpp"
#include "../../common/forward_steps.cuh"
#include "../../common/poison.cuh"

namespace flashpp::cuda::sm80 {

// Compile-time shape of one instantiation: element type, head dim and tile config.
template <typename Element_, int kHeadDim_, typename Config>
struct ForwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = Config::block_m;
  static constexpr int kBlockN = Config::block_n;
  static constexpr int kWarps = Config::warps;
  static constexpr int kStages = Config::stages;
  static constexpr int kMinBlocks = Config::min_blocks;
  // Skip the O rescale when no row of the warp raised its max (see online_softmax_update): a
  // gain where O is large next to the score tile (D >= 128); at D = 64 the vote and branch cost
  // more than the FMULs they save (measured, docs/perf-notes.md).
  static constexpr bool kSkipUnchangedRescale = kHeadDim >= 128;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // 16-row mma tiles per warp
  static constexpr int kNTiles = kBlockN / 8;        // 8-key column tiles of S
  static constexpr int kDTiles = kHeadDim / 8;       // 8-wide column tiles of O
  static_assert(kRowsPerWarp % 16 == 0, "each warp owns a multiple of 16 query rows");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 32 == 0, "tile shapes");
  static_assert(kStages >= 2, "the K/V ring needs at least two stages");

  using QTile = SwizzledTile<kBlockM, kHeadDim>;
  using KVTile = SwizzledTile<kBlockN, kHeadDim>;
  static constexpr int kSmemBytes = QTile::kBytes + 2 * kStages * KVTile::kBytes;
};

// ---------------------------------------------------------------------------------------------
// Per-warp tile products (fragment layouts: see ptx/mma.cuh and ptx/ldmatrix.cuh)
// ---------------------------------------------------------------------------------------------

// S[mt][nt] = Q(rows of this warp) K(tile)^T, accumulated over the head dim.
// q_reader addresses this warp's first Q row (Operand::a_mk); k_reader the K tile of this stage,
// stored [key][d] (Operand::b_nk: B = K^T). Each load is one XOR and add on compile-time offsets.
template <typename Traits>
__device__ __forceinline__ void compute_scores(
    float (&s)[Traits::kMTiles][Traits::kNTiles][4],
    const FragmentReader<typename Traits::QTile, Operand::a_mk>& q_reader,
    const FragmentReader<typename Traits::KVTile, Operand::b_nk>& k_reader) {
  using Element = typename Traits::Element;
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[mt][nt][c] = 0.0f;

#pragma unroll
  for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
    // A fragments: rows mt*16.. of the warp, columns kk*16..
    std::uint32_t a[Traits::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < Traits::kMTiles; ++mt) q_reader.load(a[mt], mt * 16, kk * 16);
    // B fragments for two 8-key tiles at once (keys np*16 .. +7 in regs 0-1, +8 .. +15 in 2-3).
#pragma unroll
    for (int np = 0; np < Traits::kNTiles / 2; ++np) {
      std::uint32_t b[4];
      k_reader.load(b, np * 16, kk * 16);
      const std::uint32_t b_lo[2] = {b[0], b[1]};
      const std::uint32_t b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mt = 0; mt < Traits::kMTiles; ++mt) {
        mma_m16n8k16<Element>(s[mt][2 * np], a[mt], b_lo);
        mma_m16n8k16<Element>(s[mt][2 * np + 1], a[mt], b_hi);
      }
    }
  }
}

// O[mt][dt] += P[mt] V(tile). P arrives as float accumulators of S's layout; two adjacent 8-key
// tiles of it are exactly one 16x16 A fragment once packed to 16 bits. `dropped`: the dropout
// decisions to apply to the packed P, or null.
template <typename Traits>
__device__ __forceinline__ void accumulate_pv(
    float (&o)[Traits::kMTiles][Traits::kDTiles][4],
    const float (&p)[Traits::kMTiles][Traits::kNTiles][4],
    const FragmentReader<typename Traits::KVTile, Operand::b_kn>& v_reader,
    const DropoutSigns<Traits>* dropped) {
  using Element = typename Traits::Element;
#pragma unroll
  for (int kk = 0; kk < Traits::kBlockN / 16; ++kk) {
    std::uint32_t a[Traits::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < Traits::kMTiles; ++mt) {
      a[mt][0] = pack_pair<Element>(p[mt][2 * kk][0], p[mt][2 * kk][1]);
      a[mt][1] = pack_pair<Element>(p[mt][2 * kk][2], p[mt][2 * kk][3]);
      a[mt][2] = pack_pair<Element>(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
      a[mt][3] = pack_pair<Element>(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
      if (dropped != nullptr) apply_dropout_signs<Traits>(a[mt], *dropped, mt, kk);
    }
    // V is [key][d] in shared memory (Operand::b_kn: B = V); the transposed ldmatrix yields
    // the B fragments of d tiles dp*16 (regs 0-1) and dp*16 + 8 (regs 2-3) for keys kk*16 ...
#pragma unroll
    for (int dp = 0; dp < Traits::kHeadDim / 16; ++dp) {
      std::uint32_t b[4];
      v_reader.load(b, kk * 16, dp * 16);
      const std::uint32_t b_lo[2] = {b[0], b[1]};
      const std::uint32_t b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mt = 0; mt < Traits::kMTiles; ++mt) {
        mma_m16n8k16<Element>(o[mt][2 * dp], a[mt], b_lo);
        mma_m16n8k16<Element>(o[mt][2 * dp + 1], a[mt], b_hi);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------------

// kExtras: the instantiation that also handles softcap and dropout (runtime-checked inside;
// never register-capped by min_blocks, its Philox rounds need the room);
// the plain one leaves their code out so it does not cost registers on the common path.
template <typename Traits, bool kExtras>
__global__ void __launch_bounds__(Traits::kThreads, kExtras ? 1 : Traits::kMinBlocks)
    flash_fwd_kernel(const __grid_constant__ ForwardParams p) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kStages = Traits::kStages;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  poison_dynamic_smem(smem_raw);  // test builds only (poison.cuh)
  Element* q_smem = reinterpret_cast<Element*>(smem_raw);
  Element* kv_smem = q_smem + Traits::QTile::kElements;  // stage s: K at 2s, V at 2s+1
  auto k_stage = [&](int s) { return kv_smem + (2 * s) * Traits::KVTile::kElements; };
  auto v_stage = [&](int s) { return kv_smem + (2 * s + 1) * Traits::KVTile::kElements; };

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Later query tiles see more keys under a causal mask: they start first (common/block_order.cuh).
  const BlockItem item = block_item(static_cast<std::int64_t>(blockIdx.y) * gridDim.x + blockIdx.x,
                                    gridDim.x, gridDim.y, p.heads_per_group);
  const std::int64_t m_block = gridDim.x - 1 - item.rank;
  const std::int64_t bh = p.bh_offset + item.head;
  const std::int64_t b = bh / p.q_heads, h = bh % p.q_heads, h_kv = h / p.heads_per_kv;
  const std::int64_t m0 = m_block * kBlockM;
  const std::int64_t m_end = m0 + kBlockM < p.q_len ? m0 + kBlockM : p.q_len;
  const int warp_row0 = warp * Traits::kRowsPerWarp;

  float o[Traits::kMTiles][Traits::kDTiles][4];
  float row_max[Traits::kMTiles][2], row_sum[Traits::kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < Traits::kDTiles; ++dt)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[mt][dt][c] = 0.0f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.0f;
  }

  // The key tiles this query tile visits, and of those the run that needs no element mask
  // (common/tile_range.hpp). An empty range writes O = 0, lse = -inf.
  const KeyTileRange keys = key_tile_range(p.mask, p.k_len, m0, m_end, kBlockN);
  if (keys.empty()) {
    write_output<Traits>(o, row_max, row_sum, p, b, h, m0, warp_row0, lane, q_smem);
    return;
  }
  const std::int64_t tile_begin = keys.begin;
  const std::int64_t tile_end = keys.end;

  const Element* q_gmem = static_cast<const Element*>(p.q) + b * p.q_strides.batch +
                          h * p.q_strides.head + m0 * p.q_strides.row;
  const Element* k_gmem =
      static_cast<const Element*>(p.k) + b * p.k_strides.batch + h_kv * p.k_strides.head;
  const Element* v_gmem =
      static_cast<const Element*>(p.v) + b * p.v_strides.batch + h_kv * p.v_strides.head;
  const int chunks_valid = p.head_dim / 8;

  // K/V tiles wholly inside [0, Nk) (all but possibly the last) take a lighter copy path when
  // the block's threads cover whole rows: each thread keeps one chunk column of the tile and
  // steps down by kKvRowStep rows, so the copy of a tile is one 64-bit add per chunk from a
  // per-thread source pointer that the main loop advances by one tile per iteration (no
  // per-tile n0 * stride products, no per-chunk selects). A chunk past the true head dim is
  // zero-filled (src-size 0, nothing read); it is given its row's chunk 0, an address inside the
  // tensor. Other shapes, the last partial tile, and the extras kernel (whose Philox code leaves
  // no registers for the loop-carried pointers: ptxas spills more) use load_tile_async.
  using KVTile = typename Traits::KVTile;
  constexpr bool kKvWholeRows = !kExtras && Traits::kThreads % KVTile::kChunks == 0 &&
                                (Traits::kThreads / KVTile::kChunks) % 8 == 0;
  constexpr int kKvRowStep = kKvWholeRows ? Traits::kThreads / KVTile::kChunks : 8;
  constexpr int kKvCopies = KVTile::kElements / 8 / Traits::kThreads;  // chunks per thread
  const int kv_row0 = tid / KVTile::kChunks, kv_chunk = tid % KVTile::kChunks;
  const bool kv_chunk_valid = kv_chunk < chunks_valid;
  const int kv_col = kv_chunk_valid ? kv_chunk * 8 : 0;
  const int kv_dst_offset = KVTile::chunk_offset(kv_row0, kv_chunk);

  // k_from / v_from: this thread's first chunk of a full tile (row kv_row0, column kv_col).
  auto copy_full_kv_tile = [&](const Element* k_from, const Element* v_from, int stage) {
    Element* k_to = k_stage(stage) + kv_dst_offset;
    Element* v_to = v_stage(stage) + kv_dst_offset;
#pragma unroll
    for (int i = 0; i < kKvCopies; ++i) {
      cp_async_16(k_to + i * KVTile::kRowStepElements(kKvRowStep), k_from, kv_chunk_valid);
      cp_async_16(v_to + i * KVTile::kRowStepElements(kKvRowStep), v_from, kv_chunk_valid);
      k_from += kKvRowStep * p.k_strides.row;
      v_from += kKvRowStep * p.v_strides.row;
    }
  };

  // A tile whose rows may pass Nk: the checked loader zero-fills rows >= Nk.
  auto load_partial_kv_tile = [&](std::int64_t tile, int stage) {
    const std::int64_t n0 = tile * kBlockN;
    load_tile_async<KVTile, Traits::kThreads>(k_stage(stage), k_gmem + n0 * p.k_strides.row,
                                              p.k_strides.row, p.k_len - n0, chunks_valid, tid);
    load_tile_async<KVTile, Traits::kThreads>(v_stage(stage), v_gmem + n0 * p.v_strides.row,
                                              p.v_strides.row, p.k_len - n0, chunks_valid, tid);
  };

  auto load_kv_tile = [&](std::int64_t tile, int stage) {
    const std::int64_t n0 = tile * kBlockN;
    const Element* k_src = k_gmem + n0 * p.k_strides.row;
    const Element* v_src = v_gmem + n0 * p.v_strides.row;
    if (n0 + kBlockN <= p.k_len) {
      if constexpr (kKvWholeRows) {
        copy_full_kv_tile(k_src + kv_row0 * p.k_strides.row + kv_col,
                          v_src + kv_row0 * p.v_strides.row + kv_col, stage);
      } else {
        load_tile_async<KVTile, Traits::kThreads, false>(k_stage(stage), k_src, p.k_strides.row,
                                                         kBlockN, chunks_valid, tid);
        load_tile_async<KVTile, Traits::kThreads, false>(v_stage(stage), v_src, p.v_strides.row,
                                                         kBlockN, chunks_valid, tid);
      }
    } else {
      load_partial_kv_tile(tile, stage);
    }
  };

  // One K or V tile alone (the first tile's K and V go into separate copy groups).
  auto load_single_tile = [&](Element* dst, const Element* gmem, std::int64_t row_stride,
                              std::int64_t tile) {
    const std::int64_t n0 = tile * kBlockN;
    if (n0 + kBlockN <= p.k_len) {
      load_tile_async<KVTile, Traits::kThreads, false>(dst, gmem + n0 * row_stride, row_stride,
                                                       kBlockN, chunks_valid, tid);
    } else {
      load_tile_async<KVTile, Traits::kThreads>(dst, gmem + n0 * row_stride, row_stride,
                                                p.k_len - n0, chunks_valid, tid);
    }
  };

  // Tiles are counted from tile_begin in 32-bit (fewer than 2^31 per row block); there is at
  // least one (key_first <= key_last).
  const int num_tiles = static_cast<int>(tile_end - tile_begin);

  // Prologue, in copy groups: G0 = Q + K0, G1 = V0, then one group per tile 1 .. stages - 2.
  // The first tile's scores wait only for G0, so V0 lands while Q K0^T is computed; P V0 waits
  // for G1. From tile 1 on, tile t is in group t + 1 and kStages + t groups are committed when
  // iteration t waits, which leaves the usual kStages - 2 pending. The extras kernel keeps one
  // group for Q + K0 + V0 (its extra first-tile wait costs ptxas spills there), and every tile t
  // in group t.
  constexpr bool kSplitFirstTile = !kExtras;
  load_tile_async<typename Traits::QTile, Traits::kThreads>(q_smem, q_gmem, p.q_strides.row,
                                                            p.q_len - m0, chunks_valid, tid);
  if constexpr (kSplitFirstTile) {
    load_single_tile(k_stage(0), k_gmem, p.k_strides.row, tile_begin);
    cp_async_commit();
    load_single_tile(v_stage(0), v_gmem, p.v_strides.row, tile_begin);
  } else {
    load_kv_tile(tile_begin, 0);
  }
  cp_async_commit();
#pragma unroll
  for (int s = 1; s < kStages - 1; ++s) {
    if (s < num_tiles) load_kv_tile(tile_begin + s, s);
    cp_async_commit();  // committed even when empty: the wait counts stay uniform
  }

  // This warp's Q rows start at warp_row0, a multiple of 16: the swizzle's XOR term is the
  // same as at row 0, so the reader's base just moves down by whole rows.
  const FragmentReader<typename Traits::QTile, Operand::a_mk> q_reader(
      q_smem + Traits::QTile::kRowStepElements(warp_row0), lane);
  // The tiles needing no element mask, counted from tile_begin like `it`: [unmasked_first,
  // unmasked_end), so that a tile costs two 32-bit compares.
  const int unmasked_first = static_cast<int>(keys.unmasked_begin - tile_begin);
  const int unmasked_end = static_cast<int>(keys.unmasked_end - tile_begin);

  // Prefetches of tiles it < num_full_tiles (counted from tile_begin) read only rows < Nk.
  const std::int64_t full_tile_end = p.k_len / kBlockN < tile_end ? p.k_len / kBlockN : tile_end;
  const int num_full_tiles = static_cast<int>(full_tile_end - tile_begin);
  // The fast copy's source pointers for the first in-loop prefetch, tile_begin + kStages - 1.
  const std::int64_t first_prefetch_n0 = (tile_begin + kStages - 1) * kBlockN;
  const Element* k_next = k_gmem + (first_prefetch_n0 + kv_row0) * p.k_strides.row + kv_col;
  const Element* v_next = v_gmem + (first_prefetch_n0 + kv_row0) * p.v_strides.row + kv_col;

  const auto bh32 = static_cast<std::uint32_t>(bh);
  for (int it = 0; it < num_tiles; ++it) {
    const int stage = it % kStages;
    // Tile `it` has landed for every thread (on the first tile: Q and K0; V0 may be in flight),
    // and every warp is done with the stage the next prefetch overwrites (the one used in the
    // previous iteration).
    if (kSplitFirstTile && it == 0) {
      cp_async_wait<kStages - 1>();
    } else {
      cp_async_wait<kStages - 2>();
    }
    __syncthreads();
    const int prefetch = it + kStages - 1;
    if constexpr (kKvWholeRows) {
      if (prefetch < num_full_tiles) {
        copy_full_kv_tile(k_next, v_next, prefetch % kStages);
      } else if (prefetch < num_tiles) {  // the last tile, cut by Nk
        load_partial_kv_tile(tile_begin + prefetch, prefetch % kStages);
      }
    } else {
      if (prefetch < num_tiles) load_kv_tile(tile_begin + prefetch, prefetch % kStages);
    }
    if constexpr (kKvWholeRows) {
      k_next += kBlockN * p.k_strides.row;
      v_next += kBlockN * p.v_strides.row;
    }
    cp_async_commit();

    // The lane-dependent parts of these readers are loop-invariant (hoisted by the compiler);
    // per tile only the stage base changes.
    const FragmentReader<typename Traits::KVTile, Operand::b_nk> k_reader(k_stage(stage), lane);
    const FragmentReader<typename Traits::KVTile, Operand::b_kn> v_reader(v_stage(stage), lane);
    float s[Traits::kMTiles][Traits::kNTiles][4];
    compute_scores<Traits>(s, q_reader, k_reader);

    const std::int64_t n0 = (tile_begin + it) * kBlockN;
    if constexpr (kExtras) {
      if (p.softcap > 0.0f) apply_softcap<Traits>(s, p);
    }
    // Same answer as n0 + block_n > Nk || (mask active && !tile_fully_visible(m0, m_end, n0, ..)).
    const bool needs_mask = it < unmasked_first || it >= unmasked_end;
    if (needs_mask) apply_mask<Traits>(s, p, m0 + warp_row0, n0, lane);

    rescale_output<Traits>(o, online_softmax_update<Traits>(s, row_max, row_sum, p.scale_log2));
    DropoutSigns<Traits> keep;
    const DropoutSigns<Traits>* dropped = nullptr;
    if constexpr (kExtras) {
      if (p.dropout.threshold != 0) {
        if constexpr (kDropoutBySigns<Traits>) {
          dropout_signs<Traits>(keep, p, bh32, m0 + warp_row0, n0, lane);
          dropped = &keep;
        } else {
          apply_dropout_per_element<Traits>(s, p, bh32, m0 + warp_row0, n0, lane);
        }
      }
    }
    if (kSplitFirstTile && it == 0) {  // V0 (group G1): kStages + 1 groups are committed by now
      cp_async_wait<kStages - 1>();
      __syncthreads();
    }
    accumulate_pv<Traits>(o, s, v_reader, dropped);
  }
  cp_async_wait<0>();  // leave no copy in flight into shared memory that is about to be freed

  write_output<Traits>(o, row_max, row_sum, p, b, h, m0, warp_row0, lane, q_smem);
}

}  // namespace flashpp::cuda::sm80
