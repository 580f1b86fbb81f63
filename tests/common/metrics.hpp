// Error measures for comparing an output against the float64 oracle.
#pragma once

#include <cstdint>
#include <string>

#include "host_tensor.hpp"

namespace flashpp::test {

// ||out - ref|| / ||ref|| over the logical elements (Frobenius norms). When ref is all zero the
// absolute ||out|| is returned. Infinite when out holds a NaN or an infinity where ref is finite.
// Elements where both are the same infinity count as equal (lse of rows that see no key).
double relative_error(const HostTensor& out, const HostTensor& ref);

// ||out - ref|| / sqrt(numel): the root-mean-square absolute error (same NaN/inf rules).
double rms_error(const HostTensor& out, const HostTensor& ref);
// ||ref|| / sqrt(numel)
double rms(const HostTensor& t);

// The largest |out - ref| / max(1, |ref|) over the finite elements of ref; infinite when out
// and ref disagree on where the infinities are, or out holds a NaN. Meant for lse, whose values
// are log-sums: an absolute error for small values, a relative one for large.
double max_scaled_error(const HostTensor& out, const HostTensor& ref);

std::int64_t count_nan(const HostTensor& t);
std::int64_t count_nonfinite(const HostTensor& t);

// A short report of the worst element, for failure messages:
// "worst at [0, 3, 1, 17]: got 0.51, expected 0.5".
std::string worst_element(const HostTensor& out, const HostTensor& ref);

}  // namespace flashpp::test
