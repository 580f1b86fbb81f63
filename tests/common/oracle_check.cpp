#include "oracle_check.hpp"

#include <sstream>

#include "metrics.hpp"

namespace flashpp::test {
namespace {

void check_clean(CheckReport& r, const char* name, const HostTensor& t) {
  if (const auto n = count_nan(t); n > 0) {
    r.failures.push_back(std::string(name) + ": " + std::to_string(n) +
                         " NaN elements (unwritten, or computed NaN)");
  }
  if (!t.gaps_untouched()) r.failures.push_back(std::string(name) + ": a write landed outside the view");
}

void check_close(CheckReport& r, const char* name, const HostTensor& out, const HostTensor& ref,
                 double rtol, double atol) {
  double measured = 0;
  const bool ok = within(out, ref, rtol, atol, &measured);
  std::ostringstream m;
  m << name << " " << measured << " (limit " << rtol;
  if (atol > 0) m << " + floor " << atol << " rms";
  m << ")";
  r.measured.push_back(m.str());
  if (!ok) r.failures.push_back(m.str() + "; " + worst_element(out, ref));
}

}  // namespace

std::string CheckReport::text() const {
  std::ostringstream s;
  for (const auto& f : failures) s << "FAILED " << f << "\n";
  s << "measured:";
  for (const auto& m : measured) s << " [" << m << "]";
  return s.str();
}

CheckReport check_forward(const ForwardOutputs& out, const ForwardOutputs& ref,
                          const Tolerance& tol) {
  CheckReport r;
  check_clean(r, "o", out.o);
  check_clean(r, "lse", out.lse);
  check_close(r, "o", out.o, ref.o, tol.o, 0.0);
  const double lse_err = max_scaled_error(out.lse, ref.lse);
  std::ostringstream m;
  m << "lse " << lse_err << " (limit " << tol.lse << ")";
  r.measured.push_back(m.str());
  if (!(lse_err <= tol.lse)) r.failures.push_back(m.str() + "; " + worst_element(out.lse, ref.lse));
  return r;
}

CheckReport check_backward(const AttentionCase& c, const Gradients& out, const Gradients& ref,
                           const Tolerance& tol) {
  CheckReport r;
  check_clean(r, "dq", out.dq);
  check_clean(r, "dk", out.dk);
  check_clean(r, "dv", out.dv);
  const NoiseFloor floor = gradient_noise_floor(c);
  check_close(r, "dq", out.dq, ref.dq, tol.dq, floor.dq);
  check_close(r, "dk", out.dk, ref.dk, tol.dk, floor.dk);
  check_close(r, "dv", out.dv, ref.dv, tol.dv, 0.0);
  return r;
}

}  // namespace flashpp::test
