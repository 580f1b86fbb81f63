// A row's visible keys of a score tile as the bits of one word, in the keys one thread holds
// (common/forward_steps.cuh: tile_visibility, apply_mask_bits). Plain integer arithmetic, shared
// by the kernels and the CPU test (tests/cpu/test_key_bits.cpp).
//
// In the m16n8 accumulator layout of mma.sync and wgmma, lane (g, t) holds, of each row it owns,
// the keys 8 nt + 2t + e (nt < n / 8, e < 2) of an n-key tile: bit b = 2 nt + e of the word
// stands for key 8 (b / 2) + 2t + b % 2. The thread's keys ascend with b, so a row's visible keys,
// one run [first, last] (relative to the tile's first key; any integers, empty when first >
// last), are one run of bits.
#pragma once

#include <cstdint>

#include "../../common/host_device.hpp"

namespace flashpp::cuda {

// How many of the thread's keys lie below relative key x + 2t (x: the key minus 2t).
FLASHPP_HD int thread_keys_below(int x, int n) {
  x = x < 0 ? 0 : (x > n ? n : x);
  const int r = x & 7;
  return 2 * (x >> 3) + (r < 2 ? r : 2);
}

// The bits of the thread's keys (lane % 4 = t) of an n-key tile (n <= 128, a multiple of 8) that
// lie in [first, last].
FLASHPP_HD std::uint32_t thread_key_bits(int first, int last, int t, int n) {
  const int lo = thread_keys_below(first - 2 * t, n);
  const int hi = thread_keys_below(last + 1 - 2 * t, n);
  const std::uint32_t upto = hi >= 32 ? 0xffffffffu : (1u << hi) - 1u;
  return lo >= hi ? 0u : upto & ~((1u << lo) - 1u);  // (1u << lo: lo < hi <= 32 where it counts)
}

// Whether the run [first, last] holds any key of the tile.
FLASHPP_HD bool run_meets_tile(int first, int last, int n) {
  return (first < 0 ? 0 : first) <= (last > n - 1 ? n - 1 : last);
}

}  // namespace flashpp::cuda
