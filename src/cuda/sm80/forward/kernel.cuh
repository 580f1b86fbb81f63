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
#include "kv_pipeline.cuh"

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
  static constexpr float kRescaleSlackLog2 = 0.0f;  // the exact running max (forward_steps.cuh)
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

// Dropout on P, in the kernel instantiation that has it (kExtras) and when p asks for it: either
// the keep decisions of this tile, for accumulate_pv to apply to the packed P (the returned
// pointer, to `keep`), or (tile sizes that dropout_signs does not cover) applied to s at once.
// Null when nothing is left to apply.
template <typename Traits, bool kExtras>
__device__ __forceinline__ const DropoutSigns<Traits>* apply_dropout(
    DropoutSigns<Traits>& keep, float (&s)[Traits::kMTiles][Traits::kNTiles][4],
    const ForwardParams& p, std::uint32_t bh, std::int64_t row0, std::int64_t key0, int lane) {
  if constexpr (kExtras) {
    if (p.dropout.threshold != 0) {
      if constexpr (kDropoutBySigns<Traits>) {
        dropout_signs<Traits>(keep, p, bh, row0, key0, lane);
        return &keep;
      } else {
        apply_dropout_per_element<Traits>(s, p, bh, row0, key0, lane);
      }
    }
  }
  return nullptr;
}

// O = 0, running max = -inf, running sum = 0: the state before the first key tile.
template <typename Traits>
__device__ __forceinline__ void clear_accumulators(float (&o)[Traits::kMTiles][Traits::kDTiles][4],
                                                   float (&row_max)[Traits::kMTiles][2],
                                                   float (&row_sum)[Traits::kMTiles][2]) {
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < Traits::kDTiles; ++dt)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[mt][dt][c] = 0.0f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.0f;
  }
}

// Which query tile of which (batch, head) a block computes. Later query tiles see more keys
// under a causal mask: they start first (common/block_order.cuh).
struct ForwardBlock {
  std::int64_t bh, b, h, h_kv;
  std::int64_t m0, m_end;  // query rows [m0, m_end)
};

template <int kBlockM>
__device__ __forceinline__ ForwardBlock forward_block(const ForwardParams& p) {
  const BlockItem item = block_item(static_cast<std::int64_t>(blockIdx.y) * gridDim.x + blockIdx.x,
                                    gridDim.x, gridDim.y, p.heads_per_group);
  const std::int64_t m_block = gridDim.x - 1 - item.rank;
  const std::int64_t bh = p.bh_offset + item.head;
  const std::int64_t b = bh / p.q_heads, h = bh % p.q_heads, h_kv = h / p.heads_per_kv;
  const std::int64_t m0 = m_block * kBlockM;
  const std::int64_t m_end = m0 + kBlockM < p.q_len ? m0 + kBlockM : p.q_len;
  return ForwardBlock{bh, b, h, h_kv, m0, m_end};
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
  extern __shared__ __align__(128) unsigned char smem_raw[];
  poison_dynamic_smem(smem_raw);  // test builds only (poison.cuh)
  const ForwardSmem<Traits> smem(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const ForwardBlock blk = forward_block<Traits::kBlockM>(p);
  const int warp_row0 = warp * Traits::kRowsPerWarp;  // this warp's first row in the tile

  float o[Traits::kMTiles][Traits::kDTiles][4];
  float row_max[Traits::kMTiles][2], row_sum[Traits::kMTiles][2];
  clear_accumulators<Traits>(o, row_max, row_sum);

  // The key tiles this query tile visits, and of those the run that needs no element mask
  // (common/tile_range.hpp). An empty range writes O = 0, lse = -inf.
  const KeyTileRange keys = key_tile_range(p.mask, p.k_len, blk.m0, blk.m_end, Traits::kBlockN);
  if (keys.empty()) {
    write_output<Traits>(o, row_max, row_sum, p, blk.b, blk.h, blk.m0, warp_row0, lane, smem.q);
    return;
  }

  // Q, and K/V through the ring of stages (kv_pipeline.cuh).
  KvPipeline<Traits, kExtras> kv(p, smem, blk.b, blk.h, blk.h_kv, blk.m0, keys, tid);
  kv.prologue(blk.m0);
  // This warp's Q rows start at warp_row0, a multiple of 16: the swizzle's XOR term is the
  // same as at row 0, so the reader's base just moves down by whole rows.
  const FragmentReader<typename Traits::QTile, Operand::a_mk> q_reader(
      smem.q + Traits::QTile::kRowStepElements(warp_row0), lane);
  // The tiles needing no element mask, counted from keys.begin like `it`: [unmasked_first,
  // unmasked_end), so that a tile costs two 32-bit compares.
  const int unmasked_first = static_cast<int>(keys.unmasked_begin - keys.begin);
  const int unmasked_end = static_cast<int>(keys.unmasked_end - keys.begin);
  kv.start_loop();
  const auto bh32 = static_cast<std::uint32_t>(blk.bh);

  for (int it = 0; it < kv.num_tiles; ++it) {
    const int stage = kv.wait_and_prefetch(it);  // tile `it` landed; a later one loading
    // The lane-dependent parts of these readers are loop-invariant (hoisted by the compiler);
    // per tile only the stage base changes.
    const FragmentReader<typename Traits::KVTile, Operand::b_nk> k_reader(smem.k_stage(stage), lane);
    const FragmentReader<typename Traits::KVTile, Operand::b_kn> v_reader(smem.v_stage(stage), lane);

    // S = Q K^T (scale folded into the softmax's exp2)
    float s[Traits::kMTiles][Traits::kNTiles][4];
    compute_scores<Traits>(s, q_reader, k_reader);
    const std::int64_t n0 = (keys.begin + it) * Traits::kBlockN;
    if constexpr (kExtras) {
      if (p.softcap > 0.0f) apply_softcap<Traits>(s, p);
    }
    // Same answer as n0 + block_n > Nk || (mask active && !tile_fully_visible(m0, m_end, n0, ..)).
    if (it < unmasked_first || it >= unmasked_end) {
      apply_mask<Traits>(s, p, blk.m0 + warp_row0, n0, lane);
    }

    // m' = max(m, rowmax S), P = exp(S - m'), l = exp(m - m') l + rowsum P, O *= exp(m - m')
    rescale_output<Traits>(o, online_softmax_update<Traits>(s, row_max, row_sum, p.scale_log2));

    // Dropout on P (extras kernel): decided now, applied as P is packed for P V.
    DropoutSigns<Traits> keep;
    const DropoutSigns<Traits>* dropped =
        apply_dropout<Traits, kExtras>(keep, s, p, bh32, blk.m0 + warp_row0, n0, lane);

    // O += P V
    kv.wait_first_v(it);
    accumulate_pv<Traits>(o, s, v_reader, dropped);
  }
  kv.drain();

  // O /= l, lse = m * scale + log l
  write_output<Traits>(o, row_max, row_sum, p, blk.b, blk.h, blk.m0, warp_row0, lane, smem.q);
}

}  // namespace flashpp::cuda::sm80
