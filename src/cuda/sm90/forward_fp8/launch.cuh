// Launches one instantiation (output dtype x head dim) of the FP8 forward: the V transposition pass
// into the workspace (unless FLASHPP_FP8_V_TRANSPOSE=kernel), tensor maps of the e4m3 Q, K and V
// or Vt (128-byte boxes = 128 columns), the grid, the shared-memory opt-in. Each
// instances/fwd_fp8_*.cu instantiates launch_forward_fp8 for one (Out, kHeadDim).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "../../../api/problem.hpp"
#include "../../common/check_cuda.hpp"
#include "../../common/poison.cuh"
#include "../../common/occupancy.hpp"
#include "../../common/tensor_map.hpp"
#include "../forward/launch.cuh"
#include "kernel.cuh"
#include "v_transpose.hpp"

namespace flashpp::cuda::sm90::fp8 {

// Pipeline depth per head dim: D = 256 fills 224 KB with two stages (Q 32 KB; K, raw V and Vt
// 32 KB each per stage); smaller heads take three. Without the raw V tiles (the pass and
// FLASHPP_FP8_COMPACT_SMEM=1, kernel.cuh) D = 256 takes three as well (Q 32 KB + 3 x 64 KB).
// FLASHPP_FP8_STAGES (a compile definition, for tuning runs) sets the depth below D = 256 of the
// compact pass kernel (D = 128: Q 16 KB + stages x 32 KB).
#ifndef FLASHPP_FP8_STAGES
#define FLASHPP_FP8_STAGES 3
#endif
// Keys per tile: 128, but 192 at D = 128 with the pass and without a mask (session 25 run 5, H200,
// persistent grid: +2..+3% at N=4096, +12..+14% at 16384; under a causal mask -5% at 4096, where
// the diagonal tiles and each item's first tile weigh more; on one block per item in session 17
// about equal). FLASHPP_FP8_D128_KEYS=64, 128 or 192 (a compile definition) gives every D = 128
// call with the pass that tile instead (A/B runs).
#ifndef FLASHPP_FP8_D128_KEYS
#define FLASHPP_FP8_D128_KEYS 0
#endif
template <int kHeadDim, bool kVtPass, bool kMasked>
inline constexpr int kFp8BlockN = !kVtPass || kHeadDim != 128 ? 128
                                  : FLASHPP_FP8_D128_KEYS != 0 ? FLASHPP_FP8_D128_KEYS
                                  : kMasked ? 128 : 192;

#ifndef FLASHPP_FP8_CONSUMERS
#define FLASHPP_FP8_CONSUMERS 2
#endif
template <int kHeadDim, bool kVtPass>
inline constexpr int kFp8Consumers = kVtPass && kHeadDim <= 128 ? FLASHPP_FP8_CONSUMERS : 2;

template <bool kVtPass>
inline constexpr bool kFp8Compact = kVtPass && FLASHPP_FP8_COMPACT_SMEM != 0;
template <int kHeadDim, bool kVtPass>
inline constexpr int kFp8Stages = kHeadDim < 256 ? (kFp8Compact<kVtPass> ? FLASHPP_FP8_STAGES : 3)
                                  : kFp8Compact<kVtPass> ? 3 : 2;

// True unless FLASHPP_FP8_V_TRANSPOSE=kernel (read once per process, dispatch.cu): V transposed by
// the pass before the kernel (v_transpose.cu) into the workspace, rather than in the kernel.
bool fp8_v_transpose_pass();

// kMasked: the kernel serves calls under a mask (the snake walk is instantiated for those only).
template <typename Traits, bool kMasked>
void launch_fp8_kernel(const ForwardParams& params, const detail::ForwardArgs& args,
                       cudaStream_t stream) {
  const detail::Problem& pr = args.problem;
  Sm90ForwardParams p{};
  p.args = params;
  make_map(&p.q_map, args.q, DType::e4m3, Traits::kBlockM, "q");
  if (pr.Nk > 0) {
    make_map(&p.k_map, args.k, DType::e4m3, Traits::kBlockN, "k");
    make_map(&p.v_map, args.v, DType::e4m3, Traits::kBlockN, "v");  // V's own map checks V too
    if constexpr (Traits::kVtPass) {
      auto* vt = static_cast<unsigned char*>(args.workspace.data);
      if (vt == nullptr || reinterpret_cast<std::uintptr_t>(vt) % 16 != 0) {
        throw Error(ErrorCode::invalid_argument,
                    "flashpp::forward: workspace: the CUDA FP8 forward needs 16-byte aligned "
                    "scratch (flashpp::forward_workspace_size bytes)");
      }
      const std::int64_t keys16 = vt_keys16(pr.Nk);
      // Test builds: every byte 0xFF (an e4m3 NaN) first, so a Vt byte the pass misses shows.
      poison_device_buffer(vt, static_cast<std::size_t>(vt_bytes(pr.B, pr.Hkv, Traits::kHeadDim, pr.Nk)),
                           stream);
      transpose_v(args, Traits::kHeadDim, vt, stream);
      // Vt as a [B, N = Dp rows, H = Hkv, D = Nk16 columns] view: boxes of kHeadDim rows x 128 keys.
      const bool mapped =
          make_row_tile_map(&p.v_map, vt, DType::e4m3, pr.B, Traits::kHeadDim, pr.Hkv, keys16,
                            pr.Hkv * Traits::kHeadDim * keys16, keys16, Traits::kHeadDim * keys16,
                            Traits::kHeadDim) &&
          // 192- and 64-key tiles: the keys past the first 128 in boxes of 64, 64-byte swizzled.
          (Traits::kVtTailKeys == 0 ||
           make_row_tile_map(&p.v_tail_map, vt, DType::e4m3, pr.B, Traits::kHeadDim, pr.Hkv, keys16,
                             pr.Hkv * Traits::kHeadDim * keys16, keys16, Traits::kHeadDim * keys16,
                             Traits::kHeadDim, 64));
      if (!mapped) {
        throw Error(ErrorCode::backend_failure,
                    "flashpp CUDA backend: the driver refused the tensor map of the FP8 forward's Vt");
      }
    }
  }
  // The grid: as the bf16 forward's (../forward/launch.cuh, walk_grid: persistent, the stride
  // walk without a mask and the snake walk under one; the same switches) where the pass made Vt,
  // one block per item with the in-kernel transposition. With the pass the kernel is launched
  // dependent on it (FLASHPP_FP8_DEPENDENT_LAUNCH=0 turns that off): its blocks start, load Q
  // and K and compute the first scores while the pass ends.
  const std::int64_t batch_heads = pr.B * pr.Hq;
  WalkChoice choice{ForwardGrid::walk_one_per_item, WalkKind::stride};
  if (Traits::kVtPass) choice = ring_safe_walk(params, Traits::kBlockM, Traits::kBlockN, batch_heads);
  const bool dependent = Traits::kVtPass && pr.Nk > 0 && env_switch("FLASHPP_FP8_DEPENDENT_LAUNCH") != 0;
  const char* what = "sm90 FP8 forward kernel launch";
  if constexpr (Traits::kVtPass && kMasked) {
    if (choice.walk == WalkKind::snake) {
      launch_query_tiles(flash_fwd_fp8_sm90_kernel<Traits, WalkKind::snake>, Traits::kThreads,
                         Traits::kSmemBytes, Traits::kBlockM, p, batch_heads, stream, what,
                         choice.grid, dependent);
      return;
    }
  }
  // (Any walk is correct on any grid: the stride walk is the one every kernel has.)
  launch_query_tiles(flash_fwd_fp8_sm90_kernel<Traits, WalkKind::stride>, Traits::kThreads,
                     Traits::kSmemBytes, Traits::kBlockM, p, batch_heads, stream, what,
                     choice.grid, dependent);
}

template <typename Out, int kHeadDim>
void launch_forward_fp8(const ForwardParams& params, const detail::ForwardArgs& args,
                        cudaStream_t stream);

template <typename Out, int kHeadDim>
void launch_forward_fp8(const ForwardParams& params, const detail::ForwardArgs& args,
                        cudaStream_t stream) {
  if (!fp8_v_transpose_pass()) {
    launch_fp8_kernel<Fp8ForwardTraits<Out, kHeadDim, kFp8Stages<kHeadDim, false>, false>, true>(
        params, args, stream);
    return;
  }
  using Masked = Fp8ForwardTraits<Out, kHeadDim, kFp8Stages<kHeadDim, true>, true,
                                  kFp8BlockN<kHeadDim, true, true>, kFp8Consumers<kHeadDim, true>>;
  using Unmasked = Fp8ForwardTraits<Out, kHeadDim, kFp8Stages<kHeadDim, true>, true,
                                    kFp8BlockN<kHeadDim, true, false>, kFp8Consumers<kHeadDim, true>>;
  if constexpr (!std::is_same_v<Masked, Unmasked>) {
    if (!params.mask.active()) {
      launch_fp8_kernel<Unmasked, false>(params, args, stream);
      return;
    }
  }
  launch_fp8_kernel<Masked, true>(params, args, stream);
}

}  // namespace flashpp::cuda::sm90::fp8
