// The forward's element-wise steps, shared by every kernel family (sm80's mma.sync, sm90's wgmma):
// apply_softcap, apply_mask, online_softmax_update, dropout (dropout_signs, apply_dropout_signs)
// and write_output.
//
// They work on a row view that both families' accumulators share: a warp owns kRowsPerWarp query
// rows as kMTiles 16-row tiles, and within one 16-row tile, element c of 8-column tile nt in lane
// (g = lane/4, t = lane%4) sits at
//   row  mt*16 + g + 8*(c/2),   column  nt*8 + 2t + (c%2).
// That is mma.sync's m16n8 accumulator layout, and also wgmma's m64nN layout restricted to one
// warp (warp w of a warpgroup owns rows 16w..16w+15 with the same per-lane pattern). A Traits
// type provides Element, kMTiles, kNTiles (score columns / 8), kDTiles (head dim / 8), kBlockN,
// kRowsPerWarp, kSkipUnchangedRescale and QTile (the swizzled tile write_output stages O through).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "dropout_signs.cuh"
#include "forward_params.hpp"
#include "key_bits.hpp"
#include "math.cuh"
#include "warp_reduce.cuh"

namespace flashpp::cuda {

// Accumulator element c of tile (mt, nt) in lane (g = lane/4, t = lane%4) is
//   row  warp_row0 + mt*16 + g + 8*(c/2),   key  nt*8 + 2t + (c%2).

// Logit soft-capping, kept in "pre-scale" units so the softmax path stays the same:
// s <- (c / scale) * tanh(s * scale / c), i.e. scale * s' = c * tanh(scale * s / c).
template <typename Traits>
__device__ __forceinline__ void apply_softcap(float (&s)[Traits::kMTiles][Traits::kNTiles][4],
                                              const ForwardParams& p) {
  const float inner = p.scale / p.softcap;
  const float outer = p.softcap / p.scale;
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[mt][nt][c] = outer * tanhf(s[mt][nt][c] * inner);
}

// The keys of a tile (key0 ..) that row i sees, relative to key0: [x, y], clamped into
// [0, block_n] and [-1, block_n - 1] (same answers for every key of the tile, and 32 bits); the
// row sees none of them when x > y.
template <typename Traits>
__device__ __forceinline__ int2 tile_key_bounds(const ForwardParams& p, std::int64_t i,
                                                std::int64_t key0) {
  constexpr std::int64_t n = Traits::kBlockN;
  const std::int64_t lo64 = p.mask.first_key(i) - key0;
  const std::int64_t hi64 = p.mask.last_key(i, p.k_len) - key0;
  return make_int2(static_cast<int>(lo64 < 0 ? 0 : (lo64 > n ? n : lo64)),
                   static_cast<int>(hi64 < -1 ? -1 : (hi64 >= n ? n - 1 : hi64)));
}

// Hidden elements (outside [0, Nk) or outside the causal/window band) become -inf. Called only
// on tiles that are not fully visible. Each row sees one contiguous key range
// [first_key(i), last_key(i)] (the mask's rule, clipped to [0, Nk)); it is turned once per row
// into 32-bit bounds relative to the tile, so the per-element test is two integer compares.
template <typename Traits>
__device__ __forceinline__ void apply_mask(float (&s)[Traits::kMTiles][Traits::kNTiles][4],
                                           const ForwardParams& p, std::int64_t row0,
                                           std::int64_t key0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int2 bounds = tile_key_bounds<Traits>(p, row0 + mt * 16 + g + 8 * half, key0);
      const int lo = bounds.x, hi = bounds.y;
#pragma unroll
      for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = nt * 8 + 2 * t + e;
          if (j < lo || j > hi) s[mt][nt][2 * half + e] = -INFINITY;
        }
    }
}

// apply_mask's rule as one word of visible keys per row half (kNTiles <= 16): bit 2 nt + e stands
// for the thread's key nt*8 + 2t + e, so a row's visible keys, a run [first, last] of the
// tile's, are a run of bits (common/key_bits.hpp). Each row's run comes from
// the warp's first row by small 32-bit offsets (one 64-bit distance per side, saturated), and an
// element takes one bit test instead of apply_mask's column index and two compares (its masked
// tiles' element work was ~3.5 instructions an element, session 31). `sees`: whether the row
// sees any key of the tile at all (tile_key_bounds' x <= y), for the speculative softmax.
template <typename Traits>
struct TileVisibility {
  std::uint32_t bits[Traits::kMTiles][2];
  bool sees[Traits::kMTiles][2];
};

