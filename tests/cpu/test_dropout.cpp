// Dropout: the keep mask every backend applies is exactly detail::dropout_keep (Philox), the
// backward applies the forward's mask, the keep fraction is 1 - p (p quantised to 1/256), and
// seeds, offsets and heads give different masks.
//
// Reading the mask back: with D = Nk and V = the identity (v_j = e_j), O_i = sum_j P̃_ij e_j,
// so O[i, j] = P̃_ij = P_ij * keep_ij * keep_scale. P_ij > 0 everywhere (no mask, moderate
// scores), so keep_ij is exactly "O[i, j] != 0", and the kept values must equal the dropout-free
// output times keep_scale = 256 / (256 - threshold). With dO = the identity too (Nq = D), dV_j = sum_i P̃_ij dO_i gives
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
  const double keep_scale = 256.0 / (256.0 - std::lround(p * 256.0));

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
  const double p_used = params.effective_p();
  EXPECT_NEAR(fraction, 1.0 - p_used, 5 * std::sqrt(p_used * (1 - p_used) / total));
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
// bound (sigma = sqrt(p(1-p)/n) <= 0.0005), the rounding of p to a multiple of 1/256, and the
// scale that keeps the expectation exact for the rounded p.
TEST(DropoutPhilox, KeepFractionIsOneMinusP) {
  for (float p : {0.01f, 0.1f, 0.5f, 0.9f}) {
    const auto params = make_dropout_params(p, 0xDEADBEEFCAFEull, 17);
    EXPECT_EQ(params.threshold, static_cast<std::uint32_t>(std::lround(p * 256.0)));
    EXPECT_NEAR(params.effective_p(), p, 0.5 / 256.0);
    EXPECT_NEAR(params.keep_scale * (1.0 - params.effective_p()), 1.0, 1e-6);
    std::int64_t kept = 0, total = 0;
    for (std::uint32_t bh = 0; bh < 4; ++bh)
      for (std::uint32_t i = 0; i < 512; ++i)
        for (std::uint32_t j = 0; j < 512; ++j, ++total) kept += dropout_keep(params, bh, i, j);
    const double fraction = static_cast<double>(kept) / total;
    const double p_used = params.effective_p();
    EXPECT_NEAR(fraction, 1.0 - p_used, 5 * std::sqrt(p_used * (1 - p_used) / total)) << "p = " << p;
  }
}

TEST(DropoutPhilox, ZeroProbabilityDisablesDropout) {
  const auto params = make_dropout_params(0.0f, 123, 456);
  EXPECT_FALSE(params.enabled());
  EXPECT_EQ(params.keep_scale, 1.0f);
}

// A tiny p is never silently rounded to no dropout, and p just below 1 still keeps something.
TEST(DropoutPhilox, ThresholdStaysInsideOneTo255) {
  EXPECT_EQ(make_dropout_params(1e-6f, 1, 2).threshold, 1u);
  EXPECT_TRUE(make_dropout_params(1e-6f, 1, 2).enabled());
  EXPECT_EQ(make_dropout_params(0.9999f, 1, 2).threshold, 255u);
  EXPECT_NEAR(make_dropout_params(0.9999f, 1, 2).keep_scale, 256.0, 1e-3);
}

