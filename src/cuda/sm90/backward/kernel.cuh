// The FlashAttention backward for Hopper (sm_90a): TMA loads, wgmma products, warp specialisation.
//
// One thread block owns one key tile (128 keys; 192 at D=64, 128 there too in small grids: kNarrow)
// of one (batch, kv head): K and V stay in shared memory, dK and dV in registers, while the block
// walks every query tile (64 rows) of every query head of the kv head's group that sees those
// keys. Roles:
//   producer (warpgroup 0, one thread): K and V once, then per query step Q, dO and the step's
//     lse (log2 units) and delta rows through a ring of `stages` buffers (bulk copies);
//   consumers (warpgroups 1, 2; and 3 at D=64): each owns 64 of the block's keys and computes,
//     per step, with the equations of docs/design.md written for the transposed tiles (keys as
//     rows):
//         S^T = K Q^T,  dP^T = V dO^T                 (wgmma, both operands in shared memory)
//         P^T = exp2(S^T * scale*log2e - lse_log2),  dS^T = P^T o (dP^T - delta)   (registers)
//         dV += P^T dO,  dK += dS^T Q                 (wgmma, P^T and dS^T from registers)
//         dQ = dS K                                   (wgmma, dS^T staged in shared memory)
//     dQ is the block's at D=128: both consumers' dS^T (all 128 keys) times K, each consumer
//     computing half of dQ's columns (half the atomic traffic); at D=64 the block's too, as
//     dQ^T = K^T dS^T over its 192 (128) keys, one consumer in turn computing the previous step's
//     (kDqTransposed; FLASHPP_SM90_BWD_DQ_T=0: each consumer's 64-key part of every column); at
//     D=96 each consumer's part; at D=128 in long unmasked calls (kPaired) the pair's, two blocks
//     of a cluster on neighbouring key tiles each computing dQ^T of one 64-column panel over both
//     tiles' keys from its own and the partner's dS^T (copied into it each step; see
//     copy_ds_to_partner); added into the float32 dQ accumulator (fragment-ordered, shared
//     with the sm80 family's postprocess; dQ^T's in the transposed order) by one bulk reduce-add
//     per warp from a staging area in shared memory (16-byte atomics straight from registers with
//     FLASHPP_SM90_BWD_DQ_BULK=0; the deterministic mode below).
//   Inside a step the products overlap the element-wise work (kOverlap, two consumers): P^T is
//   computed while dP^T runs, dV is issued before dS^T is computed, dK before dS^T is staged for
//   dQ. Three consumers (D=64, 160 registers each) overlap one another's steps instead.
//   At D=64 a consumer's first steps that see none of its keys (the causal diagonal's upper
//   consumers) only write zeros as their dS^T (hidden_step, kSkipHidden).
// At the end dK is scaled and dK, dV are stored; the postprocess turns the dQ accumulator into dq.
// Unmasked calls whose last wave of blocks is small run it split (common/tail_split.hpp, as the
// sm80 family), and so do masked calls of at most a wave of blocks, all of it: its key
// tiles' steps cut into pieces, each adding dK, dV into float32 sums that the postprocess writes
// out (kTailSplit, add_key_gradients_to_sums).
// Rows past Nq arrive as zeros with lse_log2 = +inf (P = 0); keys past Nk arrive as zeros and are
// masked. Softcap runs on the sm80 family (dispatch). Dropout (kDropout): P^T and dP^T are
// multiplied by the factors of the forward's mask, regenerated from Philox (common/philox.hpp:
// in this transposed layout one call gives a thread 4 of its elements).
// Deterministic mode (kDeterministic): the dQ additions into a query tile happen in key-tile
// order: a turn counter per 64-row query tile (ptx/turnstile.cuh), each block waiting until the
// blocks of the earlier key tiles that see the tile have added theirs. The consumers stage the
// step's dQ tile in shared memory (two buffers, used by the steps in turn: stage_dq_in_order;
// where each consumer has its own part of every column, D=64, they add theirs in consumer
// order) and two writer threads of the producer warpgroup (one per buffer: write_dq_in_turns)
// take the turn and add the tile with one bulk reduce-add, passing the turn once it has landed.
// So the consumers never wait for a turn (only for a buffer, two steps later), and two steps'
// turns are in flight at once. Blocks walk their query tiles last first, so that under a causal
// mask every block starts on the tile all of them see and they move down together instead of
// each waiting for the first block to reach its tiles.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "../../common/dq_accum.cuh"
#include "../../common/backward_params.hpp"
#include "../../common/block_order.cuh"
#include "../../common/dropout_signs.cuh"
#include "../../common/score_gradient.cuh"
#include "../../common/math.cuh"
#include "../../common/swizzle.cuh"
#include "../../ptx/cluster.cuh"
#include "../../ptx/griddepcontrol.cuh"
#include "../../ptx/tma.cuh"
#include "../../ptx/mbarrier.cuh"
#include "../../ptx/turnstile.cuh"
#include "../../ptx/warpgroup.cuh"
#include "../../ptx/wgmma.cuh"
#include "../../common/poison.cuh"
#include "../../common/sector_store.cuh"
#include "../../common/split_unit.cuh"
#include "../../common/tail_split.hpp"
#include "trace.cuh"

namespace flashpp::cuda::sm90 {

#ifndef FLASHPP_SM90_BWD_STAGES
#define FLASHPP_SM90_BWD_STAGES 2
#endif
// The block's dQ (1) or each consumer's part (0); -1: by head dim (the block's from 128 up:
// +17% at D=128, -10% at D=64 on the H100, perf-notes).
#ifndef FLASHPP_SM90_BWD_BLOCK_DQ
#define FLASHPP_SM90_BWD_BLOCK_DQ -1
#endif

// Overlap inside a consumer's step (1): S^T and dP^T in two wgmma groups, P^T computed while
// dP^T runs, dV = P~^T dO issued before dS^T is computed; 0: each step's products wait for all
// of its element-wise work (the first stage's order), kept for A/B runs.
#ifndef FLASHPP_SM90_BWD_OVERLAP
#define FLASHPP_SM90_BWD_OVERLAP 1
#endif
constexpr bool kOverlapDefault = FLASHPP_SM90_BWD_OVERLAP != 0;

// P^T recomputed by a masked and an unmasked copy of its loop (1) or one loop with the mask test
// behind a branch per element (0). ncu (session 15): 12% of the D=64 consumers' samples were
// "no instruction", concentrated in the element-wise code that the masked blocks interleave.
#ifndef FLASHPP_SM90_BWD_SPLIT_MASK
#define FLASHPP_SM90_BWD_SPLIT_MASK 1
#endif
constexpr bool kSplitMask = FLASHPP_SM90_BWD_SPLIT_MASK != 0;

// Across steps (1; needs kOverlap): the next step's S^T is issued once this step's dV and dK
// have landed, behind its dQ product, and runs while this step's dQ is staged and added and the
// loop's bookkeeping runs; dP^T is issued at the top of its step and runs while P^T is computed.
// (Issuing both across the loop, with a wait_group 1 at its top, made ptxas serialise every
// product, C7514: it does not follow which group is which across the back edge; a wait_group 0
// at the top, for S^T alone, it does.) -1: by head dim, from 128 up (H200, session 16:
// +2..+4% at D=128, -5..-8% at D=64 and -2..-7% at D=96; perf-notes).
#ifndef FLASHPP_SM90_BWD_PIPELINE
#define FLASHPP_SM90_BWD_PIPELINE -1
#endif

// dQ into the float32 accumulator (1): each consumer warp writes its dQ fragments to a staging
// area of its own in shared memory and one lane adds the area with one bulk reduce-add; 0: one
// 16-byte red per fragment straight from registers. The reds hold their source registers until
// the memory system takes them, and the next step's dP^T product, which reuses those registers,
// waited for that (ncu, session 15: 7-14% of the consumers' samples at the loop head). The
// deterministic mode has its own way (writers, below).
#ifndef FLASHPP_SM90_BWD_DQ_BULK
#define FLASHPP_SM90_BWD_DQ_BULK 1
#endif
// Staging areas of the bulk dQ per warp (1 or 2): with 2 a step writes its dQ while the previous
// step's reduce may still be reading the other area, instead of waiting for that read.
#ifndef FLASHPP_SM90_BWD_DQ_STAGES
#define FLASHPP_SM90_BWD_DQ_STAGES 2
#endif

// Where a step's bulk dQ reduce-add leaves (kDqBulk): 0 right after its dQ is staged, where
// the proxy fence before it waits for the staging stores (ncu, session 31: ~9% of the D=64 and
// D=128 kernels' warp samples at that fence); 1 in the next step, after that step's first
// products are issued (S^T and dP^T; with kPipeline dP^T), while they run; 2 in the next step
// before them (with kPipeline after its S^T wait; without, as 1). The last step's leaves after
// the loop. -1 (default): 1 below D=128 without dropout (D=64 -0.6..+3.4%, D=96 -0.8..+1.0%), 0
// from 128 (1 measured -2.9..+0.8% there, 2 -0.3..-3.5%; session 31 runs 2-3, perf-notes) and
// with dropout (not timed).
#ifndef FLASHPP_SM90_BWD_DQ_DEFER
#define FLASHPP_SM90_BWD_DQ_DEFER -1
#endif

// 0: no dQ additions at all, in either sm90 backward kernel; 2: kernel.cuh's bulk reduce-adds
// issued twice (twice the reduction traffic, the same work in the consumers). Timing experiments
// only (what the additions cost, and whether their L2 traffic is that cost); dQ comes out wrong.
// Default 1.
#ifndef FLASHPP_SM90_BWD_DQ_ADDS
#define FLASHPP_SM90_BWD_DQ_ADDS 1
#endif
constexpr bool kDqAdds = FLASHPP_SM90_BWD_DQ_ADDS != 0;

// Without the overlap (three consumers): dV and dK issued before dS^T is staged for the dQ
// product (1), so that they run through the staging, its fence and the barrier, or with dQ (0).
// Session 21 run 10 (H100, D=64): +0..+7% without dropout, -4..+0.3% with it, so the dropout
// kernel keeps them with dQ.
#ifndef FLASHPP_SM90_BWD_EARLY_DKV
#define FLASHPP_SM90_BWD_EARLY_DKV 1
#endif

// dQ of the whole block as dQ^T = K^T dS^T at D=64 with three consumers (1; 0: each consumer adds
// its own 64-key part of dQ, three times the L2 reduction traffic). The consumers' dS^T of a step
// meet in a ring of three buffers; the step's dQ^T (64 columns x 64 queries over the block's 192
// keys, one m64n64 product) is computed by one consumer in turn, in the step after, and added
// into the accumulator in the transposed order (dq_accum_t_block) by one bulk reduce-add per warp
// (the deterministic mode: staged whole for its writers). Session 32 runs 1-3 (H100, bf16, against
// 0): +4..+15% (1024-16384, causal and not), deterministic +7..+19%, dropout 0.1 +1..+4%.
#ifndef FLASHPP_SM90_BWD_DQ_T
#define FLASHPP_SM90_BWD_DQ_T 1
#endif

// Consumer warpgroups at head dim 64 (2 or 3; the other head dims take 2): each owns 64 keys of
// the block, so 3 make 192-key blocks, with 160 registers a consumer thread instead of 240. More
// warps to hide each consumer's serial chain of products and element-wise work, as the
// forward's 192-row tile does at D=64.
#ifndef FLASHPP_SM90_BWD_D64_CONSUMERS
#define FLASHPP_SM90_BWD_D64_CONSUMERS 3
#endif

// A consumer's leading steps whose 64 queries see none of its 64 keys (1): they skip S^T, dP^T,
// the element-wise work and the dV, dK products, write zeros as their part of the step's dS^T and
// take their turn at the block's dQ^T as any step does. Under a causal mask these are the first
// steps of a block for its upper consumers (3 of a 192-key block's ~3 x 8.5 consumer steps at
// D=64 N=1024; session 37 runs 1-3: causal +2.7..+4.6% at N 1024-4096). The kernels with dQ^T in
// turns (D=64, kDqTransposed) without dropout or the deterministic order (kSkipHidden). At D=128
// the same skip (zeros, then the block's dQ product) gained nothing and cost the unmasked calls
// ~1% (run 1). 0: every step computes its masked products.
#ifndef FLASHPP_SM90_BWD_SKIP_HIDDEN
#define FLASHPP_SM90_BWD_SKIP_HIDDEN 1
#endif

struct Sm90BackwardParams {
  BackwardParams args;
  CUtensorMap q_map, k_map, v_map, dout_map;
#if FLASHPP_SM90_BWD_TRACE
  std::uint64_t* trace;  // trace.cuh's buffer
#endif
};

// A stamp of trace.cuh (timing builds only; nothing otherwise), by the calling thread.
#if FLASHPP_SM90_BWD_TRACE
#define FLASHPP_BWD_STAMP(event, value) backward_stamp(params.trace, BackwardTraceEvent::event, (value))
#else
#define FLASHPP_BWD_STAMP(event, value) ((void)0)
#endif
// The same by consumer 0's first thread only.
#define FLASHPP_BWD_CONSUMER_STAMP(event, value)                                                 \
  do {                                                                                           \
    if (consumer == 0 && threadIdx.x % 128 == 0) FLASHPP_BWD_STAMP(event, value);                \
  } while (0)

template <typename Element_, int kHeadDim_, bool kDeterministic_ = false, bool kDropout_ = false,
          bool kPaired_ = false, bool kSplit_ = false, bool kNarrow_ = false>
struct Sm90BackwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kDeterministic = kDeterministic_;
  static constexpr bool kDropout = kDropout_;
  // Blocks in clusters of two on neighbouring key tiles (D=128, launch.cuh): each adds the pair's
  // dQ^T of one 64-column panel over both tiles' 256 keys (paired_dq below), half the L2
  // reduction traffic of a block's own dQ.
  static constexpr bool kPaired = kPaired_;
  // The kernel of calls whose small last wave is split (kTailSplit below; launch.cuh). Its own
  // instantiation, so that the other kernels' code stays as it was (with the split's branches
  // every D=64 kernel lost 1.5% under a causal mask, where none splits: session 33 run 2).
  static constexpr bool kSplit = kSplit_;
  // Two consumers at D=64 (128-key blocks) instead of FLASHPP_SM90_BWD_D64_CONSUMERS: the kernel
  // of small grids, where 192-key blocks leave SMs idle (launch.cuh, narrow_wanted).
  static constexpr bool kNarrow = kNarrow_;
  static constexpr bool kWide = false;  // wide_kernel.cuh's traits: true
  static constexpr int kPaddedHeadDim = (kHeadDim + 63) / 64 * 64;
  static constexpr int kPanels = kPaddedHeadDim / 64;
  static constexpr int kConsumers =
      kHeadDim <= 64 && !kNarrow ? FLASHPP_SM90_BWD_D64_CONSUMERS : 2;
  static constexpr int kBlockN = 64 * kConsumers;  // keys per block
  static constexpr int kBlockM = 64;               // queries per step
  static constexpr int kStages = FLASHPP_SM90_BWD_STAGES;  // Q/dO/lse/delta ring depth
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kQTiles = kBlockM / 8;      // 8-query column tiles of S^T
  static constexpr int kDTiles = kHeadDim / 8;     // 8-column tiles of dK, dV
  // dQ per step: the block's (kBlockDq: 128 keys, each consumer kDqColumns of the columns) or
  // each consumer's own 64-key part of every column.
  static constexpr bool kBlockDq =
      FLASHPP_SM90_BWD_BLOCK_DQ < 0 ? kHeadDim >= 128 : FLASHPP_SM90_BWD_BLOCK_DQ != 0;
  // The overlap inside a step (FLASHPP_SM90_BWD_OVERLAP) with two consumers; three have 160
  // registers, and the overlap keeps more values live (at D=64 it measured +0..+0.7%).
  static constexpr bool kOverlap = kOverlapDefault && kConsumers == 2;
  static constexpr bool kEarlyKeyGradients =
      !kOverlap && !kDropout && FLASHPP_SM90_BWD_EARLY_DKV != 0;
  static constexpr bool kPipeline =
      kOverlap && (FLASHPP_SM90_BWD_PIPELINE < 0 ? kHeadDim >= 128 : FLASHPP_SM90_BWD_PIPELINE != 0);
  static constexpr bool kDqBulk = FLASHPP_SM90_BWD_DQ_BULK != 0 && !kDeterministic;
  // The block's dQ^T by one consumer in turn (FLASHPP_SM90_BWD_DQ_T): three consumers at D=64
  // (two in the narrow kernel), bulk adds or the deterministic mode's writers.
  static constexpr bool kDqTransposed = FLASHPP_SM90_BWD_DQ_T != 0 && (kConsumers == 3 || kNarrow) &&
                                        kHeadDim == 64 && !kBlockDq &&
                                        (FLASHPP_SM90_BWD_DQ_BULK != 0 || kDeterministic);
  static constexpr int kDqColumns = kBlockDq ? kHeadDim / kConsumers : kHeadDim;
  // The accumulator holds dQ^T fragments (dq_accum_t_block; the postprocess reads it so).
  static constexpr bool kDqAccumTransposed = kDqTransposed || kPaired;
  // A consumer's dQ accumulator: 8-column tiles of dQ, or of dQ^T 8-query tiles.
  static constexpr int kDqTiles = kDqAccumTransposed ? kBlockM / 8 : kDqColumns / 8;
  // dS^T buffers: the other consumer reads ours (block dQ): 2 deep; kDqTransposed: a ring of 3.
  static constexpr int kDsBuffers = kDqTransposed ? 3 : (kBlockDq ? 2 : 1);
  // A step's bulk dQ leaves in the next step (FLASHPP_SM90_BWD_DQ_DEFER; -1: below D=128 without
  // dropout, where it was measured; the D=64 dropout kernel kept two more local-memory accesses
  // with it, untimed).
  static constexpr bool kDqDefer =
      kDqBulk && !kDqTransposed && FLASHPP_SM90_BWD_DQ_ADDS != 0 &&
      (FLASHPP_SM90_BWD_DQ_DEFER < 0 ? kHeadDim < 128 && !kDropout : FLASHPP_SM90_BWD_DQ_DEFER != 0);
  // The deterministic mode's dQ through the writer threads (write_dq_in_turns).
  static constexpr bool kDqWriter = kDeterministic;
  // Steps that see none of a consumer's keys skip its products (FLASHPP_SM90_BWD_SKIP_HIDDEN).
  static constexpr bool kSkipHidden =
      FLASHPP_SM90_BWD_SKIP_HIDDEN != 0 && kDqTransposed && !kDropout && !kDeterministic;
  // A warp's dQ part of a step: 16 rows x kDqColumns, in the accumulator's order (dq_accum.cuh).
  static constexpr int kDqStageWarpBytes = kDqTiles * kDqAccumBlockFloats * 4;

