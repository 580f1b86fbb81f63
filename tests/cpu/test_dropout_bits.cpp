// The sm90 forward's dropout decisions from the producer warps (src/cuda/sm90/forward/
// dropout_bits.hpp), replayed on the host: the 32 producer lanes of one consumer warp write each
// consumer lane's four slot words exactly once, and every consumer lane, decoding its words for
// each 16-key block as the kernel does (one shift a word, then the sign bit of the byte that
// keep_mask_pair selects for each packed pair of P), gets detail::dropout_keep's decision for
// every element it holds: rows g, g + 8 x keys 2t, 2t + 1 of the block's two 8-key tiles.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>

#include "cuda/sm90/forward/dropout_bits.hpp"

namespace flashpp::cuda::sm90 {
namespace {

// The sign of byte `byte` of `word` (what prmt's sign-replicating selector reads).
bool sign_of_byte(std::uint32_t word, int byte) { return ((word >> (8 * byte + 7)) & 1u) != 0; }

void check_tile(float p, std::uint64_t seed, std::uint64_t offset, std::uint32_t bh,
                std::uint32_t row0, std::uint32_t key0) {
  const detail::DropoutParams d = detail::make_dropout_params(p, seed, offset);
  // Slot words of one consumer warp: 32 lanes x {X0, Y0, X1, Y1}, and how often each was written.
  std::array<std::array<std::uint32_t, 4>, 32> words{};
  std::array<std::array<int, 4>, 32> writes{};
  for (int lane = 0; lane < 32; ++lane) {
    const DropoutBitsUnit unit = make_dropout_bits_unit(d, bh, row0, key0, lane);
    const int even = dropout_bits_even_lane(lane), h = dropout_bits_half(lane);
    for (int w = 0; w < 2; ++w) {
      words[even][2 * h + w] = unit.even[w];
      words[even + 4][2 * h + w] = unit.odd[w];
      ++writes[even][2 * h + w];
      ++writes[even + 4][2 * h + w];
    }
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int w = 0; w < 4; ++w) ASSERT_EQ(writes[lane][w], 1) << "lane " << lane << " word " << w;

  int kept = 0, checked = 0;
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    const std::uint32_t lane_words[4] = {words[lane][0], words[lane][1], words[lane][2],
                                         words[lane][3]};
    for (int kk = 0; kk < 8; ++kk) {
      std::uint32_t w0 = 0, w1 = 0;
      dropout_bits_block_words(lane_words, kk, w0, w1);
      // apply_dropout_signs: register r of the block's A fragment holds row g + 8 (r & 1) of
      // 8-key tile 2 kk + (r >> 1), keys 2t (from w0) and 2t + 1 (from w1), at byte
      // 2 (r & 1) + (r >> 1).
      for (int r = 0; r < 4; ++r) {
        const int row_half = r & 1, tile_parity = r >> 1, byte = 2 * row_half + tile_parity;
        const std::uint32_t i = row0 + static_cast<std::uint32_t>(g + 8 * row_half);
        for (int e = 0; e < 2; ++e) {
          const std::uint32_t j =
              key0 + static_cast<std::uint32_t>(16 * kk + 8 * tile_parity + 2 * t + e);
          const bool keep = sign_of_byte(e == 0 ? w0 : w1, byte);
          ASSERT_EQ(keep, detail::dropout_keep(d, bh, i, j))
              << "p " << p << " row " << i << " key " << j << " lane " << lane << " kk " << kk;
          kept += keep ? 1 : 0;
          ++checked;
        }
      }
    }
  }
  ASSERT_EQ(checked, 16 * 128);
  // Not a constant answer: the decisions follow the probability (16 x 128 draws).
  const double kept_fraction = static_cast<double>(kept) / checked;
  EXPECT_NEAR(kept_fraction, 1.0 - d.effective_p(), 0.05) << "p " << p;
}

TEST(DropoutBits, ProducerWordsDecodeToTheMask) {
  std::mt19937_64 rng(20261127);
  const float probabilities[] = {0.004f, 0.1f, 0.3f, 0.5f, 0.502f, 0.7f, 0.95f};
  for (float p : probabilities) {
    for (int trial = 0; trial < 6; ++trial) {
      const std::uint64_t seed = rng(), offset = rng();
      const auto bh = static_cast<std::uint32_t>(rng() % 4096);
      const auto row0 = static_cast<std::uint32_t>(rng() % (1u << 20)) * 16u;
      const auto key0 = static_cast<std::uint32_t>(rng() % (1u << 20)) * 128u;
      check_tile(p, seed, offset, bh, row0, key0);
    }
  }
}

TEST(DropoutBits, TilesAtThe32BitWrap) {
  // Rows and keys are counted in 32 bits by the mask (philox.hpp); tiles just below 2^32.
  check_tile(0.1f, 7, 11, 3, 0xFFFFFFF0u, 0xFFFFFF80u);
  check_tile(0.9f, 7, 11, 3, 0xFFFFFF00u, 0xFFFFFF00u);
  check_tile(0.25f, 1, 0xFFFFFFFFFFull, 4095, 0u, 0u);
}

}  // namespace
}  // namespace flashpp::cuda::sm90
