// The FlashAttention forward for Hopper (sm_90a): TMA loads, wgmma products, warp specialisation.
//
// A work item is one query tile (64 rows per consumer warpgroup) of one (batch, head). The grid is
// persistent: one block per SM, each taking items blockIdx.x, blockIdx.x + gridDim.x, ... without a
// mask (at D=128 with long items and a partial last round, the split walk: the last rounds' items
// cut over their key tiles, split_walk.hpp), and the items of a snake walk under one (ItemWalk;
// FLASHPP_SM90_FWD_WALK and FLASHPP_SM90_FWD_PERSISTENT=0 give one block per item instead). Its
// warpgroups take two roles:
//   producer (warpgroup 0, one thread): per item, loads the Q tile, then streams K and V tiles
//     through a ring of `stages` shared-memory buffers with bulk tensor copies (TMA); each buffer
//     has a "full" barrier per operand (the copy engine completes it) and an "empty" barrier that
//     the consumers arrive on when they are done with it. The ring runs on across items, so the
//     next item's first K/V tiles (and, where O has its own staging buffer, its Q tile) load while
//     the consumers finish the current one. On the snake walk it also hands each item to the
//     consumers with its Q tile (ItemHandoff), so that they do not walk the items themselves;
//   consumers (warpgroups 1..): each owns 64 query rows and runs the FlashAttention loop on
//     wgmma, with the softmax of one key tile overlapping the P V product of the previous one:
//         S(j) = Q K(j)^T              issue (wgmma, both operands in shared memory)
//         O += P(j-1) V(j-1)           issue (wgmma, P from registers)
//         wait for S(j); softcap, mask, online softmax, dropout decisions on S(j) -> P(j) (float)
//         wait for the P V product; release buffer j-1; rescale O; P(j) -> 16-bit A fragments
//     and at the end O / row sum and lse (common/forward_steps.cuh, shared with the sm80 family),
//     staged through shared memory (a buffer of its own where it fits) or, at D=256, stored
//     straight from the accumulators in whole sectors (store_output_rows, kDirectOutput).
// Key tiles are visited from the last one down, so the tiles that need an element mask under a
// causal mask (the diagonal ones) come first; tiles the mask hides entirely are never loaded.
// Rows and columns outside the tensors arrive as zeros from the copy engine.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "../../common/block_order.cuh"
#include "../../common/forward_params.hpp"
#include "../../common/forward_steps.cuh"
#include "../../common/swizzle.cuh"
#include "../../common/tile_range.hpp"
#include "../../ptx/tma.cuh"
#include "../../ptx/mbarrier.cuh"
#include "../../ptx/warpgroup.cuh"
#include "../../ptx/wgmma.cuh"
#include "../../common/poison.cuh"
#include "../../common/sector_store.cuh"
#include "split_partial.cuh"
#include "split_walk.hpp"
#include "trace.cuh"

namespace flashpp::cuda::sm90 {

// Kernel parameters: the family-neutral ForwardParams plus the tensor maps of Q, K and V (boxes of
// block_m or block_n rows x 64 columns, 128-byte swizzled; coordinates (column, row, head, batch)),
// and the launch's items (q_tiles query tiles x heads batch*head pairs; the persistent grid).
struct Sm90ForwardParams {
  ForwardParams args;
  CUtensorMap q_map;
  CUtensorMap k_map;
  CUtensorMap v_map;
  CUtensorMap v_tail_map;  // the FP8 forward's 64-key Vt panel (192- and 64-key tiles; unused here)
  std::int64_t q_tiles;
  std::int64_t heads;
  // Rows the query tiles start before row 0 (a multiple of 64: whole consumer warpgroups without
  // rows), so that a length that leaves the last tile part-empty leaves the first one part-empty
  // instead (launch.cuh, q_tile_shift). 0 in the FP8 forward.
  std::int64_t q_tile_shift;
  // The split walk's plan and workspace (split_walk.hpp; the split walk's kernel only).
  SplitWalkPlan split;
  int* split_flags;
  float4* split_partials;
#if FLASHPP_SM90_FWD_TRACE
  std::uint64_t* trace;  // trace.cuh's buffer
#endif
};

// A clock stamp of trace.cuh (timing builds only; nothing otherwise), by the first thread of a
// warpgroup.
#if FLASHPP_SM90_FWD_TRACE
#define FLASHPP_FWD_STAMP(item, role, event, value)                                              \
  do {                                                                                           \
    if ((threadIdx.x & 127) == 0)                                                                \
      trace_stamp(params.trace, (item), (role), ForwardTraceEvent::event, (value));              \
  } while (0)
#else
#define FLASHPP_FWD_STAMP(item, role, event, value) ((void)sizeof((item) + (role)))
#endif

#ifndef FLASHPP_SM90_FWD_SPECULATIVE
#define FLASHPP_SM90_FWD_SPECULATIVE 1
#endif
#ifndef FLASHPP_SM90_FWD_DIRECT_O
#define FLASHPP_SM90_FWD_DIRECT_O -1
#endif

template <typename Element_, int kHeadDim_, typename Config>
struct Sm90ForwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = Config::consumers;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = Config::block_n;
  static constexpr int kStages = Config::stages;
  static constexpr long long kLastFirstMaxTiles = Config::last_first_max_tiles;  // launch.cuh
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kPaddedHeadDim = (kHeadDim + 63) / 64 * 64;
  static constexpr int kPanels = kPaddedHeadDim / 64;

  // The row view of common/forward_steps.cuh: a warp owns 16 rows of its warpgroup's 64.
  static constexpr int kRowsPerWarp = 16;
  static constexpr int kMTiles = 1;
  static constexpr int kNTiles = kBlockN / 8;
  static constexpr int kDTiles = kHeadDim / 8;
  static constexpr bool kSkipUnchangedRescale = kHeadDim >= 128;
  // The softmax's reference max moves only when a tile's P would exceed 2^8 (P stays in range for
  // fp16 and bf16), and from the second key tile on the exponentials start before the tile's max
  // is reduced (online_softmax_speculative). FLASHPP_SM90_FWD_SPECULATIVE=0 (a compile
  // definition) gives the classic step with the exact running max.
  static constexpr bool kSpeculativeSoftmax = FLASHPP_SM90_FWD_SPECULATIVE != 0;
  static constexpr float kRescaleSlackLog2 = kSpeculativeSoftmax ? 8.0f : 0.0f;

  using QTile = SwizzledTile<kBlockM, kPaddedHeadDim>;
  using KVTile = SwizzledTile<kBlockN, kPaddedHeadDim>;
  static constexpr int kQPanelBytes = kBlockM * 128;
  static constexpr int kKVPanelBytes = kBlockN * 128;
  // Q full/empty; per stage K/V full, K/V empty; handoff empty (and one unused, so that the
  // handoff slot after them is 16-byte aligned).
  static constexpr int kBarriers = 2 + 4 * kStages + 2;
  static constexpr int kMaxSmemBytes = 227 * 1024;
  // O gets a staging buffer of its own where it fits; then the Q tile is free for the next item
  // as soon as the last S = Q K^T has completed, instead of after the epilogue.
  static constexpr int kHandoffBytes = 64;  // ItemHandoff, after the barriers
  static constexpr bool kSeparateOutput = 2 * QTile::kBytes + 2 * kStages * KVTile::kBytes +
                                              8 * kBarriers + kHandoffBytes <= kMaxSmemBytes;
  // O written from the accumulators (store_output_rows) rather than staged through shared
  // memory (write_output): then the Q tile is free as soon as the item's last S has completed,
  // also where O has no buffer of its own (D=256). At D=256 only (session 25 run 7, H200, bf16,
  // N=8192: +1.7..+2.3%, with dropout +2.4..+5%); at D=128 it lost (N=16384 -2..-5%, with
  // dropout -17%), D 64/96/192 within -2..+2%. FLASHPP_SM90_FWD_DIRECT_O=0 / =1 (a compile
  // definition) forces it off / on for every head dim.
  static constexpr bool kDirectOutput =
      FLASHPP_SM90_FWD_DIRECT_O < 0 ? kHeadDim >= 256 : FLASHPP_SM90_FWD_DIRECT_O != 0;
  static constexpr bool kQFreeAfterScores = kDirectOutput || kSeparateOutput;
  static constexpr int kTileBytes = (kSeparateOutput ? 2 : 1) * QTile::kBytes;
  static constexpr int kSmemBytes =
      kTileBytes + 2 * kStages * KVTile::kBytes + 8 * kBarriers + kHandoffBytes;
  static_assert(kSmemBytes <= kMaxSmemBytes, "shared memory of one Hopper block");