  using KTile = SwizzledTile<kBlockN, kPaddedHeadDim>;
  using QTile = SwizzledTile<kBlockM, kPaddedHeadDim>;
  static constexpr int kKPanelBytes = kBlockN * 128;
  static constexpr int kQPanelBytes = kBlockM * 128;
  static constexpr int kDsBytes = 64 * kBlockM * 2;   // one consumer's dS^T, 64 keys x 64 queries
  static constexpr int kDsBufferBytes = kConsumers * kDsBytes;  // all consumers', keys in order

  // Byte offsets in shared memory (every tile 1024-byte aligned).
  static constexpr int kK = 0;
  static constexpr int kV = kK + KTile::kBytes;
  static constexpr int kQ = kV + KTile::kBytes;
  static constexpr int kDo = kQ + kStages * QTile::kBytes;
  static constexpr int kDs = kDo + kStages * QTile::kBytes;
  static constexpr int kLseBytes = kStages * kBlockM * 4;  // per array
  // The deterministic mode's dQ tile buffers (stage_dq_in_order), 64 x kHeadDim floats each.
  static constexpr int kDqTileBytes = kBlockM * kHeadDim * 4;
  // K/V full; per stage step full, empty; with the writers per dQ buffer full, empty and (own
  // parts) each consumer's but the last's part added.
  static constexpr int kDqBufferBarriers = kBlockDq ? 2 : 1 + kConsumers;
  // With the block's dQ each consumer's half of the columns must stay inside 64-column panels
  // of K (issue_query_gradient).
  static_assert(!kDqWriter || !kBlockDq || kDqColumns % 64 == 0 || 64 % kDqColumns == 0,
                "the deterministic mode's dQ halves inside panels");
  // kDqTransposed: per dS^T buffer full (every consumer with keys wrote) and empty (read).
  // kPaired: per dS^T buffer empty (this block's dQ^T product has read it; full: both consumers wrote it), the
  // partner's dS^T copy landed here (xds_full), the partner has done with this block's copy
  // there (xds_empty).
  static constexpr int kBarrierCount = 1 + 2 * kStages + (kDqWriter ? 2 * kDqBufferBarriers : 0) +
                                       (kDqTransposed ? 2 * kDsBuffers : 0) + (kPaired ? 4 * kDsBuffers : 0);
  static constexpr int kDqStage = kDs + kDsBuffers * kDsBufferBytes;
  // Staging areas per warp, used by steps in turn (FLASHPP_SM90_BWD_DQ_STAGES) where two fit
  // beside lse, delta and the barriers (D 64 and 128; one at 96).
  static constexpr int kDqStageSetBytes = 4 * kConsumers * kDqStageWarpBytes;
  // (kDqTransposed: one; a consumer adds every third step at most.)
  static constexpr int kDqStageBuffers =
      FLASHPP_SM90_BWD_DQ_STAGES >= 2 && !kDqTransposed &&
              kDqStage + 2 * kDqStageSetBytes + 2 * kLseBytes + 8 * kBarrierCount <= 227 * 1024
          ? 2
          : 1;
  // kPaired: no staging areas (a step's dQ^T is staged in the partner's dS^T copy it was computed
  // from); the partner's dS^T copies (one per dS^T buffer) and the 64-column panel of the
  // partner's K this block's dQ^T covers.
  static constexpr int kPeerDs = kDqStage;
  static constexpr int kPeerK = kPeerDs + kDsBuffers * kDsBufferBytes;
  static constexpr int kLse =
      kPaired ? kPeerK + kKPanelBytes
              : kDqStage + (kDqBulk ? kDqStageBuffers * kDqStageSetBytes : (kDqWriter ? 2 * kDqTileBytes : 0));
  static constexpr int kDelta = kLse + kLseBytes;
  static constexpr int kBarriers = kDelta + kLseBytes;
  static constexpr int kSmemBytes = kBarriers + 8 * kBarrierCount;

  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = kConsumers == 2 ? 240 : 160;
  static_assert(ptx::register_split_fits(kProducerRegisters, kConsumers, kConsumerRegisters));
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one Hopper block");
  static_assert(kConsumers == 2 || (kConsumers == 3 && !kBlockDq),
                "2 consumers, or 3 with their own dQ");
  static_assert(!kNarrow || (kHeadDim == 64 && !kPaired && !kSplit),
                "the narrow kernel: D=64, whole key tiles");
  static_assert(!kSplit || (!kDeterministic && !kDropout),
                "the split kernel: not deterministic, without dropout");
  static_assert(!kPaired || (kHeadDim == 128 && kBlockDq && kDqBulk && kPipeline && !kDropout &&
                             kDqStageWarpBytes * 4 == kDsBufferBytes),
                "pairs: D=128, the block's dQ, bulk adds, the pipeline; a dQ^T tile fits a dS^T copy");
};