// The definition written out independently of philox.hpp's helpers: element (i, j) is byte
// 2 * ((i / 8) % 2) + (j / 8) % 2 of word 2 * (i % 2) + j % 2 of the call with counter
// (4 * (j / 16) + (j % 8) / 2, 4 * (i / 16) + (i % 8) / 2, bh, offset_lo), and keep iff
// byte >= t. Also: the 16 elements of one call are a 4 x 4 comb of a 16 x 16 block, which two
// lanes of an m16n8 accumulator (or of its transpose) hold as two whole words each.
TEST(DropoutPhilox, SixteenElementsPerCallAsDefined) {
  const auto params = make_dropout_params(0.37f, 99, (5ull << 32) | 1234u);
  const std::uint32_t bh = 5;
  int checked = 0;
  for (std::uint32_t i = 0; i < 40; ++i) {
    for (std::uint32_t j = 0; j < 100; ++j) {
      const auto words = detail::philox4x32<7>(4 * (j / 16) + (j % 8) / 2, 4 * (i / 16) + (i % 8) / 2,
                                               bh, 1234u, 99u, 0u ^ 5u);
      const unsigned word = 2 * (i % 2) + j % 2, byte_in_word = 2 * ((i / 8) % 2) + (j / 8) % 2;
      const std::uint32_t byte = (words.r[word] >> (8 * byte_in_word)) & 0xFF;
      ASSERT_EQ(dropout_keep(params, bh, i, j), byte >= params.threshold) << i << " " << j;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4000);
  // Lanes g = 2a and 2a + 1 at t = c of an m16n8 accumulator over the 16 x 16 block at
  // (16 * 3, 16 * 5) hold rows g, g + 8 x keys 2c, 2c + 1, 2c + 8, 2c + 9: together one call,
  // each element its own byte, each lane two whole words (rows of one parity).
  for (std::uint32_t a = 0; a < 4; ++a) {
    for (std::uint32_t c = 0; c < 4; ++c) {
      const std::uint32_t i0 = 16 * 3 + 2 * a, j0 = 16 * 5 + 2 * c;
      const auto call = detail::dropout_random_bytes(params, bh, i0, j0);
      unsigned seen = 0;
      for (std::uint32_t g = 2 * a; g < 2 * a + 2; ++g) {
        unsigned words_of_lane = 0;
        for (std::uint32_t half = 0; half < 2; ++half)
          for (std::uint32_t key : {0u, 1u, 8u, 9u}) {
            const std::uint32_t i = 16 * 3 + g + 8 * half, j = j0 + key;
            const auto other = detail::dropout_random_bytes(params, bh, i, j);
            for (int w = 0; w < 4; ++w) ASSERT_EQ(other.r[w], call.r[w]);
            seen |= 1u << detail::dropout_byte_index(i, j);
            words_of_lane |= 1u << detail::dropout_word_index(i, j);
          }
        EXPECT_EQ(words_of_lane, (g % 2) ? 0xCu : 0x3u);
      }
      EXPECT_EQ(seen, 0xFFFFu);
    }
  }
}

// dropout_keep_signs decides four bytes at once exactly as the byte compare does, for every
// threshold the parameters can hold (1 .. 256) and every byte value in every position.
TEST(DropoutPhilox, FourBytesAtOnceMatchTheByteCompare) {
  for (float p : {0.001f, 0.1f, 0.25f, 0.4999f, 0.5f, 0.5001f, 0.75f, 0.9f, 0.999f, 1.0f}) {
    const auto params = make_dropout_params(p, 1, 2);
    for (std::uint32_t threshold = 1; threshold <= 256; ++threshold) {
      auto d = params;
      d.threshold = threshold;
      const std::uint32_t small = threshold <= 128 ? threshold : 256 - threshold;
      d.threshold_bytes = small * 0x01010101u;
      d.complement = threshold <= 128 ? 0u : 0xFFFFFFFFu;
      for (std::uint32_t v = 0; v < 256; ++v) {
        // v in each position, its neighbours chosen to provoke borrows (0, 255, v ^ 0x80).
        const std::uint32_t word = v | (0u << 8) | (255u << 16) | ((v ^ 0x80u) << 24);
        const std::uint32_t signs = detail::dropout_keep_signs(word, d);
        for (int k = 0; k < 4; ++k) {
          const std::uint32_t byte = (word >> (8 * k)) & 0xFF;
          ASSERT_EQ(((signs >> (8 * k + 7)) & 1u) != 0, byte >= threshold)
              << "threshold " << threshold << " byte " << byte << " position " << k;
        }
      }
    }
    // And make_dropout_params fills the fields the same way.
    const std::uint32_t t = params.threshold;
    EXPECT_EQ(params.threshold_bytes, (t <= 128 ? t : 256 - t) * 0x01010101u) << p;
    EXPECT_EQ(params.complement, t <= 128 ? 0u : 0xFFFFFFFFu) << p;
  }
}

// Philox4x32 known-answer vectors (Random123's kat_vectors) at 10 rounds and at the mask's 7: a
// regression guard, since every backend (and any framework comparing masks) must use exactly this
// generator.
TEST(DropoutPhilox, KnownAnswerVectors) {
  static_assert(detail::kDropoutPhiloxRounds == 7, "the mask's rounds (docs and KATs below)");
  struct Kat {
    int rounds;
    std::uint32_t counter[4], key[2], out[4];
  };
  const Kat kats[] = {
      {7, {0, 0, 0, 0}, {0, 0}, {0x5f6fb709u, 0x0d893f64u, 0x4f121f81u, 0x4f730a48u}},
      {7, {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
       {0x5207ddc2u, 0x45165e59u, 0x4d8ee751u, 0x8c52f662u}},
      {7, {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
       {0x4dfccabau, 0x190a87f0u, 0xc47362bau, 0xb6b5242au}},
      {10, {0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {10, {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {10, {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    const auto& c = k.counter;
    const detail::PhiloxResult r =
        k.rounds == 7 ? detail::philox4x32<7>(c[0], c[1], c[2], c[3], k.key[0], k.key[1])
                      : detail::philox4x32<10>(c[0], c[1], c[2], c[3], k.key[0], k.key[1]);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(r.r[w], k.out[w]) << k.rounds << " rounds, word " << w;
  }
}

}  // namespace
}  // namespace flashpp::test