  // Registers per thread after the reallocation (the block's 64K split between the roles).
  // Four consumers (the tall D=64 tile) get 112: 640 threads launch with 96 registers each.
  static_assert(kConsumers >= 2 && kConsumers <= 4, "named barrier ids (ForwardBarrier)");
  static constexpr int kProducerRegisters = kConsumers == 2 ? 24 : 32;
  static constexpr int kConsumerRegisters = kConsumers == 2 ? 240 : kConsumers == 3 ? 160 : 112;
  static_assert(ptx::register_split_fits(kProducerRegisters, kConsumers, kConsumerRegisters));

  static_assert(kBlockN % 16 == 0 && kHeadDim % 8 == 0, "tile shapes");
  static_assert(kBlockN <= 256 && kBlockM <= 256, "a TMA box has at most 256 rows");
};

// The item the producer hands the consumers with each Q tile (kHandOffItems): forward_tile's
// answer, the fields a consumer reads in the same 64-bit types (narrower ones changed how ptxas
// scheduled the key-tile loop), or the end of the block's walk (b < 0). Consumers that walked
// the items themselves spent about 1800 cycles an item on the snake walk's position arithmetic,
// between one item's epilogue and the next item's first product (trace.cuh; perf-notes,
// session 20).
struct ItemHandoff {
  std::int64_t b, h, m0, bh, begin, end, unmasked_begin, unmasked_end;
};

// Shared memory: tiles first (the base is 1024-byte aligned, every panel a multiple of 1024 bytes):
// Q, O's staging buffer (if separate), K and V per stage; then the barriers and the item handoff.
template <typename Traits>
struct SharedStorage {
  using Element = typename Traits::Element;
  unsigned char* base;

  __device__ Element* q() const { return reinterpret_cast<Element*>(base); }
  __device__ Element* o_stage() const {
    return reinterpret_cast<Element*>(base + (Traits::kSeparateOutput ? Traits::QTile::kBytes : 0));
  }
  __device__ Element* k(int stage) const {
    return reinterpret_cast<Element*>(base + Traits::kTileBytes + (2 * stage) * Traits::KVTile::kBytes);
  }
  __device__ Element* v(int stage) const {
    return reinterpret_cast<Element*>(base + Traits::kTileBytes +
                                      (2 * stage + 1) * Traits::KVTile::kBytes);
  }
  __device__ std::uint64_t* barriers() const {
    return reinterpret_cast<std::uint64_t*>(base + Traits::kTileBytes +
                                            2 * Traits::kStages * Traits::KVTile::kBytes);
  }
  __device__ std::uint64_t* q_full() const { return barriers(); }
  __device__ ItemHandoff* handoff() const {
    static_assert(Traits::kBarriers % 2 == 0, "the handoff slot is 16-byte aligned");
    return reinterpret_cast<ItemHandoff*>(barriers() + Traits::kBarriers);
  }
  // The split walk's ticket (split_walk.hpp), in the handoff slot, which that walk does not use.
  __device__ std::int64_t* ticket() const { return reinterpret_cast<std::int64_t*>(handoff()); }
  __device__ std::uint64_t* q_empty() const { return barriers() + 1; }
  // Every consumer thread has read the handoff slot (each arrives: racecheck follows a reading
  // thread's own arrival only, perf-notes session 13); the producer may write the next item.
  __device__ std::uint64_t* handoff_empty() const { return barriers() + 2 + 4 * Traits::kStages; }
  __device__ std::uint64_t* k_full(int stage) const { return barriers() + 2 + stage; }
  __device__ std::uint64_t* v_full(int stage) const { return barriers() + 2 + Traits::kStages + stage; }
  __device__ std::uint64_t* k_empty(int stage) const {
    return barriers() + 2 + 2 * Traits::kStages + stage;
  }
  __device__ std::uint64_t* v_empty(int stage) const {
    return barriers() + 2 + 3 * Traits::kStages + stage;
  }
};

// Named barriers of this kernel (0 is __syncthreads); each id below is the first of a block of
// one barrier per consumer warpgroup (up to four: ids 1-4 and 5-8).
enum class ForwardBarrier : int { consumer_epilogue = 1, issue_turn = 5 };

// FLASHPP_SM90_PINGPONG=0 (compile definition) lets the consumer warpgroups issue their products
// whenever they are ready, for A/B runs against the default turn-taking.
#ifndef FLASHPP_SM90_PINGPONG
#define FLASHPP_SM90_PINGPONG 1
#endif
// Head dims from which the softmax of a tile is pinned above the wait for the previous P V
// product, so that it overlaps that product (perf-notes "softmax anchor": +2-10% at D 96-256,
// -6 to -7% at D 64 in session 12 run 2; a value above 256 turns it off).
#ifndef FLASHPP_SOFTMAX_ANCHOR_MIN_D
#define FLASHPP_SOFTMAX_ANCHOR_MIN_D 96
#endif

// Pingpong between consumer warpgroups: they take turns to issue their wgmma, in a fixed
// rotation, so that while one warpgroup runs its softmax the tensor cores work on the products
// the next one issued (without turns the warpgroups drift into step: all multiply, then all
// exponentiate). A turn is a named barrier of two warpgroups: the one whose turn it is waits on
// its barrier, the one before it in the rotation arrives there after issuing.
// kEnabled = false: no turns (every call below does nothing); the FP8 forward's default.
template <int kConsumers, bool kEnabled = FLASHPP_SM90_PINGPONG != 0>
struct IssueTurns {
  int consumer;

  __device__ int barrier(int c) const { return static_cast<int>(ForwardBarrier::issue_turn) + c; }
  // The rotation starts with consumer 0: the last consumer opens its first turn.
  __device__ void start() const {
    if (kEnabled && consumer == kConsumers - 1) ptx::named_barrier_arrive(barrier(0), 256);
  }
  // After a block's last item (persistent loop, every pass non-final): consumer 0 takes the turn
  // the rotation left open for it, so that every arrival meets a wait.
  __device__ void finish() const {
    if (kEnabled && consumer == 0) ptx::named_barrier_sync(barrier(0), 256);
  }
  __device__ void wait() const {
    if (kEnabled) ptx::named_barrier_sync(barrier(consumer), 256);
  }
  // `last`: this warpgroup's final turn; the last consumer then opens no further turn of
  // consumer 0 (every arrival must meet a wait).
  __device__ void pass(bool last) const {
    if (kEnabled && !(last && consumer == kConsumers - 1)) {
      ptx::named_barrier_arrive(barrier((consumer + 1) % kConsumers), 256);
    }
  }
};

// The element-wise extras a kernel is compiled with: their code costs registers, so each call
// takes the kernel with the least it needs. `dropout`: calls with dropout and no softcap (the
// softcap's tanhf made the D=128 kernel spill 96 bytes a thread in its key-tile loop).
enum class ScoreExtras { none, dropout, softcap_dropout };

// Whether a kernel's consumer warpgroups take turns (IssueTurns): all but the dropout kernel at
// D=64, whose softmax steps, with the Philox calls, outlast the other warpgroup's products
// (session 22 run 1, H200: without turns +4..+6% there, -11..-15% at D=128).
template <typename Traits, ScoreExtras kExtras>
inline constexpr bool kTakesTurns =
    FLASHPP_SM90_PINGPONG != 0 && !(kExtras == ScoreExtras::dropout && Traits::kHeadDim <= 64);