template <typename Traits>
struct BackwardShared {
  unsigned char* base;
  __device__ unsigned char* at(int offset) const { return base + offset; }
  __device__ unsigned char* k() const { return at(Traits::kK); }
  __device__ unsigned char* v() const { return at(Traits::kV); }
  __device__ unsigned char* q(int s) const { return at(Traits::kQ + s * Traits::QTile::kBytes); }
  __device__ unsigned char* dout(int s) const { return at(Traits::kDo + s * Traits::QTile::kBytes); }
  // dS^T of consumer c in buffer `buffer`: the consumers' tiles are adjacent, so buffer(b) reads
  // as one 128-key tile.
  __device__ unsigned char* ds(int buffer, int c) const {
    return at(Traits::kDs + buffer * Traits::kDsBufferBytes + c * Traits::kDsBytes);
  }
  __device__ float* dq_stage(int consumer, int warp, int buffer) const {
    return reinterpret_cast<float*>(
        at(Traits::kDqStage + ((buffer * Traits::kConsumers + consumer) * 4 + warp) * Traits::kDqStageWarpBytes));
  }
  // The deterministic mode's dQ tile buffer b: 64 x kHeadDim floats in the accumulator's order.
  __device__ float* dq_tile(int b) const { return reinterpret_cast<float*>(at(Traits::kDqStage + b * Traits::kDqTileBytes)); }
  __device__ float* lse(int s) const { return reinterpret_cast<float*>(at(Traits::kLse + s * Traits::kBlockM * 4)); }
  __device__ float* delta(int s) const { return reinterpret_cast<float*>(at(Traits::kDelta + s * Traits::kBlockM * 4)); }
  __device__ std::uint64_t* barriers() const { return reinterpret_cast<std::uint64_t*>(at(Traits::kBarriers)); }
  __device__ std::uint64_t* kv_full() const { return barriers(); }
  __device__ std::uint64_t* step_full(int s) const { return barriers() + 1 + s; }
  __device__ std::uint64_t* step_empty(int s) const { return barriers() + 1 + Traits::kStages + s; }
  // Writers only, per dQ tile buffer b: staged (full), added by its writer (empty), consumer c's
  // part added (own parts; c below the last consumer).
  __device__ std::uint64_t* dq_barriers(int b) const {
    return barriers() + 1 + 2 * Traits::kStages + b * Traits::kDqBufferBarriers;
  }
  __device__ std::uint64_t* dq_full(int b) const { return dq_barriers(b); }
  __device__ std::uint64_t* dq_empty(int b) const { return dq_barriers(b) + 1; }
  __device__ std::uint64_t* dq_part(int b, int c) const { return dq_barriers(b) + 2 + c; }
  // kDqTransposed, per dS^T buffer b: every consumer with keys has written its part (full), the
  // step's dQ^T product has read it (empty).
  __device__ std::uint64_t* ds_full(int b) const {
    return barriers() + 1 + 2 * Traits::kStages + (Traits::kDqWriter ? 2 * Traits::kDqBufferBarriers : 0) + b;
  }
  __device__ std::uint64_t* ds_empty(int b) const { return ds_full(b) + Traits::kDsBuffers; }
  __device__ std::uint64_t* xds_full(int b) const { return ds_full(b) + 2 * Traits::kDsBuffers; }
  __device__ std::uint64_t* xds_empty(int b) const { return ds_full(b) + 3 * Traits::kDsBuffers; }
  // kPaired: the partner's dS^T tile of buffer b (all its keys), and its K panel.
  __device__ unsigned char* peer_ds(int b) const { return at(Traits::kPeerDs + b * Traits::kDsBufferBytes); }
  __device__ unsigned char* peer_k() const { return at(Traits::kPeerK); }
};

// The work of one block: its key tile, its kv head's query heads, and the query tiles that see
// any of its keys (the same for every query head of the group).
// A piece of a split unit (kTailSplit) walks steps [step0, step0 + steps) of the unit's and adds
// its dK, dV into the unit's float32 sums (split_piece_index).
struct BackwardTile {
  std::int64_t b, h_kv, n0, m_begin, m_end;  // query tiles [m_begin, m_end)
  int steps;                                  // query heads x query tiles (this piece's)
  int pair_rank = 0;                          // kPaired: 0 the lower key tile of the pair, 1 the upper
  int step0 = 0;                              // kTailSplit: the piece's first step of the unit
};

// Whether a kernel of Traits runs split units (common/tail_split.hpp; launch.cuh plans a small
// last wave's split, or a small masked grid's, and then takes the kSplit kernel; the pairs' own
// kSplit kernel splits pairs, a cluster's two blocks walking the same step range): not the
// deterministic mode (its dK, dV sums would depend on the order of the atomics), not dropout
// (not measured) and not wide_kernel.cuh's (its own epilogue).
template <typename Traits>
inline constexpr bool kTailSplit = !Traits::kWide && Traits::kSplit;

template <typename Traits>
__device__ __forceinline__ BackwardTile backward_tile(const BackwardParams& p) {
  // kPaired: the launch's items are pairs of key tiles, a cluster each (blockIdx.x / 2).
  std::int64_t n_blocks = Traits::kPaired ? gridDim.x / 2 : gridDim.x;
  const std::int64_t x = Traits::kPaired ? blockIdx.x / 2 : blockIdx.x;
  std::int64_t linear = static_cast<std::int64_t>(blockIdx.y) * n_blocks + x, heads = gridDim.y;
  // A split last wave: a one-dimensional launch of p.split's blocks (whole units, then the
  // pieces); kPaired: of its pairs' clusters (p.split counts key tiles, pair_plan pairs).
  UnitPiece piece{0, -1, 0};
  if constexpr (kTailSplit<Traits>) {
    if (p.split.split_units > 0) {
      const TailSplit plan = Traits::kPaired ? pair_plan(p.split) : p.split;
      piece = unit_piece(plan, x);
      heads = p.batch * p.kv_heads;
      n_blocks = (plan.whole_units + plan.split_units) / heads;  // the launched key tiles (pairs)
      linear = piece.unit;
    }
  }
  // The first key tiles are seen by the most queries under a causal mask: they start first.
  const BlockItem item = block_item(linear, n_blocks, heads, p.heads_per_group);
  BackwardTile t;
  const std::int64_t bh_kv = item.head;
  t.b = bh_kv / p.kv_heads;
  t.h_kv = bh_kv % p.kv_heads;
  // The launch's first key tile (launch.cuh; kernel.cuh's traits only: in the wide kernel any use
  // of it tipped ptxas into serialising the D=192 products, C7511, -24%).
  std::int64_t first_tile = 0;
  if constexpr (!Traits::kWide) first_tile = p.key_tile_offset;
  // Keys [span0, span0 + span_keys) decide the query tiles: the block's, or the pair's (both
  // blocks of a pair walk the same steps; a step that sees none of a block's keys adds zeros).
  std::int64_t span0, span_keys = Traits::kBlockN;
  if constexpr (Traits::kPaired) {
    t.pair_rank = static_cast<int>(ptx::cluster_rank());
    span0 = (2 * item.rank + first_tile) * Traits::kBlockN;
    span_keys = 2 * Traits::kBlockN;
    t.n0 = span0 + t.pair_rank * Traits::kBlockN;
  } else {
    t.n0 = (item.rank + first_tile) * Traits::kBlockN;
    span0 = t.n0;
  }
  // Rows i that see a key j in [span0, last]: -left <= j - (i + shift) <= right.
  const std::int64_t last_key = (span0 + span_keys < p.k_len ? span0 + span_keys : p.k_len) - 1;
  std::int64_t first_row = span0 - p.mask.shift - p.mask.right;
  std::int64_t last_row = last_key - p.mask.shift + p.mask.left;
  first_row = first_row < 0 ? 0 : first_row;
  last_row = last_row > p.q_len - 1 ? p.q_len - 1 : last_row;
  if (first_row > last_row) {
    t.m_begin = t.m_end = 0;
  } else {
    t.m_begin = first_row / Traits::kBlockM;
    t.m_end = last_row / Traits::kBlockM + 1;
  }
  t.steps = static_cast<int>((t.m_end - t.m_begin) * p.heads_per_kv);
  if constexpr (kTailSplit<Traits>) {
    if (piece.split_index >= 0) {
      const StepRange range = piece_steps(p.split, piece, t.steps);
      t.step0 = static_cast<int>(range.begin);
      t.steps = static_cast<int>(range.end - range.begin);
    }
  }
  return t;
}

// Step `step` of a block: query head (within the group) and query tile.
struct BackwardStep {
  std::int64_t h, m0;
};

// In the deterministic mode the block walks its steps last first (see the top of this file).
template <typename Traits>
__device__ __forceinline__ BackwardStep backward_step(const BackwardParams& p,
                                                      const BackwardTile& t, int step) {
  if constexpr (Traits::kDeterministic) step = t.steps - 1 - step;
  if constexpr (kTailSplit<Traits>) step += t.step0;
  const std::int64_t tiles = t.m_end - t.m_begin;
  return BackwardStep{t.h_kv * p.heads_per_kv + step / tiles,
                      (t.m_begin + step % tiles) * Traits::kBlockM};
}

// The consumers' walk over a block's steps: backward_step(0), backward_step(1), ... (in the
// deterministic mode its order too, last first), one increment a step instead of backward_step's
// 64-bit division and remainder (about 25 instructions a step in every consumer warp: a 32-bit
// fast path and a call to the 64-bit one). The wide kernel keeps backward_step: with the walk
// ptxas serialised its D=192 products (C7511).
// It also answers whether a step's tile needs the element mask from the block's range of fully
// visible query tiles (Mask::fully_visible_row_starts), computed once, instead of loading the
// mask and comparing in 64 bits at every step.
template <typename Traits>
struct StepWalk {
  std::int64_t h = 0, tile = 0, tiles, m_begin;  // the current step's query head and tile
  detail::Mask::RowStarts unmasked;  // query tiles from these rows need no element mask

  __device__ StepWalk(const BackwardParams& p, const BackwardTile& t)
      : tiles(t.m_end - t.m_begin), m_begin(t.m_begin) {
    if (t.steps > 0) {
      const BackwardStep first = backward_step<Traits>(p, t, 0);  // the walk's one division
      h = first.h;
      tile = first.m0 / Traits::kBlockM - t.m_begin;
    }
    unmasked = p.mask.fully_visible_row_starts(t.n0, t.n0 + Traits::kBlockN, Traits::kBlockM);
    if (t.n0 + Traits::kBlockN > p.k_len) unmasked = {1, 0};  // keys past Nk: every tile masks
  }
  __device__ BackwardStep current() const { return BackwardStep{h, (m_begin + tile) * Traits::kBlockM}; }
  // needs_mask for the current step's query tile st.m0.
  __device__ bool needs_mask(std::int64_t m0) const {
    return m0 < unmasked.first_row || m0 > unmasked.last_row;
  }
  __device__ void advance() {
    if constexpr (Traits::kDeterministic) {
      if (--tile < 0) {
        tile = tiles - 1;
        --h;
      }
    } else if (++tile == tiles) {
      tile = 0;
      ++h;
    }
  }
};

// Deterministic mode: this block's turn among the key tiles that see query tile st.m0 (they form
// a run of consecutive key tiles starting at the one holding the tile's first visible key; each
// block passes the turn once).
template <typename Traits>
__device__ __forceinline__ int dq_turn(const BackwardParams& p, const BackwardTile& t,
                                       const BackwardStep& st) {
  const std::int64_t first_tile = p.mask.first_key(st.m0) / Traits::kBlockN;
  return static_cast<int>(t.n0 / Traits::kBlockN - first_tile);
}

// ---------------------------------------------------------------------------------------------
// Producer
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ void wait_step_empty(std::uint64_t* empty, int stages, int step) {
  if (step >= stages) mbarrier_wait(empty, static_cast<std::uint32_t>(step / stages - 1) & 1u);
}

