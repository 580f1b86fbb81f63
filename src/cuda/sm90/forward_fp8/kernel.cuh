// The FP8 (e4m3) forward for Hopper (sm_90a): the design of ../forward/kernel.cuh (TMA ring,
// warp specialisation, consumer warpgroups taking turns at D = 256 (kPingpong), softmax of tile j
// overlapping P V of tile j-1, a persistent grid walking the items with that kernel's walks)
// with e4m3 wgmma (m64nNk32, twice the bf16 rate) and the three changes 8-bit operands force:
//
// 1. V transposed. 8-bit wgmma reads both operands K-major only, so the B operand of O += P V must
//    be V^T (head dim along rows, keys contiguous). By default a pass before the kernel writes Vt
//    to the workspace (v_transpose.cu) and warp 0 loads its tiles like K's (kVtPass); otherwise
//    (FLASHPP_FP8_V_TRANSPOSE=kernel, kept for A/B runs) warps 1-3 of the producer
//    warpgroup turn each V tile the copy engine delivered ([keys][D], 128-byte swizzled panels)
//    into Vt ([D][128 keys], 128-byte swizzled) with 4-byte loads, byte permutes and 4-byte
//    stores, all free of bank conflicts (transpose_step below); warp 0 issues the copies.
// 2. P from registers in the 8-bit A-fragment layout. The float32 score accumulator gives lane
//    (g, t) keys 2t, 2t+1 of every 8-key column tile; the A fragment wants keys 4t .. 4t+3 of each
//    16-key half. Instead of moving P across lanes, the keys are renumbered: within every 16-key
//    group, fragment position 4t + e holds key 2t + (e & 1) + 8 (e >> 1), and the transposition
//    writes Vt's columns in that same order. P then packs with two cvt.rn.satfinite.e4m3x2 per
//    register and no shuffle.
// 3. An exp2 offset. P = exp2(s * scale*log2e - max*scale*log2e + 8) lies in [0, 256], using
//    e4m3's range (max 448) instead of [0, 1], where most probabilities would be subnormal or zero;
//    the row sum carries the same 2^8, so O / sum is unchanged, and lse subtracts 8 ln 2.
//
// Descales: S = Q8 K8^T in raw e4m3 units; the softmax scale becomes scale * q_descale * k_descale
// (per (batch, kv head)), and O is multiplied by v_descale at the end. The output is f16 or bf16,
// written straight from the accumulators.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../../common/sector_store.cuh"
#include "../../ptx/griddepcontrol.cuh"
#include "../forward/kernel.cuh"
#include "fp8_fragments.cuh"
#include "fp8_layout.hpp"

namespace flashpp::cuda::sm90::fp8 {

#ifndef FLASHPP_FP8_PINGPONG
#define FLASHPP_FP8_PINGPONG -1
#endif
#ifndef FLASHPP_FP8_COMPACT_SMEM
#define FLASHPP_FP8_COMPACT_SMEM 0
#endif

template <typename Out_, int kHeadDim_, int kStages_, bool kVtPass_ = false, int kBlockN_ = 128,
          int kConsumers_ = 2>
struct Fp8ForwardTraits {
  using Out = Out_;                                  // f16 or bf16 output
  static constexpr int kHeadDim = kHeadDim_;        // 64, 128 or 256
  // Vt made by the pass before the kernel (v_transpose.cu) and loaded by the copy engine (true),
  // or transposed here by producer warps 1-3 from the raw V tiles (false).
  static constexpr bool kVtPass = kVtPass_;
  // Consumer warpgroups of 64 query rows: 2, or 3 (160 registers each) where O, S and P fit.
  static constexpr int kConsumers = kConsumers_;
  // Turns between the consumer warpgroups (../forward/kernel.cuh, IssueTurns) at D = 256 only
  // (FLASHPP_FP8_PINGPONG=0 / =1, a compile definition, forces them off / on). Session 17 runs
  // 2-3 (H100, against the turns): D = 128 +4..+17% without them (its softmax, not the products,
  // is the long phase there, and the turns held one warpgroup's products back for the other's
  // softmax); D = 256 -11..+1% without them (products twice as long against the same softmax).
  static constexpr bool kPingpong =
      FLASHPP_FP8_PINGPONG < 0 ? kHeadDim >= 256 : FLASHPP_FP8_PINGPONG != 0;
  static constexpr int kBlockM = 64 * kConsumers;   // query rows per block
  // Keys per tile: 128 (one 128-byte Vt row), or 192 with the pass (Vt rows of a 128-byte and a
  // 64-byte panel; the per-tile work of the softmax, the rescale of O and the waits spread over
  // 1.5x the keys, as FlashAttention-3's wide FP8 tiles do).
  static constexpr int kBlockN = kBlockN_;
  static_assert(kBlockN == 128 || ((kBlockN == 64 || kBlockN == 192) && kVtPass_), "FP8 key tiles");
  // Keys of a Vt tile in its 128-byte-swizzled panel (0 or 128), and in its 64-byte one (0 or 64).
  static constexpr int kVtMainKeys = kBlockN >= 128 ? 128 : 0;
  static constexpr int kVtTailKeys = kBlockN - kVtMainKeys;
  static_assert(kVtTailKeys == 0 || kVtTailKeys == 64, "Vt panels");
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kPaddedHeadDim = (kHeadDim + 127) / 128 * 128;  // 128-byte panels
  static constexpr int kPanels = kPaddedHeadDim / 128;

