// Reproducible random numbers for tests.
//
// The generators are written out here (SplitMix64 and Box-Muller) instead of using
// std::normal_distribution, whose output is implementation-defined: a seed printed by a failing
// test must reproduce the same tensor with any compiler and standard library.
#pragma once

#include <cstdint>

namespace flashpp::test {

// SplitMix64 (Steele, Lea, Flood 2014): a tiny 64-bit generator with good statistical quality,
// plenty for test inputs.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  // Uniform in [0, 1), 53 random bits.
  double uniform();
  // Uniform integer in [0, n), n > 0 (modulo bias is irrelevant for test selection).
  std::uint64_t below(std::uint64_t n) { return next() % n; }

 private:
  std::uint64_t state_;
};

// Standard normal samples by the Box-Muller transform.
class NormalGenerator {
 public:
  explicit NormalGenerator(std::uint64_t seed) : uniform_(seed) {}
  double next();

 private:
  SplitMix64 uniform_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Derives an independent seed for the `stream`-th tensor of a case from the case's seed, so
// q, k, v and dout of one case are uncorrelated while one printed seed reproduces all four.
std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream);

}  // namespace flashpp::test
