// Philox4x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// dropout keep-mask built on it. Shared verbatim by the CPU and CUDA backends so that both
// produce the same mask element for element.
//
// The mask uses Philox4x32-7: seven rounds, as FlashAttention-2 (and so PyTorch's flash SDPA
// backend) uses for its dropout. The paper reports Philox4x32 passing TestU01's BigCrush from
// seven rounds on; ten, Random123's (and C++26's std::philox4x32) default, adds a safety margin.
// The rounds are most of the dropout's cost on the GPU (docs/perf-notes.md, "Dropout mask v4").
//
// The keep decision for attention element (b, h, i, j) of a problem with Hq query heads: one
// Philox call yields 16 random bytes, which decide 16 elements,
//   counter = (4 * (j / 16) + (j % 8) / 2,  4 * (i / 16) + (i % 8) / 2,  b * Hq + h,  offset_lo)
//   key     = (seed_lo, seed_hi ^ offset_hi)
//   byte    = byte 2 * ((i / 8) % 2) + (j / 8) % 2 of word 2 * (i % 2) + j % 2 of the call's four
//             32-bit words (little-endian bytes)
//   keep    = byte >= threshold,  threshold = round(p * 256), at least 1 when p > 0
// So one call covers a 4 x 4 "comb" of a 16 x 16 block: rows 2a, 2a + 1, 2a + 8, 2a + 9 x keys
// 2c, 2c + 1, 2c + 8, 2c + 9. In the m16n8 accumulator layout of mma.sync and wgmma (lane
// (g, t) holds rows g, g + 8 x keys 2t, 2t + 1 of each 8-key tile) the comb is what lanes g = 2a
// and 2a + 1 hold of the block's keys at t = c, split by row parity into whole words (0, 1 and
// 2, 3); in the transposed layout of the backward (keys as rows), lanes g = 2c and 2c + 1 at t = a
// hold it, split by key parity (words 0, 2 and 1, 3). Either way a pair of lanes makes two
// calls for two adjacent blocks and swaps the halves: one call per 16 elements a lane holds.
// The mask depends only on (seed, offset, b, h, i, j), never on tiling or thread layout.
//
// Resolution: the drop probability is quantised to threshold / 256 (p = 0.1 drops 26/256 =
// 10.16%), and kept elements are scaled by 256 / (256 - threshold), so that the expectation of
// the output is exact for the probability actually used.
#pragma once

#include <cstdint>

#include "host_device.hpp"

namespace flashpp::detail {

struct PhiloxResult {
  std::uint32_t r[4];
};

FLASHPP_HD void philox_mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                               std::uint32_t& lo) {
#if defined(__CUDA_ARCH__)
  lo = a * b;
  hi = __umulhi(a, b);
#else
  const std::uint64_t product = static_cast<std::uint64_t>(a) * b;
  lo = static_cast<std::uint32_t>(product);
  hi = static_cast<std::uint32_t>(product >> 32);
#endif
}

// Philox4x32 with kRounds rounds (Random123's philox4x32_R): counter (c0..c3), key (k0, k1).
template <int kRounds>
FLASHPP_HD PhiloxResult philox4x32(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2,
                                   std::uint32_t c3, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < kRounds; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kMul0, c0, hi0, lo0);
    philox_mulhilo(kMul1, c2, hi1, lo1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0;
    const std::uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return PhiloxResult{{c0, c1, c2, c3}};
}

// The rounds of the dropout mask's calls (see the top of this file).
inline constexpr int kDropoutPhiloxRounds = 7;

// Everything the dropout mask needs, fixed once per call.
struct DropoutParams {
  float p = 0.0f;             // probability of dropping, as requested
  float keep_scale = 1.0f;    // 256 / (256 - threshold), applied to kept probabilities
  std::uint32_t threshold = 0;  // round(p * 256) (>= 1 when p > 0): keep iff byte >= threshold
  std::uint32_t key0 = 0, key1 = 0, counter3 = 0;
  // For dropout_keep_signs (four bytes at a time): the threshold, or 256 - threshold when it is
  // above 128, in every byte, and whether the bytes are complemented first (threshold > 128).
  std::uint32_t threshold_bytes = 0, complement = 0;

  bool enabled() const { return threshold != 0; }
  // The drop probability actually applied: threshold / 256.
  double effective_p() const { return threshold / 256.0; }
};