// Whether an instantiation runs the speculative softmax (Traits::kSpeculativeSoftmax): not the
// D=64 dropout kernels (-5..-8% there, session 28 run 9; they keep the classic step, with the
// reference's slack).
template <typename Traits, ScoreExtras kExtras>
inline constexpr bool kSpeculates =
    Traits::kSpeculativeSoftmax && !(kExtras != ScoreExtras::none && Traits::kHeadDim <= 64);

// How the blocks of a launch share its items (launch.cuh, walk_grid):
//   stride   block b takes launch positions b, b + G, b + 2G, ... (G = gridDim.x); a grid of one
//            block per item gives each block one. The persistent grid without a mask.
//   snake    the positions of each head group dealt in rounds of G alternating direction
//            (common/block_order.cuh, snake_next): a block that took one of a round's longest
//            items takes one of the next round's shortest. The persistent grid under a mask.
//   split    the stride walk for all rounds but the last two, whose items are cut over their key
//            tiles into equal runs (split_walk.hpp). The persistent grid without a mask where the
//            last round is partial (launch.cuh, split_walk_plan).
enum class WalkKind : int { stride = 0, snake = 1, split = 2 };

// The work item of this block: which query tile of which (batch, head), and its key tiles.
struct ForwardTile {
  std::int64_t b, h, h_kv, bh, m0, m_end;
  KeyTileRange keys;
};

// Item `linear` of a launch over q_tiles query tiles x heads (batch * head pairs from bh_offset).
// The query tiles start q_tile_shift rows before row 0 on the snake walk only (the masked calls'
// persistent kernel); the other kernels keep the plain tiles.
template <typename Traits, WalkKind kWalk>
__device__ __forceinline__ ForwardTile forward_tile(const Sm90ForwardParams& params,
                                                    std::int64_t linear, std::int64_t q_tiles,
                                                    std::int64_t heads) {
  const ForwardParams& p = params.args;
  // Later query tiles see more keys under a causal mask: they start first (block_order.cuh).
  // Without one, where the last query tile leaves a consumer idle, those tiles start first.
  const BlockItem item = p.last_tiles_first ? last_tiles_first_item(linear, q_tiles, heads)
                                            : block_item(linear, q_tiles, heads, p.heads_per_group);
  ForwardTile t;
  t.bh = p.bh_offset + item.head;
  t.b = t.bh / p.q_heads;
  t.h = t.bh % p.q_heads;
  t.h_kv = t.h / p.heads_per_kv;
  t.m0 = (q_tiles - 1 - item.rank) * Traits::kBlockM;
  std::int64_t first_row = t.m0;
  if constexpr (kWalk == WalkKind::snake) {  // the first tile's first warpgroups: no rows
    t.m0 -= params.q_tile_shift;
    first_row = t.m0 > 0 ? t.m0 : 0;
  }
  t.m_end = t.m0 + Traits::kBlockM < p.q_len ? t.m0 + Traits::kBlockM : p.q_len;
  t.keys = key_tile_range(p.mask, p.k_len, first_row, t.m_end, Traits::kBlockN);
  return t;
}

// A piece of the split walk takes its key tiles [lo, hi) of the item (unmasked: all of [0, T)).
__device__ __forceinline__ void take_piece_keys(ForwardTile& t, const SplitPiece& piece) {
  t.keys.begin = piece.lo;
  t.keys.end = piece.hi;
}

// The producer's side of the handoff: written before its arrival on q_full (a release), read by
// the consumers after their wait on it (an acquire).
__device__ __forceinline__ void hand_off(ItemHandoff* slot, const ForwardTile& t) {
  auto* pairs = reinterpret_cast<longlong2*>(slot);
  pairs[0] = make_longlong2(t.b, t.h);
  pairs[1] = make_longlong2(t.m0, t.bh);
  pairs[2] = make_longlong2(t.keys.begin, t.keys.end);
  pairs[3] = make_longlong2(t.keys.unmasked_begin, t.keys.unmasked_end);
}
__device__ __forceinline__ void hand_off_end(ItemHandoff* slot) { slot->b = -1; }

// The consumers' side (every consumer thread reads the slot, then arrives on handoff_empty):
// false at the end of the walk. The fields a consumer reads (not h_kv and m_end).
__device__ __forceinline__ bool take_item(const ItemHandoff* slot, ForwardTile& t) {
  const auto* pairs = reinterpret_cast<const longlong2*>(slot);
  const longlong2 p0 = pairs[0], p1 = pairs[1], p2 = pairs[2], p3 = pairs[3];
  t.b = p0.x;
  t.h = p0.y;
  t.m0 = p1.x;
  t.bh = p1.y;
  t.h_kv = t.m_end = 0;
  t.keys.begin = p2.x;
  t.keys.end = p2.y;
  t.keys.unmasked_begin = p3.x;
  t.keys.unmasked_end = p3.y;
  return p0.x >= 0;
}

// The producer's end of a walk with handoffs (`items` handed over before): one more handoff, the
// end mark, once the last item's Q tile and handoff slot are released. Storage: a shared-memory
// layout with q_full, q_empty, handoff_empty and handoff (this kernel's and the FP8 forward's).
template <typename Storage>
__device__ __forceinline__ void hand_off_walk_end(const Storage& smem, int items) {
  if (items > 0) {
    mbarrier_wait(smem.q_empty(), static_cast<std::uint32_t>(items - 1) & 1u);
    mbarrier_wait(smem.handoff_empty(), static_cast<std::uint32_t>(items - 1) & 1u);
  }
  hand_off_end(smem.handoff());
  ptx::mbarrier_arrive(smem.q_full());
}

// The consumers' side of a walk with handoffs: body(tile, items done before it) for each item
// the producer hands over, up to the end mark. The wait for the item's Q tile (q_full) comes
// first, since the handoff travels with it.
// `role`: the consumer's role in trace.cuh's stamps.
template <typename Storage, typename Body>
__device__ __forceinline__ void for_each_handed_item(const Sm90ForwardParams& params,
                                                     const Storage& smem, int role, Body&& body) {
  for (int items_done = 0;; ++items_done) {
    FLASHPP_FWD_STAMP(items_done, role, item_start, clock64());
    mbarrier_wait(smem.q_full(), static_cast<std::uint32_t>(items_done) & 1u);
    FLASHPP_FWD_STAMP(items_done, role, q_ready, clock64());
    ForwardTile tile;
    if (!take_item(smem.handoff(), tile)) break;
    ptx::mbarrier_arrive(smem.handoff_empty());
    body(tile, items_done);
  }
}


// A kernel instantiation per walk (the walk's state costs the producer registers it does not have
// at 24 per thread when the walk is a run-time choice).
template <WalkKind kWalk>
struct ItemWalk {
  std::int64_t items, q_tiles, heads, group_items;
  SplitWalkPlan plan{};     // the split walk's
  std::int64_t ticket = 0;  // the split walk's ticket: this block's place in it
  struct Cursor {
    std::int64_t group_start = 0, round = 0;
  };
  // The block's next position (the snake walk); false when the block has no further item.
  __device__ bool next(Cursor& c, std::int64_t& linear) const {
    return snake_next(items, group_items, gridDim.x, blockIdx.x, c.group_start, c.round, linear);
  }
  // body(linear position, items done before it) for each of this block's items, in order; the
  // producer and the consumers walk the same items. The split walk adds the piece of the item
  // (SplitPiece): its key tiles and what ends it.
  template <typename Body>
  __device__ __forceinline__ void for_each(Body&& body) const {
    int items_done = 0;
    if constexpr (kWalk == WalkKind::stride) {
      for (std::int64_t linear = blockIdx.x; linear < items; linear += gridDim.x, ++items_done)
        body(linear, items_done);
    } else if constexpr (kWalk == WalkKind::split) {
      // One loop (one copy of the body): the whole items, then the run's pieces last item first.
      const std::int64_t whole = ticket < plan.whole_items
                                     ? (plan.whole_items - ticket + gridDim.x - 1) / gridDim.x
                                     : 0;
      const SplitRun run = split_run(plan, ticket);
      const std::int64_t count = whole + (plan.steps > 0 ? run.last - run.first + 1 : 0);
      for (std::int64_t k = 0; k < count; ++k, ++items_done) {
        const SplitPiece piece =
            k < whole ? SplitPiece{ticket + k * gridDim.x, 0, plan.tiles, PieceEnd::output, ticket}
                      : split_piece(plan, run, ticket, run.last - (k - whole));
        body(k < whole ? piece.item : plan.whole_items + piece.item, items_done, piece);
      }
    } else {
      Cursor cursor;
      std::int64_t linear = 0;
      for (; next(cursor, linear); ++items_done) body(linear, items_done);
    }
  }
};