  // The row view of common/forward_steps.cuh (apply_mask, rescale_output).
  static constexpr int kRowsPerWarp = 16;
  static constexpr int kMTiles = 1;
  static constexpr int kNTiles = kBlockN / 8;
  static constexpr int kDTiles = kHeadDim / 8;
  static constexpr bool kSkipUnchangedRescale = kHeadDim >= 128;

  static constexpr int kQPanelBytes = kBlockM * 128;
  static constexpr int kKVPanelBytes = kBlockN * 128;
  static constexpr int kQBytes = kQPanelBytes * kPanels;
  static constexpr int kKVBytes = kKVPanelBytes * kPanels;  // a K or a raw V tile
  static constexpr int kVtBytes = kHeadDim * kBlockN;     // [kHeadDim][kBlockN keys]
  static constexpr int kVtPanelBytes = kHeadDim * kVtMainKeys;  // the 64-byte panel's offset
  // Raw V tiles per stage: none with the pass for 192-key tiles or when FLASHPP_FP8_COMPACT_SMEM=1
  // (a compile definition, default 0; launch.cuh then gives D = 256 a third stage).
  static constexpr int kRawVStages =
      kVtPass && (FLASHPP_FP8_COMPACT_SMEM != 0 || kBlockN != 128) ? 0 : kStages;
  // Q full/empty, handoff empty and one unused (the handoff slot after the barriers is then
  // 16-byte aligned); per stage: K full/empty, V full/empty (raw V), Vt full/empty.
  static constexpr int kBarriers = 4 + 6 * kStages;
  static constexpr int kHandoffBytes = 64;  // ItemHandoff (../forward/kernel.cuh)
  static constexpr int kSmemBytes = kQBytes + (kStages + kRawVStages) * kKVBytes +
                                    kStages * kVtBytes + 8 * kBarriers + kHandoffBytes;

  static constexpr int kTransposeWarps = 3;  // warps 1..3 of the producer warpgroup
  // Registers per thread after the reallocation (producer x 128 + consumer x 256 <= 64K): the
  // consumers of D = 256 hold O (128), S (64) and P (16), those of 192-key tiles O (64), S (96)
  // and P (24); both take 240, leaving the producer 24.
#ifdef FLASHPP_FP8_PRODUCER_REGISTERS  // tuning runs: both given as compile definitions
  static constexpr int kProducerRegisters = FLASHPP_FP8_PRODUCER_REGISTERS;
  static constexpr int kConsumerRegisters = FLASHPP_FP8_CONSUMER_REGISTERS;
#else
  static constexpr bool kWideConsumers = kConsumers == 2 && (kHeadDim >= 256 || kBlockN > 128);
  static constexpr int kProducerRegisters = kConsumers == 3 || kWideConsumers ? 24 : 40;
  static constexpr int kConsumerRegisters = kConsumers == 3 ? 160 : kWideConsumers ? 240 : 232;
#endif
  static_assert(ptx::register_split_fits(kProducerRegisters, kConsumers, kConsumerRegisters));