inline DropoutParams make_dropout_params(float p, std::uint64_t seed, std::uint64_t offset) {
  DropoutParams d;
  d.p = p;
  if (p > 0.0f) {
    double t = static_cast<double>(p) * 256.0 + 0.5;
    std::uint32_t threshold = t >= 256.0 ? 256u : static_cast<std::uint32_t>(t);
    if (threshold < 1) threshold = 1;  // a requested dropout is never silently off
    if (threshold > 255 && p < 1.0f) threshold = 255;  // p < 1 keeps something
    d.threshold = threshold;
    d.keep_scale = threshold >= 256 ? 0.0f : static_cast<float>(256.0 / (256.0 - threshold));
    const std::uint32_t small = threshold <= 128 ? threshold : 256 - threshold;
    d.threshold_bytes = small * 0x01010101u;
    d.complement = threshold <= 128 ? 0u : 0xFFFFFFFFu;
  }
  d.key0 = static_cast<std::uint32_t>(seed);
  d.key1 = static_cast<std::uint32_t>(seed >> 32) ^ static_cast<std::uint32_t>(offset >> 32);
  d.counter3 = static_cast<std::uint32_t>(offset);
  return d;
}

// The Philox call that decides element (i, j) of head bh = b * Hq + h, and the 15 others that
// share it (see the top of this file).
FLASHPP_HD std::uint32_t dropout_counter0(std::uint32_t j) { return ((j >> 4) << 2) | ((j >> 1) & 3u); }
FLASHPP_HD std::uint32_t dropout_counter1(std::uint32_t i) { return ((i >> 4) << 2) | ((i >> 1) & 3u); }

FLASHPP_HD PhiloxResult dropout_random_bytes(const DropoutParams& d, std::uint32_t bh,
                                             std::uint32_t i, std::uint32_t j) {
  return philox4x32<kDropoutPhiloxRounds>(dropout_counter0(j), dropout_counter1(i), bh, d.counter3,
                                          d.key0, d.key1);
}

// Which word of the call decides element (i, j), and which byte of that word.
FLASHPP_HD unsigned dropout_word_index(std::uint32_t i, std::uint32_t j) {
  return 2u * (i & 1u) + (j & 1u);
}
FLASHPP_HD unsigned dropout_byte_in_word(std::uint32_t i, std::uint32_t j) {
  return 2u * ((i >> 3) & 1u) + ((j >> 3) & 1u);
}
// The same as one index 0..15 of the call's bytes.
FLASHPP_HD unsigned dropout_byte_index(std::uint32_t i, std::uint32_t j) {
  return 4u * dropout_word_index(i, j) + dropout_byte_in_word(i, j);
}

// (Selects rather than an indexed load: with a run-time index, GPU code keeps the words in
// registers instead of local memory.)
FLASHPP_HD bool dropout_keep_byte(const PhiloxResult& bytes, unsigned index,
                                  std::uint32_t threshold) {
  const std::uint32_t word = (index & 8u) ? ((index & 4u) ? bytes.r[3] : bytes.r[2])
                                          : ((index & 4u) ? bytes.r[1] : bytes.r[0]);
  return ((word >> (8u * (index & 3u))) & 0xFFu) >= threshold;
}

// The keep decisions of a word's four bytes at once, in their sign bits: bit 7 of byte k of the
// result is 1 iff byte k of `word` >= threshold (the other bits mean nothing). For threshold
// t <= 128, with x = the byte: x >= t iff x >= 128 or (x mod 128) >= t, and (x | 128) - t is at
// least 128 exactly when the latter holds, never borrowing from the next byte. For t > 128,
// x >= t iff not (255 - x >= 256 - t): the same test on the complemented bytes, inverted.
// On the GPU each bitwise step is one three-input LOP3 of (word, complement, one other value),
// three instructions a word; written plainly, the compiler keeps word ^ complement in a register
// of its own and spends a fourth.
FLASHPP_HD std::uint32_t dropout_keep_signs(std::uint32_t word, const DropoutParams& d) {
  const std::uint32_t c = d.complement;
#if defined(__CUDA_ARCH__)
  // Truth-table bytes for inputs (a, b, c) = (0xF0, 0xCC, 0xAA): (a ^ b) | c = 0xBE,
  // ((a ^ b) | c) ^ b = 0x72.
  std::uint32_t high_set, signs;
  asm("lop3.b32 %0, %1, %2, %3, 0xBE;" : "=r"(high_set) : "r"(word), "r"(c), "r"(0x80808080u));
  const std::uint32_t borrow_free = high_set - d.threshold_bytes;
  asm("lop3.b32 %0, %1, %2, %3, 0x72;" : "=r"(signs) : "r"(word), "r"(c), "r"(borrow_free));
  return signs;
#else
  const std::uint32_t x = word ^ c;
  return (x | ((x | 0x80808080u) - d.threshold_bytes)) ^ c;
#endif
}

// The keep decision of one element (slow path: one Philox call per element).
FLASHPP_HD bool dropout_keep(const DropoutParams& d, std::uint32_t bh, std::uint32_t i,
                             std::uint32_t j) {
  return dropout_keep_byte(dropout_random_bytes(d, bh, i, j), dropout_byte_index(i, j),
                           d.threshold);
}

}  // namespace flashpp::detail