template <typename Traits>
__device__ __forceinline__ void load_backward_tiles(const Sm90BackwardParams& params,
                                                    const BackwardShared<Traits>& smem,
                                                    const BackwardTile& tile) {
  const BackwardParams& p = params.args;
  const int b = static_cast<int>(tile.b), h_kv = static_cast<int>(tile.h_kv);
  FLASHPP_BWD_STAMP(producer_start, clock64());
  mbarrier_expect_bytes(smem.kv_full(), 2 * Traits::KTile::kBytes + (Traits::kPaired ? Traits::kKPanelBytes : 0));
#pragma unroll
  for (int panel = 0; panel < Traits::kPanels; ++panel) {
    tma_load_4d(smem.k() + panel * Traits::kKPanelBytes, &params.k_map, panel * 64,
                static_cast<int>(tile.n0), h_kv, b, smem.kv_full());
    tma_load_4d(smem.v() + panel * Traits::kKPanelBytes, &params.v_map, panel * 64,
                static_cast<int>(tile.n0), h_kv, b, smem.kv_full());
  }
  if constexpr (Traits::kPaired) {  // the partner's keys, this block's panel of dQ's columns
    const std::int64_t peer_n0 = tile.n0 + (tile.pair_rank == 0 ? Traits::kBlockN : -Traits::kBlockN);
    tma_load_4d(smem.peer_k(), &params.k_map, tile.pair_rank * 64, static_cast<int>(peer_n0), h_kv, b,
                smem.kv_full());
  }
  FLASHPP_BWD_STAMP(kv_issued, clock64());
  // The kernel may run beside the preprocess (launch.cuh, dependent launch): lse and delta are
  // its output.
  if constexpr (!Traits::kWide) grid_dependency_wait();
  for (int step = 0; step < tile.steps; ++step) {
    const int s = step % Traits::kStages;
    wait_step_empty(smem.step_empty(s), Traits::kStages, step);
    const BackwardStep st = backward_step<Traits>(p, tile, step);
    const std::int64_t row = (tile.b * p.q_heads + st.h) * p.rows_padded + st.m0;
    mbarrier_expect_bytes(smem.step_full(s),
                          2 * Traits::QTile::kBytes + 2 * Traits::kBlockM * 4);
#pragma unroll
    for (int panel = 0; panel < Traits::kPanels; ++panel) {
      tma_load_4d(smem.q(s) + panel * Traits::kQPanelBytes, &params.q_map, panel * 64,
                  static_cast<int>(st.m0), static_cast<int>(st.h), b, smem.step_full(s));
      tma_load_4d(smem.dout(s) + panel * Traits::kQPanelBytes, &params.dout_map, panel * 64,
                  static_cast<int>(st.m0), static_cast<int>(st.h), b, smem.step_full(s));
    }
    bulk_load(smem.lse(s), p.lse_log2 + row, Traits::kBlockM * 4, smem.step_full(s));
    bulk_load(smem.delta(s), p.delta + row, Traits::kBlockM * 4, smem.step_full(s));
  }
  FLASHPP_BWD_STAMP(loads_issued, clock64());
}

// ---------------------------------------------------------------------------------------------
// Consumer steps
// ---------------------------------------------------------------------------------------------

// acc = A(64 rows of `a`, K-major) B(`b`, K-major)^T over the head dim (S^T = K Q^T, dP^T = V dO^T):
// Traits::kQTiles * 8 queries, from the row of the query tile that `b` points at.
template <typename Traits>
__device__ __forceinline__ void issue_transposed_scores(float (&acc)[Traits::kQTiles][4],
                                                        const unsigned char* a, const unsigned char* b) {
  using Mma = ptx::WgmmaShape<Traits::kQTiles * 8, typename Traits::Element>;
  const std::uint64_t a_desc = ptx::smem_descriptor<ptx::Major::k>(a, 0);
  const std::uint64_t b_desc = ptx::smem_descriptor<ptx::Major::k>(b, 0);
  auto& d = reinterpret_cast<float(&)[Traits::kQTiles * 4]>(acc);
#pragma unroll
  for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
    const std::uint32_t a_step = (kk / 4) * Traits::kKPanelBytes + (kk % 4) * 32;
    const std::uint32_t b_step = (kk / 4) * Traits::kQPanelBytes + (kk % 4) * 32;
    Mma::template ss<0, 0>(d, ptx::advance_descriptor(a_desc, a_step),
                           ptx::advance_descriptor(b_desc, b_step), kk > 0 ? 1 : 0);
  }
}

// acc += A(registers: 64 keys x 64 queries) B(query tile, MN-major): dV += P^T dO, dK += dS^T Q.
template <typename Traits>
__device__ __forceinline__ void issue_key_gradient(float (&acc)[Traits::kDTiles][4],
                                                   const std::uint32_t (&a)[Traits::kBlockM / 16][4],
                                                   const unsigned char* b) {
  using Mma = ptx::WgmmaShape<Traits::kHeadDim, typename Traits::Element>;
  const std::uint64_t b_desc = ptx::smem_descriptor<ptx::Major::mn>(b, Traits::kQPanelBytes);
  auto& d = reinterpret_cast<float(&)[Traits::kHeadDim / 2]>(acc);
#pragma unroll
  for (int kk = 0; kk < Traits::kBlockM / 16; ++kk) {
    Mma::template rs<1>(d, a[kk], ptx::advance_descriptor(b_desc, kk * 2048), 1);
  }
}

// dQ = dS (dS^T in shared memory, read transposed) K (MN-major), over kKeys keys and kColumns
// columns starting at column col0 of K (col0 a multiple of 8: inside a 64-column panel the start
// address moves along the swizzled row, as a K-major k16 step does). A product that starts inside
// a panel must end in it: one that crossed into the next panel read wrong columns there (session
// 23, the wide kernel at D=192).
template <typename Traits, int kKeys, int kColumns = Traits::kDqColumns>
__device__ __forceinline__ void issue_query_gradient(float (&acc)[kColumns / 8][4],
                                                     const unsigned char* ds, const unsigned char* k,
                                                     int col0) {
  using Mma = ptx::WgmmaShape<kColumns, typename Traits::Element>;
  const std::uint64_t a_desc = ptx::smem_descriptor<ptx::Major::mn>(ds, Traits::kDsBytes);
  const std::uint64_t b_desc = ptx::smem_descriptor<ptx::Major::mn>(
      k + (col0 / 64) * Traits::kKPanelBytes + (col0 % 64) * 2, Traits::kKPanelBytes);
  auto& d = reinterpret_cast<float(&)[kColumns / 2]>(acc);
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    Mma::template ss<1, 1>(d, ptx::advance_descriptor(a_desc, kk * 2048),
                           ptx::advance_descriptor(b_desc, kk * 2048), kk > 0 ? 1 : 0);
  }
}

// dQ^T = K^T dS^T over the first kKeys keys of the block (kDqTransposed, D=64): A = the K tile read
// transposed (columns of K as rows, MN-major), B = the consumers' dS^T tiles of one buffer (keys
// as rows, queries contiguous: MN-major), one m64n64 product whose accumulator holds dQ^T
// (rows = columns of dQ, 16 a warp; columns = the step's queries).
// `k`: a 64-column panel of K (kPaired: one of this block's or the partner's). kAccumulate: add to
// acc (the pair's second tile) instead of starting from zero.
template <typename Traits, int kKeys, bool kAccumulate = false>
__device__ __forceinline__ void issue_transposed_query_gradient(float (&acc)[Traits::kDqTiles][4],
                                                                const unsigned char* ds,
                                                                const unsigned char* k) {
  static_assert(Traits::kDqAccumTransposed && Traits::kDqTiles * 8 == Traits::kBlockM,
                "m64 = a panel of dQ's columns, n = the step's queries");
  using Mma = ptx::WgmmaShape<Traits::kBlockM, typename Traits::Element>;
  const std::uint64_t a_desc = ptx::smem_descriptor<ptx::Major::mn>(k, Traits::kKPanelBytes);
  const std::uint64_t b_desc = ptx::smem_descriptor<ptx::Major::mn>(ds, Traits::kDsBytes);
  auto& d = reinterpret_cast<float(&)[Traits::kBlockM / 2]>(acc);
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    Mma::template ss<1, 1>(d, ptx::advance_descriptor(a_desc, kk * 2048),
                           ptx::advance_descriptor(b_desc, kk * 2048), kAccumulate || kk > 0 ? 1 : 0);
  }
}

// Consumers of a block with a key below Nk (the others skip every step): the dQ^T turns go round
// these (kDqTransposed).
template <typename Traits>
__device__ __forceinline__ int consumers_with_keys(const BackwardParams& p, const BackwardTile& tile) {
  const std::int64_t keys = p.k_len - tile.n0;
  return keys >= Traits::kBlockN ? Traits::kConsumers : static_cast<int>((keys + 63) / 64);
}

// Dropout decisions of the thread's S^T accumulator elements (keys key0 + g + 8 (c / 2), queries
// m0 + 8 nt + 2t + c % 2). One Philox call decides a 4 x 4 comb of a 16-query x 16-key block,
// which lanes g and g ^ 1 hold split by key parity (common/philox.hpp): for each 32-query block
// the pair makes one call each and swaps halves, so a lane makes one call per 16 of its
// elements. The decisions stay packed as sign bits (8 registers a step); dropout_factor unpacks
// one element's.
template <typename Traits>
struct StepKeepSigns {
  KeepSigns block[Traits::kQTiles / 4];  // per 32-query block
};

template <typename Traits>
__device__ __forceinline__ StepKeepSigns<Traits> dropout_decisions(const BackwardParams& p, std::uint32_t bh,
                                                                   std::int64_t m0, std::int64_t key0,
                                                                   int g, int t) {
  static_assert(Traits::kQTiles % 4 == 0, "query tiles of a multiple of 32 queries");
  const bool odd = (g & 1) != 0;
  const auto j = static_cast<std::uint32_t>(key0 + g);
  StepKeepSigns<Traits> keep;
#pragma unroll
  for (int q = 0; q < Traits::kQTiles / 4; ++q) {
    // The even lane calls for the first 16 queries of the block, the odd one for the second.
    const auto i = static_cast<std::uint32_t>(m0 + 32 * q + (odd ? 16 : 0) + 2 * t);
    keep.block[q] = share_dropout_calls<2>(detail::dropout_random_bytes(p.dropout, bh, i, j), odd, p.dropout);
  }
  return keep;
}

// keep_scale where element (nt, c) is kept, 0 where dropped: byte 2 (nt % 2) + c / 2 (2 x query
// bit 3 + key bit 3) of the word for query parity c % 2 in its 16-query block's words.
template <typename Traits>
__device__ __forceinline__ float dropout_factor(const StepKeepSigns<Traits>& keep, int nt, int c,
                                                float keep_scale) {
  const KeepSigns& k = keep.block[nt / 4];
  const std::uint32_t* w = (nt & 2) ? k.b : k.a;
  return __uint_as_float(keep_mask(w[c & 1], 2u * (nt & 1) + (c >> 1)) & __float_as_uint(keep_scale));
}

// Float accumulator pairs -> the 16-bit A fragments of a k16 product (two 8-column tiles each).
template <typename Element, int kTiles>
__device__ __forceinline__ void to_a_fragments(std::uint32_t (&a)[kTiles / 2][4], const float (&x)[kTiles][4]) {
#pragma unroll
  for (int kk = 0; kk < kTiles / 2; ++kk) {
    a[kk][0] = pack_pair<Element>(x[2 * kk][0], x[2 * kk][1]);
    a[kk][1] = pack_pair<Element>(x[2 * kk][2], x[2 * kk][3]);
    a[kk][2] = pack_pair<Element>(x[2 * kk + 1][0], x[2 * kk + 1][1]);
    a[kk][3] = pack_pair<Element>(x[2 * kk + 1][2], x[2 * kk + 1][3]);
  }
}

// A consumer hands a step's buffers back to the producer once its reads of them are done: the
// wgmma reads of Q and dO (complete after wait_group 0) and each thread's own loads of lse and
// delta, which the producer's next bulk copy into that buffer must follow. FLASHPP_SM90_BWD_RELEASE
// (compile definition) picks how:
//   0  one arrival per warp after __syncwarp. Ordered by the PTX memory model (bar.warp.sync
//      orders the warp's loads before lane 0's release), but compute-sanitizer's racecheck does
//      not follow that chain and reports a write-after-read hazard on lse/delta.
//   1  every consumer thread arrives (each thread's loads ordered by its own arrival; default:
//      the only form racecheck reports clean, session 13 runs 2 and 4).
//   2  the warpgroup meets at a named barrier, then one thread arrives (racecheck reports the
//      same hazard as for 0).
// (Loading lse and delta from global memory instead, which would let form 0 pass racecheck, lost
// 23-25% at D=64: perf-notes, "lse/delta from global memory".)
#ifndef FLASHPP_SM90_BWD_RELEASE
#define FLASHPP_SM90_BWD_RELEASE 1
#endif
constexpr int kStepReleases = FLASHPP_SM90_BWD_RELEASE == 0 ? 4 : (FLASHPP_SM90_BWD_RELEASE == 1 ? 128 : 1);

