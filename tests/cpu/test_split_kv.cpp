// The helpers the split-KV decode shares between host and device: the split heuristic and the
// lse merge of partial results (an all-empty merge gives O = 0 and lse = -inf, never NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "common/lse_merge.hpp"
#include "common/split_kv.hpp"

namespace flashpp::detail {
namespace {

TEST(SplitKv, FillsTheGpuWithoutExtraWaves) {
  SplitKvInput in;
  in.sm_count = 132;
  in.blocks_per_sm = 2;
  in.key_tiles = 131072 / 16;
  in.min_tiles_per_split = 8;
  in.work_units = 8;  // B = 1, Hkv = 8: split to (nearly) fill 264 slots
  EXPECT_EQ(choose_num_splits(in), 32);
  in.work_units = 128;  // B = 16: two splits fill one wave; three would need two waves
  EXPECT_EQ(choose_num_splits(in), 2);
  in.work_units = 512;  // B = 64: already two waves
  EXPECT_EQ(choose_num_splits(in), 1);
  in.work_units = 8;
  in.key_tiles = 40;  // a short cache: at least 8 tiles per split
  EXPECT_EQ(choose_num_splits(in), 5);
  in.key_tiles = 0;
  EXPECT_EQ(choose_num_splits(in), 1);
}

// The default variant's heuristic: one wave at most, the shortest longest split, and among the
// counts that give it the smallest (so that splits come out even).
TEST(SplitKv, V2FillsOneWaveWithEvenSplits) {
  SplitKvInput in;
  in.sm_count = 132;
  in.blocks_per_sm = 2;  // 264 slots
  in.min_tiles_per_split = 4;
  in.max_splits = 128;
  in.work_units = 8;  // B = 1, Hkv = 8
  in.key_tiles = 4096 / 16;
  EXPECT_EQ(choose_num_splits_v2(in), 32);  // 256 tiles: 32 x 8 (33 would also give 8)
  in.key_tiles = 32768 / 16;
  EXPECT_EQ(choose_num_splits_v2(in), 33);  // 2048 tiles: 63 per split against 64 with 32
  in.key_tiles = 1024 / 16;
  EXPECT_EQ(choose_num_splits_v2(in), 16);  // at least 4 tiles (one per warp) per split
  in.key_tiles = 3;
  EXPECT_EQ(choose_num_splits_v2(in), 1);  // shorter than a tile per warp
  in.key_tiles = 0;
  EXPECT_EQ(choose_num_splits_v2(in), 1);
  in.key_tiles = 4096 / 16;
  in.work_units = 128;  // B = 16: two splits fill one wave
  EXPECT_EQ(choose_num_splits_v2(in), 2);
  in.work_units = 264;  // the GPU is full without splitting
  EXPECT_EQ(choose_num_splits_v2(in), 1);
  in.work_units = 512;
  EXPECT_EQ(choose_num_splits_v2(in), 1);
  in.work_units = 8;
  in.max_splits = 5;
  EXPECT_EQ(choose_num_splits_v2(in), 5);
  // Over a range of shapes: never past one wave, never fewer than min tiles per split (when
  // there is more than one split), and no smaller count has as short a longest split.
  for (std::int64_t work : {1, 3, 8, 24, 100, 131, 263}) {
    for (std::int64_t tiles : {1, 4, 7, 64, 100, 255, 256, 257, 2048, 8192}) {
      in.work_units = work;
      in.key_tiles = tiles;
      in.max_splits = 128;
      const std::int64_t s = choose_num_splits_v2(in);
      EXPECT_GE(s, 1);
      EXPECT_LE(s * work, std::max<std::int64_t>(work, 264)) << work << " " << tiles;
      if (s > 1) EXPECT_GE(tiles / s, 4) << work << " " << tiles;
      const std::int64_t longest = (tiles + s - 1) / s;
      for (std::int64_t t = 1; t < s; ++t) EXPECT_GT((tiles + t - 1) / t, longest);
      for (std::int64_t t = s + 1; t * work <= 264 && tiles / t >= 4 && t <= 128; ++t)
        EXPECT_GE((tiles + t - 1) / t, longest) << work << " " << tiles << " " << t;
    }
  }
}

// The decode kernel's work split: over every split and warp, each tile that holds a key some row
// of the block may see is taken exactly once, and no other tile is.
TEST(SplitKv, SplitsAndWarpsCoverEveryVisibleKeyOnce) {
  constexpr int kTile = 16, kWarps = 4;
  const std::int64_t unbounded = std::int64_t(1) << 60;
  for (std::int64_t nk : {0, 1, 15, 16, 17, 70, 133}) {
    for (std::int64_t nq : {1, 3, 4}) {
      for (int group : {1, 4, 6}) {
        for (std::int64_t left : {unbounded, std::int64_t(0), std::int64_t(5), std::int64_t(40)}) {
          for (std::int64_t right : {unbounded, std::int64_t(0), std::int64_t(2)}) {
            const bool masked = left < unbounded || right < unbounded;
            const int m_tiles = static_cast<int>((group * nq + 15) / 16);
            for (int m_tile = 0; m_tile < m_tiles; ++m_tile) {
              const std::int64_t i_first = (m_tile * 16) / group;
              const std::int64_t i_last = std::min<std::int64_t>(nq - 1, (m_tile * 16 + 15) / group);
              std::set<int> needed;
              for (std::int64_t i = i_first; i <= i_last; ++i)
                for (std::int64_t j = 0; j < nk; ++j) {
                  const std::int64_t d = j - (i + nk - nq);
                  if (d >= -left && d <= right) needed.insert(static_cast<int>(j / kTile));
                }
              const KeyRange keys = decode_key_range(nk, nq, i_first, i_last, masked, left, right);
              for (int splits : {1, 2, 3, 7}) {
                std::multiset<int> taken;
                for (int split = 0; split < splits; ++split) {
                  const TileSpan span = split_tiles(keys, kTile, splits, split);
                  for (int w = 0; w < kWarps; ++w)
                    for (int k = 0; k < warp_tile_count(span, w, kWarps); ++k)
                      taken.insert(span.begin + w + k * kWarps);
                }
                for (int t : taken) {
                  EXPECT_EQ(taken.count(t), 1u) << "tile " << t << " taken twice; nk=" << nk;
                  EXPECT_LE(t * kTile, nk - 1) << "tile past the keys; nk=" << nk;
                }
                for (int t : needed) {
                  EXPECT_EQ(taken.count(t), 1u)
                      << "tile " << t << " not taken: nk=" << nk << " nq=" << nq
                      << " group=" << group << " left=" << left << " right=" << right
                      << " splits=" << splits;
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(LseMerge, MatchesTheSoftmaxOfTheUnion) {
  // Scores of 6 keys split in three parts (one empty); values are scalars.
  const std::vector<std::vector<double>> scores = {{0.5, 3.0}, {}, {-1.0, 2.0, 9.0, 4.0}};
  const std::vector<std::vector<double>> values = {{1.0, 2.0}, {}, {3.0, 4.0, 5.0, 6.0}};
  double total = 0, weighted = 0, mx = -INFINITY;
  for (const auto& part : scores)
    for (double s : part) mx = std::max(mx, s);
  for (std::size_t p = 0; p < scores.size(); ++p)
    for (std::size_t j = 0; j < scores[p].size(); ++j) {
      total += std::exp(scores[p][j] - mx);
      weighted += std::exp(scores[p][j] - mx) * values[p][j];
    }
  LseMerger merger;
  float acc = 0.0f;
  for (std::size_t p = 0; p < scores.size(); ++p) {
    double l = 0, o = 0;
    float lse = -INFINITY;
    if (!scores[p].empty()) {
      for (std::size_t j = 0; j < scores[p].size(); ++j) l += std::exp(scores[p][j]);
      for (std::size_t j = 0; j < scores[p].size(); ++j) o += std::exp(scores[p][j]) / l * values[p][j];
      lse = static_cast<float>(std::log(l));
    }
    float rescale, weight;
    merger.add(lse, rescale, weight);
    acc = acc * rescale + weight * static_cast<float>(o);
  }
  EXPECT_NEAR(acc * merger.normaliser(), weighted / total, 1e-5);
  EXPECT_NEAR(merger.lse(), mx + std::log(total), 1e-5);
}

TEST(LseMerge, AllEmptyGivesZeroAndMinusInf) {
  LseMerger merger;
  float acc = 0.0f, rescale, weight;
  for (int i = 0; i < 3; ++i) {
    merger.add(-INFINITY, rescale, weight);
    acc = acc * rescale + weight * 0.0f;
  }
  EXPECT_EQ(acc * merger.normaliser(), 0.0f);
  EXPECT_EQ(merger.lse(), -INFINITY);
  EXPECT_FALSE(std::isnan(acc * merger.normaliser()));
}

}  // namespace
}  // namespace flashpp::detail
