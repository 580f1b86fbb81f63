// Checking a backend's outputs against the oracle's, tensor by tensor, with the limits of
// tolerance.hpp. Returns a report rather than asserting, so that a test can also check that a
// deliberately wrong result is rejected (test_check_sensitivity.cpp), and GPU tests can reuse it
// with their own Tolerance.
#pragma once

#include <string>
#include <vector>

#include "attention_case.hpp"
#include "tolerance.hpp"

namespace flashpp::test {

struct CheckReport {
  std::vector<std::string> failures;  // one line per failed check
  std::vector<std::string> measured;  // "o 1.2e-4 (limit 2e-3)" per tensor
  bool passed() const { return failures.empty(); }
  std::string text() const;  // all failures, then all measurements
};

// O and lse: no NaN, nothing written outside the views, O within tol.o relative error, lse
// within tol.lse (max |Δ| / max(1, |lse|), and -inf exactly where the oracle has it).
CheckReport check_forward(const ForwardOutputs& out, const ForwardOutputs& ref,
                          const Tolerance& tol);

// dQ, dK, dV: no NaN, nothing outside the views, relative error within tol plus, for dQ and dK,
// the absolute floor of gradient_noise_floor(c).
CheckReport check_backward(const AttentionCase& c, const Gradients& out, const Gradients& ref,
                           const Tolerance& tol);

}  // namespace flashpp::test
