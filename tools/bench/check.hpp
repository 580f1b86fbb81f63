// Correctness check of a benchmarked call: a slice of the problem is recomputed by the float64
// reference backend (Backend::cpu_reference) on float64 copies of the very same inputs, and
// compared with what the benchmarked backend wrote, tensor by tensor, as ||out - ref|| / ||ref||.
//
// Slices (chosen so the reference stays cheap, and so that the slice is an exact sub-problem):
//   o, lse, dq: batch 0, the first 1-2 query heads (with their kv heads), at most 256 query
//     rows (fewer for long keys) against all keys. Rows are the first ones for top-left
//     alignment and the last ones for bottom-right (the causal diagonal then stays in place).
//   dk, dv: sum over every query row and every query head sharing kv head 0, so their slice is
//     batch 0, kv head 0, all rows; skipped (and said so) when that is too large.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "tensors.hpp"

namespace flashpp::bench {

struct CheckResult {
  bool ran = false;
  double tolerance = 0;
  std::vector<std::pair<std::string, double>> errors;  // tensor name, relative error
  std::string skipped;                                 // what was not compared, and why

  bool pass() const;  // every error <= tolerance (NaN fails)
  double max_error() const;
  std::string summary() const;  // "PASS 3.2e-07 <= 1e-04 (o, lse)"
};

// The tolerance on ||out - ref|| / ||ref|| for a storage dtype (fp32 accumulation throughout).
double tolerance(DType dtype, Mode direction);

// Outputs downloaded to the host, contiguous in the case's layout.
struct HostOutputs {
  std::vector<std::byte> o, lse, dq, dk, dv;
};

CheckResult check_forward(const Case& c, const HostInputs& in, const HostOutputs& out);
CheckResult check_backward(const Case& c, const HostInputs& in, const HostOutputs& out);

}  // namespace flashpp::bench