  // The P fragment of one k32 step: 4 registers; the tile has kBlockN / 32 steps.
  static constexpr int kPSteps = kBlockN / 32;

  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
  static_assert(kHeadDim % 32 == 0, "k32 steps of Q K^T");
};

template <typename Traits>
struct Fp8SharedStorage {
  unsigned char* base;
  __device__ unsigned char* q() const { return base; }
  __device__ unsigned char* k(int stage) const {
    return base + Traits::kQBytes + stage * Traits::kKVBytes;
  }
  __device__ unsigned char* v(int stage) const {
    return base + Traits::kQBytes + (Traits::kStages + stage) * Traits::kKVBytes;
  }
  __device__ unsigned char* vt(int stage) const {
    return base + Traits::kQBytes + (Traits::kStages + Traits::kRawVStages) * Traits::kKVBytes +
           stage * Traits::kVtBytes;
  }
  __device__ std::uint64_t* barriers() const {
    return reinterpret_cast<std::uint64_t*>(vt(Traits::kStages));
  }
  __device__ std::uint64_t* q_full() const { return barriers(); }
  // The consumers are done with the item's Q tile (its last S = Q K^T has completed).
  __device__ std::uint64_t* q_empty() const { return barriers() + 1; }
  // Every consumer thread has read the handoff slot (as in ../forward/kernel.cuh).
  __device__ std::uint64_t* handoff_empty() const { return barriers() + 2; }
  __device__ std::uint64_t* k_full(int s) const { return barriers() + 4 + s; }
  __device__ std::uint64_t* k_empty(int s) const { return barriers() + 4 + Traits::kStages + s; }
  __device__ std::uint64_t* v_full(int s) const { return barriers() + 4 + 2 * Traits::kStages + s; }
  __device__ std::uint64_t* v_empty(int s) const { return barriers() + 4 + 3 * Traits::kStages + s; }
  __device__ std::uint64_t* vt_full(int s) const { return barriers() + 4 + 4 * Traits::kStages + s; }
  __device__ std::uint64_t* vt_empty(int s) const { return barriers() + 4 + 5 * Traits::kStages + s; }
  __device__ ItemHandoff* handoff() const {
    static_assert(Traits::kBarriers % 2 == 0, "the handoff slot is 16-byte aligned");
    return reinterpret_cast<ItemHandoff*>(barriers() + Traits::kBarriers);
  }
};

// ---------------------------------------------------------------------------------------------
// Producer warp 0: the copies
// ---------------------------------------------------------------------------------------------

// The copies of one item (as load_item in ../forward/kernel.cuh): the Q tile once the previous
// item's is released (with the handoff, kHandOff), K and Vt (or raw V) tiles through the ring;
// `ring` counts the tiles loaded before and is advanced here. With the Vt pass the first Vt copy
// waits for the pass (grid_dependency_wait: the kernel may be launched while the pass still
// runs, launch.cuh); Q and K do not depend on it.
template <typename Traits, bool kHandOff>
__device__ __forceinline__ void load_item_fp8(const Sm90ForwardParams& params,
                                              const Fp8SharedStorage<Traits>& smem,
                                              const ForwardTile& tile, int items_done, int& ring) {
  const int h = static_cast<int>(tile.h), h_kv = static_cast<int>(tile.h_kv);
  const int b = static_cast<int>(tile.b);
  const int num_tiles = static_cast<int>(tile.keys.end - tile.keys.begin);
  auto load_q = [&] {
    if (!claim_q_slot<kHandOff>(smem, tile, items_done, num_tiles)) return;
    mbarrier_expect_bytes(smem.q_full(), Traits::kQBytes);
#pragma unroll
    for (int panel = 0; panel < Traits::kPanels; ++panel) {
      tma_load_4d(smem.q() + panel * Traits::kQPanelBytes, &params.q_map, panel * 128,
                  static_cast<int>(tile.m0), h, b, smem.q_full());
    }
  };
  if (num_tiles == 0) load_q();
  for (int j = 0; j < num_tiles; ++j) {
    const int slot = ring + j;
    const int stage = slot % Traits::kStages;
    const int n0 = static_cast<int>((tile.keys.end - 1 - j) * Traits::kBlockN);
    wait_buffer_empty(smem.k_empty(stage), Traits::kStages, slot);
    mbarrier_expect_bytes(smem.k_full(stage), Traits::kKVBytes);
#pragma unroll
    for (int panel = 0; panel < Traits::kPanels; ++panel) {
      tma_load_4d(smem.k(stage) + panel * Traits::kKVPanelBytes, &params.k_map, panel * 128, n0,
                  h_kv, b, smem.k_full(stage));
    }
    if (j == 0) load_q();  // the first K tile may load while the previous item's Q is in use
    if constexpr (Traits::kVtPass) {
      if (j == 0) grid_dependency_wait();  // returns at once after the first time
      // params.v_map is Vt's: [B, Dp rows, Hkv, Nk16 columns], one box of kHeadDim rows x 128 keys.
      wait_buffer_empty(smem.vt_empty(stage), Traits::kStages, slot);
      mbarrier_expect_bytes(smem.vt_full(stage), Traits::kVtBytes);
      if constexpr (Traits::kVtMainKeys > 0) {
        tma_load_4d(smem.vt(stage), &params.v_map, n0, 0, h_kv, b, smem.vt_full(stage));
      }
      if constexpr (Traits::kVtTailKeys > 0) {  // params.v_tail_map: 64-key boxes, 64-byte rows
        tma_load_4d(smem.vt(stage) + Traits::kVtPanelBytes, &params.v_tail_map,
                    n0 + Traits::kVtMainKeys, 0, h_kv, b, smem.vt_full(stage));
      }
    } else {
      wait_buffer_empty(smem.v_empty(stage), Traits::kStages, slot);
      mbarrier_expect_bytes(smem.v_full(stage), Traits::kKVBytes);
#pragma unroll
      for (int panel = 0; panel < Traits::kPanels; ++panel) {
        tma_load_4d(smem.v(stage) + panel * Traits::kKVPanelBytes, &params.v_map, panel * 128, n0,
                    h_kv, b, smem.v_full(stage));
      }
    }
  }
  ring += num_tiles;
}

// ---------------------------------------------------------------------------------------------
// Producer warps 1-3: V -> Vt
// ---------------------------------------------------------------------------------------------

// One warp-step of the transposition: lane l takes four keys of its 16-key group G = l / 4,
// keys 16G + 2t + {0, 1, 8, 9} (t = l % 4: the renumbering of the P fragment), and one 16-byte
// chunk c of head-dim columns, and writes them transposed to Vt rows 16c .. 16c + 15 at
// positions 4l .. 4l + 3, one 4 x 4 byte block (4-byte loads, eight byte permutes, 4-byte
// stores) at a time. The chunk is c = step ^ f(l), f(l) = (l % 8) ^ 2t, so that over eight
// steps every lane visits every chunk; the 4-byte column group g starts at the quarter-warp's
// index and rotates. Then one load instruction reads 32 distinct banks (within a quarter-warp the
// swizzled chunks (c ^ key % 8) = step ^ (l % 8) ^ (key & 1) are distinct, and the quarters read
// different column groups), and so does one store instruction (32 distinct positions of rows
// whose swizzle differs only by quarter, in a way that keeps the positions' banks apart).
template <typename Traits>
__device__ __forceinline__ void transpose_step(const unsigned char* v, unsigned char* vt, int panel,
                                               int step) {
  // The lane index read here (volatile), not passed in: otherwise the compiler hoists the
  // sixteen lane-dependent store offsets out of the tile loop and keeps them live, more
  // registers than the producer warps have (ptxas spilled).
  int lane;
  asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
  const int chunk = transpose_chunk(lane, step);
  const int d0 = panel * 128 + chunk * 16;  // first head-dim column of the chunk
  if (d0 >= Traits::kHeadDim) return;       // D = 64: the padded columns are never read
  // 32-bit shared-memory addresses: the producer warps have few registers to spare.
  const std::uint32_t panel_base =
      static_cast<std::uint32_t>(__cvta_generic_to_shared(v)) + panel * Traits::kKVPanelBytes;
  std::uint32_t rows[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) rows[r] = panel_base + swizzled_offset(transpose_key(lane, r), chunk * 16);
  const std::uint32_t out = static_cast<std::uint32_t>(__cvta_generic_to_shared(vt)) + d0 * 128;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int g = transpose_group(lane, i);
    std::uint32_t w[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) w[r] = load_shared_u32(rows[r] + 4 * g);
    transpose_4x4_bytes(w);  // w[e]: column d0 + 4g + e, keys in fragment order
#pragma unroll
    for (int e = 0; e < 4; ++e) store_shared_u32(out + swizzled_offset(4 * g + e, 4 * lane), w[e]);
  }
}

