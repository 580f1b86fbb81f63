// Launches one instantiation (element type x head dim) of the sm90 forward: the tensor maps of
// Q, K and V, the grid (query tiles x batch*heads, longest first under a mask), the shared-memory
// opt-in. Each sm90_fwd_*.cu instance (src/cuda/instances.cmake) instantiates launch_forward for
// one (Element, kHeadDim).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "../../../api/problem.hpp"
#include "../../common/env_switch.hpp"
#include "../../common/check_cuda.hpp"
#include "../../common/launch_config.hpp"
#include "../../common/poison.cuh"
#include "../../common/tensor_map.hpp"
#include "kernel.cuh"
#include "split_plan.hpp"
#include "split_walk.hpp"
#include "tile_config.hpp"
#include "../../common/occupancy.hpp"

namespace flashpp::cuda::sm90 {

template <typename Element, int kHeadDim>
void launch_forward(const ForwardParams& params, const detail::ForwardArgs& args,
                    cudaStream_t stream);

// A [B, N, H, D] view's tensor map with boxes of `rows` rows; throws when the driver refuses it
// (the dispatcher checked the layout before choosing this family).
inline void make_map(CUtensorMap* map, const TensorView& t, DType dtype, int rows,
                     const char* name) {
  if (!make_row_tile_map(map, t.data, dtype, t.sizes[0], t.sizes[1], t.sizes[2], t.sizes[3],
                         t.strides[0], t.strides[1], t.strides[2], rows)) {
    throw Error(ErrorCode::backend_failure,
                std::string("flashpp CUDA backend: the driver refused the tensor map of ") + name);
  }
}

// How a forward kernel's blocks find their items: a one-dimensional grid whose blocks walk the
// items (ItemWalk): as many blocks as fit on the GPU at once (persistent), or one per item.
enum class ForwardGrid { walk_persistent, walk_one_per_item };

struct WalkChoice {
  ForwardGrid grid;
  WalkKind walk;
};

// A masked call's walk: the snake walk on a persistent grid by default; FLASHPP_SM90_FWD_WALK=
// stride takes the stride walk, =none one block per item (A/B runs; read at every call).
// false: one block per item.
inline bool masked_walk(WalkKind* walk) {
  const char* env = std::getenv("FLASHPP_SM90_FWD_WALK");
  *walk = WalkKind::snake;
  if (env == nullptr) return true;
  if (std::strcmp(env, "none") == 0) return false;
  if (std::strcmp(env, "stride") == 0) *walk = WalkKind::stride;
  return true;
}

// The bf16/fp16 forward's grid: persistent, with the stride walk where every item costs the same
// (no mask) and the snake walk under a mask, where the longest-first order dealt in rounds of
// alternating direction balances items of unequal cost (session 13 run 3, H200, bf16, causal,
// against one block per item, which the stride walk lost to in session 12: D=128 N=1024 346 ->
// 388 TFLOPS, N=4096 542 -> 573, N=16384 583 -> 591; D=64 216 -> 244, 375 -> 404, 412 -> 429).
// The softcap/dropout kernel keeps one block per item under a mask, and at D=128 without one
// (launch_forward_tiles). FLASHPP_SM90_FWD_PERSISTENT=0 / =1 forces one block per item / a
// persistent grid (with PERSISTENT=1 and a mask, the walk above); read at every call.
// Masked calls with kLongMaskedKeys keys or more take one block per item: there the snake walk
// lost to it (session 14, H200, bf16, causal, B=4 H=32, gpu_compare: D=128 N=131072 604 vs 636
// TFLOPS, N=32768 617 vs 632; D=64 still gained up to N=65536: 450 vs 443). The walk deals the
// longest items of every head first, so the blocks running at once read the K/V of many heads;
// one block per item runs neighbouring tiles of one head together, which share K/V tiles in L2
// (a head's K/V at D=128 and 131072 keys is 64 MiB, about the L2). Not measured: the crossover
// between 65536 and 131072 keys at D=64, and this rule on an H100.
inline constexpr std::int64_t kLongMaskedKeys = 131072;

inline WalkChoice walk_grid(bool masked, std::int64_t k_len) {
  const int forced = persistent_forced();
  WalkKind walk = WalkKind::stride;
  const bool walk_asked = masked && masked_walk(&walk);
  const bool long_masked = masked && k_len >= kLongMaskedKeys;
  const bool persistent = forced >= 0 ? forced == 1 : (!masked || (walk_asked && !long_masked));
  if (!persistent) return {ForwardGrid::walk_one_per_item, WalkKind::stride};
  return {ForwardGrid::walk_persistent, walk};
}


// walk_grid's choice for a kernel whose persistent blocks count the K/V tiles they have loaded in
// 32 bits (the ring position): where all the K/V tiles of a launch could reach 2^31 (sequences of
// about a million keys and more), one block per item instead (the gain of the persistent grid is
// nil at such lengths anyway). The bf16/fp16 and the FP8 forward.
inline WalkChoice ring_safe_walk(const ForwardParams& params, int block_m, int block_n,
                                 std::int64_t batch_heads) {
  const std::int64_t all_kv_tiles = (params.q_len + block_m - 1) / block_m *
                                    std::min<std::int64_t>(batch_heads, 65535) *
                                    ((params.k_len + block_n - 1) / block_n);
  if (all_kv_tiles >= (std::int64_t{1} << 31)) return {ForwardGrid::walk_one_per_item, WalkKind::stride};
  return walk_grid(params.mask.active(), params.k_len);
}

// The launches of a forward kernel over items (query tile, batch * head), at most 65535 heads
// each; under a mask, heads grouped so that the longest query tiles start first
// (common/block_order.cuh).
// dependent_launch: the first launch with programmatic stream serialisation
// (ptx/griddepcontrol.cuh), so that the kernel may start while the one before it on the stream
// still runs (the FP8 forward after its V transposition pass; the kernel waits for it before
// reading what it wrote). Later launches of a call follow the first in the ordinary way.
template <typename Kernel>
void launch_query_tiles(Kernel kernel, int threads, int smem_bytes, int block_m,
                        Sm90ForwardParams p, std::int64_t batch_heads, cudaStream_t stream,
                        const char* what, ForwardGrid grid_kind,
                        bool dependent_launch = false) {
  // Made on every launch (its own cost per call was not measured): a cudaDeviceReset clears it.
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
             "cudaFuncSetAttribute (sm90 forward shared memory)");
  const std::int64_t m_blocks = (p.args.q_len + block_m - 1) / block_m;
  const bool ordered = FLASHPP_BLOCK_ORDER && p.args.mask.active();
  const bool persistent = grid_kind == ForwardGrid::walk_persistent;
  const std::int64_t slots =
      ordered || persistent ? cached_resident_blocks(kernel, threads, smem_bytes) : 0;
  // Heads per launch: the grid's y limit, and for a one-dimensional grid of one block per item
  // at most 2^31 - 1 items (the grid's x limit).
  constexpr std::int64_t kMaxGridY = 65535, kMaxGridX = 2147483647;
  const std::int64_t max_heads =
      grid_kind == ForwardGrid::walk_one_per_item && m_blocks > 0
          ? std::max<std::int64_t>(1, std::min(kMaxGridY, kMaxGridX / m_blocks))
          : kMaxGridY;
  for (std::int64_t first = 0; first < batch_heads; first += max_heads) {
    p.args.bh_offset = first;
    const std::int64_t heads = std::min(max_heads, batch_heads - first);
    p.args.heads_per_group = ordered ? heads_per_group(true, m_blocks, heads, slots) : 1;
    p.q_tiles = m_blocks;
    p.heads = heads;
    const std::int64_t items = m_blocks * heads;
    if (items == 0) continue;
    const dim3 grid(static_cast<unsigned>(persistent ? std::min(items, persistent_blocks(slots)) : items));
    LaunchShape shape{grid, dim3(static_cast<unsigned>(threads)),
                      static_cast<std::size_t>(smem_bytes)};
    shape.dependent = dependent_launch && first == 0;  // later launches follow this kernel's
    launch_kernel(shape, stream, kernel, what, p);
    check_launch(what);
  }
}

