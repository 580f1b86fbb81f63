// The backward's score gradient of one (query i, key j) element, shared by every kernel family
// (sm80's score_gradient.cuh, the sm90 backward): with P = exp(S - L) already recomputed (0 where
// the mask hides the element), dP = dO_i . v_j and D_i = rowsum(dO_i o O_i),
//   P~ = P z            what dV = P~^T dO uses (z: the dropout factor, below)
//   dS = P (dP z - D)   what dQ = dS K and dK = dS^T Q use
// z is keep_scale = 1 / (1 - p) where the element is kept and 0 where dropout drops it; without
// dropout (kDropout = false) z = 1 and P~ = P. The softcap chain factor, where a kernel has
// softcap, multiplies dS afterwards.
#pragma once

namespace flashpp::cuda {

struct ScoreGradient {
  float p_dropped;  // P~: what dV = P~^T dO uses
  float ds;         // dS (before any softcap chain factor); dQ, dK use it
};

// The two halves, for kernels that compute P~ before dP has landed (the sm90 backward issues
// dV = P~^T dO while dP^T is still being computed).
template <bool kDropout>
__device__ __forceinline__ float dropped_probability(float prob, float dropout_factor) {
  if constexpr (kDropout) return prob * dropout_factor;
  return prob;
}

template <bool kDropout>
__device__ __forceinline__ float score_gradient(float prob, float dp, float delta, float dropout_factor) {
  if constexpr (kDropout) dp *= dropout_factor;
  return prob * (dp - delta);
}

template <bool kDropout>
__device__ __forceinline__ ScoreGradient element_score_gradient(float prob, float dp, float delta,
                                                                float dropout_factor) {
  return ScoreGradient{dropped_probability<kDropout>(prob, dropout_factor),
                       score_gradient<kDropout>(prob, dp, delta, dropout_factor)};
}

}  // namespace flashpp::cuda