// `release_barrier`: a named barrier of this warpgroup's 128 threads (form 2).
__device__ __forceinline__ void release_step(std::uint64_t* empty, int lane, int release_barrier) {
  if constexpr (FLASHPP_SM90_BWD_RELEASE == 0) {
    __syncwarp();
    if (lane == 0) ptx::mbarrier_arrive(empty);
  } else if constexpr (FLASHPP_SM90_BWD_RELEASE == 1) {
    ptx::mbarrier_arrive(empty);
  } else {
    ptx::named_barrier_sync(release_barrier, 128);
    if (threadIdx.x % 128 == 0) ptx::mbarrier_arrive(empty);
  }
}

// The two halves of a warp's bulk dQ addition (add_warp_dq below; kDqDefer runs them a step
// apart). stage_warp_dq: the warp's fragments into its staging area, once
// the reduce that read the area kStageBuffers steps ago has read it.
template <int kStageBuffers, int kTiles>
__device__ __forceinline__ void stage_warp_dq(const float (&dq)[kTiles][4], float* stage, int lane) {
  if (lane == 0) bulk_wait_read<kStageBuffers - 1>();
  __syncwarp();
#pragma unroll
  for (int dt = 0; dt < kTiles; ++dt) dq_accum_stage_fragment(stage + dt * kDqAccumBlockFloats, lane, dq[dt]);
}

// send_warp_dq: the staged area added into dst() (its first accumulator block, computed by lane
// 0 after the fence: computed before it, the address arithmetic cost the D=128 kernel 5%, session
// 31 run 2) by one bulk reduce-add of lane 0, after every lane's proxy fence.
template <int kTiles, typename Dst>
__device__ __forceinline__ void send_warp_dq(const Dst& dst, const float* stage, int lane) {
  ptx::fence_shared_to_async();
  __syncwarp();
  if (lane == 0) {
    float* const first = dst();
    bulk_reduce_add(first, stage, kTiles * kDqAccumBlockFloats * 4);
    if constexpr (FLASHPP_SM90_BWD_DQ_ADDS == 2) bulk_reduce_add(first, stage, kTiles * kDqAccumBlockFloats * 4);
    bulk_commit();
  }
}

// accumulate_dq of one warp: its 16 rows (row block `row_block`) x kTiles 8-column tiles from
// column tile dt0 added into the fragment-ordered float32 accumulator (common/dq_accum.cuh, shared
// with the sm80 family and its postprocess). kBulk: staged in `stage` (the warp's own area of
// kTiles accumulator blocks), then one bulk reduce-add by lane 0 (the accumulator blocks of the
// warp's rows and columns are consecutive); the area is written again only once the previous
// reduce has read it, and the block waits for its last reduces before it ends (bulk_wait).
// Otherwise one 16-byte red per fragment, no barrier. kStageBuffers: the warp's areas, used by
// its steps in turn: an area is rewritten once the reduce of kStageBuffers steps ago has read it.
template <bool kBulk, int kStageBuffers = 1, int kTiles>
__device__ __forceinline__ void add_warp_dq(const BackwardParams& p, std::int64_t bh,
                                            std::int64_t row_block, int dt0,
                                            const float (&dq)[kTiles][4], float* stage, int lane) {
  if constexpr (kBulk) {
    stage_warp_dq<kStageBuffers>(dq, stage, lane);
    send_warp_dq<kTiles>([&] { return dq_accum_block(p, bh, row_block, dt0, p.accum_width); }, stage, lane);
  } else {
    (void)stage;
#pragma unroll
    for (int dt = 0; dt < kTiles; ++dt)
      dq_accum_add_fragment(dq_accum_block(p, bh, row_block, dt0 + dt, p.accum_width), lane, dq[dt]);
  }
}

// Deterministic mode: the last consumer with keys below Nk (the others have no dQ part).
template <typename Traits>
__device__ __forceinline__ int dq_last_consumer(const BackwardParams& p, const BackwardTile& tile) {
  const std::int64_t keys = p.k_len - tile.n0;
  return keys >= Traits::kBlockN ? Traits::kConsumers - 1 : static_cast<int>((keys - 1) / 64);
}

// Deterministic mode, a consumer thread: its dQ fragments of step `step` into the step's tile
// buffer (step % 2), then the hand-over. With the block's dQ (consumers on disjoint columns) each
// consumer writes its columns once the writer has added what was there two steps ago, and every
// thread arrives on `full`. With own parts (D=64) the first consumer writes, each next one (after
// the previous one's arrival on its `part` barrier) adds its fragments to the same elements (the
// same thread of each consumer holds the same ones), so the sums come in consumer order whatever
// the timing, and the last consumer with keys (`last`) hands the buffer to the writer.
template <typename Traits>
__device__ __forceinline__ void stage_dq_in_order(const BackwardShared<Traits>& smem,
                                                  const float (&dq)[Traits::kDqTiles][4], int consumer,
                                                  int last, int warp, int lane, int step) {
  constexpr bool kChained = !Traits::kBlockDq;
  const int buffer = step & 1;
  const int dt0 = Traits::kBlockDq ? consumer * Traits::kDqTiles : 0;
  float* stage = smem.dq_tile(buffer) + (warp * (Traits::kHeadDim / 8) + dt0) * kDqAccumBlockFloats;
  const bool adds = kChained && consumer > 0;
  if (adds) {
    mbarrier_wait(smem.dq_part(buffer, consumer - 1), static_cast<std::uint32_t>(step / 2) & 1u);
  } else if (step >= 2) {
    mbarrier_wait(smem.dq_empty(buffer), static_cast<std::uint32_t>(step / 2 - 1) & 1u);
  }
#pragma unroll
  for (int dt = 0; dt < Traits::kDqTiles; ++dt) {
    float* block = stage + dt * kDqAccumBlockFloats;
    if (adds) {
      float c[4];
      dq_accum_load_fragment(c, block, lane);
#pragma unroll
      for (int e = 0; e < 4; ++e) c[e] += dq[dt][e];
      dq_accum_stage_fragment(block, lane, c);
    } else {
      dq_accum_stage_fragment(block, lane, dq[dt]);
    }
  }
  if (!kChained || consumer == last) {
    ptx::fence_shared_to_async();  // this thread's writes, before the writer's bulk copy reads them
    ptx::mbarrier_arrive(smem.dq_full(buffer));
  } else {
    ptx::mbarrier_arrive(smem.dq_part(buffer, consumer));
  }
}

// Deterministic mode with kDqTransposed: the block's dQ^T of step `step` (one consumer's, all keys)
// into the step's tile buffer (step % 2) in the transposed order, warp w's 16 columns as one
// 4 KB piece, once the writer has added what was there two steps ago; then the hand-over.
template <typename Traits>
__device__ __forceinline__ void stage_dq_t_for_writer(const BackwardShared<Traits>& smem,
                                                      const float (&dq)[Traits::kDqTiles][4], int warp,
                                                      int lane, int step) {
  const int buffer = step & 1;
  if (step >= 2) mbarrier_wait(smem.dq_empty(buffer), static_cast<std::uint32_t>(step / 2 - 1) & 1u);
  float* stage = smem.dq_tile(buffer) + warp * Traits::kDqTiles * kDqAccumBlockFloats;
#pragma unroll
  for (int dt = 0; dt < Traits::kDqTiles; ++dt) dq_accum_stage_fragment(stage + dt * kDqAccumBlockFloats, lane, dq[dt]);
  ptx::fence_shared_to_async();  // this thread's writes, before the writer's bulk copy reads them
  ptx::mbarrier_arrive(smem.dq_full(buffer));
}

// Deterministic mode, writer `w` (0 or 1; one thread of the producer warpgroup each): the block's
// dQ of steps w, w + 2, ... (tile buffer w) into the accumulator, each in its turn (dq_turn): once
// the consumers have staged the step, wait for the turn, add the 64 x kHeadDim tile with one bulk
// reduce-add, wait until it has landed, pass the turn, free the buffer.
template <typename Traits>
__device__ __forceinline__ void write_dq_in_turns(const BackwardParams& p, const BackwardShared<Traits>& smem,
                                                  const BackwardTile& tile, int w) {
  for (int step = w; step < tile.steps; step += 2) {
    mbarrier_wait(smem.dq_full(w), static_cast<std::uint32_t>(step / 2) & 1u);
    const BackwardStep st = backward_step<Traits>(p, tile, step);
    const std::int64_t bh = tile.b * p.q_heads + st.h;
    int* turns = p.dq_turns + bh * (p.rows_padded / 64) + st.m0 / 64;
    ptx::wait_turn_async(turns, dq_turn<Traits>(p, tile, st));
    if constexpr (kDqAdds && Traits::kDqTransposed) {
      // dQ^T's tile: its 16-column blocks are apart in the accumulator (dq_accum_t_block).
      constexpr int kBlockBytes = Traits::kDqTileBytes / (Traits::kHeadDim / 16);
#pragma unroll
      for (int cb = 0; cb < Traits::kHeadDim / 16; ++cb) {
        bulk_reduce_add(dq_accum_t_block(p, bh, cb, st.m0 / 8), smem.dq_tile(w) + cb * (kBlockBytes / 4), kBlockBytes);
      }
      bulk_commit();
      bulk_wait<0>();
    } else if constexpr (kDqAdds) {
      bulk_reduce_add(dq_accum_block(p, bh, st.m0 / 16, 0, p.accum_width), smem.dq_tile(w), Traits::kDqTileBytes);
      bulk_commit();
      bulk_wait<0>();
    }
    ptx::pass_turn_async(turns);
    ptx::mbarrier_arrive(smem.dq_empty(w));
  }
}

// P^T = exp2(S^T scale log2e - lse_log2) of one 8-query tile of a consumer's S^T: key rows
// key0 + g, key0 + g + 8, query columns query0 + 2 t, + 1 (lse_pair: their lse_log2), zero where
// `masked` and the key is past Nk or the mask hides the element. prob may alias s.
template <bool kMaskedAlways>
__device__ __forceinline__ void recompute_probabilities(float (&prob)[4], const float (&s)[4],
                                                        float2 lse_pair, const BackwardParams& p,
                                                        std::int64_t key0, std::int64_t query0,
                                                        int g, int t, bool masked) {
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    float value = fast_exp2(fmaf(s[c], p.scale_log2, -((c & 1) ? lse_pair.y : lse_pair.x)));
    if (kMaskedAlways || masked) {
      const std::int64_t j = key0 + g + 8 * (c >> 1), i = query0 + 2 * t + (c & 1);
      if (j >= p.k_len || !p.mask.visible(i, j)) value = 0.0f;
    }
    prob[c] = value;
  }
}

// `own` where kPipeline gives P^T and dS^T arrays of their own, else `shared` (the score
// registers, overwritten in place).
template <bool kPipeline, typename Own, typename Shared>
__device__ __forceinline__ auto& own_or(Own& own, Shared& shared) {
  if constexpr (kPipeline) {
    return own;
  } else {
    (void)own;
    return shared;
  }
}

// The split unit whose piece this block is, -1 for a whole unit: worked out again from blockIdx.x
// at the end rather than kept live over the walk (a register of the consumers' 160 at D=64), in
// 32 bits (the launch has fewer than 2^31 blocks; a 64-bit division is a call that made ptxas
// spill around it).
template <typename Traits>
__device__ __forceinline__ int split_piece_index(const BackwardParams& p) {
  if constexpr (kTailSplit<Traits> && Traits::kPaired) {
    return pair_block_split_index(p.split, blockIdx.x);
  } else if constexpr (kTailSplit<Traits>) {
    const auto whole = static_cast<unsigned>(p.split.whole_units);
    if (p.split.split_units > 0 && blockIdx.x >= whole) {
      return static_cast<int>((blockIdx.x - whole) / static_cast<unsigned>(p.split.pieces));
    }
  }
  return -1;
}