// Whether a launch of block_m-row query tiles on `choice` takes last_tiles_first_item's order:
// the stride walk of a persistent grid without a mask, where the last query tile of each head
// leaves whole consumers without rows (they skip the item: pass_item) and a head has at most
// `max_tiles` tiles (the tile's last_first_max_tiles, tile_config.hpp). The 8 of most tiles:
// session 26 run 2 (H100, bf16 and fp16, D=64 tall tile, gpu_compare, against the plain order in
// the same build): N=1024 (6 tiles a head: the busiest blocks go from 6 items to 5 and a cheap
// one) +2.9..+3.3%; 2048 (11 tiles) and 4096 (22) +0..+0.7%; 16384 (86) -1.9% bf16, +1.2% fp16.
// Its first round reads the K/V of ~128 heads at once, where the plain order shares a head's K/V
// among neighbouring tiles. FLASHPP_SM90_FWD_LAST_FIRST=0 / =1 keeps the plain order / takes
// this one at any length (A/B runs; read at every call).
inline bool last_tiles_first(const ForwardParams& params, const WalkChoice& choice, int block_m,
                             std::int64_t max_tiles) {
  const std::int64_t last_rows = params.q_len % block_m;
  const std::int64_t q_tiles = (params.q_len + block_m - 1) / block_m;
  const int forced = env_switch("FLASHPP_SM90_FWD_LAST_FIRST");
  return choice.grid == ForwardGrid::walk_persistent && choice.walk == WalkKind::stride &&
         !params.mask.active() && q_tiles > 1 && last_rows != 0 && last_rows <= block_m - 64 &&
         (forced == 1 || (forced < 0 && q_tiles <= max_tiles));
}

