// The CPU backend: the float64 reference (the oracle) and the tiled, multithreaded
// FlashAttention-2 forward and backward.
#pragma once

#include <cstddef>

#include "../api/problem.hpp"

namespace flashpp::cpu {

// Reference: materialises S and P for one (b, h) at a time, accumulates in float64. Accepts
// every dtype including f64 (for inputs, outputs and lse).
void reference_forward(const detail::ForwardArgs& args);
void reference_backward(const detail::BackwardArgs& args);

// Tiled FlashAttention-2 (src/cpu/flash_*.cpp). Extra memory is O(tile) per thread.
void flash_forward(const detail::ForwardArgs& args);
void flash_backward(const detail::BackwardArgs& args);

// e4m3 inputs: q, k, v read into float32 copies times their descales, then the float32 path of
// the reference (reference = true) or the tiled forward; o is written in its own dtype.
void dequantised_forward(const detail::ForwardArgs& args, bool reference);

// Bytes of scratch the tiled backward needs (D = rowsum(dO * O)); it allocates it itself when
// the caller passes none.
std::size_t backward_workspace_size(const detail::Problem& problem);

}  // namespace flashpp::cpu