template <typename Traits>
__device__ __forceinline__ TileVisibility<Traits> tile_visibility(const ForwardParams& p,
                                                                  std::int64_t row0,
                                                                  std::int64_t key0, int lane) {
  static_assert(Traits::kNTiles <= 16, "a thread's keys of a tile in one 32-bit word");
  constexpr int n = Traits::kBlockN;
  const int g = lane >> 2, t = lane & 3;
  // Distances relative to key0 for the row row0 + g, saturated to +-2^30 (the runs below compare
  // them against [-1, n] only, after offsets below 2^8).
  auto saturate = [](std::int64_t x) {
    constexpr std::int64_t kLimit = std::int64_t(1) << 30;
    return static_cast<int>(x < -kLimit ? -kLimit : (x > kLimit ? kLimit : x));
  };
  const std::int64_t d = row0 + g + p.mask.shift - key0;  // key - key0 where j - (i + shift) = 0
  const int first0 = saturate(d - p.mask.left);           // first visible key - key0
  const int last0 = saturate(d + p.mask.right);           // last key of the band - key0
  const int last_key = saturate(p.k_len - 1 - key0);      // the last key below Nk - key0
  TileVisibility<Traits> v;
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int offset = mt * 16 + 8 * half;
      const int first = first0 + offset;
      const int last = min(last0 + offset, last_key);
      v.sees[mt][half] = run_meets_tile(first, last, n);
      v.bits[mt][half] = thread_key_bits(first, last, t, n);  // common/key_bits.hpp
    }
  return v;
}

// apply_mask with the words of tile_visibility.
template <typename Traits>
__device__ __forceinline__ void apply_mask_bits(float (&s)[Traits::kMTiles][Traits::kNTiles][4],
                                                const TileVisibility<Traits>& v) {
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if ((v.bits[mt][half] & (1u << (2 * nt + e))) == 0u) s[mt][nt][2 * half + e] = -INFINITY;
}

// The largest score of row half `half` of m-tile mt (-inf where every one is), over the quad.
template <typename Traits>
__device__ __forceinline__ float tile_row_max(const float (&s)[Traits::kMTiles][Traits::kNTiles][4],
                                              int mt, int half) {
  float m = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < Traits::kNTiles; ++nt)
    m = fmaxf(m, fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
  return quad_max(m);
}

// The O rescale an online-softmax step asks for: one factor per row, and whether any row of the
// warp raised its max (when none did, every factor is exactly 1).
template <typename Traits>
struct SoftmaxCorrection {
  float factor[Traits::kMTiles][2];
  bool max_moved = false;
};

// P = exp2(s * scale_log2 + offset) in place over row half `half` of m-tile mt; returns this
// lane's sum of them, and (kMax) their largest in `largest` (0 otherwise).
template <typename Traits, bool kMax>
__device__ __forceinline__ float exponentiate_row(float (&s)[Traits::kMTiles][Traits::kNTiles][4],
                                                  int mt, int half, float scale_log2, float offset,
                                                  float& largest) {
  float sum = 0.0f;
  largest = 0.0f;
#pragma unroll
  for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
    for (int c = 2 * half; c < 2 * half + 2; ++c) {
      s[mt][nt][c] = fast_exp2(fmaf(s[mt][nt][c], scale_log2, offset));
      sum += s[mt][nt][c];
      if (kMax) largest = fmaxf(largest, s[mt][nt][c]);
    }
  return sum;
}

