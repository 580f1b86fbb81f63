// Merging partial softmax results by their log-sum-exp, shared by the CUDA split-KV combine
// kernels, ring attention's merge kernel (src/distributed/ring_kernels.cu) and the CPU tests that
// check it (the CPU backend decodes without splitting the keys).
//
// A partial result over a key subset s is (O_s, L_s): O_s is the softmax-weighted average of
// the values of s and L_s the log-sum-exp of its scores (-inf when s has no visible key, with
// O_s = 0). Over the union, with M = max_s L_s:
//     w_s = exp(L_s - M),   L = M + log(sum_s w_s),   O = sum_s (w_s / sum_s w_s) O_s
// When every L_s is -inf, the row saw no key: O = 0 and L = -inf, never NaN.
#pragma once

#include <cmath>

#include "host_device.hpp"

namespace flashpp::detail {

// Accumulates partials one at a time (a running max keeps exp() from overflowing).
struct LseMerger {
  float max_lse = -INFINITY;
  float sum = 0.0f;  // sum_s exp(L_s - max_lse)

  // Adds a partial with log-sum-exp `lse`; returns the factor by which the accumulated O so far
  // must be multiplied (`rescale`) and the weight of this partial's O (`weight`), both relative
  // to the running max (normalise with `normaliser()` at the end).
  FLASHPP_HD void add(float lse, float& rescale, float& weight) {
    if (!(lse > -INFINITY)) {  // an empty partial (or NaN-free -inf): contributes nothing
      rescale = 1.0f;
      weight = 0.0f;
      return;
    }
    if (lse > max_lse) {
      rescale = max_lse == -INFINITY ? 0.0f : expf(max_lse - lse);
      sum = sum * rescale + 1.0f;
      max_lse = lse;
      weight = 1.0f;
    } else {
      rescale = 1.0f;
      weight = expf(lse - max_lse);
      sum += weight;
    }
  }
  // 1 / sum of weights, or 0 when nothing was seen (so that O = 0).
  FLASHPP_HD float normaliser() const { return sum > 0.0f ? 1.0f / sum : 0.0f; }
  FLASHPP_HD float lse() const { return sum > 0.0f ? max_lse + logf(sum) : -INFINITY; }
};

// Two partials of the same row (ring attention merges each step's block into its running
// result): the merged L and the normalised weights, O = w_acc O_acc + w_blk O_blk. Both -inf:
// L = -inf and weights 0 (O stays 0, never NaN).
struct MergeWeights {
  float lse, w_acc, w_blk;
};

FLASHPP_HD MergeWeights lse_merge(float lse_acc, float lse_blk) {
  LseMerger merger;
  float rescale_acc, weight_acc, rescale_blk, weight_blk;
  merger.add(lse_acc, rescale_acc, weight_acc);
  merger.add(lse_blk, rescale_blk, weight_blk);
  const float normaliser = merger.normaliser();
  return {merger.lse(), weight_acc * rescale_blk * normaliser, weight_blk * normaliser};
}

}  // namespace flashpp::detail