// Whether the producer hands each item to the consumers (ItemHandoff) instead of the consumers
// walking the items themselves: on the snake walk (masked calls on the persistent grid), whose
// position arithmetic cost the consumers about 1800 cycles an item (session 20 runs 3-6: causal
// +3..+5% at N=1024, +1..+2% at 4096). Not on the stride walk: there it gained nothing unmasked
// and cost the one-block-per-item dropout kernel at D=128 12-15% (runs 4-5, not understood).
template <WalkKind kWalk>
inline constexpr bool kHandOffItems = kWalk == WalkKind::snake;

// ---------------------------------------------------------------------------------------------
// Producer: one thread issues every copy
// ---------------------------------------------------------------------------------------------

// Before the copy of key tile j into `stage`, the consumers must have released tile j - stages
// there: the (j / stages - 1)-th completion of that buffer's empty barrier. K and V buffers are
// released separately: K once S = Q K^T has completed, V only after P V, an iteration later.
__device__ __forceinline__ void wait_buffer_empty(std::uint64_t* empty, int stages, int j) {
  if (j >= stages) mbarrier_wait(empty, static_cast<std::uint32_t>(j / stages - 1) & 1u);
}

// The producer's turn at the Q tile for item `items_done` (this kernel's and the FP8 forward's):
// once the consumers have released the previous item's Q tile (and, kHandOff, read its handoff),
// hands the item over; false for an item without key tiles, whose q_full completes with a plain
// arrival instead of the copy.
template <bool kHandOff, typename Storage>
__device__ __forceinline__ bool claim_q_slot(const Storage& smem, const ForwardTile& tile,
                                             int items_done, int num_tiles) {
  if (items_done > 0) mbarrier_wait(smem.q_empty(), static_cast<std::uint32_t>(items_done - 1) & 1u);
  if constexpr (kHandOff) {
    if (items_done > 0) mbarrier_wait(smem.handoff_empty(), static_cast<std::uint32_t>(items_done - 1) & 1u);
    hand_off(smem.handoff(), tile);
  }
  if (num_tiles == 0) {
    ptx::mbarrier_arrive(smem.q_full());
    return false;
  }
  return true;
}

// The copies of one item. `items_done`: items this block finished
// before (the Q tile's turn); `ring`: K/V tiles this block loaded before (the ring position,
// advanced here). Every item completes q_full once (an item without keys with a plain arrival),
// after the consumers released the previous item's Q tile; kHandOff: and hands the item to the
// consumers with it (ItemHandoff).
template <typename Traits, bool kHandOff>
__device__ __forceinline__ void load_item(const Sm90ForwardParams& params,
                                          const SharedStorage<Traits>& smem,
                                          const ForwardTile& tile, int items_done, int& ring) {
  const int h = static_cast<int>(tile.h), h_kv = static_cast<int>(tile.h_kv);
  const int b = static_cast<int>(tile.b);
  const int num_tiles = static_cast<int>(tile.keys.end - tile.keys.begin);
  auto load_q = [&] {
    if (!claim_q_slot<kHandOff>(smem, tile, items_done, num_tiles)) return;
    mbarrier_expect_bytes(smem.q_full(), Traits::QTile::kBytes);
#pragma unroll
    for (int panel = 0; panel < Traits::kPanels; ++panel) {
      tma_load_4d(reinterpret_cast<unsigned char*>(smem.q()) + panel * Traits::kQPanelBytes,
                  &params.q_map, panel * 64, static_cast<int>(tile.m0), h, b, smem.q_full());
    }
  };
  if (num_tiles == 0) load_q();
  for (int j = 0; j < num_tiles; ++j) {
    const int slot = ring + j;
    const int stage = slot % Traits::kStages;
    wait_buffer_empty(smem.k_empty(stage), Traits::kStages, slot);
    const int n0 = static_cast<int>((tile.keys.end - 1 - j) * Traits::kBlockN);
    mbarrier_expect_bytes(smem.k_full(stage), Traits::KVTile::kBytes);
#pragma unroll
    for (int panel = 0; panel < Traits::kPanels; ++panel) {
      tma_load_4d(reinterpret_cast<unsigned char*>(smem.k(stage)) + panel * Traits::kKVPanelBytes,
                  &params.k_map, panel * 64, n0, h_kv, b, smem.k_full(stage));
    }
    if (j == 0) load_q();  // the first K tile may load while the previous item's Q is in use
    wait_buffer_empty(smem.v_empty(stage), Traits::kStages, slot);
    mbarrier_expect_bytes(smem.v_full(stage), Traits::KVTile::kBytes);
#pragma unroll
    for (int panel = 0; panel < Traits::kPanels; ++panel) {
      tma_load_4d(reinterpret_cast<unsigned char*>(smem.v(stage)) + panel * Traits::kKVPanelBytes,
                  &params.v_map, panel * 64, n0, h_kv, b, smem.v_full(stage));
    }
  }
  ring += num_tiles;
}

// The producer's walk over a block's items (this kernel's and the FP8 forward's): load(tile,
// items done before it, ring) issues each item's copies (and its handoff, on walks with one);
// `ring` counts the K/V tiles loaded before, the position in the ring of stages.
template <typename Traits, WalkKind kWalk, typename Storage, typename LoadItem>
__device__ __forceinline__ void producer_walk(const Sm90ForwardParams& params, const Storage& smem,
                                              const ItemWalk<kWalk>& walk, LoadItem&& load) {
  int ring = 0, items = 0;
  walk.for_each([&](std::int64_t linear, int items_done, const auto&... piece) {
    FLASHPP_FWD_STAMP(items_done, 0, item_start, clock64());
    if (items_done == 0) FLASHPP_FWD_STAMP(0, 0, sm_id, sm_id());
    ForwardTile tile = forward_tile<Traits, kWalk>(params, linear, walk.q_tiles, walk.heads);
    (take_piece_keys(tile, piece), ...);
    load(tile, items_done, ring);
    FLASHPP_FWD_STAMP(items_done, 0, loads_issued, clock64());
    items = items_done + 1;
  });
  if constexpr (kHandOffItems<kWalk>) hand_off_walk_end(smem, items);
}

