#include "gpu_runner.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "api/validate.hpp"
#include "common/half_convert.hpp"
#include "common/metrics.hpp"
#include "common/tolerance.hpp"
#include "gpu_buffer.hpp"

namespace flashpp::gpu_test {
namespace {

constexpr Device kCuda{DeviceType::cuda, 0};

// A device copy of a host tensor's whole storage (gaps included), viewed with the same strides.
struct DeviceTensor {
  DeviceBuffer buffer;
  TensorView view;
};

DeviceTensor to_device(const test::HostTensor& t) {
  DeviceTensor d{DeviceBuffer(t.raw_bytes()), t.view(kCuda)};
  if (t.raw_bytes() > 0) {
    cudaMemcpy(d.buffer.data(), t.raw(), t.raw_bytes(), cudaMemcpyHostToDevice);
    d.view.data = d.buffer.data();
  }
  return d;
}

void to_host(const DeviceTensor& d, test::HostTensor& t) {
  if (t.raw_bytes() > 0) cudaMemcpy(t.raw(), d.buffer.data(), t.raw_bytes(), cudaMemcpyDeviceToHost);
}

}  // namespace

test::ForwardOutputs run_forward_cuda(const test::AttentionInputs& in, Options options) {
  options.backend = Backend::cuda;
  test::ForwardOutputs out;
  out.o = in.q.like();
  out.lse = test::HostTensor::lse(DType::f32, in.q.size(0), in.q.size(2), in.q.size(1),
                                  in.q.layout());
  out.o.poison();
  out.lse.poison();
  DeviceTensor q = to_device(in.q), k = to_device(in.k), v = to_device(in.v);
  DeviceTensor o = to_device(out.o), lse = to_device(out.lse);
  flashpp::forward(q.view, k.view, v.view, o.view, lse.view, options);
  if (cudaDeviceSynchronize() != cudaSuccess) {
    throw Error(ErrorCode::backend_failure,
                std::string("forward kernel failed: ") + cudaGetErrorString(cudaGetLastError()));
  }
  to_host(o, out.o);
  to_host(lse, out.lse);
  return out;
}

test::HostTensor naive_forward_in_dtype(const test::AttentionInputs& in, const Options& options) {
  // The resolved problem (scale, mask, dropout) exactly as the backends see it.
  const detail::Problem p =
      detail::validate_inputs("naive_forward_in_dtype", in.q.view(), in.k.view(), in.v.view(),
                              options);
  const DType dt = in.q.dtype();
  auto rnd = [dt](float x) {
    return dt == DType::f16    ? detail::half_to_float(detail::float_to_half(x))
           : dt == DType::bf16 ? detail::bf16_to_float(detail::float_to_bf16(x))
                               : x;
  };
  // Row-major [B, N, H, D] float copies (the values are exact in float).
  const std::vector<double> qd = in.q.values(), kd = in.k.values(), vd = in.v.values();
  const std::vector<float> q(qd.begin(), qd.end()), k(kd.begin(), kd.end()), v(vd.begin(), vd.end());
  const std::int64_t B = p.B, Nq = p.Nq, Nk = p.Nk, Hq = p.Hq, Hkv = p.Hkv, D = p.D;
  const std::int64_t hpk = Hq / Hkv;
  std::vector<double> out(static_cast<std::size_t>(B * Nq * Hq * D));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t row = 0; row < B * Hq * Nq; ++row) {
    const std::int64_t b = row / (Hq * Nq), h = (row / Nq) % Hq, i = row % Nq;
    const float* qi = &q[((b * Nq + i) * Hq + h) * D];
    std::vector<float> s(Nk), pv(D, 0.0f);
    float mx = kNegInf;
    for (std::int64_t j = 0; j < Nk; ++j) {
      const float* kj = &k[((b * Nk + j) * Hkv + h / hpk) * D];
      float dot = 0.0f;
      for (std::int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
      float x = rnd(dot * p.scale);
      if (p.softcap > 0.0f) x = rnd(p.softcap * std::tanh(x / p.softcap));
      s[j] = p.mask.visible(i, j) ? x : kNegInf;
      mx = std::max(mx, s[j]);
    }
    float sum = 0.0f;
    for (std::int64_t j = 0; j < Nk; ++j) {
      s[j] = mx == kNegInf ? 0.0f : std::exp(s[j] - mx);
      sum += s[j];
    }
    for (std::int64_t j = 0; j < Nk; ++j) {
      float prob = sum > 0.0f ? rnd(s[j] / sum) : 0.0f;
      if (p.dropout.enabled()) {
        const bool keep = detail::dropout_keep(p.dropout, static_cast<std::uint32_t>(b * Hq + h),
                                               static_cast<std::uint32_t>(i),
                                               static_cast<std::uint32_t>(j));
        prob = keep ? rnd(prob * p.dropout.keep_scale) : 0.0f;
      }
      if (prob == 0.0f) continue;
      const float* vj = &v[((b * Nk + j) * Hkv + h / hpk) * D];
      for (std::int64_t d = 0; d < D; ++d) pv[d] += prob * vj[d];
    }
    for (std::int64_t d = 0; d < D; ++d) out[((b * Nq + i) * Hq + h) * D + d] = rnd(pv[d]);
  }
  test::HostTensor o = in.q.like();
  o.set_values(out);
  return o;
}

void expect_forward_matches_oracle(const test::AttentionCase& c, const test::AttentionInputs& in) {
  const double u = test::unit_roundoff(c.dtype);
  const test::Tolerance tol = test::float32_kernel_tolerance(c.dtype);
  const test::ForwardOutputs ours = run_forward_cuda(in, c.options);
  const test::OracleResult ref = test::run_oracle(in, c.options, /*with_backward=*/false);
  const test::HostTensor naive = naive_forward_in_dtype(in, c.options);
  EXPECT_EQ(test::count_nan(ours.o), 0) << "O has unwritten (NaN) elements";
  EXPECT_TRUE(ours.o.gaps_untouched());
  const double err = test::relative_error(ours.o, ref.fwd.o);
  const double naive_err = test::relative_error(naive, ref.fwd.o);
  EXPECT_LE(err, 2.0 * naive_err + 0.25 * u)
      << "naive error " << naive_err << "; " << test::worst_element(ours.o, ref.fwd.o);
  EXPECT_LE(err, tol.o) << test::worst_element(ours.o, ref.fwd.o);
  EXPECT_LE(test::max_scaled_error(ours.lse, ref.fwd.lse), tol.lse)
      << test::worst_element(ours.lse, ref.fwd.lse);
}

}  // namespace flashpp::gpu_test
