// The FP8 kernel's data-movement index maps (src/cuda/sm90/forward_fp8/fp8_layout.hpp),
// replayed on the host: the transposing warps turn every V tile into a Vt whose k positions
// follow key_at_position, the order in which the e4m3 A fragments of P hold their keys, so that
// O = sum over positions of P[row][key(pos)] * V[key(pos)][d] is exactly P V; every Vt byte is
// written once; and each 4-byte load and store instruction of a warp touches 32 distinct banks.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "cuda/sm90/forward_fp8/fp8_layout.hpp"

namespace flashpp::cuda::sm90::fp8 {
namespace {

TEST(Fp8Layout, KeyRenumberingIsAPermutationMatchingTheScoreLayout) {
  std::set<int> keys;
  for (int pos = 0; pos < 128; ++pos) keys.insert(key_at_position(pos));
  EXPECT_EQ(keys.size(), 128u);
  EXPECT_EQ(*keys.begin(), 0);
  EXPECT_EQ(*keys.rbegin(), 127);
  // Lane (g, t) holds, for one row, scores of keys 8 nt + 2t + {0, 1}; its A-fragment register
  // for a 16-key group G holds positions 16 G + 4t .. + 3. Those must be the same four keys,
  // in the order the kernel packs them: (tile 2G, c 0), (2G, 1), (2G + 1, 0), (2G + 1, 1).
  for (int group = 0; group < 8; ++group)
    for (int t = 0; t < 4; ++t) {
      const int expected[4] = {16 * group + 2 * t, 16 * group + 2 * t + 1, 16 * group + 8 + 2 * t,
                               16 * group + 9 + 2 * t};
      for (int e = 0; e < 4; ++e) EXPECT_EQ(key_at_position(16 * group + 4 * t + e), expected[e]);
    }
}

// Replays transpose_step for every (panel, step, lane, sub-step) of a tile of head dim D.
void replay_transpose(int D) {
  const int panels = (D + 127) / 128;
  auto value = [](int key, int d) { return static_cast<unsigned char>((key * 31 + d * 7 + 1) & 0xFF); };
  // Raw V as the copy engine lands it: per 128-column panel, 128 rows of 128 bytes, swizzled.
  std::vector<unsigned char> v(static_cast<std::size_t>(panels) * 128 * 128, 0);
  for (int key = 0; key < 128; ++key)
    for (int d = 0; d < panels * 128; ++d)
      v[static_cast<std::size_t>(d / 128) * 128 * 128 + swizzled_offset(key, d % 128)] =
          d < D ? value(key, d) : 0;
  std::vector<unsigned char> vt(static_cast<std::size_t>(D) * 128, 0);
  std::vector<int> writes(vt.size(), 0);
  for (int panel = 0; panel < panels; ++panel)
    for (int step = 0; step < 8; ++step)
      for (int i = 0; i < 4; ++i) {
        // One warp instruction per (r) load and per (e) store: collect the lanes' banks.
        for (int r = 0; r < 4; ++r) {
          std::set<int> banks;
          int active = 0;
          for (int lane = 0; lane < 32; ++lane) {
            const int chunk = transpose_chunk(lane, step);
            if (panel * 128 + chunk * 16 >= D) continue;
            ++active;
            const int address = swizzled_offset(transpose_key(lane, r), chunk * 16) + 4 * transpose_group(lane, i);
            banks.insert((address / 4) % 32);
          }
          EXPECT_EQ(static_cast<int>(banks.size()), active) << "load bank conflict: panel " << panel
                                                            << " step " << step << " i " << i << " r " << r;
        }
        for (int e = 0; e < 4; ++e) {
          std::set<int> banks;
          int active = 0;
          for (int lane = 0; lane < 32; ++lane) {
            const int chunk = transpose_chunk(lane, step);
            const int d0 = panel * 128 + chunk * 16;
            if (d0 >= D) continue;
            ++active;
            const int g = transpose_group(lane, i);
            const int row = d0 + 4 * g + e;
            const int address = d0 * 128 + swizzled_offset(4 * g + e, 4 * lane);
            EXPECT_EQ(address, swizzled_offset(row, 4 * lane));  // the kernel's shortcut
            banks.insert((address / 4) % 32);
            // The word: byte r = V[key r][row] (after the 4 x 4 transpose).
            for (int r = 0; r < 4; ++r) {
              const int key = transpose_key(lane, r);
              const int src = panel * 128 * 128 + swizzled_offset(key, chunk * 16 + 4 * g + e);
              vt[address + r] = v[src];
              ++writes[address + r];
            }
          }
          EXPECT_EQ(static_cast<int>(banks.size()), active) << "store bank conflict: panel " << panel
                                                            << " step " << step << " i " << i << " e " << e;
        }
      }
  // wgmma reads B[k = position][n = d] from Vt row d, position k (K-major, swizzled).
  for (int d = 0; d < D; ++d)
    for (int pos = 0; pos < 128; ++pos) {
      const int address = swizzled_offset(d, pos);
      ASSERT_EQ(writes[address], 1) << "d " << d << " position " << pos;
      ASSERT_EQ(vt[address], value(key_at_position(pos), d)) << "d " << d << " position " << pos;
    }
}

TEST(Fp8Layout, TransposeReplayD64) { replay_transpose(64); }
TEST(Fp8Layout, TransposeReplayD128) { replay_transpose(128); }
TEST(Fp8Layout, TransposeReplayD256) { replay_transpose(256); }

}  // namespace
}  // namespace flashpp::cuda::sm90::fp8
