// Launches one instantiation (element type x head dim) of the sm90 backward: preprocess (shared
// with the sm80 family: delta, lse in log2 units, the dQ accumulator and split sums zeroed), the
// main kernel (tensor maps, grid of the key tiles some query sees x batch*kv heads, longest first
// under a mask, a small last wave split without one; dK = dV = 0 filled in on the other keys),
// and the postprocess (also the sm80 family's: dQ from its fragment-ordered accumulator,
// common/dq_accum.cuh, and the split units' dK, dV).
// Each sm90_bwd_*.cu instance (src/cuda/instances.cmake) instantiates run_backward_for for one
// (Element, kHeadDim).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "../../../api/problem.hpp"
#include "../../common/backward_pre_post.cuh"
#include "../../common/check_cuda.hpp"
#include "../../common/launch_config.hpp"
#include "../../common/env_switch.hpp"
#include "../../common/tail_split.hpp"
#include "../../common/tensor_map.hpp"
#include "../../common/tile_range.hpp"
#include "kernel.cuh"
#include "wide_kernel.cuh"
#include "../../common/occupancy.hpp"
#include "../../instances.hpp"

namespace flashpp::cuda::sm90 {

template <typename Element, int kHeadDim>
void run_backward_for(const BackwardParams& params, const detail::BackwardArgs& args,
                      cudaStream_t stream);

// The kernel of a head dim: kernel.cuh's up to 128, wide_kernel.cuh's (dK, dV transposed) above.
template <typename Element, int kHeadDim, bool kDeterministic = false, bool kDropout = false>
using BackwardTraitsFor =
    std::conditional_t<(kHeadDim > 128), Sm90WideBackwardTraits<Element, kHeadDim, kDropout>,
                       Sm90BackwardTraits<Element, kHeadDim, kDeterministic, kDropout>>;

// The backward kernel of Traits: one block per key tile (backward_block), with kernel.cuh's
// consumers or, for the wide traits, wide_kernel.cuh's.
template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash_bwd_sm90_kernel(const __grid_constant__ Sm90BackwardParams params) {
#if FLASHPP_WGMMA_AVAILABLE
  backward_block<Traits>(params, [&](const BackwardShared<Traits>& smem, const BackwardTile& tile,
                                     int consumer) {
    if constexpr (Traits::kWide) {
      consumer_backward_wide<Traits>(params, smem, tile, consumer);
    } else {
      consumer_backward<Traits>(params, smem, tile, consumer);
    }
  });
#endif
}

inline void make_backward_map(CUtensorMap* map, const TensorView& t, DType dtype, int rows,
                              const char* name) {
  if (!make_row_tile_map(map, t.data, dtype, t.sizes[0], t.sizes[1], t.sizes[2], t.sizes[3],
                         t.strides[0], t.strides[1], t.strides[2], rows)) {
    throw Error(ErrorCode::backend_failure,
                std::string("flashpp CUDA backend: the driver refused the tensor map of ") + name);
  }
}

// The kernel parameters with the tensor maps of q, dout, k, v (the same for every variant of
// an (Element, head dim): the maps depend on the block sizes only).
template <typename Traits>
Sm90BackwardParams with_tensor_maps(const BackwardParams& params,
                                    const detail::BackwardArgs& args) {
  Sm90BackwardParams p{};
  p.args = params;
  const DType dtype = args.problem.dtype;
  if (params.q_len > 0) {
    make_backward_map(&p.q_map, args.q, dtype, Traits::kBlockM, "q");
    make_backward_map(&p.dout_map, args.dout, dtype, Traits::kBlockM, "dout");
  }
  make_backward_map(&p.k_map, args.k, dtype, Traits::kBlockN, "k");
  make_backward_map(&p.v_map, args.v, dtype, Traits::kBlockN, "v");
  return p;
}

// The main kernel of Traits over the key tiles some query sees x batch * kv heads; dK = dV = 0
// written on the other keys.
// dependent: launched with programmatic stream serialisation (ptx/griddepcontrol.cuh) after the
// preprocess or launch_zero_key_rows, whose last blocks it may run beside (backward_block).
template <typename Traits>
void launch_main(Sm90BackwardParams p, cudaStream_t stream, bool dependent) {
  const BackwardParams& params = p.args;
  const std::int64_t kv_heads = params.batch * params.kv_heads;
  if (kv_heads > 65535) {
    throw Error(ErrorCode::unsupported, "sm90 backward: batch * kv heads above 65535");
  }
  // The key tiles some query sees: those of query rows [0, Nq) (common/tile_range.hpp). The
  // others (top-left causal with Nk > Nq, windows, no query at all) would only write dK = dV = 0.
  // The wide kernel (D > 128) launches every key tile of a call with queries (backward_tile does
  // not read the offset there): its blocks no query sees write their zeros themselves.
  KeyTileRange span = key_tile_range(params.mask, params.k_len, 0, params.q_len, Traits::kBlockN);
  if (Traits::kWide && params.q_len > 0) {
    span.begin = 0;
    span.end = (params.k_len + Traits::kBlockN - 1) / Traits::kBlockN;
  }
  launch_zero_key_rows(params, span.begin * Traits::kBlockN,
                       std::min(span.end * Traits::kBlockN, params.k_len), stream);
  if (span.empty()) return;
  p.args.key_tile_offset = span.begin;
  auto kernel = flash_bwd_sm90_kernel<Traits>;
  constexpr int kSmem = Traits::kSmemBytes;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
             "cudaFuncSetAttribute (sm90 backward shared memory)");
  const std::int64_t n_blocks = span.end - span.begin;
  // The deterministic mode needs the key tiles of a head to start in rank order (a block waits
  // for the blocks of lower rank): block_item keeps rank order within a head either way.
  // (A split launch keeps the order run_backward_for set, which the postprocess follows.)
  const bool ordered = FLASHPP_BLOCK_ORDER && params.mask.active() && params.split.split_units == 0;
  const std::int64_t slots = ordered ? cached_resident_blocks(kernel, Traits::kThreads, kSmem) : 0;
  if (params.split.split_units == 0) {
    p.args.heads_per_group = ordered ? heads_per_group(true, n_blocks, kv_heads, slots) : 1;
  }
#if FLASHPP_SM90_BWD_TRACE
  p.trace = backward_trace_buffer(stream);
#endif
  // The grid: clusters of two neighbouring key tiles (kPaired; an odd count gets a pad tile past
  // the launch's last one, its keys masked: past Nk or seen by no query, so it adds zeros and
  // stores nothing or the zeros launch_zero_key_rows also wrote), or one block a key tile; a
  // split (the last wave's, or a small grid's) launches p.split's blocks in one dimension, whole
  // units then the pieces, in plan order (kPaired: the pairs' clusters, pair_plan).
  dim3 grid(static_cast<unsigned>(n_blocks), static_cast<unsigned>(kv_heads));
  if constexpr (Traits::kPaired) {
    const std::int64_t pairs = (n_blocks + 1) / 2;
    p.args.heads_per_group = ordered ? heads_per_group(true, pairs, kv_heads, slots / 2) : 1;
    grid.x = static_cast<unsigned>(2 * pairs);
  }
  if (p.args.split.split_units > 0) grid = dim3(static_cast<unsigned>(p.args.split.blocks()));
  LaunchShape shape{grid, dim3(Traits::kThreads), static_cast<std::size_t>(kSmem)};
  shape.dependent = dependent;
  shape.cluster_x = Traits::kPaired ? 2 : 1;
  launch_kernel(shape, stream, kernel, "sm90 backward kernel launch", p);
#if FLASHPP_SM90_BWD_TRACE
  write_backward_trace(p.trace, n_blocks * kv_heads, stream);
#endif
}

