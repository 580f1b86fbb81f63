// The element-wise heart of the backward, shared by the main kernel and the deterministic dQ
// kernel: from the raw score q.k and dP = dO.v of one (query i, key j) pair, recompute
//   P  = exp(S - lse)                   S = scale * q.k, or softcap * tanh(scale * q.k / softcap)
//   P~ = P * keep / (1 - p)             (dropout; keep regenerated from Philox, philox.hpp)
//   dS = P * (dP * keep / (1 - p) - D_i) * (1 - (S / softcap)^2)   (the last factor with softcap)
// exactly as src/cpu/reference.cpp defines them.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../../common/math.cuh"
#include "../../common/backward_params.hpp"
#include "../../common/score_gradient.cuh"

namespace flashpp::cuda::sm80 {

// `lse_log2` is lse * log2(e), +inf where the row sees no key or does not exist, so P = 0 there.
// `visible` is false for elements the mask hides; `kept` is the dropout decision (true without
// dropout, where keep_scale is 1), from dropout_keep_bits below.
// kSoftcap and kDropout are template flags rather than tests of p: the caller branches once per
// tile, so the common path carries no tanh and no dropout factor, not even predicated off, in
// its unrolled element loop.
template <bool kSoftcap, bool kDropout>
__device__ __forceinline__ ScoreGradient score_gradient(const BackwardParams& p, float qk,
                                                        float dp, float lse_log2, float delta,
                                                        bool visible, bool kept) {
  float prob;
  float softcap_chain = 1.0f;
  if constexpr (kSoftcap) {
    const float t = tanhf(qk * p.scale / p.softcap);
    prob = fast_exp2(p.softcap * kLog2e * t - lse_log2);
    softcap_chain = 1.0f - t * t;
  } else {
    prob = fast_exp2(fmaf(qk, p.scale_log2, -lse_log2));
  }
  // Assign rather than multiply: a hidden element's exp2 may be inf.
  if (!visible) prob = 0.0f;
  ScoreGradient sg = element_score_gradient<kDropout>(
      prob, dp, delta, kDropout && kept ? p.dropout.keep_scale : 0.0f);
  if constexpr (kSoftcap) sg.ds *= softcap_chain;  // dS with respect to scale * q.k
  return sg;
}

// Calls body(std::bool_constant<softcap>, std::bool_constant<masked>,
// std::bool_constant<dropout>) with the flags known at compile time: one branch per tile instead
// of one per element. kExtras = false (the kernels' plain instantiation) compiles only the
// paths without softcap and dropout, so their code costs that kernel no registers.
template <bool kExtras, typename Body>
__device__ __forceinline__ void with_score_flags(bool softcap, bool masked, bool dropout,
                                                 Body&& body) {
  if constexpr (!kExtras) {
    if (masked) {
      body(std::false_type{}, std::true_type{}, std::false_type{});
    } else {
      body(std::false_type{}, std::false_type{}, std::false_type{});
    }
    return;
  }
  auto with_dropout = [&](auto softcap_flag, auto mask_flag) {
    if (dropout) {
      body(softcap_flag, mask_flag, std::true_type{});
    } else {
      body(softcap_flag, mask_flag, std::false_type{});
    }
  };
  if (softcap) {
    if (masked) {
      with_dropout(std::true_type{}, std::true_type{});
    } else {
      with_dropout(std::true_type{}, std::false_type{});
    }
  } else if (masked) {
    with_dropout(std::false_type{}, std::true_type{});
  } else {
    with_dropout(std::false_type{}, std::false_type{});
  }
}

// The dropout decisions of a thread's accumulator elements as a bit mask (bit e for element e;
// at most 64 elements, in 32 or 64 bits). `element_ij(e, i, j)` names element e's (query, key).
// One Philox call decides a 4 x 4 comb of 16 elements (common/philox.hpp), of which a thread of
// these kernels holds 8 (two rows of one parity x four keys in the dQ kernel; two keys x four
// queries in the main kernel's transposed tiles). The loop is kept rolled on purpose (Philox is
// ~40 instructions; unrolled over every element it would bloat the kernel for a path that is off
// in most calls), and makes a call only when an element needs another call than the two kept
// from before (the older one is replaced): one call per 8 elements.
// kExtras = false: the plain instantiation, which has no dropout (every element kept).
template <int kElements, bool kExtras, typename ElementIndex>
__device__ __forceinline__ auto dropout_keep_bits(const BackwardParams& p, std::uint32_t bh,
                                                  ElementIndex element_ij) {
  static_assert(kElements <= 64, "one 64-bit mask");
  using Bits = std::conditional_t<(kElements > 32), std::uint64_t, std::uint32_t>;
  if (!kExtras || p.dropout.threshold == 0) return ~Bits{0};
  Bits bits = 0;
  detail::PhiloxResult calls[2] = {};  // the two latest calls and their counters
  std::uint64_t ids[2] = {~0ull, ~0ull};
  bool replace_second = false;
#pragma unroll 1
  for (int e = 0; e < kElements; ++e) {
    std::int64_t i64, j64;
    element_ij(e, i64, j64);
    const auto i = static_cast<std::uint32_t>(i64), j = static_cast<std::uint32_t>(j64);
    const std::uint64_t id =
        (static_cast<std::uint64_t>(detail::dropout_counter0(j)) << 32) | detail::dropout_counter1(i);
    bool in_second = id == ids[1];
    if (id != ids[0] && !in_second) {
      const detail::PhiloxResult bytes = detail::dropout_random_bytes(p.dropout, bh, i, j);
      // (Constant indices only, so that both calls stay in registers.)
      if (replace_second) {
        calls[1] = bytes;
        ids[1] = id;
      } else {
        calls[0] = bytes;
        ids[0] = id;
      }
      in_second = replace_second;
      replace_second = !replace_second;
    }
    const bool keep = detail::dropout_keep_byte(in_second ? calls[1] : calls[0],
                                                detail::dropout_byte_index(i, j), p.dropout.threshold);
    bits |= static_cast<Bits>(keep) << e;
  }
  return bits;
}

}  // namespace flashpp::cuda::sm80
