// The CPU backend: the float64 reference (the oracle) and the tiled, multithreaded
// FlashAttention-2 forward and backward.
//
// The tiled kernels (src/cpu/kernels/) are compiled once per instruction set, each build in its
// own namespace flashpp::cpu::isa_<name> (so that no inline function of one build can stand in
// for another's at link time); flash_forward / flash_backward here choose one at run time from
// the CPU's features (src/cpu/cpu_features.hpp, src/cpu/dispatch.cpp).
#pragma once

#include <cstddef>
#include <string>

#include "../api/inference_problem.hpp"

namespace flashpp::cpu {

// Reference: materialises S and P for one (b, h) at a time, accumulates in float64. Accepts
// every dtype including f64 (for inputs, outputs and lse).
void reference_forward(const detail::ForwardArgs& args);
void reference_backward(const detail::BackwardArgs& args);

// Tiled FlashAttention-2, dispatched to the best kernel the CPU runs. Extra memory is O(tile)
// per thread.
void flash_forward(const detail::ForwardArgs& args);
void flash_backward(const detail::BackwardArgs& args);

// e4m3 inputs: q, k, v read into float32 copies times their descales, then the float32 path of
// the reference (reference = true) or the tiled forward; o is written in its own dtype.
void dequantised_forward(const detail::ForwardArgs& args, bool reference);

// Bytes of scratch the tiled backward needs (D = rowsum(dO * O)); it allocates it itself when
// the caller passes none.
std::size_t backward_workspace_size(const detail::Problem& problem);

// Name of the kernel flash_forward (backward = false) or flash_backward would run for `dtype`
// on this machine now (FLASHPP_CPU_ISA included), e.g. "avx512 f32" or "amx bf16 (tiles)".
std::string kernel_name(DType dtype, bool backward);

// KV-cache decoding (src/cpu/kvcache.cpp): appends k_new/v_new, then runs the reference (when
// `reference`) or the tiled forward per sequence over its cached keys. Needs host_seqlens.
void forward_kvcache(const detail::KvCacheArgs& args, bool reference);

}  // namespace flashpp::cpu

// Entry points of each per-ISA build of src/cpu/kernels/ (d_rows: B x Hq x Nq floats of
// workspace for D = rowsum(dO * O)).
#define FLASHPP_DECLARE_CPU_KERNELS(isa)                                  \
  namespace flashpp::cpu::isa {                                           \
  void flash_forward(const detail::ForwardArgs& args);                    \
  void flash_backward(const detail::BackwardArgs& args, float* d_rows);   \
  }
// Entry points of the bf16 engines (src/cpu/kernels/forward_bf16.cpp, backward_bf16.cpp): the
// forward and the backward with their tile products on bf16 dot-product units (AVX512-BF16),
// tiles (AMX-BF16) or emulated tiles (the amx_emulated level, for tests).
#define FLASHPP_DECLARE_CPU_BF16_KERNELS(isa)                                \
  namespace flashpp::cpu::isa {                                              \
  void flash_forward_bf16(const detail::ForwardArgs& args);                  \
  void flash_backward_bf16(const detail::BackwardArgs& args, float* d_rows); \
  }