// A consumer warpgroup's walk over the same items: on walks with handoffs as the producer hands
// them over (up to the end mark), else taking the positions itself. item(tile, items done
// before it, q_waited[, piece]): q_waited (a std::bool_constant) says whether the item's Q tile
// has been waited for (the handoff travels with it); the split walk adds the SplitPiece.
template <typename Traits, WalkKind kWalk, typename Storage, typename Item>
__device__ __forceinline__ void consumer_walk(const Sm90ForwardParams& params, const Storage& smem,
                                              const ItemWalk<kWalk>& walk, int role, Item&& item) {
  if constexpr (kHandOffItems<kWalk>) {
    for_each_handed_item(params, smem, role, [&](const ForwardTile& tile, int items_done) {
      item(tile, items_done, std::true_type{});
    });
  } else {
    walk.for_each([&](std::int64_t linear, int items_done, const auto&... piece) {
      ForwardTile tile = forward_tile<Traits, kWalk>(params, linear, walk.q_tiles, walk.heads);
      (take_piece_keys(tile, piece), ...);
      item(tile, items_done, std::false_type{}, piece...);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Consumer: the FlashAttention loop of one warpgroup
// ---------------------------------------------------------------------------------------------

// The epilogue from the accumulators (this kernel's and the FP8 forward's): this warp's 16 rows
// from row0 of (batch b, head h), O * out_scale / row sum as Out, straight from the accumulator
// layout in whole 32-byte sectors (common/sector_store.cuh; rows < Nq, columns < D, a multiple of
// 8), and lse = max * lse_scale + ln(sum) + lse_shift (-inf, and O = 0, for a row that saw no
// key). Every lane takes part (shuffles).
template <typename Out, int kDTiles>
__device__ __forceinline__ void store_output_rows(const float (&o)[kDTiles][4],
                                                  const float (&row_max)[2],
                                                  const float (&row_sum)[2], const ForwardParams& p,
                                                  std::int64_t b, std::int64_t h, std::int64_t row0,
                                                  float out_scale, float lse_scale, float lse_shift,
                                                  int lane) {
  const int g = lane >> 2, t = lane & 3;
  Out* o_base = static_cast<Out*>(p.o) + b * p.o_strides.batch + h * p.o_strides.head;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const std::int64_t i = row0 + g + 8 * half;
    const float sum = quad_sum(row_sum[half]);
    const bool empty_row = !(sum > 0.0f);
    const float factor = empty_row ? 0.0f : out_scale / sum;
    const bool row_in = i < p.q_len;
    Out* row = o_base + (row_in ? i * p.o_strides.row : 0) + sector_store_column(t);
    store_accumulator_row(row, o, half, factor, p.head_dim / 8, row_in, t);
    if (row_in && p.lse != nullptr && t == 0) {
      const float lse = empty_row ? -INFINITY : row_max[half] * lse_scale + logf(sum) + lse_shift;
      p.lse[b * p.lse_stride_batch + h * p.lse_stride_head + i * p.lse_stride_row] = lse;
    }
  }
}

// S = Q(this warpgroup's 64 rows) K(stage)^T over the head dim: kHeadDim/16 wgmma, one group.
// kKeys: the stage's first kKeys keys (the whole tile, or its first half: kHalfFirstTile).
template <typename Traits, int kKeys = Traits::kBlockN>
__device__ __forceinline__ void issue_scores(float (&s)[kKeys / 8][4],
                                             const SharedStorage<Traits>& smem, int consumer,
                                             int stage) {
  using Mma = ptx::WgmmaShape<kKeys, typename Traits::Element>;
  const std::uint64_t q_desc = ptx::smem_descriptor<ptx::Major::k>(
      reinterpret_cast<unsigned char*>(smem.q()) + consumer * 64 * 128, 0);
  const std::uint64_t k_desc = ptx::smem_descriptor<ptx::Major::k>(smem.k(stage), 0);
  auto& acc = reinterpret_cast<float(&)[kKeys / 2]>(s);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
    // k16 step kk: panel kk/4, 32 bytes per step inside the panel's 128-byte rows.
    const std::uint32_t q_step = (kk / 4) * Traits::kQPanelBytes + (kk % 4) * 32;
    const std::uint32_t k_step = (kk / 4) * Traits::kKVPanelBytes + (kk % 4) * 32;
    Mma::template ss<0, 0>(acc, ptx::advance_descriptor(q_desc, q_step),
                        ptx::advance_descriptor(k_desc, k_step), kk > 0 ? 1 : 0);
  }
  ptx::wgmma_commit();
}

// O += P V(stage): kBlockN/16 wgmma with P's 16-bit A fragments from registers, V read MN-major.
template <typename Traits>
__device__ __forceinline__ void issue_pv(float (&o)[Traits::kDTiles][4],
                                         std::uint32_t (&p)[Traits::kBlockN / 16][4],
                                         const SharedStorage<Traits>& smem, int stage) {
  using Mma = ptx::WgmmaShape<Traits::kHeadDim, typename Traits::Element>;
  const std::uint64_t v_desc =
      ptx::smem_descriptor<ptx::Major::mn>(smem.v(stage), Traits::kKVPanelBytes);
  auto& acc = reinterpret_cast<float(&)[Traits::kHeadDim / 2]>(o);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Traits::kBlockN / 16; ++kk) {
    Mma::template rs<1>(acc, p[kk], ptx::advance_descriptor(v_desc, kk * 16 * 128), 1);
  }
  ptx::wgmma_commit();
}

// P (float, score layout) -> the 16-bit A fragments of the P V product: two adjacent 8-key tiles
// make one k16 fragment.
template <typename Traits>
__device__ __forceinline__ void convert_p(std::uint32_t (&p)[Traits::kBlockN / 16][4],
                                          const float (&s)[Traits::kNTiles][4]) {
  using Element = typename Traits::Element;
#pragma unroll
  for (int kk = 0; kk < Traits::kBlockN / 16; ++kk) {
    p[kk][0] = pack_pair<Element>(s[2 * kk][0], s[2 * kk][1]);
    p[kk][1] = pack_pair<Element>(s[2 * kk][2], s[2 * kk][3]);
    p[kk][2] = pack_pair<Element>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    p[kk][3] = pack_pair<Element>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// The element-wise view of the first kBlockN / 2 keys of a tile (common/forward_steps.cuh reads
// kBlockN and kNTiles; the shared-memory layout stays the tile's, from Traits).
template <typename Traits>
struct HalfKeyTraits : Traits {
  static constexpr int kBlockN = Traits::kBlockN / 2;
  static constexpr int kNTiles = Traits::kNTiles / 2;
};

// Whether a warpgroup's first key tile of an item, where its rows see none of the tile's second
// half (a causal diagonal through the lower warpgroup's rows; Nk cut inside the first half),
// takes S over the first half only (issue_scores<Traits, kBlockN / 2>) and the element-wise steps
// of half a tile, with P = 0 on the other half: the snake walk's plain kernels (masked calls, whose
// causal items start with the diagonal tile) in 128-key tiles (D 64, both tiles; 96; 128).
// Session 36 runs 3-4 (H100, causal, against the whole tile): the two-warpgroup D=64 tile at
// N=1024 +4..+5%, D=96 +1..+2%, D=128 +1..+3%; the tall D=64 tile +1.5% at 2048, +1.1% at 4096,
// +0.6% at 16384. FLASHPP_SM90_FWD_HALF_FIRST=0 (compile definition): the whole tile always.
#ifndef FLASHPP_SM90_FWD_HALF_FIRST
#define FLASHPP_SM90_FWD_HALF_FIRST 1
#endif

// A K, V or Q buffer is free again: each consumer warp is done with it (its last wgmma on it has
// completed; for Q staging O, its reads of the staged rows too), and
// arrives once on the buffer's empty barrier.
__device__ __forceinline__ void release_buffer(std::uint64_t* empty, int lane) {
  __syncwarp();
  if (lane == 0) ptx::mbarrier_arrive(empty);
}

// The block's key tiles [from, to) of an item (j counted as the producer loads them, from the
// last key tile) that this warpgroup does not multiply: the protocol of a working consumer
// (consumer_item) without the products, so that the ring of K/V buffers and the rotation of turns
// stay in step: each buffer released once its copy has completed (not before: an early arrival
// would count towards the previous use of the buffer), one turn taken and passed per tile.
// `ring`: the item's first ring position (as in consumer_item; not advanced here).
template <typename Traits, typename Turns>
__device__ __forceinline__ void skip_tiles(const SharedStorage<Traits>& smem, const Turns& turns,
                                           int from, int to, int ring, int lane) {
  for (int j = from; j < to; ++j) {
    const int stage = (ring + j) % Traits::kStages;
    const auto phase = static_cast<std::uint32_t>((ring + j) / Traits::kStages) & 1u;
    mbarrier_wait(smem.k_full(stage), phase);
    mbarrier_wait(smem.v_full(stage), phase);
    turns.wait();
    turns.pass(false);
    release_buffer(smem.k_empty(stage), lane);
    release_buffer(smem.v_empty(stage), lane);
  }
}

// One item of a consumer warpgroup without rows (past the last row, or before row 0 with
// q_tile_shift): no products and nothing written; every tile skipped, the Q tile released, and
// the turn a working consumer takes for its last P V. `ring` as for load_item (advanced here).
template <typename Traits, typename Turns>
__device__ __forceinline__ void pass_item(const SharedStorage<Traits>& smem, const Turns& turns,
                                          int num_tiles, int& ring, int lane) {
  skip_tiles<Traits>(smem, turns, 0, num_tiles, ring, lane);
  release_buffer(smem.q_empty(), lane);
  if (num_tiles > 0) {
    turns.wait();
    turns.pass(false);
  }
  ring += num_tiles;
}

// Masked tiles through tile_visibility / apply_mask_bits (common/forward_steps.cuh: a word of
// visible keys per row, one bit test an element) instead of apply_mask's index and two compares
// an element: on the masked calls' walk (snake) in tiles of no more rows than keys (two
// warpgroups on 128-key tiles: D 64, 96, 128). Session 31 runs 7-8: D=128 causal +2.5..+3.5% at
// N=1024, +1% at 2048, within +-0.5% from 4096 on; the tall D=64 tile gained 3-4% at 1024 and lost
// 2-3% at 16384 (its steady loop scheduled otherwise), so it keeps apply_mask, as do the stride
// and split walks (their masked tiles are the few at Nk; with bits their unmasked loops lost
// ~1.7% at D=64). FLASHPP_SM90_FWD_MASK_BITS=0: apply_mask everywhere.
#ifndef FLASHPP_SM90_FWD_MASK_BITS
#define FLASHPP_SM90_FWD_MASK_BITS 1
#endif
template <typename Traits, WalkKind kWalk>
inline constexpr bool kMaskBits = FLASHPP_SM90_FWD_MASK_BITS != 0 && Traits::kNTiles <= 16 &&
                                  kWalk == WalkKind::snake && Traits::kBlockM <= Traits::kBlockN;

template <typename Traits, ScoreExtras kExtras, WalkKind kWalk>
inline constexpr bool kHalfFirstTile = FLASHPP_SM90_FWD_HALF_FIRST != 0 &&
                                       kExtras == ScoreExtras::none &&
                                       kWalk == WalkKind::snake && Traits::kBlockN == 128;

// Whether a kernel's consumer warpgroups take their own key tiles (warpgroup_keys): the snake
// walk's (the masked calls' persistent kernel) in tiles of more rows than keys (the tall D=64
// tile, D 192/256). Not in tiles of no more rows than keys (two warpgroups on 128-key tiles: D
// 64, 96, 128), where a causal diagonal rarely leaves a warpgroup fewer tiles than the block and
// the per-warpgroup bounds cost the D=64 kernel 4% at N=1024 causal (session 29 run 1); not on
// the stride walk (unmasked calls, where they would only cost registers).
template <typename Traits, WalkKind kWalk>
inline constexpr bool kOwnKeyTiles = kWalk == WalkKind::snake && Traits::kBlockM > Traits::kBlockN;

// The key tiles of an item that the warpgroup of rows [row0, row0 + 64) sees: a run inside the
// block's (key_tile_range is monotone in the rows); the block's own without a mask, or where the
// kernel does not ask (kOwn: kOwnKeyTiles).
template <typename Traits, bool kOwn>
__device__ __forceinline__ KeyTileRange warpgroup_keys(const ForwardParams& p,
                                                       const ForwardTile& tile, std::int64_t row0) {
  if constexpr (!kOwn) return tile.keys;
  if (!p.mask.active()) return tile.keys;
  const std::int64_t end = row0 + 64 < p.q_len ? row0 + 64 : p.q_len;
  return key_tile_range(p.mask, p.k_len, row0, end, Traits::kBlockN);
}

// One item of one consumer warpgroup. kExtras: what the instantiation handles beyond the plain
// steps (ScoreExtras). kQWaited: the caller has waited for the item's Q tile (the handoff).
// kWalk: the kernel's walk (the snake walk's tiles may start before row 0, and its warpgroups may
// take their own key tiles: kOwnKeyTiles). `items_done` and `ring` as for load_item (ring
// advanced here); `turns`: the IssueTurns of the consumer loop. `piece`: on the split walk, the
// item's piece (its key tiles are already the tile's; it may end by writing or merging a partial
// state instead of the plain epilogue: split_partial.cuh, on the epilogue's named barriers).
template <typename Traits, ScoreExtras kExtras, bool kQWaited, WalkKind kWalk, typename Turns,
          typename... Piece>
__device__ __forceinline__ void consumer_item(const Sm90ForwardParams& params,
                                              const SharedStorage<Traits>& smem,
                                              const ForwardTile& tile, int consumer,
                                              const Turns& turns,
                                              int items_done, int& ring, const Piece&... piece) {
  const ForwardParams& p = params.args;
  const int lane = threadIdx.x & 31;
  const int warp_in_group = (threadIdx.x / 32) & 3;
  const int warp_row0 = consumer * 64 + warp_in_group * 16;  // within the block's query tile
  const std::int64_t row0 = tile.m0 + warp_row0;

  float o[1][Traits::kDTiles][4];
  float row_max[1][2] = {{-INFINITY, -INFINITY}};
  float row_sum[1][2] = {{0.0f, 0.0f}};
#pragma unroll
  for (int dt = 0; dt < Traits::kDTiles; ++dt)
#pragma unroll
    for (int c = 0; c < 4; ++c) o[0][dt][c] = 0.0f;

  const int num_tiles = static_cast<int>(tile.keys.end - tile.keys.begin);
  const int role = 1 + consumer;  // trace.cuh
  FLASHPP_FWD_STAMP(items_done, role, tiles, static_cast<std::uint64_t>(num_tiles));
  if constexpr (!kQWaited) {
    FLASHPP_FWD_STAMP(items_done, role, item_start, clock64());
    mbarrier_wait(smem.q_full(), static_cast<std::uint32_t>(items_done) & 1u);
    FLASHPP_FWD_STAMP(items_done, role, q_ready, clock64());
  }
  // No row of this warpgroup exists: the part-empty last tile of a call, or the first one's
  // warpgroups before row 0 (q_tile_shift).
  if (tile.m0 + consumer * 64 >= p.q_len || (kWalk == WalkKind::snake && tile.m0 + consumer * 64 < 0)) {
    pass_item<Traits>(smem, turns, num_tiles, ring, lane);
    return;
  }
  // This warpgroup's own key tiles (a run inside the block's): its 64 rows may see fewer than the
  // block's rows (a causal diagonal through a 192-row tile, a sliding window). The block's tiles
  // before and after them are skipped (skip_tiles), and a tile that every row of this warpgroup
  // sees whole takes no element mask even where other rows of the block need one.
  // j counts the block's key tiles from its last one (the producer's order); this warpgroup's
  // are j in [lead, lead + visible).
  constexpr bool kOwn = kOwnKeyTiles<Traits, kWalk>;
  const KeyTileRange own = warpgroup_keys<Traits, kOwn>(p, tile, tile.m0 + consumer * 64);
  const int visible = !kOwn ? num_tiles : own.empty() ? 0 : static_cast<int>(own.end - own.begin);
  const int lead = !kOwn ? 0 : visible == 0 ? num_tiles : static_cast<int>(tile.keys.end - own.end);
  // Ring slot of the block's key tile j of this item: its stage and the parity of that stage's use.
  auto stage_of = [&](int j) { return (ring + j) % Traits::kStages; };
  auto phase_of = [&](int j) { return static_cast<std::uint32_t>((ring + j) / Traits::kStages) & 1u; };
  skip_tiles<Traits>(smem, turns, 0, lead, ring, lane);
  if (visible == 0) {
    if constexpr (Traits::kQFreeAfterScores) release_buffer(smem.q_empty(), lane);
    if (num_tiles > 0) {  // the turn of the last P V, as a working consumer takes it
      turns.wait();
      turns.pass(false);
    }
  }
  if (visible > 0) {
    const auto bh32 = static_cast<std::uint32_t>(tile.bh);
    constexpr bool kSoftcap = kExtras == ScoreExtras::softcap_dropout;
    const bool dropout = kExtras != ScoreExtras::none && p.dropout.threshold != 0;
    DropoutSigns<Traits> keep;  // the dropout decisions of the latest score tile
    // The element-wise steps of one score tile, in the paper's order; the rescale of O they ask
    // for comes back in `correction` (1 for the first tile, whose O is still zero). `first`: the
    // warpgroup's first key tile of the item (no reference max yet: the classic softmax step).
    auto softmax_steps = [&](float (&s)[1][Traits::kNTiles][4], std::int64_t n_block, auto first) {
      const std::int64_t n0 = n_block * Traits::kBlockN;
      const bool masked = own.needs_mask(n_block);
      // A masked tile's visible keys, once (kMaskBits), for the mask and the speculation's test.
      [[maybe_unused]] TileVisibility<Traits> visible;
      if constexpr (kMaskBits<Traits, kWalk>) {
        if (masked) visible = tile_visibility<Traits>(p, row0, n0, lane);
      }
      auto score_extras = [&](float (&x)[1][Traits::kNTiles][4]) {
        if (kSoftcap && p.softcap > 0.0f) apply_softcap<Traits>(x, p);
        if (masked) {
          if constexpr (kMaskBits<Traits, kWalk>) {
            apply_mask_bits<Traits>(x, visible);
          } else {
            apply_mask<Traits>(x, p, row0, n0, lane);
          }
        }
      };
      score_extras(s);
      SoftmaxCorrection<Traits> correction;
      if constexpr (kSpeculates<Traits, kExtras> && !decltype(first)::value) {
        bool sees_tile[1][2] = {{true, true}};  // every key of an unmasked tile is visible
        if (masked) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            if constexpr (kMaskBits<Traits, kWalk>) {
              sees_tile[0][half] = visible.sees[0][half];
            } else {
              const int2 bounds = tile_key_bounds<Traits>(p, row0 + (lane >> 2) + 8 * half, n0);
              sees_tile[0][half] = bounds.x <= bounds.y;
            }
          }
        }
        // The plain kernels vote on the lanes' sums of P, the dropout kernels on their largest P
        // (the sums cost the D=128 dropout kernel 14%, session 28 run 15).
        correction = online_softmax_speculative<Traits, kExtras == ScoreExtras::none>(
            s, row_max, row_sum, sees_tile, p.scale_log2, [&](float (&x)[1][Traits::kNTiles][4]) {
              // The KV head from the query head: a handed-over item does not carry it.
              recompute_scores<Traits>(x, p, tile.b, tile.h, tile.h / p.heads_per_kv, row0, n0,
                                       lane);
              score_extras(x);
            });
      } else {
        correction = online_softmax_update<Traits>(s, row_max, row_sum, p.scale_log2);
      }
      if (dropout) {
        if constexpr (kDropoutBySigns<Traits>) {
          dropout_signs<Traits>(keep, p, bh32, row0, n0, lane);
        } else {
          apply_dropout_per_element<Traits>(s, p, bh32, row0, n0, lane);
        }
      }
      return correction;
    };

    std::uint32_t p_frag[Traits::kBlockN / 16][4];
    // P (float) -> 16-bit A fragments, with the dropped elements zeroed.
    auto prepare_p = [&](const float (&s)[Traits::kNTiles][4]) {
      convert_p<Traits>(p_frag, s);
      if constexpr (kDropoutBySigns<Traits>) {
        if (dropout) {
#pragma unroll
          for (int kk = 0; kk < Traits::kBlockN / 16; ++kk) apply_dropout_signs<Traits>(p_frag[kk], keep, 0, kk);
        }
      }
    };
    // The first visible key tile (the last one of `own`): scores, softmax, nothing to overlap
    // with yet. kHalfFirstTile: where this warpgroup's rows see no key of the tile's second half
    // (every row's last key, the last row's by the band's monotone rule, before it), S over the
    // first half and its masked classic step; P's fragments of the second half are zero.
    bool half_first = false;
    if constexpr (kHalfFirstTile<Traits, kExtras, kWalk>) {
      const std::int64_t last_row =
          tile.m0 + consumer * 64 + 63 < p.q_len ? tile.m0 + consumer * 64 + 63 : p.q_len - 1;
      half_first = p.mask.last_key(last_row, p.k_len) <
                   (own.end - 1) * Traits::kBlockN + Traits::kBlockN / 2;
    }
    {
      mbarrier_wait(smem.k_full(stage_of(lead)), phase_of(lead));
      FLASHPP_FWD_STAMP(items_done, role, k0_ready, clock64());
      turns.wait();
      FLASHPP_FWD_STAMP(items_done, role, turn0, clock64());
      // The tile's S over its first kKeys keys (`keys`), issued in this warpgroup's turn and
      // waited for; then its K buffer goes back to the producer.
      auto first_scores = [&](auto& s, auto keys) {
        constexpr int kKeys = decltype(keys)::value;
        issue_scores<Traits, kKeys>(s[0], smem, consumer, stage_of(lead));
        turns.pass(false);
        ptx::wgmma_wait<0>();
        FLASHPP_FWD_STAMP(items_done, role, s0_done, clock64());
        ptx::fence_registers(reinterpret_cast<float(&)[kKeys / 2]>(s));
        release_buffer(smem.k_empty(stage_of(lead)), lane);
      };
      if (half_first) {
        if constexpr (kHalfFirstTile<Traits, kExtras, kWalk>) {
          using Half = HalfKeyTraits<Traits>;
          float s[1][Half::kNTiles][4];
          first_scores(s, std::integral_constant<int, Half::kBlockN>{});
          const std::int64_t n0 = (own.end - 1) * Traits::kBlockN;
          if constexpr (kMaskBits<Traits, kWalk>) {
            apply_mask_bits<Half>(s, tile_visibility<Half>(p, row0, n0, lane));
          } else {
            apply_mask<Half>(s, p, row0, n0, lane);
          }
          online_softmax_update<Half>(s, row_max, row_sum, p.scale_log2);  // O is zero: no rescale
          convert_p<Half>(reinterpret_cast<std::uint32_t(&)[Half::kBlockN / 16][4]>(p_frag), s[0]);
#pragma unroll
          for (int kk = Half::kBlockN / 16; kk < Traits::kBlockN / 16; ++kk)
#pragma unroll
            for (int c = 0; c < 4; ++c) p_frag[kk][c] = 0u;
        }
      } else {
        float s[1][Traits::kNTiles][4];
        first_scores(s, std::integral_constant<int, Traits::kBlockN>{});
        softmax_steps(s, own.end - 1, std::true_type{});  // O is still zero: no rescale
        prepare_p(s[0]);
      }
      FLASHPP_FWD_STAMP(items_done, role, p0_ready, clock64());
    }
    for (int j = lead + 1; j < lead + visible; ++j) {
      const int stage = stage_of(j), prev_stage = stage_of(j - 1);
      float s[1][Traits::kNTiles][4];
      mbarrier_wait(smem.k_full(stage), phase_of(j));
      mbarrier_wait(smem.v_full(prev_stage), phase_of(j - 1));
      turns.wait();
      issue_scores<Traits>(s[0], smem, consumer, stage);
      issue_pv<Traits>(o[0], p_frag, smem, prev_stage);
      turns.pass(false);
      ptx::wgmma_wait<1>();  // S(j) has landed; P(j-1) V(j-1) may still run
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kBlockN / 2]>(s));
      release_buffer(smem.k_empty(stage), lane);
      const SoftmaxCorrection<Traits> correction =
          softmax_steps(s, tile.keys.end - 1 - j, std::false_type{});
      // The softmax overlaps P V only if ptxas keeps it above the wait (perf-notes: "softmax
      // anchor"); a plain wait is hoisted above it.
      if constexpr (Traits::kHeadDim >= FLASHPP_SOFTMAX_ANCHOR_MIN_D) {
        ptx::wgmma_wait_all_after(row_sum[0][0] + row_sum[0][1]);
      } else {
        ptx::wgmma_wait<0>();
      }
      ptx::fence_registers(reinterpret_cast<float(&)[Traits::kHeadDim / 2]>(o));
      ptx::fence_registers(reinterpret_cast<std::uint32_t(&)[Traits::kBlockN / 4]>(p_frag));
      release_buffer(smem.v_empty(prev_stage), lane);
      rescale_output<Traits, kSpeculates<Traits, kExtras>>(o, correction);
      prepare_p(s[0]);
    }
    // Every S = Q K^T of this item has completed (waited above): Q may take the next item's
    // tile while the last P V runs, where O does not stage through it.
    FLASHPP_FWD_STAMP(items_done, role, loop_done, clock64());
    if constexpr (Traits::kQFreeAfterScores) release_buffer(smem.q_empty(), lane);
    const int last = lead + visible - 1;
    mbarrier_wait(smem.v_full(stage_of(last)), phase_of(last));
    turns.wait();
    issue_pv<Traits>(o[0], p_frag, smem, stage_of(last));
    turns.pass(false);
    ptx::wgmma_wait<0>();
    FLASHPP_FWD_STAMP(items_done, role, last_pv_done, clock64());
    ptx::fence_registers(reinterpret_cast<float(&)[Traits::kHeadDim / 2]>(o));
    ptx::fence_registers(reinterpret_cast<std::uint32_t(&)[Traits::kBlockN / 4]>(p_frag));
    release_buffer(smem.v_empty(stage_of(last)), lane);
    skip_tiles<Traits>(smem, turns, lead + visible, num_tiles, ring, lane);
  }
  ring += num_tiles;

  // The split walk's pieces: the item's first key tiles leave their state to the block of the
  // next ticket; its last ones take in the state the block of the ticket before left.
  if constexpr (sizeof...(Piece) > 0) {
    constexpr int kSplitBarrier = static_cast<int>(ForwardBarrier::consumer_epilogue);
    static_assert(kWalk == WalkKind::split && Traits::kQFreeAfterScores,
                  "split pieces end without the epilogue's release of the Q tile");
    const SplitPiece& cut = (piece, ...);
    if (cut.end == PieceEnd::write_partial) {
      write_split_state<Traits::kConsumers, Traits::kDTiles, kSplitBarrier>(
          params.split_flags, params.split_partials, cut.slot, consumer, o[0], row_max[0],
          row_sum[0]);
      FLASHPP_FWD_STAMP(items_done, role, output_done, clock64());
      return;
    }
    if (cut.end == PieceEnd::merge_partial) {
      merge_split_state<Traits::kConsumers, Traits::kDTiles, kSplitBarrier>(
          params.split_flags, params.split_partials, cut.slot, consumer, p.scale_log2,
          o[0], row_max[0], row_sum[0]);
    }
  }

  if constexpr (Traits::kDirectOutput) {
    const float keep_scale = p.dropout.threshold != 0 ? p.dropout.keep_scale : 1.0f;
    store_output_rows<typename Traits::Element>(o[0], row_max[0], row_sum[0], p, tile.b, tile.h, row0,
                                                keep_scale, p.scale, 0.0f, lane);
  } else if constexpr (Traits::kSeparateOutput) {
    write_output<Traits>(o, row_max, row_sum, p, tile.b, tile.h, tile.m0, warp_row0, lane, smem.o_stage());
  } else {
    // Every warp of this warpgroup is done reading its Q rows (the last wgmma has completed in
    // all four) before write_output stages O through them; then the tile goes to the next item.
    ptx::named_barrier_sync(static_cast<int>(ForwardBarrier::consumer_epilogue) + consumer, 128);
    write_output<Traits>(o, row_max, row_sum, p, tile.b, tile.h, tile.m0, warp_row0, lane, smem.o_stage());
    ptx::fence_shared_to_async();  // the staging reads come before the copy engine's next Q write
    release_buffer(smem.q_empty(), lane);
  }
  FLASHPP_FWD_STAMP(items_done, role, output_done, clock64());
}

