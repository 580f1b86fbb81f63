// The sm90 forward's dropout decisions made by the producer warpgroup's spare warps (warps 1-3;
// warp 0's first lane issues the copies) and handed to the consumer warpgroups through shared
// memory, so that the Philox rounds leave the consumers' chain of issue, wait for S, softmax,
// convert (docs/perf-notes.md, session 27). Host and device: the CPU test
// (tests/cpu/test_dropout_bits.cpp) replays both sides against detail::dropout_keep.
//
// The mask is src/common/philox.hpp's, unchanged; this file only says who computes which call and
// where its decisions go. For 128-key tiles and two consumer warpgroups (256 consumer threads):
//
//   A slot holds one key tile's decisions: 16 bytes per consumer thread ct (0..255, consumer * 128
//   + its thread in the warpgroup), words {X0, Y0, X1, Y1}. Word Xh (Yh) holds, for each 16-key
//   block kk = 4 h + s of the tile (s = 0..3), the keep decisions of the lane's even-key (odd-key)
//   elements as bit 7 - s of each byte: bytes 0..3 in the order of the call's word bytes
//   (philox.hpp: byte 2 * (row half) + (8-key tile parity)). Shifted left by s, the word has them in
//   its bytes' sign bits, which is what the consumers' keep_mask_pair reads (dropout_signs.cuh):
//   one shift per word and block instead of a Philox call per 16 elements.
//
//   Producer lane L (0..31) makes, for consumer warp cw of the block (rows row0 .. row0 + 15),
//   the four calls of row pair a = (L / 4) % 4 and key pair c = L % 4 in the blocks kk = 4 h + s,
//   h = L / 16: the decisions of consumer lanes 8 a + c (rows 2a, 2a + 8: the call's words 0, 1)
//   and 8 a + 4 + c (rows 2a + 1, 2a + 9: words 2, 3). One warp covers one consumer warp a tile;
//   1024 calls a tile over three warps.
#pragma once

#include <cstdint>

#include "../../../common/philox.hpp"

namespace flashpp::cuda::sm90 {

struct DropoutBitsLayout {
  static constexpr int kConsumerThreads = 256;
  static constexpr int kWordsPerThread = 4;  // X0, Y0, X1, Y1
  static constexpr int kSlotBytes = kConsumerThreads * kWordsPerThread * 4;
  // Tiles the producer warps may run ahead of the consumers.
  static constexpr int kSlots = 4;
  static constexpr int kConsumerWarps = kConsumerThreads / 32;
  static constexpr int kProducerWarps = 3;
  static constexpr int kProducerThreads = 32 * kProducerWarps;
  // Shared memory after the kernel's own: the slots, then a full and an empty barrier per slot.
  static constexpr int kBytes = kSlots * kSlotBytes + 2 * 8 * kSlots;
};

// One producer lane's words for one consumer warp and key tile: {X, Y} of key blocks 4 h .. 4 h + 3
// for the even-row lane (8 a + c) and the odd-row lane (8 a + 4 + c).
struct DropoutBitsUnit {
  std::uint32_t even[2], odd[2];
};

// The consumer lane and word pair (h: 0 = X0, Y0; 1 = X1, Y1) a producer lane's unit fills.
FLASHPP_HD int dropout_bits_even_lane(int producer_lane) {
  return 8 * ((producer_lane >> 2) & 3) + (producer_lane & 3);
}
FLASHPP_HD int dropout_bits_half(int producer_lane) { return producer_lane >> 4; }

// The four calls of producer lane `producer_lane` for the consumer warp whose first row is row0 (a
// multiple of 16) in the key tile whose first key is key0 (a multiple of 128), of head bh.
FLASHPP_HD DropoutBitsUnit make_dropout_bits_unit(const detail::DropoutParams& d, std::uint32_t bh,
                                                  std::uint32_t row0, std::uint32_t key0,
                                                  int producer_lane) {
  const auto c = static_cast<std::uint32_t>(producer_lane & 3);
  const auto a = static_cast<std::uint32_t>((producer_lane >> 2) & 3);
  const auto h = static_cast<std::uint32_t>(producer_lane >> 4);
  // philox.hpp's counters for rows 2a + {0, 1, 8, 9} of row0 and keys 2c + {0, 1, 8, 9} of block kk.
  const std::uint32_t counter1 = ((row0 >> 4) << 2) | a;
  DropoutBitsUnit unit{{0u, 0u}, {0u, 0u}};
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (std::uint32_t s = 0; s < 4; ++s) {
    const std::uint32_t block = (key0 >> 4) + 4 * h + s;
    const detail::PhiloxResult r = detail::philox4x32<detail::kDropoutPhiloxRounds>(
        (block << 2) | c, counter1, bh, d.counter3, d.key0, d.key1);
    unit.even[0] |= (detail::dropout_keep_signs(r.r[0], d) & 0x80808080u) >> s;
    unit.even[1] |= (detail::dropout_keep_signs(r.r[1], d) & 0x80808080u) >> s;
    unit.odd[0] |= (detail::dropout_keep_signs(r.r[2], d) & 0x80808080u) >> s;
    unit.odd[1] |= (detail::dropout_keep_signs(r.r[3], d) & 0x80808080u) >> s;
  }
  return unit;
}

// The consumer's side: the sign words of 16-key block kk (0..7) from its slot words, in the form
// share_dropout_calls gives them (w0 for the even key of each pair, w1 for the odd one).
FLASHPP_HD void dropout_bits_block_words(const std::uint32_t (&words)[4], int kk,
                                         std::uint32_t& w0, std::uint32_t& w1) {
  const int h = kk >> 2, s = kk & 3;
  w0 = words[2 * h] << s;
  w1 = words[2 * h + 1] << s;
}

}  // namespace flashpp::cuda::sm90