// Online softmax: raises the running row max to include this tile, rescales the running sum by
// exp2((m_old - m_new) * scale*log2e), and replaces the scores by
// P = exp2(s * scale*log2e - m_new * scale*log2e) (one FFMA and one EX2 per element). The same
// factor must rescale O (rescale_output): at once where O is up to date (sm80), or once the
// product still running into O has landed (sm90).
// row_max is in raw score units; row_sum is this lane's partial sum (reduced over the quad once,
// at the end). A row whose max is still -inf uses 0 as its reference, so P = 0, not NaN.
// Traits::kRescaleSlackLog2 > 0 makes row_max a reference rather than the exact running max: it
// moves only when the tile's max exceeds it by more than the slack (in log2 units of P), so that
// P <= 2^slack; lse and O's normalisation use the reference, and most tiles need no rescale.
template <typename Traits>
__device__ __forceinline__ SoftmaxCorrection<Traits> online_softmax_update(
    float (&s)[Traits::kMTiles][Traits::kNTiles][4], float (&row_max)[Traits::kMTiles][2],
    float (&row_sum)[Traits::kMTiles][2], float scale_log2) {
  SoftmaxCorrection<Traits> correction;
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float tile_max = tile_row_max<Traits>(s, mt, half);
      float new_max = fmaxf(row_max[mt][half], tile_max);
      // With a slack, a row keeps its reference while the tile's largest P stays <= 2^slack.
      if (Traits::kRescaleSlackLog2 > 0.0f &&
          (new_max - row_max[mt][half]) * scale_log2 <= Traits::kRescaleSlackLog2)
        new_max = row_max[mt][half];
      const float reference = new_max == -INFINITY ? 0.0f : new_max;
      correction.factor[mt][half] = fast_exp2((row_max[mt][half] - reference) * scale_log2);
      correction.max_moved |= new_max != row_max[mt][half];
      row_max[mt][half] = new_max;
      row_sum[mt][half] *= correction.factor[mt][half];

      float unused_max;
      row_sum[mt][half] += exponentiate_row<Traits, false>(s, mt, half, scale_log2,
                                                            -reference * scale_log2, unused_max);
    }
  return correction;
}

// The online softmax with its exponentials started before the tile's max is known (the sm90
// forward, from its second key tile on; Traits::kRescaleSlackLog2 > 0). The classic step
// (online_softmax_update) cannot start an exp2 until the row max of the tile is reduced, a chain
// of dependent FMNMX and two shuffles on the critical path of every tile. Here each exp2 takes the
// row's current reference (row_max; 0 while it is -inf), and nothing waits for the tile's max.
// Then, per warp (a uniform branch), from the lanes' partial sums of P (no P exceeds them):
//   kept:       every lane's sums are at most 2^slack (a row without a reference: it sees no key
//               of the tile), or, after a quad max, every row's largest P is at most 1 (at most
//               2^slack with the max vote): P is final, no rescale. Almost every tile after the
//               first, with nothing but the sums and a vote.
//   rescaled:   a row rose further, or saw its first visible key, with 2^-100 < largest P <
//               2^100: its P, partial sum and O are scaled by 1 / (largest P), and its reference
//               moves by log2 of it. Exact up to the rounding of one more multiply. With the
//               sums' vote, once a vote has failed, every row of the warp whose largest P
//               exceeds 1 is rescaled so, not only those past 2^slack. A reference taken
//               from few keys (the top rows of a causal diagonal tile, which the classic first
//               step saw one key of) otherwise stays below the row's scores for the rest of
//               the item: its sums fail the vote on every later tile, though no P passes 2^slack.
//   recomputed: a row whose P may have overflowed or underflowed entirely (scores that jump by
//               2^100 or more: never ordinary data): `recompute(s)` writes the tile's scores
//               again (with the same softcap and mask), such rows take the tile's max as their
//               reference, and the exponentials run once more (every row is then kept).
// kSumVote = false: the vote asks each lane's largest P instead of its sums (one FMNMX an element
// more; the sm90 dropout kernel at D=128 ran 14% slower with the sums, session 28 run 15).
// sees_tile: whether each row sees a key of the tile (only read for rows without a reference).
// The returned correction's max_moved is the same in every lane of the warp.
inline constexpr float kSpeculationRange = 100.0f;  // |log2 P| of the rescaled path

constexpr float pow2(int e) { return e <= 0 ? 1.0f : 2.0f * pow2(e - 1); }

// What one speculative pass over a tile found: per row, this lane's partial sum of P; whether
// this lane's sums keep their rows' references; then (judge_rows) per row.
template <typename Traits>
struct SpeculativePass {
  float sum[Traits::kMTiles][2], largest[Traits::kMTiles][2];  // largest: kSumVote = false only
  bool kept = true;  // this lane's elements
  // judge_rows: per row (quad-reduced).
  float jump[Traits::kMTiles][2];
  bool row_kept[Traits::kMTiles][2];
  bool rescalable = true;
};