// The split of a small last wave (common/tail_split.hpp) for a call of Traits: a kernel that
// splits (kTailSplit: the kSplit instantiation, which run_backward_for takes where this plans a
// split for it), the workspace's split area present and large enough; none for other kernels.
// Without a mask every key tile walks the same steps: a last wave of at most half the slots is
// split, and a grid of at most one wave is split whole where its pieces fill the slots better
// (plan_grid_split). Under one the key tiles' step counts differ (the longest-first order of block_order.cuh
// balances larger grids), and only a grid of at most one wave is split, all of it, each unit cut
// into equal runs of its own steps: into as many pieces as make about kMaskedSplitWaves waves
// (at least two), launched longest unit first (GQA and MQA with few kv heads, short sequences;
// under a causal mask the longest key tile walks twice the average's steps, which a wave of whole
// tiles, or of pieces cut the same number of times, waits for).
// Session 34 run 5 (H100, bf16, interleaved GPU time, causal, against session 33's head / one wave
// of pieces, FLASHPP_SM90_BWD_MASKED_SPLIT_WAVES=1): B=1 H=16:4 N=2048 D=64 3.0x / +30%, B=1
// H=32:8 N=1024 D=64 2.2x / +37%, D=128 +70% / +15%, B=2 H=8:2 N=2048 D=96 2.0x / +28%, B=1 H=16:1
// N=4096 D=128 6.0x / +71%, two pieces a tile: B=1 H=32:8 N=2048 D=128 +37%, H=32:4 N=4096 +51%,
// H=8:2 N=8192 +76%.
// FLASHPP_SM90_BWD_SPLIT=0 launches every key tile whole (A/B runs; read at every call);
// FLASHPP_SM90_BWD_MASKED_SPLIT_WAVES (a compile definition) sets the waves of a masked split.
#ifndef FLASHPP_SM90_BWD_MASKED_SPLIT_WAVES
#define FLASHPP_SM90_BWD_MASKED_SPLIT_WAVES 2
#endif
inline constexpr std::int64_t kMaskedSplitWaves = FLASHPP_SM90_BWD_MASKED_SPLIT_WAVES;
// An unmasked grid of at most a wave is split whole into the pieces that end soonest in up to
// kUnmaskedSplitWaves waves (common/tail_split.hpp plan_grid_split; 1: session 34's single wave).
#ifndef FLASHPP_SM90_BWD_UNMASKED_SPLIT_WAVES
#define FLASHPP_SM90_BWD_UNMASKED_SPLIT_WAVES 2
#endif
inline constexpr std::int64_t kUnmaskedSplitWaves = FLASHPP_SM90_BWD_UNMASKED_SPLIT_WAVES;