// The V tiles of one item, ring positions ring .. ring + tiles - 1 (`ring` advanced here).
template <typename Traits>
__device__ __forceinline__ void transpose_v_tiles(const Fp8SharedStorage<Traits>& smem,
                                                  const ForwardTile& tile, int warp, int& ring) {
  const int lane = threadIdx.x & 31;
  const int num_tiles = static_cast<int>(tile.keys.end - tile.keys.begin);
  constexpr int kUnits = Traits::kPanels * 8;  // (panel, step) pairs
  for (int j = 0; j < num_tiles; ++j) {
    const int slot = ring + j;
    const int stage = slot % Traits::kStages;
    mbarrier_wait(smem.v_full(stage), static_cast<std::uint32_t>(slot / Traits::kStages) & 1u);
    wait_buffer_empty(smem.vt_empty(stage), Traits::kStages, slot);
    for (int unit = warp; unit < kUnits; unit += Traits::kTransposeWarps) {
      transpose_step<Traits>(smem.v(stage), smem.vt(stage), unit / 8, unit % 8);
    }
    ptx::fence_shared_to_async();  // the stores, visible to the consumers' wgmma
    __syncwarp();
    if (lane == 0) {
      ptx::mbarrier_arrive(smem.vt_full(stage));
      ptx::mbarrier_arrive(smem.v_empty(stage));
    }
  }
  ring += num_tiles;
}