// A piece of a split unit: this warp's 16 keys of dV and scale * dK added into the unit's float32
// sums (common/split_unit.cuh, rows from the unit's first key), which the postprocess writes out.
template <typename Traits>
__device__ __forceinline__ void add_key_gradients_to_sums(const float (&dk)[Traits::kDTiles][4],
                                                          const float (&dv)[Traits::kDTiles][4],
                                                          const BackwardParams& p,
                                                          const BackwardTile& tile,
                                                          int split_index, std::int64_t key0,
                                                          int g, int t) {
  // (The unit's rows are the kernel's key tile, launch.cuh: p.split_unit_rows == kBlockN.)
  constexpr int kDkOffset = Traits::kBlockN * Traits::kHeadDim;
  const int col_tiles = p.head_dim / 8;  // (a multiple of 8)
  float* sum = split_unit_sums(p, split_index) + static_cast<int>(key0 - tile.n0) * Traits::kHeadDim +
               g * Traits::kHeadDim + 2 * t;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float* row = sum + 8 * half * Traits::kHeadDim;
    const bool row_in = key0 + g + 8 * half < p.k_len;
#pragma unroll
    for (int n = 0; n < Traits::kDTiles; ++n) {
      if (row_in && n < col_tiles) {
        add_pair(row + 8 * n, dv[n][2 * half], dv[n][2 * half + 1]);
        add_pair(row + kDkOffset + 8 * n, dk[n][2 * half] * p.scale, dk[n][2 * half + 1] * p.scale);
      }
    }
  }
}

// dK = scale * sum dS^T Q, dV = sum P^T dO: this warp's 16 keys (rows g and g + 8 from key0), every
// column below head_dim (a multiple of 8: a tile is stored whole or not at all), in whole 32-byte
// sectors (common/sector_store.cuh; +8% at N=1024 over 4-byte stores, session 22 run 7); a piece
// of a split unit adds them into the unit's sums instead.
template <typename Traits>
__device__ __forceinline__ void store_key_gradients(const float (&dk)[Traits::kDTiles][4],
                                                    const float (&dv)[Traits::kDTiles][4],
                                                    const BackwardParams& p, const BackwardTile& tile,
                                                    std::int64_t key0, int g, int t) {
  using Element = typename Traits::Element;
  if constexpr (kTailSplit<Traits>) {
    const int split_index = split_piece_index<Traits>(p);
    if (split_index >= 0) {
      add_key_gradients_to_sums<Traits>(dk, dv, p, tile, split_index, key0, g, t);
      return;
    }
  }
  const int col_tiles = p.head_dim / 8;
  const int col = sector_store_column(t);
  Element* dk_out = static_cast<Element*>(p.dk) + tile.b * p.dk_strides.batch +
                    tile.h_kv * p.dk_strides.head + col;
  Element* dv_out = static_cast<Element*>(p.dv) + tile.b * p.dv_strides.batch +
                    tile.h_kv * p.dv_strides.head + col;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const std::int64_t j = key0 + g + 8 * half;
    const bool row_in = j < p.k_len;
    Element* dk_row = dk_out + (row_in ? j * p.dk_strides.row : 0);
    Element* dv_row = dv_out + (row_in ? j * p.dv_strides.row : 0);
    store_accumulator_row(dk_row, dk, half, p.scale, col_tiles, row_in, t);
    store_accumulator_row(dv_row, dv, half, 1.0f, col_tiles, row_in, t);
  }
}

// kPaired, one thread of the producer warpgroup: each step's dS^T of the block (both consumers'),
// once written, into the partner's copy of buffer step % 2 by one bulk copy that completes on the
// partner's xds_full. (The consumers waited, before writing the buffer, until the partner had
// done with the buffer's previous copy.)
template <typename Traits>
__device__ __forceinline__ void copy_ds_to_partner(const BackwardShared<Traits>& smem, const BackwardTile& tile) {
  const unsigned partner = static_cast<unsigned>(tile.pair_rank ^ 1);
  for (int step = 0; step < tile.steps; ++step) {
    const int b = step % Traits::kDsBuffers;
    mbarrier_wait(smem.ds_full(b), static_cast<std::uint32_t>(step / Traits::kDsBuffers) & 1u);
    ptx::bulk_copy_to_cluster(ptx::cluster_address(smem.peer_ds(b), partner), smem.ds(b, 0), Traits::kDsBufferBytes,
                              ptx::cluster_address(smem.xds_full(b), partner));
  }
}

// Zeros as a consumer's dS^T part (64 keys x 64 queries, 16-bit; the swizzle does not matter):
// 16-byte stores by its 128 threads.
template <typename Traits>
__device__ __forceinline__ void zero_ds_part(unsigned char* part) {
  static_assert(Traits::kDsBytes % (128 * 16) == 0, "whole 16-byte stores a thread");
#pragma unroll
  for (int i = 0; i < Traits::kDsBytes / (128 * 16); ++i)
    *reinterpret_cast<uint4*>(part + (i * 128 + threadIdx.x % 128) * 16) = make_uint4(0u, 0u, 0u, 0u);
}