// The grid of a call of Traits as launch_main launches it (the key tiles some query sees, all of
// them without a mask, x batch * kv heads: `units` blocks) and the blocks the GPU holds at once
// (`slots`; kPaired: clusters of two), found once per call for the split plans and the choice of
// the 128-key kernel.
struct BackwardGrid {
  std::int64_t units = 0, slots = 0;
};
template <typename Traits>
BackwardGrid backward_grid(const BackwardParams& params) {
  if (params.q_len == 0 || params.k_len == 0) return {};
  const KeyTileRange span =
      key_tile_range(params.mask, params.k_len, 0, params.q_len, Traits::kBlockN);
  if (span.empty()) return {};
  auto kernel = flash_bwd_sm90_kernel<Traits>;
  check_cuda(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes),
      "cudaFuncSetAttribute (sm90 backward shared memory)");
  return {(span.end - span.begin) * params.batch * params.kv_heads,
          cached_resident(kernel, Traits::kThreads, Traits::kSmemBytes, Traits::kPaired ? 2 : 1)};
}

template <typename Traits>
TailSplit plan_backward_split(const BackwardParams& params, const BackwardGrid& grid) {
  const TailSplit none{};
  if constexpr (kTailSplit<Traits>) {
    static_assert(Traits::kBlockN <= split_unit_rows(Traits::kHeadDim),
                  "a split unit's sums hold the kernel's key tile");
    if (grid.units == 0 || params.split_partials == nullptr ||
        env_switch("FLASHPP_SM90_BWD_SPLIT") == 0) {
      return none;
    }
    const std::int64_t steps =
        (params.q_len + Traits::kBlockM - 1) / Traits::kBlockM * params.heads_per_kv;
    const TailSplit plan =
        params.mask.active()
            ? plan_masked_split(grid.units, steps, grid.slots, kMaskedSplitWaves, true)
        : grid.units <= grid.slots
            ? plan_grid_split(grid.units, steps, grid.slots, kUnmaskedSplitWaves, true)
            : plan_tail_split(grid.units, steps, grid.slots, true);
    if (plan.split_units > params.split_capacity || plan.blocks() > 2147483647) return none;
    return plan;
  }
  return none;
}