// ---------------------------------------------------------------------------------------------
// Consumers
// ---------------------------------------------------------------------------------------------

// S = Q K(stage)^T: kHeadDim/32 k32 steps (the padded columns of D = 64 are skipped).
template <typename Traits>
__device__ __forceinline__ void issue_scores(float (&s)[Traits::kNTiles][4],
                                             const Fp8SharedStorage<Traits>& smem, int consumer,
                                             int stage) {
  using Mma = ptx::WgmmaFp8Shape<Traits::kBlockN>;
  const std::uint64_t q_desc =
      ptx::smem_descriptor<ptx::Major::k>(smem.q() + consumer * 64 * 128, 0);
  const std::uint64_t k_desc = ptx::smem_descriptor<ptx::Major::k>(smem.k(stage), 0);
  auto& acc = reinterpret_cast<float(&)[Traits::kBlockN / 2]>(s);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Traits::kHeadDim / 32; ++kk) {
    const std::uint32_t q_step = (kk / 4) * Traits::kQPanelBytes + (kk % 4) * 32;
    const std::uint32_t k_step = (kk / 4) * Traits::kKVPanelBytes + (kk % 4) * 32;
    Mma::ss(acc, ptx::advance_descriptor(q_desc, q_step), ptx::advance_descriptor(k_desc, k_step),
            kk > 0 ? 1 : 0);
  }
  ptx::wgmma_commit();
}

// O += P Vt(stage)^T: kBlockN/32 k32 steps, P's e4m3 fragments from registers; the steps past the
// 128-byte panel's keys (192- and 64-key tiles) read the 64-byte panel.
template <typename Traits>
__device__ __forceinline__ void issue_pv(float (&o)[Traits::kDTiles][4],
                                         const std::uint32_t (&p)[Traits::kPSteps][4],
                                         const Fp8SharedStorage<Traits>& smem, int stage) {
  using Mma = ptx::WgmmaFp8Shape<Traits::kHeadDim>;
  const std::uint64_t vt_desc = ptx::smem_descriptor<ptx::Major::k>(smem.vt(stage), 0);
  // The keys past the 128-byte panel (all of a 64-key tile's): 64-byte rows, 64-byte swizzled.
  const std::uint64_t vt_tail_desc =
      ptx::smem_descriptor<ptx::Major::k, 64>(smem.vt(stage) + Traits::kVtPanelBytes, 0);
  auto& acc = reinterpret_cast<float(&)[Traits::kHeadDim / 2]>(o);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Traits::kPSteps; ++kk) {
    constexpr int kMainSteps = Traits::kVtMainKeys / 32;
    const std::uint64_t b = kk < kMainSteps
                                ? ptx::advance_descriptor(vt_desc, kk * 32)
                                : ptx::advance_descriptor(vt_tail_desc, (kk - kMainSteps) * 32);
    Mma::rs(acc, p[kk], b, 1);
  }
  ptx::wgmma_commit();
}

