// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// dropout keep-mask built on it. Shared verbatim by the CPU and CUDA backends so that both
// produce the same mask element for element.
//
// The keep decision for attention element (b, h, i, j) of a problem with Hq query heads:
//   counter = (j / 4, i, b * Hq + h, offset_lo)      key = (seed_lo, seed_hi ^ offset_hi)
//   r       = philox4x32_10(counter, key)[j % 4]
//   keep    = (r >> 8) >= threshold,  threshold = ceil(p * 2^24)
// so one Philox call serves four consecutive keys of a row, and the mask depends only on
// (seed, offset, b, h, i, j), never on tiling or thread layout.
#pragma once

#include <cstdint>

#include "host_device.hpp"

namespace flashpp::detail {

struct PhiloxResult {
  std::uint32_t r[4];
};

FLASHPP_HD void philox_mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                               std::uint32_t& lo) {
#if defined(__CUDA_ARCH__)
  lo = a * b;
  hi = __umulhi(a, b);
#else
  const std::uint64_t product = static_cast<std::uint64_t>(a) * b;
  lo = static_cast<std::uint32_t>(product);
  hi = static_cast<std::uint32_t>(product >> 32);
#endif
}

FLASHPP_HD PhiloxResult philox4x32_10(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2,
                                      std::uint32_t c3, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kMul0, c0, hi0, lo0);
    philox_mulhilo(kMul1, c2, hi1, lo1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0;
    const std::uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return PhiloxResult{{c0, c1, c2, c3}};
}

// Everything the dropout mask needs, fixed once per call.
struct DropoutParams {
  float p = 0.0f;             // probability of dropping
  float keep_scale = 1.0f;    // 1 / (1 - p), applied to kept probabilities
  std::uint32_t threshold = 0;  // ceil(p * 2^24): keep iff (r >> 8) >= threshold
  std::uint32_t key0 = 0, key1 = 0, counter3 = 0;

  bool enabled() const { return threshold != 0; }
};

inline DropoutParams make_dropout_params(float p, std::uint64_t seed, std::uint64_t offset) {
  DropoutParams d;
  d.p = p;
  d.keep_scale = p > 0.0f ? static_cast<float>(1.0 / (1.0 - static_cast<double>(p))) : 1.0f;
  double t = static_cast<double>(p) * 16777216.0;
  std::uint32_t threshold = static_cast<std::uint32_t>(t);
  if (static_cast<double>(threshold) < t) ++threshold;
  d.threshold = threshold;
  d.key0 = static_cast<std::uint32_t>(seed);
  d.key1 = static_cast<std::uint32_t>(seed >> 32) ^ static_cast<std::uint32_t>(offset >> 32);
  d.counter3 = static_cast<std::uint32_t>(offset);
  return d;
}

// The four random words for keys 4*(j/4) .. 4*(j/4)+3 of row i of head bh = b*Hq + h.
FLASHPP_HD PhiloxResult dropout_random_words(const DropoutParams& d, std::uint32_t bh,
                                             std::uint32_t i, std::uint32_t j) {
  return philox4x32_10(j >> 2, i, bh, d.counter3, d.key0, d.key1);
}

FLASHPP_HD bool dropout_keep_word(std::uint32_t word, std::uint32_t threshold) {
  return (word >> 8) >= threshold;
}

// The keep decision of one element (slow path: one Philox call per element).
FLASHPP_HD bool dropout_keep(const DropoutParams& d, std::uint32_t bh, std::uint32_t i,
                             std::uint32_t j) {
  return dropout_keep_word(dropout_random_words(d, bh, i, j).r[j & 3u], d.threshold);
}

}  // namespace flashpp::detail