// Rows the query tiles of a launch start before row 0 (Sm90ForwardParams::q_tile_shift): where the
// length leaves whole warpgroups of the last tile without rows and later rows see more keys (a
// mask limiting keys to the right: causal, windows), those warpgroups go to the first tile
// instead, which sees the fewest keys. The last tile then runs its many key tiles with every
// warpgroup busy. Session 29: the 192-row tile at N=4096 (4096 = 21 x 192 + 64) ran its longest
// item with one warpgroup of three. FLASHPP_SM90_FWD_SHIFT=0 turns it off (A/B runs; read at
// every call).
inline std::int64_t query_tile_shift(const ForwardParams& params, int block_m) {
  const bool later_rows_see_more = params.mask.right < detail::kNoLimit;
  if (!later_rows_see_more || env_switch("FLASHPP_SM90_FWD_SHIFT") == 0) return 0;
  const std::int64_t missing = (block_m - params.q_len % block_m) % block_m;
  return missing / 64 * 64;
}

// The tiles whose kernel is instantiated with the split walk (split_walk.hpp): the D=128 tiles,
// the two-warpgroup one's unmasked calls measured bound by the partial last round (session 30
// run 1: 128 blocks as fast as 132 at N 1024 and 4096), and the tall one (session 40). Other tiles
// keep the stride walk (their objects would grow by a kernel each; the tall D=64 tile's
// part-empty last tiles make its items unequal).
template <typename Traits>
inline constexpr bool kSplitWalk = Traits::kHeadDim == 128 && Traits::kQFreeAfterScores;

// The kernels instantiated for a tile: every one (`all`: the plain kernel on each walk, the softcap
// and dropout kernels), the plain kernel on each walk (`plain`: the tall tiles; callers with
// softcap or dropout must use other tiles), or the plain kernel on the stride walk
// (`plain_stride`: the long-keys tile, for unmasked calls, whose grid walks by stride).
enum class TileKernels { all, plain, plain_stride };

