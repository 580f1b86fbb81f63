#include "fma_peak.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace flashpp::bench {
namespace {

// Enough independent accumulators to hide the FMA latency (4 cycles) on two FMA ports, and few
// enough to stay in registers (16 ymm / 32 zmm).
#if defined(__AVX512F__)
constexpr int kLanes = 16;
constexpr int kChains = 16;
constexpr const char* kIsa = "AVX-512";
using Vec = __m512;
inline Vec splat(float x) { return _mm512_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float sum_lanes(Vec a) {
  // A store and a scalar sum rather than _mm512_reduce_add_ps, which trips GCC 12's
  // uninitialised-variable warning; this runs once per thread.
  alignas(64) float f[16];
  _mm512_store_ps(f, a);
  float total = 0;
  for (float x : f) total += x;
  return total;
}
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kLanes = 8;
constexpr int kChains = 12;
constexpr const char* kIsa = "AVX2";
using Vec = __m256;
inline Vec splat(float x) { return _mm256_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float sum_lanes(Vec a) {
  alignas(32) float f[8];
  _mm256_store_ps(f, a);
  return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
#else
constexpr int kLanes = 1;
constexpr int kChains = 8;
constexpr const char* kIsa = "scalar";
using Vec = float;
inline Vec splat(float x) { return x; }
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
inline float sum_lanes(Vec a) { return a; }
#endif

// `iterations` rounds of kChains independent FMAs. acc = acc*m + a converges to a/(1-m), so
// values stay finite and normal; the result is returned so the loop cannot be dropped.
float fma_chains(long iterations, float seed) {
  Vec acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = splat(seed + float(c));
  const Vec m = splat(0.999999f), a = splat(1e-3f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = fma(acc[c], m, a);
  }
  float total = 0;
  for (int c = 0; c < kChains; ++c) total += sum_lanes(acc[c]);
  return total;
}

// Seconds for every thread to run `iterations` rounds.
double timed_run(long iterations, int threads, float* sink) {
  const auto start = std::chrono::steady_clock::now();
  float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  total += fma_chains(iterations, float(omp_get_thread_num()));
  *sink += total;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

FmaPeak measure_fma_peak(int threads, double seconds) {
  if (threads <= 0) threads = omp_get_max_threads();
  float sink = 0;
  // Calibrate to runs of about 20 ms (the first runs also wake the threads and the wide-vector
  // units), then repeat them for `seconds` and keep the fastest: on a shared machine a short
  // run is the likeliest to find every core free, and the peak is what the cores can do.
  long iterations = 1 << 12;
  double t = timed_run(iterations, threads, &sink);
  while (t < 0.02) {
    iterations *= 2;
    t = timed_run(iterations, threads, &sink);
  }
  double best = t, spent = 0;
  while (spent < seconds) {
    const double run = timed_run(iterations, threads, &sink);
    best = std::min(best, run);
    spent += run;
  }

  FmaPeak peak;
  peak.threads = threads;
  peak.vector_lanes = kLanes;
  peak.isa = kIsa;
  const double flops = 2.0 * kLanes * kChains * double(iterations) * threads;
  peak.gflops = flops / best / 1e9 + (sink == 12345.0f ? 1e-30 : 0.0);  // keeps sink alive
  return peak;
}

}  // namespace flashpp::bench