template <typename Traits>
__device__ __forceinline__ void consumer_backward(const Sm90BackwardParams& params,
                                                  const BackwardShared<Traits>& smem,
                                                  const BackwardTile& tile, int consumer) {
  using Element = typename Traits::Element;
  constexpr bool kPipeline = Traits::kPipeline;
  const BackwardParams& p = params.args;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
  const int g = lane >> 2, t = lane & 3;
  // dS^T complete: this consumer's (own dQ part) or every consumer's (block dQ) before the product.
  const int ds_barrier = Traits::kBlockDq ? 1 : 1 + consumer;
  const int ds_threads = Traits::kBlockDq ? 128 * Traits::kConsumers : 128;
  const int release_barrier = 1 + 2 * Traits::kConsumers + consumer;  // release_step's form 2
  const std::int64_t key0 = tile.n0 + consumer * 64 + warp * 16;  // this warp's first key
  const unsigned char* k_rows = smem.k() + consumer * 64 * 128;
  const unsigned char* v_rows = smem.v() + consumer * 64 * 128;

  float dv[Traits::kDTiles][4], dk[Traits::kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < Traits::kDTiles; ++dt)
#pragma unroll
    for (int c = 0; c < 4; ++c) dv[dt][c] = dk[dt][c] = 0.0f;

  // S^T and dP^T of a step's 64 queries x this consumer's 64 keys; with kOverlap two groups, so
  // that P^T is computed while dP^T still runs.
  float s_t[Traits::kQTiles][4], dp_t[Traits::kQTiles][4];
  auto issue_s = [&](int step) {  // kPipeline: the next step's S^T
    const int s = step % Traits::kStages;
    mbarrier_wait(smem.step_full(s), static_cast<std::uint32_t>(step / Traits::kStages) & 1u);
    ptx::wgmma_fence();
    issue_transposed_scores<Traits>(s_t, k_rows, smem.q(s));
    ptx::wgmma_commit();
  };

  // No key of this consumer below Nk (the last key tile of a head where Nk is not a multiple of
  // the block's keys, e.g. two of three consumers at N=1024 with 192-key blocks): with its own dQ
  // it has nothing to add or store, and only releases each step's buffers once they are full.
  if constexpr (!Traits::kBlockDq) {
    if (tile.n0 + consumer * 64 >= p.k_len) {
      for (int step = 0; step < tile.steps; ++step) {
        const int s = step % Traits::kStages;
        mbarrier_wait(smem.step_full(s), static_cast<std::uint32_t>(step / Traits::kStages) & 1u);
        release_step(smem.step_empty(s), lane, release_barrier);  // (and no dQ part to stage)
      }
      return;
    }
  }
  FLASHPP_BWD_CONSUMER_STAMP(consumer_start, clock64());
  FLASHPP_BWD_CONSUMER_STAMP(steps, static_cast<std::uint64_t>(tile.steps));
  if (tile.steps > 0) mbarrier_wait(smem.kv_full(), 0);
  FLASHPP_BWD_CONSUMER_STAMP(kv_ready, clock64());
  if (kPipeline && tile.steps > 0) issue_s(0);
  // kDqDefer: step `step` sends the previous step's staged dQ to dq_pending (that step's first
  // accumulator block), then points dq_pending at its own (st: the step's query head and tile),
  // while its first products run.
  float* dq_pending = nullptr;
  auto send_pending_dq = [&](int step, const BackwardStep& st) {
    if constexpr (Traits::kDqDefer) {
      if (step > 0) {
        send_warp_dq<Traits::kDqTiles>([&] { return dq_pending; },
                                       smem.dq_stage(consumer, warp, (step - 1) % Traits::kDqStageBuffers), lane);
      }
      if (step < tile.steps) {
        dq_pending = dq_accum_block(p, tile.b * p.q_heads + st.h, (st.m0 + warp * 16) / 16,
                                    Traits::kBlockDq ? consumer * Traits::kDqTiles : 0, p.accum_width);
      }
    }
  };
  // kDqTransposed: the consumer whose turn it is computes the previous step's dQ^T (prev_st: that
  // step's query head and tile) from the dS^T ring, once every consumer with keys has written its
  // part there, and adds it; the turns go round the consumers with keys.
  [[maybe_unused]] const int dq_consumers = consumers_with_keys<Traits>(p, tile);
  [[maybe_unused]] int dq_turn = 0;  // whose turn the previous step's dQ^T is
  [[maybe_unused]] BackwardStep prev_st{};
  auto issue_transposed_dq = [&](float (&dq)[Traits::kDqTiles][4], int s_done) {
    if constexpr (Traits::kDqTransposed) {
      const int b = s_done % Traits::kDsBuffers;
      mbarrier_wait(smem.ds_full(b), static_cast<std::uint32_t>(s_done / Traits::kDsBuffers) & 1u);
      if (Traits::kConsumers == 3 && dq_consumers == 3) {
        issue_transposed_query_gradient<Traits, Traits::kBlockN>(dq, smem.ds(b, 0), smem.k());
      } else if (dq_consumers == 2) {
        issue_transposed_query_gradient<Traits, 128>(dq, smem.ds(b, 0), smem.k());
      } else {
        issue_transposed_query_gradient<Traits, 64>(dq, smem.ds(b, 0), smem.k());
      }
    }
  };
  // (s_done: the step whose dQ^T it is; the deterministic mode hands it to the writers.)
  auto add_transposed_dq = [&](const float (&dq)[Traits::kDqTiles][4], const BackwardStep& done, int s_done) {
    if constexpr (Traits::kDqTransposed && Traits::kDqWriter) {
      (void)done;
      stage_dq_t_for_writer<Traits>(smem, dq, warp, lane, s_done);
    } else if constexpr (Traits::kDqTransposed && kDqAdds) {
      (void)s_done;
      float* stage = smem.dq_stage(consumer, warp, 0);
      stage_warp_dq<1>(dq, stage, lane);
      send_warp_dq<Traits::kDqTiles>(
          [&] { return dq_accum_t_block(p, tile.b * p.q_heads + done.h, warp, done.m0 / 8); }, stage, lane);
    }
  };
  // kPaired (paired_dq): step s's dQ^T of this block's panel of columns is computed by consumer
  // s % 2 in step s + 1 from both blocks' dS^T of step s (this block's buffer s % 2 and the
  // partner's copy of its own), staged in place of that copy and added; at the top of step s + 2
  // that consumer tells the partner that the copy's area may be written again (xds_empty).
  [[maybe_unused]] const unsigned partner = Traits::kPaired ? static_cast<unsigned>(tile.pair_rank ^ 1) : 0u;
  auto issue_paired_dq = [&](float (&dq)[Traits::kDqTiles][4], int s_done) {
    if constexpr (Traits::kPaired) {
      const int b = s_done % Traits::kDsBuffers;
      const auto phase = static_cast<std::uint32_t>(s_done / Traits::kDsBuffers) & 1u;
      if (threadIdx.x % 128 == 0) ptx::arrive_expect_bytes(smem.xds_full(b), Traits::kDsBufferBytes);
      mbarrier_wait(smem.ds_full(b), phase);   // both consumers' dS^T of the step
      mbarrier_wait(smem.xds_full(b), phase);  // and the partner's
      issue_transposed_query_gradient<Traits, Traits::kBlockN>(
          dq, smem.ds(b, 0), smem.k() + tile.pair_rank * Traits::kKPanelBytes);
      issue_transposed_query_gradient<Traits, Traits::kBlockN, true>(dq, smem.peer_ds(b), smem.peer_k());
    }
  };
  auto add_paired_dq = [&](const float (&dq)[Traits::kDqTiles][4], const BackwardStep& done, int s_done) {
    if constexpr (Traits::kPaired && kDqAdds) {
      float* stage = reinterpret_cast<float*>(smem.peer_ds(s_done % Traits::kDsBuffers)) +
                     warp * Traits::kDqTiles * kDqAccumBlockFloats;
      stage_warp_dq<1>(dq, stage, lane);
      send_warp_dq<Traits::kDqTiles>(
          [&] {
            return dq_accum_t_block(p, tile.b * p.q_heads + done.h, 4 * tile.pair_rank + warp, done.m0 / 8);
          },
          stage, lane);
    }
  };
  // kSkipHidden: the query tiles from which a step sees some of this consumer's keys (a consumer
  // with no key below Nk returned above).
  [[maybe_unused]] detail::Mask::RowStarts seen{};
  if constexpr (Traits::kSkipHidden) {
    seen = p.mask.seeing_row_starts(tile.n0 + consumer * 64, tile.n0 + consumer * 64 + 64, Traits::kBlockM);
  }
  // A step that sees none of this consumer's keys (kSkipHidden): P^T and dS^T are zero and add
  // nothing to dV and dK, so it only writes zeros as its part of the step's dS^T for the dQ^T
  // product (ring buffers and barriers as any step) and takes its dQ^T turn. (The turn's code is
  // the loop's, below, written out again: one lambda for both moved ptxas's schedule of the
  // deterministic and dropout kernels, which never skip.)
  auto hidden_step = [&](int step, int s, const BackwardStep& st) {
    if constexpr (Traits::kSkipHidden) {
      mbarrier_wait(smem.step_full(s), static_cast<std::uint32_t>(step / Traits::kStages) & 1u);
      const int ds_buffer = step % Traits::kDsBuffers;
      if (step >= Traits::kDsBuffers) {
        mbarrier_wait(smem.ds_empty(ds_buffer), static_cast<std::uint32_t>(step / Traits::kDsBuffers - 1) & 1u);
      }
      zero_ds_part<Traits>(smem.ds(ds_buffer, consumer));
      ptx::fence_shared_to_async();
      ptx::mbarrier_arrive(smem.ds_full(ds_buffer));
      release_step(smem.step_empty(s), lane, release_barrier);
      if (step > 0 && dq_turn == consumer) {  // the previous step's dQ^T
        float dq_t[Traits::kDqTiles][4];
        ptx::wgmma_fence();
        issue_transposed_dq(dq_t, step - 1);
        ptx::wgmma_commit();
        ptx::wgmma_wait<0>();
        ptx::fence_registers(reinterpret_cast<float(&)[Traits::kDqTiles * 4]>(dq_t));
        ptx::mbarrier_arrive(smem.ds_empty((step - 1) % Traits::kDsBuffers));
        add_transposed_dq(dq_t, prev_st, step - 1);
      }
      if (step > 0) dq_turn = dq_turn + 1 == dq_consumers ? 0 : dq_turn + 1;
      prev_st = st;
    }
  };
  StepWalk<Traits> walk(p, tile);
  // The walk's leading hidden steps (under a causal mask the upper consumers' first query tiles
  // of the first query head) before the loop, so that the loop has no test of its own: a branch
  // per step cost the calls without hidden steps ~1% (session 37 run 2). With GQA the next query
  // heads' hidden steps run as masked steps.
  int first_step = 0;
  if constexpr (Traits::kSkipHidden) {
    for (; first_step < tile.steps; ++first_step, walk.advance()) {
      const BackwardStep st = walk.current();
      if (st.m0 >= seen.first_row && st.m0 <= seen.last_row) break;
      hidden_step(first_step, first_step % Traits::kStages, st);
    }
  }
  for (int step = first_step; step < tile.steps; ++step, walk.advance()) {
    const int s = step % Traits::kStages;
    const BackwardStep st = walk.current();
    if constexpr (Traits::kPaired) {
      // The area of step - 2's dQ^T (the partner's copy) has been read by its reduce-add.
      if (step >= 2 && (step & 1) == consumer && lane == 0) {
        bulk_wait_read<0>();
        ptx::remote_arrive(ptx::cluster_address(smem.xds_empty(step % Traits::kDsBuffers), partner));
      }
    }
    if constexpr (kPipeline) {
      ptx::wgmma_wait<0>();  // S^T, issued at the end of the previous step
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kBlockM / 2]>(s_t));
      if constexpr (FLASHPP_SM90_BWD_DQ_DEFER == 2) send_pending_dq(step, st);
      ptx::wgmma_fence();
      issue_transposed_scores<Traits>(dp_t, v_rows, smem.dout(s));
      ptx::wgmma_commit();
      if constexpr (FLASHPP_SM90_BWD_DQ_DEFER != 2) send_pending_dq(step, st);
    } else {
      mbarrier_wait(smem.step_full(s), static_cast<std::uint32_t>(step / Traits::kStages) & 1u);
      ptx::wgmma_fence();
      issue_transposed_scores<Traits>(s_t, k_rows, smem.q(s));
      if constexpr (Traits::kOverlap) ptx::wgmma_commit();
      issue_transposed_scores<Traits>(dp_t, v_rows, smem.dout(s));
      ptx::wgmma_commit();
      send_pending_dq(step, st);
    }
    // While the products run: which elements need the mask test, and the dropout decisions.
    const bool needs_mask = walk.needs_mask(st.m0);
    StepKeepSigns<Traits> keep;
    if constexpr (Traits::kDropout) {
      keep = dropout_decisions<Traits>(p, static_cast<std::uint32_t>(tile.b * p.q_heads + st.h),
                                       st.m0, key0, g, t);
    }
    auto factor = [&](int nt, int c) {
      return Traits::kDropout ? dropout_factor<Traits>(keep, nt, c, p.dropout.keep_scale) : 1.0f;
    };

    if constexpr (kPipeline) {
      // S^T has landed (above); dP^T runs on.
    } else if constexpr (Traits::kOverlap) {
      ptx::wgmma_wait<1>();
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kBlockM / 2]>(s_t));
    } else {
      ptx::wgmma_wait<0>();
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kBlockM / 2]>(dp_t));
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kBlockM / 2]>(s_t));
    }

    // recompute_p: P^T = exp2(S^T scale log2e - lse_log2), 0 where masked (rows = keys,
    // columns = queries); kept in s_t for dS (kPipeline: in an array of its own, as the next
    // S^T product writes s_t while this step still reads P^T). A masked and an unmasked copy of
    // the loop (when split, FLASHPP_SM90_BWD_SPLIT_MASK), so that the unmasked steps run compact
    // code without the per-element tests' branches in between.
    float own_prob[kPipeline ? Traits::kQTiles : 1][4], own_ds[kPipeline ? Traits::kQTiles : 1][4];
    auto& prob_t = own_or<kPipeline>(own_prob, s_t);
    auto& ds_t = own_or<kPipeline>(own_ds, dp_t);
    auto recompute_p = [&](auto masked) {
#pragma unroll
      for (int nt = 0; nt < Traits::kQTiles; ++nt) {
        // This thread's two query columns of the tile: one 8-byte load of lse.
        const float2 lse = *reinterpret_cast<const float2*>(smem.lse(s) + nt * 8 + 2 * t);
        recompute_probabilities<decltype(masked)::value>(prob_t[nt], s_t[nt], lse, p, key0,
                                                         st.m0 + 8 * nt, g, t,
                                                         !kSplitMask && needs_mask);
      }
    };
    if (kSplitMask && needs_mask) {
      recompute_p(std::true_type{});
    } else {
      recompute_p(std::false_type{});
    }
    // P~^T (dropout applied) as the A fragments of dV += P~^T dO: before dS^T with kOverlap (dV
    // runs while dS^T is computed), else after it, so that P^T and the fragments are not live
    // together beside dS^T (the 160 registers of three consumers).
    std::uint32_t p_a[Traits::kBlockM / 16][4];
    auto convert_dropped_p = [&] {
      float p_dropped[Traits::kQTiles][4];
#pragma unroll
      for (int nt = 0; nt < Traits::kQTiles; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          p_dropped[nt][c] = dropped_probability<Traits::kDropout>(prob_t[nt][c], factor(nt, c));
      to_a_fragments<Element, Traits::kQTiles>(p_a, p_dropped);
    };
    if constexpr (Traits::kOverlap) {
      convert_dropped_p();
      // accumulate_dv: issued now, it runs while dS^T is computed.
      ptx::wgmma_fence();
      issue_key_gradient<Traits>(dv, p_a, smem.dout(s));
      ptx::wgmma_commit();
      ptx::wgmma_wait<1>();  // dP^T has landed; dV may still run
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kBlockM / 2]>(dp_t));
    }

    // score_gradient: dS^T = P^T o (dP^T z - delta) (common/score_gradient.cuh), in dp_t (or its
    // own array).
#pragma unroll
    for (int nt = 0; nt < Traits::kQTiles; ++nt) {
      const float2 delta = *reinterpret_cast<const float2*>(smem.delta(s) + nt * 8 + 2 * t);
#pragma unroll
      for (int c = 0; c < 4; ++c)
        ds_t[nt][c] = score_gradient<Traits::kDropout>(prob_t[nt][c], dp_t[nt][c],
                                                       (c & 1) ? delta.y : delta.x, factor(nt, c));
    }
    if constexpr (!Traits::kOverlap) convert_dropped_p();
    std::uint32_t ds_a[Traits::kBlockM / 16][4];
    to_a_fragments<Element, Traits::kQTiles>(ds_a, ds_t);
    if constexpr (Traits::kOverlap) {
      // accumulate_dk: needs only this thread's dS^T; it runs while dS^T is staged for dQ.
      ptx::wgmma_fence();
      issue_key_gradient<Traits>(dk, ds_a, smem.q(s));
      ptx::wgmma_commit();
    } else if constexpr (Traits::kEarlyKeyGradients) {
      // accumulate_dv and accumulate_dk: they run while dS^T is staged for dQ.
      ptx::wgmma_fence();
      issue_key_gradient<Traits>(dv, p_a, smem.dout(s));
      issue_key_gradient<Traits>(dk, ds_a, smem.q(s));
      ptx::wgmma_commit();
    }

    // dS^T (16-bit) into this consumer's 128-byte-swizzled buffer for the dQ product (with
    // kDqTransposed once the product of three steps ago has read the buffer).
    const int ds_buffer =
        Traits::kDqTransposed ? step % Traits::kDsBuffers : (Traits::kDsBuffers > 1 ? step & 1 : 0);
    if constexpr (Traits::kDqTransposed || Traits::kPaired) {
      if (step >= Traits::kDsBuffers) {
        const auto phase = static_cast<std::uint32_t>(step / Traits::kDsBuffers - 1) & 1u;
        mbarrier_wait(smem.ds_empty(ds_buffer), phase);
        // kPaired: and the partner has done with this buffer's last copy (so it has been read).
        if constexpr (Traits::kPaired) mbarrier_wait(smem.xds_empty(ds_buffer), phase);
      }
    }
    unsigned char* ds_buf = smem.ds(ds_buffer, consumer);
