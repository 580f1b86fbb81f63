#include "metrics.hpp"

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

namespace flashpp::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Difference of two elements, with equal infinities counting as equal and any NaN as infinite.
double element_difference(double out, double ref) {
  if (std::isnan(out) || std::isnan(ref)) return kInf;
  if (std::isinf(out) || std::isinf(ref)) return out == ref ? 0.0 : kInf;
  return out - ref;
}

struct Norms {
  double diff2 = 0.0, ref2 = 0.0;
  std::int64_t n = 0;
};

Norms norms(const HostTensor& out, const HostTensor& ref) {
  const std::vector<double> a = out.values(), b = ref.values();
  Norms r;
  r.n = static_cast<std::int64_t>(a.size());
  if (a.size() != b.size()) {
    r.diff2 = kInf;
    return r;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = element_difference(a[i], b[i]);
    r.diff2 += d * d;
    if (std::isfinite(b[i])) r.ref2 += b[i] * b[i];
  }
  return r;
}

}  // namespace

double relative_error(const HostTensor& out, const HostTensor& ref) {
  const Norms r = norms(out, ref);
  if (r.ref2 == 0.0) return std::sqrt(r.diff2);
  return std::sqrt(r.diff2 / r.ref2);
}

double rms_error(const HostTensor& out, const HostTensor& ref) {
  const Norms r = norms(out, ref);
  return r.n == 0 ? 0.0 : std::sqrt(r.diff2 / static_cast<double>(r.n));
}

double rms(const HostTensor& t) {
  double s = 0.0;
  const std::vector<double> a = t.values();
  for (double x : a) s += x * x;
  return a.empty() ? 0.0 : std::sqrt(s / static_cast<double>(a.size()));
}

double max_scaled_error(const HostTensor& out, const HostTensor& ref) {
  const std::vector<double> a = out.values(), b = ref.values();
  if (a.size() != b.size()) return kInf;
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = element_difference(a[i], b[i]);
    if (std::isinf(d)) return kInf;
    if (std::isfinite(b[i])) worst = std::max(worst, std::abs(d) / std::max(1.0, std::abs(b[i])));
  }
  return worst;
}

std::int64_t count_nan(const HostTensor& t) {
  std::int64_t n = 0;
  for (double x : t.values()) n += std::isnan(x) ? 1 : 0;
  return n;
}

std::int64_t count_nonfinite(const HostTensor& t) {
  std::int64_t n = 0;
  for (double x : t.values()) n += std::isfinite(x) ? 0 : 1;
  return n;
}

std::string worst_element(const HostTensor& out, const HostTensor& ref) {
  const std::vector<double> a = out.values(), b = ref.values();
  if (a.size() != b.size() || a.empty()) return "no elements";
  std::size_t worst = 0;
  double worst_diff = -1.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(element_difference(a[i], b[i]));
    if (d > worst_diff) {
      worst_diff = d;
      worst = i;
    }
  }
  // Unravel the row-major index.
  std::int64_t index[4] = {0, 0, 0, 0};
  std::int64_t rest = static_cast<std::int64_t>(worst);
  for (int dim = out.rank() - 1; dim >= 0; --dim) {
    index[dim] = rest % out.size(dim);
    rest /= out.size(dim);
  }
  std::ostringstream s;
  s << "worst at [";
  for (int dim = 0; dim < out.rank(); ++dim) s << (dim ? ", " : "") << index[dim];
  s << "]: got " << a[worst] << ", expected " << b[worst];
  return s.str();
}

}  // namespace flashpp::test
