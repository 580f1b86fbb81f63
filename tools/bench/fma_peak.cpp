#include "fma_peak.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include <immintrin.h>

namespace flashpp::bench {
namespace {

// One register-only FMA loop per instruction set, compiled for it by a target attribute (the
// build has no -march: the loop is chosen at run time, as the CPU kernels are). Enough
// independent accumulators to hide the FMA latency (4 cycles) on two FMA ports, and few enough
// to stay in registers (16 ymm / 32 zmm). acc = acc*m + a converges to a/(1-m), so values stay
// finite and normal; the result is returned so the loop cannot be dropped.
constexpr int kChainsAvx512 = 16, kChainsAvx2 = 12, kChainsScalar = 8;

__attribute__((target("avx512f"))) float fma_chains_avx512(long iterations, float seed) {
  __m512 acc[kChainsAvx512];
  for (int c = 0; c < kChainsAvx512; ++c) acc[c] = _mm512_set1_ps(seed + float(c));
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-3f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChainsAvx512; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
  }
  alignas(64) float f[16];
  float total = 0;
  for (int c = 0; c < kChainsAvx512; ++c) {
    _mm512_store_ps(f, acc[c]);
    for (float x : f) total += x;
  }
  return total;
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(long iterations, float seed) {
  __m256 acc[kChainsAvx2];
  for (int c = 0; c < kChainsAvx2; ++c) acc[c] = _mm256_set1_ps(seed + float(c));
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-3f);
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChainsAvx2; ++c) acc[c] = _mm256_fmadd_ps(acc[c], m, a);
  }
  alignas(32) float f[8];
  float total = 0;
  for (int c = 0; c < kChainsAvx2; ++c) {
    _mm256_store_ps(f, acc[c]);
    for (float x : f) total += x;
  }
  return total;
}

float fma_chains_scalar(long iterations, float seed) {
  float acc[kChainsScalar];
  for (int c = 0; c < kChainsScalar; ++c) acc[c] = seed + float(c);
  for (long i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChainsScalar; ++c) acc[c] = acc[c] * 0.999999f + 1e-3f;
  }
  float total = 0;
  for (float x : acc) total += x;
  return total;
}

struct PeakLoop {
  float (*run)(long, float);
  int lanes, chains;
  const char* isa;
};

PeakLoop choose_loop() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {fma_chains_avx512, 16, kChainsAvx512, "AVX-512"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return {fma_chains_avx2, 8, kChainsAvx2, "AVX2"};
  }
  return {fma_chains_scalar, 1, kChainsScalar, "scalar"};
}

// Seconds for every thread to run `iterations` rounds.
double timed_run(const PeakLoop& loop, long iterations, int threads, float* sink) {
  const auto start = std::chrono::steady_clock::now();
  float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  total += loop.run(iterations, float(omp_get_thread_num()));
  *sink += total;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

FmaPeak measure_fma_peak(int threads, double seconds) {
  if (threads <= 0) threads = omp_get_max_threads();
  float sink = 0;
  const PeakLoop loop = choose_loop();
  // Calibrate to runs of about 20 ms (the first runs also wake the threads and the wide-vector
  // units), then repeat them for `seconds` and keep the fastest: on a shared machine a short
  // run is the likeliest to find every core free, and the peak is what the cores can do.
  long iterations = 1 << 12;
  double t = timed_run(loop, iterations, threads, &sink);
  while (t < 0.02) {
    iterations *= 2;
    t = timed_run(loop, iterations, threads, &sink);
  }
  double best = t, spent = 0;
  while (spent < seconds) {
    const double run = timed_run(loop, iterations, threads, &sink);
    best = std::min(best, run);
    spent += run;
  }

  FmaPeak peak;
  peak.threads = threads;
  peak.vector_lanes = loop.lanes;
  peak.isa = loop.isa;
  const double flops = 2.0 * loop.lanes * loop.chains * double(iterations) * threads;
  peak.gflops = flops / best / 1e9 + (sink == 12345.0f ? 1e-30 : 0.0);  // keeps sink alive
  return peak;
}

}  // namespace flashpp::bench