// The split of the pairs' small last wave (unmasked calls; common/tail_split.hpp
// plan_pair_tail_split, for the kSplit pairs kernel PairSplitTraits): B=4 H=32 N=4096 D=128 is
// 2048 pairs on 66 clusters of two (H100: 132 SMs), a last wave of 2 pairs during which 64
// clusters idle for a whole pair's time (~3% of the kernel), N=16384 B=2 4 pairs (~1.5%).
// FLASHPP_SM90_BWD_SPLIT=0 turns it off as it does the other splits.
template <typename PairSplitTraits>
TailSplit plan_pair_split(const BackwardParams& params) {
  static_assert(PairSplitTraits::kPaired && kTailSplit<PairSplitTraits>, "the pairs' split kernel");
  const TailSplit none{};
  if (params.mask.active() || params.split_partials == nullptr ||
      env_switch("FLASHPP_SM90_BWD_SPLIT") == 0) {
    return none;
  }
  const BackwardGrid grid = backward_grid<PairSplitTraits>(params);  // slots: clusters of two
  if (grid.units == 0) return none;
  const std::int64_t tiles = grid.units / (params.batch * params.kv_heads);  // every one (no mask)
  const std::int64_t steps =
      (params.q_len + PairSplitTraits::kBlockM - 1) / PairSplitTraits::kBlockM * params.heads_per_kv;
  const TailSplit plan = plan_pair_tail_split(grid.units / 2, tiles, steps, grid.slots, true);
  if (plan.split_units == 0 || plan.split_units > params.split_capacity ||
      plan.blocks() > 2147483647) {
    return none;
  }
  return plan;
}

// Paired key tiles at D=128 without dropout or the deterministic mode (kernel.cuh kPaired), by
// default for calls without a mask whose blocks walk at least kPairMinSteps query tiles.
// Session 32 run 5 (H100, bf16, B=4 H=32 / B=2 at 16384, against unpaired blocks): N 4096 and
// 16384 +3.9 / +4.3%, N=1024 -2.5%; causal -4.6% / -0.3% / -10% (both blocks of a pair walk the
// union of their query tiles, so the upper one computes two steps that see none of its keys).
// Not where the whole grid is split (plan_backward_split: at most half a wave of key tiles, e.g.
// MQA B=1 H=16 N=4096, 32 key tiles: paired, 32 blocks on 132 SMs ran at 0.30 of cuDNN, split
// 3.4x faster, and B=1 H=32:8 N=1024 +38%; session 34 runs 3-4). FLASHPP_SM90_BWD_PAIRS=0 / =1
// (read at every call) turns them off / on for every such call.
inline constexpr std::int64_t kPairMinSteps = 64;
inline bool pairs_wanted(const BackwardParams& p, bool whole_grid_split) {
  const int forced = env_switch("FLASHPP_SM90_BWD_PAIRS");
  if (forced >= 0) return forced == 1;
  return !p.mask.active() && !whole_grid_split &&
         (p.q_len + 63) / 64 * p.heads_per_kv >= kPairMinSteps;
}