template <typename Traits, TileKernels kKernels = TileKernels::all>
void launch_forward_tiles(const ForwardParams& params, const detail::ForwardArgs& args,
                          cudaStream_t stream) {
  Sm90ForwardParams p{};
  p.args = params;
  const DType dtype = args.problem.dtype;
  make_map(&p.q_map, args.q, dtype, Traits::kBlockM, "q");
  if (args.problem.Nk > 0) {  // with no keys the kernel loads nothing and writes O = 0, lse = -inf
    make_map(&p.k_map, args.k, dtype, Traits::kBlockN, "k");
    make_map(&p.v_map, args.v, dtype, Traits::kBlockN, "v");
  }

  const bool extras = params.softcap > 0.0f || params.dropout.threshold != 0;
  const std::int64_t batch_heads = args.problem.B * args.problem.Hq;
  const WalkChoice one_per_item{ForwardGrid::walk_one_per_item, WalkKind::stride};
  WalkChoice choice = ring_safe_walk(params, Traits::kBlockM, Traits::kBlockN, batch_heads);
  // Softcap and dropout calls at D=128 take one block per item: there the persistent grid
  // measured 14-22% slower without a mask (session 17 run 9, H100, bf16, p=0.1: 391 vs 453
  // TFLOPS at N=4096, 387 vs 473 at 16384; softcap 0 / +8%); at D 64, 96, 192, 256 within -3.5..+1%
  // the other way, so they keep it. FLASHPP_SM90_FWD_PERSISTENT=1 still gives D=128 the stride
  // walk (tests). Under a mask every extras call takes one block per item: the snake walk is
  // instantiated for the plain kernel only.
  if (extras && Traits::kHeadDim == 128 && persistent_forced() != 1) choice = one_per_item;
  if (choice.walk != WalkKind::stride && extras) choice = one_per_item;
  p.args.last_tiles_first =
      last_tiles_first(params, choice, Traits::kBlockM, Traits::kLastFirstMaxTiles);
  p.q_tile_shift = choice.walk == WalkKind::snake ? query_tile_shift(params, Traits::kBlockM) : 0;
  auto kernel = flash_fwd_sm90_kernel<Traits, ScoreExtras::none>;
  if constexpr (kKernels == TileKernels::all) {
    if (params.softcap > 0.0f) {
      kernel = flash_fwd_sm90_kernel<Traits, ScoreExtras::softcap_dropout>;
    } else if (extras) {
      kernel = flash_fwd_sm90_kernel<Traits, ScoreExtras::dropout>;
    }
  }
  if constexpr (kKernels == TileKernels::plain_stride) {
    if (choice.walk != WalkKind::stride || extras) {
      throw Error(ErrorCode::internal,
                  "sm90 forward: a masked, softcap or dropout call on the long-keys tile");
    }
  } else if (choice.walk == WalkKind::snake) {
    kernel = flash_fwd_sm90_kernel<Traits, ScoreExtras::none, WalkKind::snake>;
  }
  if constexpr (kSplitWalk<Traits> && kKernels != TileKernels::plain_stride) {
    if (choice.grid == ForwardGrid::walk_persistent && choice.walk == WalkKind::stride && !extras &&
        split_walk_call(params)) {
      auto split_kernel = flash_fwd_sm90_kernel<Traits, ScoreExtras::none, WalkKind::split>;
      const std::int64_t blocks = persistent_blocks(
          cached_resident_blocks(split_kernel, Traits::kThreads, Traits::kSmemBytes));
      const SplitWalkPlan plan =
          split_walk_plan(params.q_len, params.k_len, batch_heads, params.heads_per_kv,
                          Traits::kBlockM, Traits::kBlockN,
                          2 * Traits::kPaddedHeadDim * sizeof(typename Traits::Element), blocks,
                          device_l2_bytes());
      const std::size_t bytes = split_workspace_bytes(blocks, Traits::kConsumers, Traits::kDTiles);
      // The workspace query (forward_split_workspace_bytes) sized it for this grid; a smaller
      // caller's workspace keeps the stride walk.
      if (plan.splits() && args.workspace.data != nullptr && args.workspace.bytes >= bytes) {
        auto* base = static_cast<unsigned char*>(args.workspace.data);
        const std::int64_t partials = split_partials_offset(blocks, Traits::kConsumers);
        p.split = plan;
        p.split_flags = reinterpret_cast<int*>(base);
        p.split_partials = reinterpret_cast<float4*>(base + partials);
        check_cuda(cudaMemsetAsync(base, 0, static_cast<std::size_t>(partials), stream),
                   "cudaMemsetAsync (sm90 forward split walk flags)");
        poison_device_buffer(base + partials, bytes - static_cast<std::size_t>(partials), stream);
        kernel = split_kernel;
      }
    }
  }
#if FLASHPP_SM90_FWD_TRACE
  p.trace = trace_buffer(stream);
#endif
  launch_query_tiles(kernel, Traits::kThreads, Traits::kSmemBytes, Traits::kBlockM, p, batch_heads,
                     stream, "sm90 forward kernel launch", choice.grid);
#if FLASHPP_SM90_FWD_TRACE
  write_trace(p.trace, Traits::kConsumers, stream);
#endif
}

template <typename Element, int kHeadDim>
void launch_forward(const ForwardParams& params, const detail::ForwardArgs& args,
                    cudaStream_t stream) {
  const ForwardTileShape tile = forward_tile_shape<kHeadDim>(
      params, params.q_len, params.k_len, args.problem.B * args.problem.Hq, -1);
  if constexpr (ForwardLongKeysTileConfig<kHeadDim>::exists) {
    if (tile == ForwardTileShape::long_keys) {  // unmasked, no softcap or dropout
      using LongTraits = Sm90ForwardTraits<Element, kHeadDim, ForwardLongKeysTileConfig<kHeadDim>>;
      launch_forward_tiles<LongTraits, TileKernels::plain_stride>(params, args, stream);
      return;
    }
  }
  if constexpr (ForwardTallTileConfig<kHeadDim>::exists) {
    if (tile == ForwardTileShape::tall) {  // use_tall_tile excludes softcap and dropout
      using TallTraits = Sm90ForwardTraits<Element, kHeadDim, ForwardTallTileConfig<kHeadDim>>;
      launch_forward_tiles<TallTraits, TileKernels::plain>(params, args, stream);
      return;
    }
  }
  using Traits = Sm90ForwardTraits<Element, kHeadDim, ForwardTileConfig<kHeadDim>>;
  launch_forward_tiles<Traits>(params, args, stream);
}

}  // namespace flashpp::cuda::sm90
