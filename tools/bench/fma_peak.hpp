// The machine's fp32 FMA peak, measured: every thread runs fused multiply-adds on registers
// only (no memory traffic), with the widest vectors this file is compiled for. CPU results are
// printed as a fraction of it.
#pragma once

#include <string>

namespace flashpp::bench {

struct FmaPeak {
  double gflops = 0;  // fp32, all threads
  int threads = 0;
  int vector_lanes = 0;  // fp32 lanes per vector: 16 (AVX-512), 8 (AVX2), 1 (scalar)
  std::string isa;       // "AVX-512", "AVX2", "scalar"
};

// Runs about `seconds` of FMAs in short runs on `threads` OpenMP threads (0: all); the fastest
// run counts.
FmaPeak measure_fma_peak(int threads, double seconds = 1.0);

}  // namespace flashpp::bench