// A consumer warpgroup's items: on the snake walk as the producer hands them over (ItemHandoff),
// up to the end of the walk; on the stride walk the consumers take the positions themselves.
template <typename Traits, ScoreExtras kExtras, WalkKind kWalk>
__device__ __forceinline__ void consumer_loop(const Sm90ForwardParams& params,
                                              const SharedStorage<Traits>& smem,
                                              const ItemWalk<kWalk>& walk, int consumer) {
  const IssueTurns<Traits::kConsumers, kTakesTurns<Traits, kExtras>> turns{consumer};
  turns.start();
  int ring = 0;
  consumer_walk<Traits>(params, smem, walk, 1 + consumer,
                        [&](const ForwardTile& tile, int items_done, auto q_waited,
                            const auto&... piece) {
                          consumer_item<Traits, kExtras, decltype(q_waited)::value, kWalk>(
                              params, smem, tile, consumer, turns, items_done, ring, piece...);
                        });
  turns.finish();
}

// ---------------------------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------------------------

template <typename Traits, ScoreExtras kExtras, WalkKind kWalk = WalkKind::stride>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash_fwd_sm90_kernel(const __grid_constant__ Sm90ForwardParams params) {
#if FLASHPP_WGMMA_AVAILABLE
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  poison_dynamic_smem(smem_raw);  // test builds only (poison.cuh)
  const SharedStorage<Traits> smem{smem_raw};
  ItemWalk<kWalk> walk{params.q_tiles * params.heads, params.q_tiles, params.heads,
                       params.args.heads_per_group * params.q_tiles};

  if (threadIdx.x == 0) {
    if constexpr (kWalk == WalkKind::split) *smem.ticket() = take_split_ticket(params.split_flags);
    ptx::mbarrier_init(smem.q_full(), 1);
    ptx::mbarrier_init(smem.q_empty(), 4 * Traits::kConsumers);  // one arrival per warp
    ptx::mbarrier_init(smem.handoff_empty(), 128 * Traits::kConsumers);  // one per thread
    for (int s = 0; s < Traits::kStages; ++s) {
      ptx::mbarrier_init(smem.k_full(s), 1);
      ptx::mbarrier_init(smem.v_full(s), 1);
      ptx::mbarrier_init(smem.k_empty(s), 4 * Traits::kConsumers);  // one arrival per warp
      ptx::mbarrier_init(smem.v_empty(s), 4 * Traits::kConsumers);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  if constexpr (kWalk == WalkKind::split) {
    walk.plan = params.split;
    walk.ticket = *smem.ticket();
  }

  const int warpgroup = ptx::warpgroup_index();
  if (warpgroup == 0) {
    ptx::release_registers<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) {
      producer_walk<Traits>(params, smem, walk, [&](const ForwardTile& tile, int items_done, int& ring) {
        load_item<Traits, kHandOffItems<kWalk>>(params, smem, tile, items_done, ring);
      });
    }
  } else {
    ptx::claim_registers<Traits::kConsumerRegisters>();
    consumer_loop<Traits, kExtras, kWalk>(params, smem, walk, warpgroup - 1);
  }
#endif
}

}  // namespace flashpp::cuda::sm90