#pragma unroll
    for (int nt = 0; nt < Traits::kQTiles; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp * 16 + g + 8 * half, chunk = nt;
        const int offset = row * 128 + ((chunk ^ (row & 7)) * 16) + t * 4;
        *reinterpret_cast<std::uint32_t*>(ds_buf + offset) = ds_a[nt / 2][(nt & 1) * 2 + half];
      }
    ptx::fence_shared_to_async();
    // With the block's dQ, the other consumer reads this buffer too; it is written again two
    // steps later, after the next step's barrier, which both pass only once done with this one.
    // kDqTransposed: the consumer whose turn it is reads it in the next step (ds_full).
    // kPaired: the producer warpgroup's copier (copy_ds_to_partner) and the turn's consumer wait.
    if constexpr (Traits::kDqTransposed || Traits::kPaired) {
      (void)ds_barrier, (void)ds_threads;
      ptx::mbarrier_arrive(smem.ds_full(ds_buffer));
    } else {
      ptx::named_barrier_sync(ds_barrier, ds_threads);
    }
    [[maybe_unused]] const bool dq_mine =
        (Traits::kDqTransposed && step > 0 && dq_turn == consumer) ||
        (Traits::kPaired && step > 0 && ((step - 1) & 1) == consumer);

    // accumulate_dq's product (with accumulate_dv and accumulate_dk where neither the overlap
    // nor kEarlyKeyGradients issued them earlier).
    float dq[Traits::kDqTiles][4];
    ptx::wgmma_fence();
    if constexpr (!Traits::kOverlap && !Traits::kEarlyKeyGradients) {
      issue_key_gradient<Traits>(dv, p_a, smem.dout(s));
      issue_key_gradient<Traits>(dk, ds_a, smem.q(s));
    }
    if constexpr (Traits::kPaired) {
      // (the previous step's dQ^T once this step's products are issued, below)
    } else if constexpr (Traits::kBlockDq) {
      issue_query_gradient<Traits, Traits::kBlockN>(dq, smem.ds(ds_buffer, 0), smem.k(),
                                                    consumer * Traits::kDqColumns);
    } else if constexpr (Traits::kDqTransposed) {
      // (the previous step's dQ^T after this step's products have landed, below)
    } else {
      issue_query_gradient<Traits, 64>(dq, ds_buf, k_rows, 0);
    }
    ptx::wgmma_commit();
    if constexpr (kPipeline) {
      ptx::wgmma_wait<1>();  // dV and dK have landed: their A fragments are free
      ptx::fence_registers(reinterpret_cast<std::uint32_t(&)[Traits::kBlockM / 4]>(p_a));
      ptx::fence_registers(reinterpret_cast<std::uint32_t(&)[Traits::kBlockM / 4]>(ds_a));
      // The last step issues its own S^T once more (from its buffers, which nothing refills;
      // dropped after the loop): an issue on every path keeps s_t a plain loop-carried value.
      issue_s(step + 1 < tile.steps ? step + 1 : step);
      ptx::wgmma_wait<1>();  // dQ has landed; the next S^T runs
    } else {
      ptx::wgmma_wait<0>();
      ptx::fence_registers(reinterpret_cast<std::uint32_t(&)[Traits::kBlockM / 4]>(p_a));
      ptx::fence_registers(reinterpret_cast<std::uint32_t(&)[Traits::kBlockM / 4]>(ds_a));
    }
    ptx::fence_registers(reinterpret_cast<float(&)[Traits::kHeadDim / 2]>(dv));
    ptx::fence_registers(reinterpret_cast<float(&)[Traits::kHeadDim / 2]>(dk));
    ptx::fence_registers(reinterpret_cast<float(&)[Traits::kDqTiles * 4]>(dq));
    release_step(smem.step_empty(s), lane, release_barrier);

    // accumulate_dq: dQ += into the fragment-ordered float32 accumulator (common/dq_accum.cuh,
    // shared with the sm80 family and its postprocess), this warp's 16 rows x kDqColumns.
    const std::int64_t bh = tile.b * p.q_heads + st.h;
    const std::int64_t row_block = (st.m0 + warp * 16) / 16;
    const int dt0 = Traits::kBlockDq ? consumer * Traits::kDqTiles : 0;
    if constexpr (Traits::kPaired) {
      (void)row_block;
      (void)dt0;
      (void)bh;
      (void)dq;
      if (dq_mine) {
        // A product of its own inside the branch (as kDqTransposed's), behind the next S^T. (The
        // two branches' bodies as one lambda called here and after the loop changed ptxas's
        // schedule: it serialised this kernel's products, C7512, and moved the D=64 kernels'.)
        float dq_t[Traits::kDqTiles][4];
        ptx::wgmma_fence();
        issue_paired_dq(dq_t, step - 1);
        ptx::wgmma_commit();
        ptx::wgmma_wait<0>();
        ptx::fence_registers(reinterpret_cast<float(&)[Traits::kDqTiles * 4]>(dq_t));
        ptx::mbarrier_arrive(smem.ds_empty((step - 1) % Traits::kDsBuffers));
        add_paired_dq(dq_t, prev_st, step - 1);
      }
      prev_st = st;
    } else if constexpr (Traits::kDqTransposed) {
      (void)row_block;
      (void)dt0;
      (void)bh;
      (void)dq;
      if (dq_mine) {
        // A product of its own, issued and waited for here (inside the branch, so that ptxas
        // does not keep its accumulator beside the step's fragments).
        float dq_t[Traits::kDqTiles][4];
        ptx::wgmma_fence();
        issue_transposed_dq(dq_t, step - 1);
        ptx::wgmma_commit();
        ptx::wgmma_wait<0>();
        ptx::fence_registers(reinterpret_cast<float(&)[Traits::kDqTiles * 4]>(dq_t));
        ptx::mbarrier_arrive(smem.ds_empty((step - 1) % Traits::kDsBuffers));
        add_transposed_dq(dq_t, prev_st, step - 1);
      }
      if (step > 0) dq_turn = dq_turn + 1 == dq_consumers ? 0 : dq_turn + 1;
      prev_st = st;
    } else if constexpr (!kDqAdds) {
      (void)row_block;
      (void)dt0;
    } else if constexpr (Traits::kDqDefer) {
      (void)bh;  // the step's accumulator block is dq_pending (send_pending_dq)
      (void)row_block;
      (void)dt0;
      stage_warp_dq<Traits::kDqStageBuffers>(dq, smem.dq_stage(consumer, warp, step % Traits::kDqStageBuffers), lane);
    } else if constexpr (Traits::kDqBulk) {
      add_warp_dq<true, Traits::kDqStageBuffers>(
          p, bh, row_block, dt0, dq, smem.dq_stage(consumer, warp, step % Traits::kDqStageBuffers), lane);
    } else if constexpr (Traits::kDqWriter) {
      stage_dq_in_order<Traits>(smem, dq, consumer, dq_last_consumer<Traits>(p, tile), warp, lane, step);
    } else {
      add_warp_dq<false>(p, bh, row_block, dt0, dq, nullptr, lane);  // a 16-byte red per fragment
    }
    if (step == 0) FLASHPP_BWD_CONSUMER_STAMP(step0_done, clock64());
  }
  FLASHPP_BWD_CONSUMER_STAMP(loop_done, clock64());
  // The last step's extra S^T (kPipeline); unconditional: a wait on some paths only made ptxas
  // serialise the products.
  if constexpr (kPipeline) ptx::wgmma_wait<0>();
  send_pending_dq(tile.steps, BackwardStep{});  // the last step's dQ (kDqDefer)
  if constexpr (Traits::kPaired) {  // the last step's dQ^T, by the consumer whose turn it is
    if (tile.steps > 0 && ((tile.steps - 1) & 1) == consumer) {
      float dq[Traits::kDqTiles][4];
      ptx::wgmma_fence();
      issue_paired_dq(dq, tile.steps - 1);
      ptx::wgmma_commit();
      ptx::wgmma_wait<0>();
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kDqTiles * 4]>(dq));
      add_paired_dq(dq, prev_st, tile.steps - 1);
    }
  }
  if constexpr (Traits::kDqTransposed) {  // the last step's dQ^T, by the consumer whose turn it is
    if (tile.steps > 0 && dq_turn == consumer) {
      float dq[Traits::kDqTiles][4];
      ptx::wgmma_fence();
      issue_transposed_dq(dq, tile.steps - 1);
      ptx::wgmma_commit();
      ptx::wgmma_wait<0>();
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kDqTiles * 4]>(dq));
      add_transposed_dq(dq, prev_st, tile.steps - 1);
    }
  }
  // The last reduce-adds complete before the block ends (their source is this block's memory).
  if constexpr (Traits::kDqBulk) {
    if (lane == 0) bulk_wait<0>();
  }
  FLASHPP_BWD_CONSUMER_STAMP(dq_done, clock64());

  store_key_gradients<Traits>(dk, dv, p, tile, key0, g, t);
  FLASHPP_BWD_CONSUMER_STAMP(stored, clock64());
  FLASHPP_BWD_CONSUMER_STAMP(end_ns, global_ns());
}

// One block of a backward kernel of Traits: barriers, the register split, the producer's loads
// (load_backward_tiles), and `consume(smem, tile, consumer)` on each consumer warpgroup
// (flash_bwd_sm90_kernel in launch.cuh picks this file's consumers or wide_kernel.cuh's).
template <typename Traits, typename Consume>
__device__ __forceinline__ void backward_block(const Sm90BackwardParams& params, Consume consume) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  poison_dynamic_smem(smem_raw);  // test builds only (poison.cuh)
  const BackwardShared<Traits> smem{smem_raw};
  const BackwardTile tile = backward_tile<Traits>(params.args);
  if (threadIdx.x == 0) {
    FLASHPP_BWD_STAMP(block_start_ns, global_ns());
    FLASHPP_BWD_STAMP(sm, backward_sm_id());
    ptx::mbarrier_init(smem.kv_full(), 1);
    for (int s = 0; s < Traits::kStages; ++s) {
      ptx::mbarrier_init(smem.step_full(s), 1);
      ptx::mbarrier_init(smem.step_empty(s), kStepReleases * Traits::kConsumers);
    }
    if constexpr (Traits::kPaired) {
      for (int b = 0; b < Traits::kDsBuffers; ++b) {
        ptx::mbarrier_init(smem.ds_full(b), 128 * Traits::kConsumers);  // every consumer wrote
        ptx::mbarrier_init(smem.ds_empty(b), 128);  // the consumer whose dQ^T turn it was
        ptx::mbarrier_init(smem.xds_full(b), 1);    // its expect, and the partner's bytes
        ptx::mbarrier_init(smem.xds_empty(b), 4);   // the partner's consumer, lane 0 of each warp
      }
    }
    if constexpr (Traits::kDqTransposed) {
      const int writers = consumers_with_keys<Traits>(params.args, tile);
      for (int b = 0; b < Traits::kDsBuffers; ++b) {
        ptx::mbarrier_init(smem.ds_full(b), 128 * writers);
        ptx::mbarrier_init(smem.ds_empty(b), 128);
      }
    }
    if constexpr (Traits::kDqWriter) {
      for (int b = 0; b < 2; ++b) {
        ptx::mbarrier_init(smem.dq_full(b), Traits::kBlockDq ? 128 * Traits::kConsumers : 128);  // (dQ^T: one consumer)
        ptx::mbarrier_init(smem.dq_empty(b), 1);
        if constexpr (!Traits::kBlockDq) {
          for (int c = 0; c + 1 < Traits::kConsumers; ++c) ptx::mbarrier_init(smem.dq_part(b, c), 128);
        }
      }
    }
    ptx::fence_barrier_init();
  }
  // kPaired: the partner's barriers are initialised before anything arrives on them.
  if constexpr (Traits::kPaired) {
    ptx::cluster_sync();
  } else {
    __syncthreads();
  }
  // Launched dependent on the preprocess (launch.cuh), the block starts while that kernel's last
  // blocks run: nothing it writes (lse and delta in log2 units, the zeroed dQ accumulator and
  // split sums) is read or added to before grid_dependency_wait; the producer's thread issues
  // the K and V loads first (load_backward_tiles). The postprocess, launched dependent on this
  // kernel, may be scheduled once every block of it has started (it waits for the whole grid).
  // Not the wide kernel (D > 128): with the wait ptxas serialised its products at D=192 (C7511).
  if constexpr (!Traits::kWide) {
    allow_dependent_launch();
    if (threadIdx.x != 0) grid_dependency_wait();
  }
  const int warpgroup = ptx::warpgroup_index();
  if (warpgroup == 0) {
    ptx::release_registers<Traits::kProducerRegisters>();
    if (threadIdx.x == 0 && tile.steps > 0) load_backward_tiles<Traits>(params, smem, tile);
    if constexpr (Traits::kDqWriter) {
      // Lane 0 of warps 1 and 2.
      if (threadIdx.x == 32 || threadIdx.x == 64) {
        write_dq_in_turns<Traits>(params.args, smem, tile, threadIdx.x / 32 - 1);
      }
    }
    if constexpr (Traits::kPaired) {
      if (threadIdx.x == 32) copy_ds_to_partner<Traits>(smem, tile);
    }
  } else {
    ptx::claim_registers<Traits::kConsumerRegisters>();
    consume(smem, tile, warpgroup - 1);
  }
  // kPaired: neither block leaves while the other may still copy into its shared memory or
  // arrive on its barriers.
  if constexpr (Traits::kPaired) ptx::cluster_sync();
}

}  // namespace flashpp::cuda::sm90
