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
// on CUDA the grid of BENCHMARKING.md (B = 4, Hq = 32).
std::vector<Case> cpu_grid();
std::vector<Case> cuda_grid();

}  // namespace flashpp::bench
