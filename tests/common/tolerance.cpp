#include "tolerance.hpp"

#include <cmath>
#include <vector>

#include "common/mask.hpp"
#include "metrics.hpp"

namespace flashpp::test {

Tolerance float32_kernel_tolerance(DType dtype) {
  const double u = unit_roundoff(dtype);
  Tolerance t;
  t.o = std::max(4 * u, 2e-5);
  t.dv = std::max(4 * u, 2e-5);
  t.dq = std::max(8 * u, 1e-4);
  t.dk = std::max(8 * u, 1e-4);
  t.lse = 2e-5;
  return t;
}

namespace {
// The mask of the case, by the rule documented in flashpp.hpp (Options).
detail::Mask mask_of(const AttentionCase& c) {
  const Options& o = c.options;
  detail::Mask m;
  m.shift = o.alignment == Alignment::bottom_right ? c.shape.Nk - c.shape.Nq : 0;
  m.left = o.window_left == kUnbounded ? detail::kNoLimit : o.window_left;
  m.right = o.window_right == kUnbounded ? detail::kNoLimit : o.window_right;
  if (o.causal) m.right = 0;
  return m;
}
}  // namespace

NoiseFloor gradient_noise_floor(const AttentionCase& c) {
  const AttentionShape& s = c.shape;
  const detail::Mask mask = mask_of(c);
  std::vector<double> keys(static_cast<std::size_t>(s.Nq), 0.0);
  for (std::int64_t i = 0; i < s.Nq; ++i) {
    for (std::int64_t j = 0; j < s.Nk; ++j) keys[i] += mask.visible(i, j) ? 1.0 : 0.0;
  }
  double row_sum = 0.0;
  std::int64_t rows = 0;
  for (double k : keys) {
    if (k > 0) {
      row_sum += 1.0 / k;
      ++rows;
    }
  }
  double key_sum = 0.0;  // sum over keys j of sum over rows i seeing j of 1/keys_i^2
  for (std::int64_t i = 0; i < s.Nq; ++i) {
    if (keys[i] > 0) key_sum += keys[i] * (1.0 / (keys[i] * keys[i]));
  }
  const double heads_per_kv = static_cast<double>(s.Hq / std::max<std::int64_t>(s.Hkv, 1));
  const double u_eff = unit_roundoff(c.dtype) + static_cast<double>(s.D) * std::ldexp(1.0, -24);
  const double dropout_scale = 1.0 / (1.0 - c.options.dropout_p);
  const double factor = 4.0 * u_eff * dropout_scale;
  NoiseFloor f;
  f.dq = rows > 0 ? factor * std::sqrt(row_sum / rows) : 0.0;
  f.dk = s.Nk > 0 ? factor * std::sqrt(heads_per_kv * key_sum / s.Nk) : 0.0;
  return f;
}

bool within(const HostTensor& out, const HostTensor& ref, double rtol, double atol,
            double* measured_relative) {
  const double err = rms_error(out, ref), size = rms(ref);
  if (measured_relative) *measured_relative = size > 0 ? err / size : err;
  return err <= rtol * size + atol;
}

}  // namespace flashpp::test