// P (float, score layout) -> e4m3 A fragments with the key renumbering of the header: step kk
// covers 8-key tiles 4kk .. 4kk + 3; register r = (row half) + 2 (16-key half).
template <typename Traits>
__device__ __forceinline__ void convert_p(std::uint32_t (&p)[Traits::kPSteps][4],
                                          const float (&s)[Traits::kNTiles][4]) {
#pragma unroll
  for (int kk = 0; kk < Traits::kPSteps; ++kk)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float(&a)[4] = s[4 * kk + 2 * half];
      const float(&b)[4] = s[4 * kk + 2 * half + 1];
      p[kk][2 * half] = pack_e4m3x4(a[0], a[1], b[0], b[1]);      // row g
      p[kk][2 * half + 1] = pack_e4m3x4(a[2], a[3], b[2], b[3]);  // row g + 8
    }
}

// The online softmax of common/forward_steps.cuh with P scaled by 2^kPOffsetLog2.
inline constexpr float kPOffsetLog2 = 8.0f;

// The maximum of this thread's scores of one row half (columns 2 half, 2 half + 1 of every
// 8-key tile).
template <int kNTiles>
__device__ __forceinline__ float thread_row_max(const float (&s)[kNTiles][4], int half) {
  // A pairwise tree (depth log2 of the 2 kNTiles scores) rather than a chain through every score:
  // the maximum is the first step after S lands, on the consumer's critical path.
  float m[kNTiles];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) m[nt] = fmaxf(s[nt][2 * half], s[nt][2 * half + 1]);
#pragma unroll
  for (int stride = 1; stride < kNTiles; stride *= 2)
#pragma unroll
    for (int i = 0; i + stride < kNTiles; i += 2 * stride) m[i] = fmaxf(m[i], m[i + stride]);
  return m[0];
}

template <typename Traits>
__device__ __forceinline__ SoftmaxCorrection<Traits> online_softmax_fp8(
    float (&s)[1][Traits::kNTiles][4], float (&row_max)[1][2], float (&row_sum)[1][2],
    float scale_log2) {
  SoftmaxCorrection<Traits> correction;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float tile_max = quad_max(thread_row_max<Traits::kNTiles>(s[0], half));
    const float new_max = fmaxf(row_max[0][half], tile_max);
    const float reference = new_max == -INFINITY ? 0.0f : new_max;
    correction.factor[0][half] = fast_exp2((row_max[0][half] - reference) * scale_log2);
    correction.max_moved |= new_max != row_max[0][half];
    row_max[0][half] = new_max;
    row_sum[0][half] *= correction.factor[0][half];
    const float offset = kPOffsetLog2 - reference * scale_log2;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
      for (int c = 2 * half; c < 2 * half + 2; ++c) {
        s[0][nt][c] = fast_exp2(fmaf(s[0][nt][c], scale_log2, offset));
        sum += s[0][nt][c];
      }
    row_sum[0][half] += sum;
  }
  return correction;
}

__device__ __forceinline__ float descale_at(const float* d, const std::int64_t (&strides)[2],
                                            std::int64_t b, std::int64_t h_kv) {
  return d == nullptr ? 1.0f : d[b * strides[0] + h_kv * strides[1]];
}

