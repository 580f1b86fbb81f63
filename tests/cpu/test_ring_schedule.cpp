// Ring attention's schedule (src/distributed/ring_schedule.hpp) and its lse merge
// (src/common/lse_merge.hpp) on the CPU: every visible (query, key) pair is computed exactly once
// over the W steps, the causal steps do equal work, the zigzag positions form a permutation, and
// the merge of two partial softmaxes equals the softmax over the union of their keys (CI has
// neither GPUs nor NCCL; the Python twin of these rules is tested in
// tests/python/test_ring_attention_cpu.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/lse_merge.hpp"
#include "distributed/ring_schedule.hpp"

namespace fr = flashpp::ring_detail;

TEST(RingSchedule, ZigzagPositionsArePermutation) {
  for (int world = 1; world <= 8; ++world) {
    const std::int64_t n = 6;
    std::vector<int> seen(n * world, 0);
    for (int r = 0; r < world; ++r) {
      for (std::int64_t i = 0; i < n; ++i) seen[fr::zigzag_position(world, r, n, i)]++;
      EXPECT_EQ(fr::zigzag_position(world, r, n, 0), 3 * r);
      EXPECT_EQ(fr::zigzag_position(world, r, n, 3), 3 * (2 * world - 1 - r));
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  }
}

TEST(RingSchedule, EveryVisiblePairOnceAndEqualWork) {
  for (int world = 1; world <= 8; ++world) {
    for (bool causal : {false, true}) {
      const std::int64_t c = 4, n = 2 * c, N = n * world;
      auto position = [&](int r, std::int64_t i) {
        return causal ? fr::zigzag_position(world, r, n, i) : r * n + i;
      };
      for (int r = 0; r < world; ++r) {
        std::vector<int> seen(n * N, 0);
        for (int s = 0; s < world; ++s) {
          const int src = fr::source_rank(world, r, s);
          EXPECT_EQ(src, ((r - s) % world + world) % world);
          const fr::Piece p = fr::ring_piece(world, r, s, n, causal);
          std::int64_t pairs = 0;
          for (std::int64_t i = p.q0; i < p.q1; ++i) {
            for (std::int64_t j = p.k0; j < p.k1; ++j) {
              if (p.causal && j - p.k0 > i - p.q0) continue;
              seen[i * N + position(src, j)]++;
              ++pairs;
            }
          }
          if (causal && s > 0) EXPECT_EQ(pairs, n * c) << "world " << world << " step " << s;
        }
        for (std::int64_t i = 0; i < n; ++i) {
          for (std::int64_t g = 0; g < N; ++g) {
            const int want = (!causal || g <= position(r, i)) ? 1 : 0;
            ASSERT_EQ(seen[i * N + g], want)
                << "world " << world << " rank " << r << " row " << i << " key " << g;
          }
        }
      }
    }
  }
}

TEST(RingMerge, EqualsSoftmaxOverTheUnion) {
  std::mt19937 gen(7);
  std::normal_distribution<double> normal(0.0, 3.0);
  for (int trial = 0; trial < 100; ++trial) {
    const int na = 1 + trial % 5, nb = 1 + trial % 7, D = 3;
    std::vector<double> s(na + nb), v((na + nb) * D);
    for (auto& x : s) x = normal(gen);
    for (auto& x : v) x = normal(gen);
    auto partial = [&](int j0, int j1, float& lse, std::vector<float>& o) {
      double mx = -INFINITY, sum = 0;
      for (int j = j0; j < j1; ++j) mx = std::max(mx, s[j]);
      for (int j = j0; j < j1; ++j) sum += std::exp(s[j] - mx);
      lse = float(mx + std::log(sum));
      o.assign(D, 0.0f);
      for (int j = j0; j < j1; ++j)
        for (int d = 0; d < D; ++d) o[d] += float(std::exp(s[j] - lse) * v[j * D + d]);
    };
    float la, lb, lall;
    std::vector<float> oa, ob, oall;
    partial(0, na, la, oa);
    partial(na, na + nb, lb, ob);
    partial(0, na + nb, lall, oall);
    const flashpp::detail::MergeWeights w = flashpp::detail::lse_merge(la, lb);
    EXPECT_NEAR(w.lse, lall, 1e-5 * std::max(1.0f, std::fabs(lall)));
    for (int d = 0; d < D; ++d) EXPECT_NEAR(w.w_acc * oa[d] + w.w_blk * ob[d], oall[d], 1e-4);
    // symmetric
    const flashpp::detail::MergeWeights w2 = flashpp::detail::lse_merge(lb, la);
    EXPECT_FLOAT_EQ(w2.lse, w.lse);
  }
}

TEST(RingMerge, EmptySidesGiveNoNaN) {
  const flashpp::detail::MergeWeights both = flashpp::detail::lse_merge(-INFINITY, -INFINITY);
  EXPECT_TRUE(std::isinf(both.lse) && both.lse < 0);
  EXPECT_EQ(both.w_acc, 0.0f);
  EXPECT_EQ(both.w_blk, 0.0f);
  const flashpp::detail::MergeWeights one = flashpp::detail::lse_merge(-INFINITY, 1.5f);
  EXPECT_FLOAT_EQ(one.lse, 1.5f);
  EXPECT_EQ(one.w_acc, 0.0f);
  EXPECT_FLOAT_EQ(one.w_blk, 1.0f);
}