// The exponentials from each row's current reference (0 while it has none), and their sums
// (kSumVote = false: and their max, which the vote then asks instead of the sums).
template <typename Traits, bool kSumVote>
__device__ __forceinline__ SpeculativePass<Traits> speculative_pass(
    float (&s)[Traits::kMTiles][Traits::kNTiles][4], const float (&row_max)[Traits::kMTiles][2],
    const bool (&sees_tile)[Traits::kMTiles][2], float scale_log2) {
  SpeculativePass<Traits> pass;
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float reference = row_max[mt][half] == -INFINITY ? 0.0f : row_max[mt][half];
      pass.sum[mt][half] = exponentiate_row<Traits, !kSumVote>(
          s, mt, half, scale_log2, -reference * scale_log2, pass.largest[mt][half]);
    }
  // Whether this lane's elements keep their rows' references, from its partial sums (no P is
  // larger than the sum of them all): no max and no shuffle before the warp's vote.
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      pass.kept &= row_max[mt][half] != -INFINITY
                       ? (kSumVote ? pass.sum[mt][half] : pass.largest[mt][half]) <=
                             pow2(static_cast<int>(Traits::kRescaleSlackLog2))
                       : !sees_tile[mt][half];
    }
  return pass;
}

// After a vote that not every row kept its reference: each row's verdict (quad-reduced largest
// P), log2 of its largest P, and whether a rescale can repair every row of this lane.
template <typename Traits, bool kSumVote>
__device__ __forceinline__ void judge_rows(SpeculativePass<Traits>& pass,
                                           const float (&s)[Traits::kMTiles][Traits::kNTiles][4],
                                           const float (&row_max)[Traits::kMTiles][2],
                                           const bool (&sees_tile)[Traits::kMTiles][2]) {
  pass.rescalable = true;
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float largest = pass.largest[mt][half];
      if (kSumVote) {
        largest = 0.0f;
#pragma unroll
        for (int nt = 0; nt < Traits::kNTiles; ++nt)
          largest = fmaxf(largest, fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
      }
      const float m = quad_max(largest);
      // The sums' vote failed: every row above its reference moves (online_softmax_speculative).
      constexpr float kKeepLimit = kSumVote ? 1.0f : pow2(static_cast<int>(Traits::kRescaleSlackLog2));
      const bool row_kept = row_max[mt][half] != -INFINITY ? m <= kKeepLimit : !sees_tile[mt][half];
      const float jump = fast_log2(m);  // +-inf for P = inf or 0
      pass.jump[mt][half] = jump;
      pass.row_kept[mt][half] = row_kept;
      pass.rescalable &= row_kept || (jump < kSpeculationRange && jump > -kSpeculationRange);
    }
}

// The rescaled and recomputed cases of online_softmax_speculative (below), off its hot path.
template <typename Traits, bool kSumVote, typename Recompute>
__device__ __forceinline__ void speculation_missed(float (&s)[Traits::kMTiles][Traits::kNTiles][4],
                                                   float (&row_max)[Traits::kMTiles][2],
                                                   float (&row_sum)[Traits::kMTiles][2],
                                                   const float (&previous_sum)[Traits::kMTiles][2],
                                                   const bool (&sees_tile)[Traits::kMTiles][2],
                                                   float scale_log2, SpeculativePass<Traits>& pass,
                                                   SoftmaxCorrection<Traits>& correction,
                                                   Recompute&& recompute) {
  judge_rows<Traits, kSumVote>(pass, s, row_max, sees_tile);
  if constexpr (kSumVote) {
    bool rows_kept = true;
#pragma unroll
    for (int mt = 0; mt < Traits::kMTiles; ++mt) {
      rows_kept &= pass.row_kept[mt][0] && pass.row_kept[mt][1];
    }
    if (__all_sync(0xffffffffu, rows_kept)) return;  // only the sums were large: kept after all
  }
  correction.max_moved = true;
  if (__all_sync(0xffffffffu, pass.rescalable)) {
#pragma unroll
    for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // P, the sums and O (zero while the row had no reference) all scale by 2^-jump, and the
        // reference moves up by jump (in score units).
        const bool moved = !pass.row_kept[mt][half];
        const float jump = pass.jump[mt][half];
        const float factor = moved ? fast_exp2(-jump) : 1.0f;
        if (moved) {
          const float reference = row_max[mt][half] == -INFINITY ? 0.0f : row_max[mt][half];
          row_max[mt][half] = jump == 0.0f ? reference : reference + jump / scale_log2;
        }
        row_sum[mt][half] *= factor;  // the tile's sum already in (online_softmax_speculative)
        correction.factor[mt][half] = factor;
#pragma unroll
        for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
          for (int c = 2 * half; c < 2 * half + 2; ++c) s[mt][nt][c] *= factor;
      }
    return;
  }
  // Recomputed: the rows that moved take the tile's max as their reference (O and the sums
  // follow; the factor is 0 for a jump past float's range), and the exponentials run again.
  recompute(s);
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float tile_max = tile_row_max<Traits>(s, mt, half);
      float factor = 1.0f;
      if (!pass.row_kept[mt][half]) {
        const float reference = fmaxf(row_max[mt][half], tile_max);
        factor = row_max[mt][half] == -INFINITY
                     ? 0.0f
                     : fast_exp2((row_max[mt][half] - reference) * scale_log2);
        row_max[mt][half] = reference;
      }
      row_sum[mt][half] = previous_sum[mt][half] * factor;
      correction.factor[mt][half] = factor;
    }
  const SpeculativePass<Traits> again =
      speculative_pass<Traits, kSumVote>(s, row_max, sees_tile, scale_log2);
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) row_sum[mt][half] += again.sum[mt][half];
}