// 128-key blocks at D=64 (kNarrow: two consumer warpgroups) instead of 192-key ones (three) where
// the 192-key grid leaves SMs idle: at most one wave of blocks under a mask, at most 1.5 waves
// without one (`grid`: the 192-key grid, backward_grid; the two kernels take one block an SM),
// unless the whole 192-key grid is split (`split`, plan_backward_split) and has at most half the
// slots of key tiles, which its pieces fill better still (the narrow kernel does not split). The
// narrow kernel does 0.83 of the wide one's work a second on a full machine (B=2 H=32 N=16384),
// but in small grids it has 1.5x the blocks to fill the SMs with. Session 34 runs 1-4 (H200 runs
// 1-2, H100 runs 3-4; bf16, interleaved GPU time, narrow against wide): B=1 H=16 N=1024 +25%
// (causal +16%, and +14% against the masked grid's two pieces a tile), B=1 H=16 N=2048 +14%
// (causal +5% forced, 176 blocks), B=2 H=16 N=1024 and B=1 H=32 N=1024 +11% (causal -2..-3%:
// more than a wave there), GQA B=4 H=32:8 N=1024 +8%, B=1 H=16 N=4096 -1% (-7%), B=4 H=32 N=1024
// -1% (-7%); B=1 H=16:4 N=2048 (44 blocks, one wave of pieces) -39% (causal -49%). Plain kernels
// only (not dropout or the deterministic mode: not measured). FLASHPP_SM90_BWD_NARROW=0 / =1
// (read at every call) turns it off / on for every such call.
inline bool narrow_wanted(const BackwardParams& p, const BackwardGrid& grid,
                          const TailSplit& split) {
  const int forced = env_switch("FLASHPP_SM90_BWD_NARROW");
  if (forced >= 0) return forced == 1;
  if (grid.units == 0) return false;
  if (split.split_units > 0 && split.whole_units == 0 && 2 * split.split_units <= grid.slots) {
    return false;
  }
  return p.mask.active() ? grid.units <= grid.slots : 2 * grid.units <= 3 * grid.slots;
}

// A traits type passed as a value (the CUDA sources build as C++17: no std::type_identity).
template <typename T>
struct TraitsTag {
  using type = T;
};

