// The CPU backend: the float64 reference (the oracle) and the tiled, multithreaded
// FlashAttention-2 forward and backward.
#pragma once

#include <cstddef>

#include "../api/inference_problem.hpp"

namespace flashpp::cpu {

// Reference: materialises S and P for one (b, h) at a time, accumulates in float64. Accepts
// every dtype including f64 (for inputs, outputs and lse).
void reference_forward(const detail::ForwardArgs& args);
void reference_backward(const detail::BackwardArgs& args);

// Tiled FlashAttention-2 (src/cpu/flash_*.cpp). Extra memory is O(tile) per thread.
void flash_forward(const detail::ForwardArgs& args);
void flash_backward(const detail::BackwardArgs& args);

// Bytes of scratch the tiled backward needs (D = rowsum(dO * O)); it allocates it itself when
// the caller passes none.
std::size_t backward_workspace_size(const detail::Problem& problem);

// KV-cache decoding (src/cpu/kvcache.cpp): appends k_new/v_new, then runs the reference (when
// `reference`) or the tiled forward per sequence over its cached keys. Needs host_seqlens.
void forward_kvcache(const detail::KvCacheArgs& args, bool reference);

}  // namespace flashpp::cpu