template <typename Traits, bool kSumVote = true, typename Recompute>
__device__ __forceinline__ SoftmaxCorrection<Traits> online_softmax_speculative(
    float (&s)[Traits::kMTiles][Traits::kNTiles][4], float (&row_max)[Traits::kMTiles][2],
    float (&row_sum)[Traits::kMTiles][2], const bool (&sees_tile)[Traits::kMTiles][2],
    float scale_log2, Recompute&& recompute) {
  static_assert(Traits::kRescaleSlackLog2 > 0.0f, "the kept path needs a slack");
  SoftmaxCorrection<Traits> correction;
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt) {
    correction.factor[mt][0] = correction.factor[mt][1] = 1.0f;
  }
  SpeculativePass<Traits> pass = speculative_pass<Traits, kSumVote>(s, row_max, sees_tile, scale_log2);
  // The sums are added before the vote (the empty asm keeps the compiler from sinking the adds
  // into the branches, where they would wait for the vote).
  float previous_sum[Traits::kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      previous_sum[mt][half] = row_sum[mt][half];
      row_sum[mt][half] += pass.sum[mt][half];
      asm volatile("" : "+f"(row_sum[mt][half]));
    }
  if (!__builtin_expect(__all_sync(0xffffffffu, pass.kept), 1)) {
    speculation_missed<Traits, kSumVote>(s, row_max, row_sum, previous_sum, sees_tile, scale_log2,
                                         pass, correction, recompute);
  }
  return correction;
}

// The raw scores of one tile again, from global memory, in the row view: Q rows row0 + ... of
// (b, h) against K rows key0 + ... of (b, h_kv), float32 products and sums; 0 outside Nq x Nk
// (the caller masks). For online_softmax_speculative's recomputed path only: slow (every lane
// reads its rows of Q and K from L2, one element at a time, through a local array, so that the
// loop's code stays small beside the hot path it sits in).
template <typename Traits>
__device__ __forceinline__ void recompute_scores(float (&s)[Traits::kMTiles][Traits::kNTiles][4],
                                                 const ForwardParams& p, std::int64_t b,
                                                 std::int64_t h, std::int64_t h_kv,
                                                 std::int64_t row0, std::int64_t key0, int lane) {
  using Element = typename Traits::Element;
  constexpr int kElements = Traits::kMTiles * Traits::kNTiles * 4;
  const int g = lane >> 2, t = lane & 3;
  const auto* q = static_cast<const Element*>(p.q) + b * p.q_strides.batch + h * p.q_strides.head;
  const auto* k =
      static_cast<const Element*>(p.k) + b * p.k_strides.batch + h_kv * p.k_strides.head;
  float scores[kElements];
#pragma unroll 1
  for (int e = 0; e < kElements; ++e) {
    const int mt = e / (Traits::kNTiles * 4), nt = (e / 4) % Traits::kNTiles, c = e % 4;
    const std::int64_t i = row0 + mt * 16 + g + 8 * (c >> 1);
    const std::int64_t j = key0 + nt * 8 + 2 * t + (c & 1);
    float dot = 0.0f;
    if (i < p.q_len && j < p.k_len) {
      const Element* qi = q + i * p.q_strides.row;
      const Element* kj = k + j * p.k_strides.row;
#pragma unroll 1
      for (int d = 0; d < p.head_dim; d += 2) {
        const float2 a = unpack_pair<Element>(*reinterpret_cast<const std::uint32_t*>(qi + d));
        const float2 e2 = unpack_pair<Element>(*reinterpret_cast<const std::uint32_t*>(kj + d));
        dot = fmaf(a.x, e2.x, dot);
        dot = fmaf(a.y, e2.y, dot);
      }
    }
    scores[e] = dot;
  }
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[mt][nt][c] = scores[(mt * Traits::kNTiles + nt) * 4 + c];
}

