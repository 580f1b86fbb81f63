// The helpers the split-KV decode shares between host and device: the split heuristic and the
// lse merge of partial results (an all-empty merge gives O = 0 and lse = -inf, never NaN).
#include <gtest/gtest.h>

#include <cmath>
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
