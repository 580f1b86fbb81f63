// Runs one case: places its tensors, times the forward and/or backward, measures extra memory
// and checks the results.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "check.hpp"
#include "cli.hpp"
#include "progress.hpp"

namespace flashpp::bench {

struct RunSettings {
  Device device{};
  std::optional<int> repetitions;  // unset: the device's default (see runner.cpp)
  std::optional<int> warmup;
  bool check = true;
};

// One timed direction of one case.
struct Measurement {
  Case shape;
  Mode direction = Mode::forward;  // forward or backward
  int repetitions = 0;
  int input_sets = 1;  // input sets rotated through (CUDA, small shapes)
  double median_ms = 0, min_ms = 0;
  double flops = 0;
  bool exact_pairs = false;  // FLOPs from exactly counted visible pairs
  std::size_t workspace_bytes = 0;
  std::int64_t extra_bytes = -1;  // -1: unavailable
  CheckResult check;
  std::string error;  // set when the case could not run (the flashpp message)

  double flops_per_second() const { return median_ms > 0 ? flops / (median_ms * 1e-3) : 0; }
};

std::vector<Measurement> run_case(const Case& c, const RunSettings& settings,
                                  ProgressTicker& progress);

}  // namespace flashpp::bench