// O *= the online softmax's correction, per row. Rescaling O costs one FMUL per accumulator (as
// many as the scores of a tile at D=128). Once the running maxima settle, most tiles raise none of
// a warp's rows, and the correction is exactly 1: the warp then skips the whole rescale (a
// warp-uniform branch). kUniform: max_moved is already the same in every lane of the warp
// (online_softmax_speculative), so no vote.
template <typename Traits, bool kUniform = false>
__device__ __forceinline__ void rescale_output(float (&o)[Traits::kMTiles][Traits::kDTiles][4],
                                               const SoftmaxCorrection<Traits>& correction) {
  const bool needed = kUniform ? correction.max_moved
                               : !Traits::kSkipUnchangedRescale ||
                                     __any_sync(0xffffffffu, correction.max_moved);
  if (needed) {
#pragma unroll
    for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
      for (int dt = 0; dt < Traits::kDTiles; ++dt)
#pragma unroll
        for (int c = 0; c < 4; ++c) o[mt][dt][c] *= correction.factor[mt][c >> 1];
  }
}

// Dropout on P (after the row sums took P undropped: lse ignores dropout; the keep_scale factor
// is applied once to O at the end). The keep decisions come from the shared Philox stream
// (common/philox.hpp), whose calls are laid out for this accumulator layout: lanes g and g ^ 1
// (lane ^ 4) hold one call's 16 elements of a 16 x 16 block, split by row parity. Decisions are
// made while the scores are at hand (dropout_signs, overlapping the running products) and applied
// to P once it is packed to 16 bits (apply_dropout_signs: one permute and one AND per pair).
// Key tiles of a multiple of 32 keys only; other sizes (tuning tables) use
// apply_dropout_per_element.
template <typename Traits>
inline constexpr bool kDropoutBySigns = Traits::kNTiles % 4 == 0;

template <typename Traits>
struct DropoutSigns {
  KeepSigns block_pair[Traits::kMTiles][kDropoutBySigns<Traits> ? Traits::kNTiles / 4 : 1];
};

// The keep signs of this lane's elements of a score tile whose first row is row0 (a multiple of
// 16) and first key key0 (a multiple of 32).
template <typename Traits>
__device__ __forceinline__ void dropout_signs(DropoutSigns<Traits>& keep, const ForwardParams& p,
                                              std::uint32_t bh, std::int64_t row0,
                                              std::int64_t key0, int lane) {
  static_assert(kDropoutBySigns<Traits>, "key tiles of a multiple of 32 keys");
  const int g = lane >> 2, t = lane & 3;
  const bool odd = (g & 1) != 0;
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt) {
    const auto i = static_cast<std::uint32_t>(row0 + mt * 16 + g);
#pragma unroll
    for (int q = 0; q < Traits::kNTiles / 4; ++q) {
      // The even lane calls for block A (keys 32q ..), the odd one for block B (32q + 16 ..).
      const auto j = static_cast<std::uint32_t>(key0 + 32 * q + (odd ? 16 : 0) + 2 * t);
      keep.block_pair[mt][q] =
          share_dropout_calls<1>(detail::dropout_random_bytes(p.dropout, bh, i, j), odd, p.dropout);
    }
  }
}

// Drops the elements of one packed A fragment of P (m-tile mt, keys 16 kk .. 16 kk + 15):
// registers 0..3 hold (row g, 8-key tile 2kk), (g + 8, 2kk), (g, 2kk + 1), (g + 8, 2kk + 1), keys
// 2t, 2t + 1 each: byte 2 * (row half) + (tile parity) of the words for keys 2t and 2t + 1.
template <typename Traits>
__device__ __forceinline__ void apply_dropout_signs(std::uint32_t (&a)[4],
                                                    const DropoutSigns<Traits>& keep, int mt,
                                                    int kk) {
  const KeepSigns& pair = keep.block_pair[mt][kk / 2];
  const std::uint32_t* w = (kk & 1) ? pair.b : pair.a;
  a[0] &= keep_mask_pair(w[0], w[1], 0);
  a[1] &= keep_mask_pair(w[0], w[1], 2);
  a[2] &= keep_mask_pair(w[0], w[1], 1);
  a[3] &= keep_mask_pair(w[0], w[1], 3);
}

