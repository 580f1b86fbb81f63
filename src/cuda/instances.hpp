// The head dims each CUDA kernel family is compiled for: the one list of them, read both by the
// compiler (every dispatcher rounds a head dim up and picks its instantiation through HeadDims)
// and by CMake (src/cuda/instances.cmake reads the `using ...HeadDims = HeadDims<...>;` lines below
// and generates one .cu per (kernel, head dim, dtype) from them), so the instances built and the
// instances called cannot disagree. Keep each such line on one line, dims ascending.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

namespace flashpp::cuda {

// Whether a head-dim list is non-empty and strictly ascending (round_up relies on it).
constexpr bool strictly_ascending(std::initializer_list<int> dims) {
  int previous = 0;
  for (int d : dims) {
    if (d <= previous) return false;
    previous = d;
  }
  return dims.size() > 0;
}

template <int... kDims>
struct HeadDims {
  static_assert(strictly_ascending({kDims...}), "head dims: a non-empty ascending list");

  static constexpr bool contains(std::int64_t d) { return ((d == kDims) || ...); }

  // The smallest listed head dim >= d, 0 when there is none: the instance a head dim runs on
  // (its extra columns are zero-filled in shared memory and never stored).
  static constexpr int round_up(std::int64_t d) {
    int up = 0;
    ((up == 0 && d <= kDims ? up = kDims : 0), ...);
    return up;
  }

  // Calls f(std::integral_constant<int, kHeadDim>{}) for the listed kHeadDim equal to head_dim;
  // false (and no call) when head_dim is not listed.
  template <typename F>
  static bool dispatch(std::int64_t head_dim, F&& f) {
    return ((head_dim == kDims && (f(std::integral_constant<int, kDims>{}), true)) || ...);
  }

  // "64, 128 and 256", for messages.
  static std::string text() {
    constexpr int dims[] = {kDims...};
    constexpr std::size_t n = sizeof...(kDims);
    std::string out = std::to_string(dims[0]);
    for (std::size_t i = 1; i < n; ++i) {
      out += (i + 1 == n ? " and " : ", ") + std::to_string(dims[i]);
    }
    return out;
  }
};

// ---- the table ------------------------------------------------------------------------------
// sm80 (every target of FLASHPP_CUDA_ARCHS):
using Sm80ForwardHeadDims = HeadDims<32, 64, 96, 128, 192, 256>;
// Also the backward's kernel head dims for both families (common/backward_workspace.hpp): the
// width of the dQ accumulator and of the preprocess's loads.
using Sm80BackwardHeadDims = HeadDims<32, 64, 96, 128, 192, 256>;
// Decoding takes these head dims exactly (no rounding up).
using Sm80DecodeHeadDims = HeadDims<64, 128, 256>;
// sm90 (sm_90a only):
using Sm90ForwardHeadDims = HeadDims<64, 96, 128, 192, 256>;
using Sm90Fp8ForwardHeadDims = HeadDims<64, 128, 256>;
using Sm90BackwardHeadDims = HeadDims<64, 96, 128, 192, 256>;
// ---------------------------------------------------------------------------------------------

// The sm90 backward runs at the kernel head dim the workspace was laid out for.
template <int... kSome, int... kAll>
constexpr bool head_dims_subset(HeadDims<kSome...>, HeadDims<kAll...>) {
  return (HeadDims<kAll...>::contains(kSome) && ...);
}
static_assert(head_dims_subset(Sm90BackwardHeadDims{}, Sm80BackwardHeadDims{}),
              "every sm90 backward head dim is a backward kernel head dim");

// The sm90 backward's deterministic mode (sm90/backward/kernel.cuh's dQ writers): kernel head
// dims up to 128 (64, 96, 128). The wide kernel (192, 256: sm90/backward/wide_kernel.cuh) has no
// deterministic mode.
constexpr bool sm90_deterministic_head_dim(int head_dim) { return head_dim <= 128; }

}  // namespace flashpp::cuda
