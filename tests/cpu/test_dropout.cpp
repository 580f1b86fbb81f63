// Dropout: the keep mask every backend applies is exactly detail::dropout_keep (Philox), the
// backward applies the forward's mask, the keep fraction is 1 - p, and seeds, offsets and heads
// give different masks.
//
// Reading the mask back: with D = Nk and V = the identity (v_j = e_j), O_i = sum_j P̃_ij e_j,
// so O[i, j] = P̃_ij = P_ij * keep_ij / (1 - p). P_ij > 0 everywhere (no mask, moderate
// scores), so keep_ij is exactly "O[i, j] != 0", and the kept values must equal the dropout-free
// output times 1/(1 - p). With dO = the identity too (Nq = D), dV_j = sum_i P̃_ij dO_i gives
// dV[j, i] = P̃_ij: the backward's mask, readable the same way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "common/attention_case.hpp"
#include "common/philox.hpp"
#include "common/random.hpp"

namespace flashpp::test {
namespace {

using detail::dropout_keep;
using detail::make_dropout_params;

constexpr std::int64_t kB = 2, kH = 3, kN = 64;  // Nq = Nk = D = kN

// q, k random; v and dout the identity: v[b, j, h, d] = (j == d).
AttentionInputs identity_inputs(std::uint64_t seed) {
  AttentionCase c;
  c.shape = {kB, kN, kN, kH, kH, kN};
  c.dtype = DType::f32;
  c.seed = seed;
  AttentionInputs in = make_inputs(c);
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t n = 0; n < kN; ++n)
      for (std::int64_t h = 0; h < kH; ++h)
        for (std::int64_t d = 0; d < kN; ++d) {
          in.v.set(b, n, h, d, n == d ? 1.0 : 0.0);
          in.dout.set(b, n, h, d, n == d ? 1.0 : 0.0);
        }
  return in;
}

Options dropout_options(float p, std::uint64_t seed, std::uint64_t offset) {
  Options o;
  o.dropout_p = p;
  o.seed = seed;
  o.offset = offset;
  return o;
}

class DropoutMask : public ::testing::TestWithParam<Backend> {};

TEST_P(DropoutMask, ForwardAndBackwardApplyThePhiloxMask) {
  const Backend backend = GetParam();
  const AttentionInputs in = identity_inputs(11);
  const float p = 0.3f;
  const std::uint64_t seed = 0x0123456789ABCDEFull, offset = (7ull << 32) | 3u;
  const Options with = dropout_options(p, seed, offset);
  const ForwardOutputs plain = run_forward(in, Options{}, backend);
  const ForwardOutputs dropped = run_forward(in, with, backend);
  const Gradients grads = run_backward(in, dropped, with, backend);
  const auto params = make_dropout_params(p, seed, offset);
  const double keep_scale = 1.0 / (1.0 - p);

  std::int64_t kept = 0, total = 0;
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t h = 0; h < kH; ++h)
      for (std::int64_t i = 0; i < kN; ++i)
        for (std::int64_t j = 0; j < kN; ++j) {
          const bool keep = dropout_keep(params, static_cast<std::uint32_t>(b * kH + h),
                                         static_cast<std::uint32_t>(i),
                                         static_cast<std::uint32_t>(j));
          const double probability = plain.o.get(b, i, h, j);  // P_ij
          ASSERT_GT(probability, 0.0);
          const double expected = keep ? probability * keep_scale : 0.0;
          const double forward = dropped.o.get(b, i, h, j);   // P̃_ij from the forward
          const double backward = grads.dv.get(b, j, h, i);   // P̃_ij from the backward
          SCOPED_TRACE(::testing::Message() << "b " << b << " h " << h << " i " << i << " j " << j
                                            << " keep " << keep);
          if (keep) {
            ASSERT_NEAR(forward, expected, 1e-5 * expected);
            ASSERT_NEAR(backward, expected, 1e-5 * expected);
          } else {
            ASSERT_EQ(forward, 0.0);
            ASSERT_EQ(backward, 0.0);
          }
          kept += keep;
          ++total;
        }
  // lse is computed without dropout.
  for (std::int64_t b = 0; b < kB; ++b)
    for (std::int64_t h = 0; h < kH; ++h)
      for (std::int64_t i = 0; i < kN; ++i)
        ASSERT_NEAR(dropped.lse.get(b, h, i), plain.lse.get(b, h, i), 1e-5);
  // Keep fraction: binomial, sigma = sqrt(p (1-p) / n) ≈ 0.0033 for n = 18432; 5 sigma.
  const double fraction = static_cast<double>(kept) / total;
  EXPECT_NEAR(fraction, 1.0 - p, 5 * std::sqrt(p * (1 - p) / total));
}

