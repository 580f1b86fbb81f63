// Part of the softmax's exponentials on the FMA pipe (FlashAttention-4's idea), for A/B runs:
// MUFU issues 16 ex2 per SM and clock, so at D=64 a tile's 128 x 128 exponentials take as long as
// its two wgmma (perf-notes "exp2 on the FMA pipe in the sm90 forward"). exp2_poly
// (common/math.cuh) takes ~8 FMA-pipe issue slots instead, which wgmma, unlike mma.sync (session
// 7, where it lost), leaves free.
//
// FLASHPP_SM90_EXP2_POLY (compile definition): which of a thread's score columns go to exp2_poly,
// by 8-column tile nt of the wgmma accumulator (the other elements keep ex2.approx):
//   0  none (default; the kernel calls common/forward_steps.cuh's online_softmax_update)
//   1  every 4th tile (nt % 4 == 3): 1/4 of the elements
//   2  every 2nd tile (nt % 2 == 1): 1/2
//   3  every 8th tile (nt % 8 == 7): 1/8
//   4  every 16th tile (nt % 16 == 15): 1/16 (at 128-key tiles, one of a thread's 16 tiles)
// at head dims up to FLASHPP_SM90_EXP2_POLY_MAX_D (default 64; 256 for every head dim).
#pragma once

#include <cmath>

#include "../../common/forward_steps.cuh"
#include "../../common/math.cuh"
#include "../../common/warp_reduce.cuh"

#ifndef FLASHPP_SM90_EXP2_POLY
#define FLASHPP_SM90_EXP2_POLY 0
#endif
#ifndef FLASHPP_SM90_EXP2_POLY_MAX_D
#define FLASHPP_SM90_EXP2_POLY_MAX_D 64
#endif
static_assert(FLASHPP_SM90_EXP2_POLY >= 0 && FLASHPP_SM90_EXP2_POLY <= 4,
              "FLASHPP_SM90_EXP2_POLY: 0 (off), 1 (1/4), 2 (1/2), 3 (1/8) or 4 (1/16)");

namespace flashpp::cuda::sm90 {

// Every how many 8-column tiles one goes to exp2_poly at this head dim (0: none).
template <int kHeadDim>
inline constexpr int kExp2PolyPeriod =
    FLASHPP_SM90_EXP2_POLY == 0 || kHeadDim > FLASHPP_SM90_EXP2_POLY_MAX_D ? 0
    : FLASHPP_SM90_EXP2_POLY == 1                                          ? 4
    : FLASHPP_SM90_EXP2_POLY == 2                                          ? 2
    : FLASHPP_SM90_EXP2_POLY == 3                                          ? 8
                                                                           : 16;

// common/forward_steps.cuh's online_softmax_update, line for line, except that the elements of
// every kPeriod-th 8-column tile take exp2_poly instead of fast_exp2 (the rescale factor stays on
// MUFU: two per row and tile). kPeriod = 0 calls the shared function itself.
template <typename Traits, int kPeriod>
__device__ __forceinline__ SoftmaxCorrection<Traits> online_softmax_update_split(
    float (&s)[Traits::kMTiles][Traits::kNTiles][4], float (&row_max)[Traits::kMTiles][2],
    float (&row_sum)[Traits::kMTiles][2], float scale_log2) {
  if constexpr (kPeriod == 0) {
    return online_softmax_update<Traits>(s, row_max, row_sum, scale_log2);
  } else {
    SoftmaxCorrection<Traits> correction;
#pragma unroll
    for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < Traits::kNTiles; ++nt)
          tile_max = fmaxf(tile_max, fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
        tile_max = quad_max(tile_max);
        const float new_max = fmaxf(row_max[mt][half], tile_max);
        const float reference = new_max == -INFINITY ? 0.0f : new_max;
        correction.factor[mt][half] = fast_exp2((row_max[mt][half] - reference) * scale_log2);
        correction.max_moved |= new_max != row_max[mt][half];
        row_max[mt][half] = new_max;
        row_sum[mt][half] *= correction.factor[mt][half];

        const float offset = -reference * scale_log2;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
          for (int c = 2 * half; c < 2 * half + 2; ++c) {
            const float x = fmaf(s[mt][nt][c], scale_log2, offset);
            s[mt][nt][c] = nt % kPeriod == kPeriod - 1 ? exp2_poly(x) : fast_exp2(x);
            sum += s[mt][nt][c];
          }
        row_sum[mt][half] += sum;
      }
    return correction;
  }
}

}  // namespace flashpp::cuda::sm90