// One item of one consumer warpgroup. kQWaited: the caller has waited for the item's Q tile (the
// handoff); `items_done` and `ring` as for load_item_fp8 (ring advanced here); `turns`: the
// IssueTurns of the consumer's walk.
template <typename Traits, bool kQWaited, typename Turns>
__device__ __forceinline__ void consumer_item_fp8(const Sm90ForwardParams& params,
                                                  const Fp8SharedStorage<Traits>& smem,
                                                  const ForwardTile& tile, int consumer,
                                                  const Turns& turns, int items_done, int& ring) {
  const ForwardParams& p = params.args;
  const int lane = threadIdx.x & 31;
  const int warp_in_group = (threadIdx.x / 32) & 3;
  const std::int64_t row0 = tile.m0 + consumer * 64 + warp_in_group * 16;
  // The KV head from the query head: a handed-over item does not carry it (take_item).
  const std::int64_t h_kv = tile.h / p.heads_per_kv;
  const float qk_descale = descale_at(p.q_descale, p.q_descale_strides, tile.b, h_kv) *
                           descale_at(p.k_descale, p.k_descale_strides, tile.b, h_kv);
  const float scale_log2 = p.scale_log2 * qk_descale;
  const float v_scale = descale_at(p.v_descale, p.v_descale_strides, tile.b, h_kv);

  float o[1][Traits::kDTiles][4];
  float row_max[1][2] = {{-INFINITY, -INFINITY}};
  float row_sum[1][2] = {{0.0f, 0.0f}};
#pragma unroll
  for (int dt = 0; dt < Traits::kDTiles; ++dt)
#pragma unroll
    for (int c = 0; c < 4; ++c) o[0][dt][c] = 0.0f;

  if constexpr (!kQWaited) mbarrier_wait(smem.q_full(), static_cast<std::uint32_t>(items_done) & 1u);
  const int num_tiles = static_cast<int>(tile.keys.end - tile.keys.begin);
  if (num_tiles == 0) release_buffer(smem.q_empty(), lane);
  if (num_tiles > 0) {
    // Key tile indices fit 32 bits (Nk < 2^32, 128 keys a tile); 32-bit copies of the loop's
    // bounds keep registers free for D = 256 (the 64-bit ones spilled).
    const int last_block = static_cast<int>(tile.keys.end - 1);
    const int unmasked_begin = static_cast<int>(
        tile.keys.unmasked_begin < tile.keys.begin ? tile.keys.begin
        : tile.keys.unmasked_begin > tile.keys.end ? tile.keys.end : tile.keys.unmasked_begin);
    const int unmasked_end = static_cast<int>(
        tile.keys.unmasked_end < tile.keys.begin ? tile.keys.begin
        : tile.keys.unmasked_end > tile.keys.end ? tile.keys.end : tile.keys.unmasked_end);
    auto softmax_steps = [&](float (&s)[1][Traits::kNTiles][4], int n_block) {
      if (n_block < unmasked_begin || n_block >= unmasked_end) {
        apply_mask<Traits>(s, p, row0, static_cast<std::int64_t>(n_block) * Traits::kBlockN, lane);
      }
      return online_softmax_fp8<Traits>(s, row_max, row_sum, scale_log2);
    };
    // Ring slot of key tile j of this item: its stage and the parity of that stage's use.
    auto stage_of = [&](int j) { return (ring + j) % Traits::kStages; };
    auto phase_of = [&](int j) { return static_cast<std::uint32_t>((ring + j) / Traits::kStages) & 1u; };
    std::uint32_t p_frag[Traits::kPSteps][4];
    {
      float s[1][Traits::kNTiles][4];
      mbarrier_wait(smem.k_full(stage_of(0)), phase_of(0));
      turns.wait();
      issue_scores<Traits>(s[0], smem, consumer, stage_of(0));
      turns.pass(false);
      ptx::wgmma_wait<0>();
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kBlockN / 2]>(s));
      release_buffer(smem.k_empty(stage_of(0)), lane);
      softmax_steps(s, last_block);
      convert_p<Traits>(p_frag, s[0]);
    }
    for (int j = 1; j < num_tiles; ++j) {
      const int stage = stage_of(j), prev_stage = stage_of(j - 1);
      float s[1][Traits::kNTiles][4];
      mbarrier_wait(smem.k_full(stage), phase_of(j));
      mbarrier_wait(smem.vt_full(prev_stage), phase_of(j - 1));
      turns.wait();
      issue_scores<Traits>(s[0], smem, consumer, stage);
      issue_pv<Traits>(o[0], p_frag, smem, prev_stage);
      turns.pass(false);
      ptx::wgmma_wait<1>();  // S(j) has landed; P(j-1) V(j-1) may still run
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kBlockN / 2]>(s));
      release_buffer(smem.k_empty(stage), lane);
      const SoftmaxCorrection<Traits> correction = softmax_steps(s, last_block - j);
      // The softmax above must run while P(j-1) V(j-1) does: wait only after it (see
      // ptx::wgmma_wait_all_after).
      ptx::wgmma_wait_all_after(row_sum[0][0] + row_sum[0][1]);
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kHeadDim / 2]>(o));
      ptx::fence_registers(reinterpret_cast<std::uint32_t(&)[Traits::kBlockN / 8]>(p_frag));
      release_buffer(smem.vt_empty(prev_stage), lane);
      rescale_output<Traits>(o, correction);
      convert_p<Traits>(p_frag, s[0]);
    }
    // Every S = Q K^T of this item has completed: Q may take the next item's tile while the last
    // P V runs (O is written from the accumulators, not staged through Q).
    release_buffer(smem.q_empty(), lane);
    const int last = num_tiles - 1;
    mbarrier_wait(smem.vt_full(stage_of(last)), phase_of(last));
    turns.wait();
    issue_pv<Traits>(o[0], p_frag, smem, stage_of(last));
    turns.pass(false);
    ptx::wgmma_wait<0>();
    ptx::fence_registers(reinterpret_cast<float(&)[Traits::kHeadDim / 2]>(o));
    ptx::fence_registers(reinterpret_cast<std::uint32_t(&)[Traits::kBlockN / 8]>(p_frag));
    release_buffer(smem.vt_empty(stage_of(last)), lane);
    ring += num_tiles;
  }
  // O / row sum * v_descale; lse = max * scale_qk + ln(sum) - 8 ln 2 (P carried 2^8).
  store_output_rows<typename Traits::Out>(o[0], row_max[0], row_sum[0], p, tile.b, tile.h, row0,
                                          v_scale, p.scale * qk_descale, -kPOffsetLog2 * kLn2, lane);
}