TEST_P(DropoutMask, SeedOffsetAndHeadChangeTheMask) {
  const Backend backend = GetParam();
  const AttentionInputs in = identity_inputs(12);
  const float p = 0.5f;
  const ForwardOutputs base = run_forward(in, dropout_options(p, 1, 0), backend);
  const ForwardOutputs again = run_forward(in, dropout_options(p, 1, 0), backend);
  const ForwardOutputs other_seed = run_forward(in, dropout_options(p, 2, 0), backend);
  const ForwardOutputs other_offset = run_forward(in, dropout_options(p, 1, 1), backend);
  const ForwardOutputs other_offset_high = run_forward(in, dropout_options(p, 1, 1ull << 32), backend);
  auto disagreement = [&](const ForwardOutputs& other) {
    std::int64_t differ = 0, total = 0;
    for (std::int64_t b = 0; b < kB; ++b)
      for (std::int64_t h = 0; h < kH; ++h)
        for (std::int64_t i = 0; i < kN; ++i)
          for (std::int64_t j = 0; j < kN; ++j, ++total)
            differ += (base.o.get(b, i, h, j) == 0.0) != (other.o.get(b, i, h, j) == 0.0);
    return static_cast<double>(differ) / total;
  };
  EXPECT_EQ(disagreement(again), 0.0) << "same seed and offset must give the same mask";
  // Independent masks disagree with probability 2p(1-p) = 0.5; sigma ≈ 0.0037, 5 sigma.
  const double bound = 5 * std::sqrt(0.25 / (kB * kH * kN * kN));
  EXPECT_NEAR(disagreement(other_seed), 0.5, bound) << "seed";
  EXPECT_NEAR(disagreement(other_offset), 0.5, bound) << "offset (low 32 bits)";
  EXPECT_NEAR(disagreement(other_offset_high), 0.5, bound) << "offset (high 32 bits)";
  // Heads of one call get different masks too.
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < kN; ++i)
    for (std::int64_t j = 0; j < kN; ++j)
      differ += (base.o.get(0, i, 0, j) == 0.0) != (base.o.get(0, i, 1, j) == 0.0);
  EXPECT_GT(differ, kN * kN / 4) << "heads 0 and 1 share a mask";
}

INSTANTIATE_TEST_SUITE_P(Backends, DropoutMask,
                         ::testing::Values(Backend::cpu, Backend::cpu_reference),
                         [](const auto& info) {
                           return info.param == Backend::cpu ? std::string("cpu")
                                                             : std::string("cpu_reference");
                         });

// The Philox mask itself: keep fraction over a million elements for several p, with a 5-sigma
// bound (sigma = sqrt(p(1-p)/n) <= 0.0005), and the threshold rounding of p to 2^-24.
TEST(DropoutPhilox, KeepFractionIsOneMinusP) {
  for (float p : {0.01f, 0.1f, 0.5f, 0.9f}) {
    const auto params = make_dropout_params(p, 0xDEADBEEFCAFEull, 17);
    EXPECT_NEAR(params.threshold / 16777216.0, p, 1.0 / 16777216.0);
    EXPECT_NEAR(params.keep_scale, 1.0 / (1.0 - p), 1e-6 / (1.0 - p));
    std::int64_t kept = 0, total = 0;
    for (std::uint32_t bh = 0; bh < 4; ++bh)
      for (std::uint32_t i = 0; i < 512; ++i)
        for (std::uint32_t j = 0; j < 512; ++j, ++total) kept += dropout_keep(params, bh, i, j);
    const double fraction = static_cast<double>(kept) / total;
    EXPECT_NEAR(fraction, 1.0 - p, 5 * std::sqrt(p * (1 - p) / total)) << "p = " << p;
  }
}

TEST(DropoutPhilox, ZeroProbabilityDisablesDropout) {
  const auto params = make_dropout_params(0.0f, 123, 456);
  EXPECT_FALSE(params.enabled());
  EXPECT_EQ(params.keep_scale, 1.0f);
}

// One Philox call serves four keys: the fast path (one call per 4 keys) and the per-element
// slow path must agree, including at row ends that are not multiples of 4.
TEST(DropoutPhilox, FourKeysPerCallAgreesWithPerElement) {
  const auto params = make_dropout_params(0.37f, 99, 1ull << 40);
  for (std::uint32_t i = 0; i < 8; ++i)
    for (std::uint32_t j0 = 0; j0 < 40; j0 += 4) {
      const auto words = detail::dropout_random_words(params, 5, i, j0);
      for (std::uint32_t t = 0; t < 4; ++t) {
        EXPECT_EQ(detail::dropout_keep_word(words.r[t], params.threshold),
                  dropout_keep(params, 5, i, j0 + t));
      }
    }
}

// Philox4x32-10 known-answer vectors (Random123's kat_vectors): a regression guard, since every
// backend (and any framework comparing masks) must use exactly this generator.
TEST(DropoutPhilox, KnownAnswerVectors) {
  {
    const auto r = detail::philox4x32_10(0, 0, 0, 0, 0, 0);
    EXPECT_EQ(r.r[0], 0x6627e8d5u);
    EXPECT_EQ(r.r[1], 0xe169c58du);
    EXPECT_EQ(r.r[2], 0xbc57ac4cu);
    EXPECT_EQ(r.r[3], 0x9b00dbd8u);
  }
  {
    const auto r = detail::philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
                                         0xffffffffu, 0xffffffffu);
    EXPECT_EQ(r.r[0], 0x408f276du);
    EXPECT_EQ(r.r[1], 0x41c83b0eu);
    EXPECT_EQ(r.r[2], 0xa20bc7c6u);
    EXPECT_EQ(r.r[3], 0x6d5451fdu);
  }
  {
    const auto r = detail::philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u,
                                         0xa4093822u, 0x299f31d0u);
    EXPECT_EQ(r.r[0], 0xd16cfe09u);
    EXPECT_EQ(r.r[1], 0x94fdccebu);
    EXPECT_EQ(r.r[2], 0x5001e420u);
    EXPECT_EQ(r.r[3], 0x24126ea1u);
  }
}

}  // namespace
}  // namespace flashpp::test