template <typename Element, int kHeadDim>
void run_backward_for(const BackwardParams& params, const detail::BackwardArgs& args,
                      cudaStream_t stream) {
  if (params.accum_width != kHeadDim) {
    throw Error(ErrorCode::internal, "sm90 backward: dQ accumulator width differs from the head dim");
  }
  const std::size_t turns = static_cast<std::size_t>(params.batch * params.q_heads) *
                            static_cast<std::size_t>(params.rows_padded / 64);
  if (args.deterministic && turns > 0 && params.dq_turns == nullptr) {
    throw Error(ErrorCode::internal, "sm90 backward: deterministic mode without turn counters");
  }
  // The main kernel's variant; its tensor maps follow its tiles.
  // `split`: the split kernel's plan (plan_backward_split), none for the other kernels.
  auto run = [&](auto traits, const TailSplit& split = TailSplit{}) {
    using Traits = typename decltype(traits)::type;
    // The accumulator's order is the main kernel's (dQ or dQ^T fragments); the postprocess reads it.
    BackwardParams call = params;
    call.dq_accum_transposed = Traits::kDqAccumTransposed;
    // The split is set before the preprocess, which zeroes the split units' sums.
    call.split = split;
    call.split_unit_rows = Traits::kBlockN;
    if (split.split_units > 0) {
      // The units' key tiles as launch_main launches them, and their order (block_order.cuh),
      // which the postprocess follows: under a mask the longest first over every head (the split
      // grids are small), else as they come.
      call.key_tile_offset =
          key_tile_range(call.mask, call.k_len, 0, call.q_len, Traits::kBlockN).begin;
      call.heads_per_group = call.mask.active() ? call.batch * call.kv_heads : 1;
    }
    // Host work first (tensor maps), then the launches back to back, so the GPU does not wait
    // between them on a small problem. The main kernel and the postprocess each start beside
    // the kernel before them (dependent launches), but after the deterministic mode's memset.
    // FLASHPP_SM90_BWD_PDL (read at every call; A/B runs): 0 launches both the ordinary way, 2
    // only the main kernel dependent, 3 only the postprocess; the wide kernel (D > 128) always
    // launches the ordinary way (backward_block). Session 35 runs 4-6 (H100, bf16 and fp16,
    // interleaved GPU time against 0): D=64 N=1024 +1..+2.5%, D=96 N=2048 +0.5..+0.8%, D=128
    // within +-0.5% (N 1024 and 4096).
    const int pdl = env_switch("FLASHPP_SM90_BWD_PDL");
    const bool dependent_ok = !Traits::kWide && !args.deterministic;
    const bool dependent_main = dependent_ok && (pdl < 0 || pdl == 1 || pdl == 2);
    const bool dependent_post = dependent_ok && (pdl < 0 || pdl == 1 || pdl == 3);
    Sm90BackwardParams p{};
    if (call.k_len > 0) p = with_tensor_maps<Traits>(call, args);
    launch_preprocess<Element>(call, stream);
    // With keys but no queries launch_main writes dK = dV = 0 without the main kernel.
    if (call.k_len > 0) {
      if (args.deterministic && turns > 0) {
        check_cuda(cudaMemsetAsync(call.dq_turns, 0, turns * sizeof(int), stream),
                   "cudaMemsetAsync (sm90 backward turn counters)");
      }
      launch_main<Traits>(p, stream, dependent_main);
    }
    launch_postprocess<Element>(call, stream, dependent_post);
  };
  if (args.deterministic) {
    if constexpr (sm90_deterministic_head_dim(kHeadDim)) {
      if (params.dropout.threshold != 0) {
        run(TraitsTag<BackwardTraitsFor<Element, kHeadDim, true, true>>{});
      } else {
        run(TraitsTag<BackwardTraitsFor<Element, kHeadDim, true>>{});
      }
    } else {
      throw Error(ErrorCode::internal, "sm90 backward: no deterministic mode at this head dim");
    }
  } else if (params.dropout.threshold != 0) {
    run(TraitsTag<BackwardTraitsFor<Element, kHeadDim, false, true>>{});
  } else if constexpr (kHeadDim <= 128) {  // kernel.cuh's head dims
    // The split kernel where a split is planned; before it the pairs (long unmasked calls at
    // D=128) and the 128-key blocks (small grids at D=64), unless the whole grid is split.
    using SplitTraits = Sm90BackwardTraits<Element, kHeadDim, false, false, false, true>;
    const BackwardGrid grid = backward_grid<SplitTraits>(params);
    const TailSplit split = plan_backward_split<SplitTraits>(params, grid);
    const bool whole_grid_split = split.split_units > 0 && split.whole_units == 0;
    if constexpr (kHeadDim == 128) {
      if (pairs_wanted(params, whole_grid_split)) {
        using PairSplitTraits = Sm90BackwardTraits<Element, kHeadDim, false, false, true, true>;
        const TailSplit pair_split = plan_pair_split<PairSplitTraits>(params);
        if (pair_split.split_units > 0) {
          run(TraitsTag<PairSplitTraits>{}, pair_split);
        } else {
          run(TraitsTag<Sm90BackwardTraits<Element, kHeadDim, false, false, true>>{});
        }
        return;
      }
    }
    if constexpr (kHeadDim == 64) {
      if (narrow_wanted(params, grid, split)) {
        run(TraitsTag<Sm90BackwardTraits<Element, kHeadDim, false, false, false, false, true>>{});
        return;
      }
    }
    if (split.split_units > 0) {
      run(TraitsTag<SplitTraits>{}, split);
      return;
    }
    run(TraitsTag<BackwardTraitsFor<Element, kHeadDim>>{});
  } else {
    run(TraitsTag<BackwardTraitsFor<Element, kHeadDim>>{});
  }
}

}  // namespace flashpp::cuda::sm90