// kWalk: how the blocks share the items (../forward/kernel.cuh, ItemWalk): a persistent grid
// (the stride walk without a mask, the snake walk under one, whose items the producer hands to
// the consumers), or one block per item (the stride walk on a grid of one block per item; the
// in-kernel transposition always takes that).
template <typename Traits, WalkKind kWalk>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash_fwd_fp8_sm90_kernel(const __grid_constant__ Sm90ForwardParams params) {
#if FLASHPP_WGMMA_AVAILABLE
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  poison_dynamic_smem(smem_raw);  // test builds only (poison.cuh)
  const Fp8SharedStorage<Traits> smem{smem_raw};
  const ItemWalk<kWalk> walk{params.q_tiles * params.heads, params.q_tiles, params.heads,
                             params.args.heads_per_group * params.q_tiles};

  if (threadIdx.x == 0) {
    ptx::mbarrier_init(smem.q_full(), 1);
    ptx::mbarrier_init(smem.q_empty(), 4 * Traits::kConsumers);  // one arrival per warp
    ptx::mbarrier_init(smem.handoff_empty(), 128 * Traits::kConsumers);  // one per thread
    for (int s = 0; s < Traits::kStages; ++s) {
      ptx::mbarrier_init(smem.k_full(s), 1);
      ptx::mbarrier_init(smem.v_full(s), 1);
      ptx::mbarrier_init(smem.k_empty(s), 4 * Traits::kConsumers);  // one arrival per warp
      ptx::mbarrier_init(smem.v_empty(s), Traits::kTransposeWarps);
      ptx::mbarrier_init(smem.vt_full(s), Traits::kVtPass ? 1 : Traits::kTransposeWarps);
      ptx::mbarrier_init(smem.vt_empty(s), 4 * Traits::kConsumers);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();

  const int warpgroup = ptx::warpgroup_index();
  if (warpgroup == 0) {
    ptx::release_registers<Traits::kProducerRegisters>();
    const int warp = static_cast<int>(threadIdx.x) / 32;
    if (threadIdx.x == 0) {
      producer_walk<Traits>(params, smem, walk, [&](const ForwardTile& tile, int items_done, int& ring) {
        load_item_fp8<Traits, kHandOffItems<kWalk>>(params, smem, tile, items_done, ring);
      });
    } else if constexpr (!Traits::kVtPass) {
      static_assert(kWalk == WalkKind::stride, "the transposing warps walk the items themselves");
      if (warp > 0) {
        int ring = 0;
        walk.for_each([&](std::int64_t linear, int) {
          transpose_v_tiles<Traits>(
              smem, forward_tile<Traits, kWalk>(params, linear, walk.q_tiles, walk.heads), warp - 1, ring);
        });
      }
    }
  } else {
    ptx::claim_registers<Traits::kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    const IssueTurns<Traits::kConsumers, Traits::kPingpong> turns{consumer};
    turns.start();
    int ring = 0;
    consumer_walk<Traits>(params, smem, walk, 1 + consumer,
                          [&](const ForwardTile& tile, int items_done, auto q_waited) {
                            consumer_item_fp8<Traits, decltype(q_waited)::value>(
                                params, smem, tile, consumer, turns, items_done, ring);
                          });
    turns.finish();
  }
#endif
}

}  // namespace flashpp::cuda::sm90::fp8
