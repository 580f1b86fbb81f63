// The sm90 forward's mask words (src/cuda/common/key_bits.hpp): a row's visible run of keys as
// bits of the keys one thread holds. Checked against the accumulator layout key by key, on the CPU
// where CI runs: bit 2 nt + e of lane t stands for key 8 nt + 2t + e of the tile.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/common/key_bits.hpp"

namespace {

using flashpp::cuda::run_meets_tile;
using flashpp::cuda::thread_key_bits;

TEST(KeyBits, EveryRunOfEveryTileWidth) {
  for (int n : {16, 64, 128}) {
    for (int t = 0; t < 4; ++t) {
      for (int first = -40; first <= n + 40; ++first) {
        for (int last = first - 3; last <= n + 40; ++last) {
          std::uint32_t expect = 0;
          bool any = false;
          for (int b = 0; b < n / 4; ++b) {
            const int key = 8 * (b / 2) + 2 * t + b % 2;
            if (key >= first && key <= last) expect |= 1u << b;
          }
          for (int key = 0; key < n; ++key) any = any || (key >= first && key <= last);
          ASSERT_EQ(thread_key_bits(first, last, t, n), expect)
              << "n " << n << " t " << t << " first " << first << " last " << last;
          ASSERT_EQ(run_meets_tile(first, last, n), any)
              << "n " << n << " first " << first << " last " << last;
        }
      }
    }
  }
}

TEST(KeyBits, SaturatedDistances) {
  // tile_visibility saturates 64-bit distances to +-2^30 before adding row offsets below 2^8.
  constexpr int kFar = 1 << 30;
  EXPECT_EQ(thread_key_bits(-kFar, kFar + 120, 3, 128), 0xffffffffu);
  EXPECT_EQ(thread_key_bits(-kFar, -kFar + 120, 0, 128), 0u);
  EXPECT_EQ(thread_key_bits(kFar, kFar + 120, 0, 128), 0u);
  EXPECT_TRUE(run_meets_tile(-kFar, kFar, 128));
  EXPECT_FALSE(run_meets_tile(kFar, kFar + 8, 128));
}

}  // namespace