// The fallback for key tiles that are not a multiple of 32 keys: a Philox call per element.
template <typename Traits>
__device__ __forceinline__ void apply_dropout_per_element(
    float (&s)[Traits::kMTiles][Traits::kNTiles][4], const ForwardParams& p, std::uint32_t bh,
    std::int64_t row0, std::int64_t key0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < Traits::kNTiles; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const auto i = static_cast<std::uint32_t>(row0 + mt * 16 + g + 8 * (c >> 1));
        const auto j = static_cast<std::uint32_t>(key0 + nt * 8 + 2 * t + (c & 1));
        if (!detail::dropout_keep(p.dropout, bh, i, j)) s[mt][nt][c] = 0.0f;
      }
}

// ---------------------------------------------------------------------------------------------
// Epilogue
// ---------------------------------------------------------------------------------------------

// O = O / sum (times 1/(1-p) under dropout), stored for rows < Nq and columns < D; lse per row.
//
// The normalised, converted O goes first into this warp's own rows of the Q tile in shared
// memory (only this warp ever reads those rows, and its last Q.K product is done), then leaves
// with 16-byte stores, consecutive lanes on consecutive chunks of a row: coalesced, instead of
// the accumulator layout's scattered 4-byte stores. Only a __syncwarp is needed.
template <typename Traits>
__device__ __forceinline__ void write_output(float (&o)[Traits::kMTiles][Traits::kDTiles][4],
                                             const float (&row_max)[Traits::kMTiles][2],
                                             float (&row_sum)[Traits::kMTiles][2],
                                             const ForwardParams& p, std::int64_t b,
                                             std::int64_t h, std::int64_t m0, int warp_row0,
                                             int lane, typename Traits::Element* q_smem) {
  using Element = typename Traits::Element;
  using QTile = typename Traits::QTile;
  const int g = lane >> 2, t = lane & 3;
  const float keep_scale = p.dropout.threshold != 0 ? p.dropout.keep_scale : 1.0f;
  // Every lane's last ldmatrix of these Q rows precedes the first write into them (ldmatrix is
  // warp-collective, but under independent thread scheduling only a warp barrier says so).
  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = warp_row0 + mt * 16 + g + 8 * half;  // within the tile
      const std::int64_t i = m0 + row;
      const float sum = quad_sum(row_sum[mt][half]);
      const bool empty_row = !(sum > 0.0f);  // no visible key: O = 0, lse = -inf
      const float factor = empty_row ? 0.0f : keep_scale / sum;
#pragma unroll
      for (int dt = 0; dt < Traits::kDTiles; ++dt) {
        *reinterpret_cast<std::uint32_t*>(q_smem + QTile::offset(row, dt * 8) + 2 * t) =
            pack_pair<Element>(o[mt][dt][2 * half] * factor, o[mt][dt][2 * half + 1] * factor);
      }
      if (p.lse != nullptr && t == 0 && i < p.q_len) {
        const float lse = empty_row ? -INFINITY : row_max[mt][half] * p.scale + logf(sum);
        p.lse[b * p.lse_stride_batch + h * p.lse_stride_head + i * p.lse_stride_row] = lse;
      }
    }
  __syncwarp();

  Element* o_base = static_cast<Element*>(p.o) + b * p.o_strides.batch + h * p.o_strides.head;
  const int chunks_valid = p.head_dim / 8;
  constexpr int kChunks = QTile::kChunks;
  constexpr int kWarpChunks = Traits::kRowsPerWarp * kChunks;
  static_assert(kWarpChunks % 32 == 0, "the warp's rows split evenly over its lanes");
#pragma unroll
  for (int k = 0; k < kWarpChunks / 32; ++k) {
    const int e = lane + 32 * k;
    const int row = warp_row0 + e / kChunks, chunk = e % kChunks;
    const std::int64_t i = m0 + row;
    if (i < p.q_len && chunk < chunks_valid) {
      *reinterpret_cast<uint4*>(o_base + i * p.o_strides.row + chunk * 8) =
          *reinterpret_cast<const uint4*>(q_smem + QTile::chunk_offset(row, chunk));
    }
  }
}

}  // namespace flashpp::cuda
