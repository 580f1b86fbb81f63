// What a case costs (FLOPs by BENCHMARKING.md's convention) and the standard grids.
#pragma once

#include <vector>

#include "cli.hpp"

namespace flashpp::bench {

struct FlopCount {
  double forward = 0;        // 4 * B * Hq * (visible pairs) * D
  double backward = 0;       // 2.5 x forward
  bool exact_pairs = false;  // true: causal with Nq != Nk, visible pairs counted one by one
};

// The convention: 4*B*Hq*Nq*Nk*D, halved when causal with Nq = Nk. For causal with Nq != Nk
// there is no convention, so the visible (query, key) pairs are counted exactly.
FlopCount count_flops(const Case& c);

// The visible (query, key) pairs of one head under the case's mask.
double visible_pairs(const Case& c);

// The standard grid: on the CPU a handful of shapes that run in about a minute on two cores;
// on CUDA a subset of BENCHMARKING.md's grid (B = 4, Hq = 32, N in {1024, 4096, 16384},
// D in {64, 128}, causal or not, fp16 and bf16); pass a shape for the other points.
std::vector<Case> cpu_grid();
std::vector<Case> cuda_grid();

}  // namespace flashpp::bench
