#include "fp8_case.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "common/half_convert.hpp"
#include "fp8_tensor_core.hpp"
#include "random.hpp"

namespace flashpp::test {
namespace {

constexpr double kE4m3Max = 448.0;
constexpr double kInf = std::numeric_limits<double>::infinity();

double round_e4m3(double x) { return detail::e4m3_to_float(detail::float_to_e4m3(static_cast<float>(x))); }

double round_to(DType dtype, double x) {
  const float f = static_cast<float>(x);
  switch (dtype) {
    case DType::bf16: return detail::bf16_to_float(detail::float_to_bf16(f));
    case DType::f16: return detail::half_to_float(detail::float_to_half(f));
    default: return f;
  }
}

// The visible key range [first, last] of query row i (last < first: none).
void visible_keys(const Fp8Case& c, std::int64_t i, std::int64_t& first, std::int64_t& last) {
  const auto& s = c.shape;
  const std::int64_t shift = c.alignment == Alignment::bottom_right ? s.Nk - s.Nq : 0;
  first = 0;
  last = s.Nk - 1;
  if (c.causal) last = std::min(last, i + shift);
  if (c.window_left != kUnbounded) first = std::max<std::int64_t>(0, i + shift - c.window_left);
}

// The values of a [B, N, H, D] tensor in [B, N, H, D] order (fast indexing for the loops here).
struct Dense {
  std::vector<double> v;
  std::int64_t N, H, D;
  explicit Dense(const HostTensor& t) : v(t.values()), N(t.size(1)), H(t.size(2)), D(t.size(3)) {}
  const double* row(std::int64_t b, std::int64_t n, std::int64_t h) const {
    return v.data() + ((b * N + n) * H + h) * D;
  }
};

HostTensor bnhd_f64(std::int64_t B, std::int64_t N, std::int64_t H, std::int64_t D) {
  return HostTensor::attention(DType::f64, B, N, H, D, Layout::bnhd);
}

}  // namespace

std::string Fp8Case::describe() const {
  std::ostringstream s;
  s << "B=" << shape.B << " Nq=" << shape.Nq << " Nk=" << shape.Nk << " Hq=" << shape.Hq
    << " Hkv=" << shape.Hkv << " D=" << shape.D << " e4m3->" << to_string(out_dtype) << " "
    << to_string(layout) << (inputs == Fp8Inputs::outliers ? " outliers" : " normal")
    << (causal ? (alignment == Alignment::bottom_right ? " causal bottom_right" : " causal top_left")
               : "")
    << (window_left != kUnbounded ? " window_left=" + std::to_string(window_left) : "")
    << (descales ? " descales" : " no-descales") << " seed=" << seed;
  return s.str();
}

Options Fp8Case::options() const {
  Options o;
  o.causal = causal;
  o.alignment = alignment;
  o.window_left = window_left;
  return o;
}

Fp8Data make_fp8_data(const Fp8Case& c) {
  const auto& s = c.shape;
  const std::int64_t group = s.Hq / s.Hkv;
  Fp8Data d;
  struct Spec {
    HostTensor* t8;
    HostTensor* t64;
    std::vector<float>* scale;
    std::int64_t N, H, heads_per_scale;
    double outlier;   // factor of the outlier channels
    int outlier_phase;
  };
  d.q = HostTensor::attention(DType::e4m3, s.B, s.Nq, s.Hq, s.D, c.layout);
  d.k = HostTensor::attention(DType::e4m3, s.B, s.Nk, s.Hkv, s.D, c.layout);
  d.v = HostTensor::attention(DType::e4m3, s.B, s.Nk, s.Hkv, s.D, c.layout);
  d.q64 = bnhd_f64(s.B, s.Nq, s.Hq, s.D);
  d.k64 = bnhd_f64(s.B, s.Nk, s.Hkv, s.D);
  d.v64 = bnhd_f64(s.B, s.Nk, s.Hkv, s.D);
  const bool outliers = c.inputs == Fp8Inputs::outliers;
  const Spec specs[3] = {{&d.q, &d.q64, &d.q_scale, s.Nq, s.Hq, group, outliers ? 8.0 : 1.0, 3},
                         {&d.k, &d.k64, &d.k_scale, s.Nk, s.Hkv, 1, outliers ? 8.0 : 1.0, 3},
                         {&d.v, &d.v64, &d.v_scale, s.Nk, s.Hkv, 1, outliers ? 10.0 : 1.0, 5}};
  for (int t = 0; t < 3; ++t) {
    const Spec& sp = specs[t];
    NormalGenerator normal(derive_seed(c.seed, static_cast<std::uint64_t>(t)));
    // Raw values [B, N, H, D]; in e4m3's range already when the case has no descales.
    std::vector<double> raw(static_cast<std::size_t>(s.B * sp.N * sp.H * s.D));
    const double stddev = c.descales ? 3.0 : 1.0;  // any scale: the descale absorbs it
    for (std::int64_t e = 0; e < static_cast<std::int64_t>(raw.size()); ++e) {
      const std::int64_t dd = e % s.D;
      raw[e] = stddev * normal.next() * (dd % 16 == sp.outlier_phase ? sp.outlier : 1.0);
    }
    auto at = [&](std::int64_t b, std::int64_t n, std::int64_t h, std::int64_t dd) -> double& {
      return raw[static_cast<std::size_t>(((b * sp.N + n) * sp.H + h) * s.D + dd)];
    };
    sp.scale->assign(static_cast<std::size_t>(s.B * s.Hkv), 1.0f);
    for (std::int64_t b = 0; b < s.B; ++b)
      for (std::int64_t g = 0; g < s.Hkv; ++g) {
        float descale = 1.0f;
        if (c.descales) {
          double amax = 0.0;
          for (std::int64_t h = g * sp.heads_per_scale; h < (g + 1) * sp.heads_per_scale; ++h)
            for (std::int64_t n = 0; n < sp.N; ++n)
              for (std::int64_t dd = 0; dd < s.D; ++dd) amax = std::max(amax, std::abs(at(b, n, h, dd)));
          descale = amax > 0.0 ? static_cast<float>(amax / kE4m3Max) : 1.0f;
        }
        (*sp.scale)[static_cast<std::size_t>(b * s.Hkv + g)] = descale;
        for (std::int64_t h = g * sp.heads_per_scale; h < (g + 1) * sp.heads_per_scale; ++h)
          for (std::int64_t n = 0; n < sp.N; ++n)
            for (std::int64_t dd = 0; dd < s.D; ++dd) {
              const double x8 = round_e4m3(at(b, n, h, dd) / descale);
              sp.t8->set(b, n, h, dd, x8);
              sp.t64->set(b, n, h, dd, x8 * static_cast<double>(descale));
            }
      }
  }
  return d;
}

TensorView descale_view(const Fp8Case& c, const void* data, Device device) {
  if (!c.descales) return TensorView{};
  TensorView t;
  t.data = const_cast<void*>(data);
  t.dtype = DType::f32;
  t.device = device;
  t.rank = 2;
  t.sizes[0] = c.shape.B;
  t.sizes[1] = c.shape.Hkv;
  t.strides[0] = c.shape.Hkv;
  t.strides[1] = 1;
  return t;
}

ForwardOutputs fp8_outputs(const Fp8Case& c) {
  const auto& s = c.shape;
  ForwardOutputs out;
  out.o = HostTensor::attention(c.out_dtype, s.B, s.Nq, s.Hq, s.D, c.layout);
  out.lse = HostTensor::lse(DType::f32, s.B, s.Hq, s.Nq, c.layout);
  return out;
}

ForwardOutputs run_fp8_forward_host(const Fp8Case& c, const Fp8Data& d, Backend backend) {
  Options o = c.options();
  o.backend = backend;
  o.q_descale = descale_view(c, d.q_scale.data());
  o.k_descale = descale_view(c, d.k_scale.data());
  o.v_descale = descale_view(c, d.v_scale.data());
  ForwardOutputs out = fp8_outputs(c);
  flashpp::forward(d.q.view(), d.k.view(), d.v.view(), out.o.view(), out.lse.view(), o);
  return out;
}

ForwardOutputs fp8_oracle(const Fp8Case& c, const Fp8Data& d) {
  const auto& s = c.shape;
  Options o = c.options();
  o.backend = Backend::cpu_reference;
  ForwardOutputs out;
  out.o = bnhd_f64(s.B, s.Nq, s.Hq, s.D);
  out.lse = HostTensor::lse(DType::f64, s.B, s.Hq, s.Nq);
  flashpp::forward(d.q64.view(), d.k64.view(), d.v64.view(), out.o.view(), out.lse.view(), o);
  return out;
}

ForwardOutputs naive_fp8_forward(const Fp8Case& c, const Fp8Data& d) {
  const auto& s = c.shape;
  const std::int64_t group = s.Hq / s.Hkv;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.D)));
  ForwardOutputs out;
  out.o = HostTensor::attention(c.out_dtype, s.B, s.Nq, s.Hq, s.D, Layout::bnhd);
  out.lse = HostTensor::lse(DType::f32, s.B, s.Hq, s.Nq);
  std::vector<float> p(static_cast<std::size_t>(s.Nk)), o(static_cast<std::size_t>(s.D));
  const Dense q(d.q64), k(d.k64), v(d.v64);
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < s.Hq; ++h)
      for (std::int64_t i = 0; i < s.Nq; ++i) {
        std::int64_t first, last;
        visible_keys(c, i, first, last);
        float m = -std::numeric_limits<float>::infinity();
        for (std::int64_t j = first; j <= last; ++j) {
          float acc = 0.0f;
          const double* qi = q.row(b, i, h);
          const double* kj = k.row(b, j, h / group);
          for (std::int64_t dd = 0; dd < s.D; ++dd) acc += static_cast<float>(qi[dd]) * static_cast<float>(kj[dd]);
          p[j] = acc * scale;
          m = std::max(m, p[j]);
        }
        float l = 0.0f;
        for (std::int64_t j = first; j <= last; ++j) l += (p[j] = std::exp(p[j] - m));
        std::fill(o.begin(), o.end(), 0.0f);
        for (std::int64_t j = first; j <= last; ++j) {
          const float pj = static_cast<float>(round_e4m3(p[j] / l));
          const double* vj = v.row(b, j, h / group);
          for (std::int64_t dd = 0; dd < s.D; ++dd) o[dd] += pj * static_cast<float>(vj[dd]);
        }
        for (std::int64_t dd = 0; dd < s.D; ++dd) out.o.set(b, i, h, dd, round_to(c.out_dtype, o[dd]));
        out.lse.set(b, h, i, 0, last >= first ? m + std::log(l) : -kInf);
      }
  return out;
}

HostTensor fp8_lse_bounds(const Fp8Case& c, const Fp8Data& d, const HostTensor& lse_ref) {
  const auto& s = c.shape;
  const std::int64_t group = s.Hq / s.Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
  HostTensor bounds = HostTensor::lse(DType::f64, s.B, s.Hq, s.Nq);
  const Dense q(d.q64), k(d.k64);
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < s.Hq; ++h)
      for (std::int64_t i = 0; i < s.Nq; ++i) {
        std::int64_t first, last;
        visible_keys(c, i, first, last);
        double magnitude = 0.0;
        for (std::int64_t j = first; j <= last; ++j) {
          double sum = 0.0;
          const double* qi = q.row(b, i, h);
          const double* kj = k.row(b, j, h / group);
          for (std::int64_t dd = 0; dd < s.D; ++dd) sum += std::abs(qi[dd] * kj[dd]);
          magnitude = std::max(magnitude, sum);
        }
        const double ref = lse_ref.get(b, h, i);
        bounds.set(b, h, i, 0,
                   std::ldexp(1.0, -9) * scale * magnitude + 1e-5 * (1.0 + (std::isfinite(ref) ? std::abs(ref) : 0.0)));
      }
  return bounds;
}

HostTensor emulated_tensor_core_lse(const Fp8Case& c, const Fp8Data& d) {
  const auto& s = c.shape;
  const std::int64_t group = s.Hq / s.Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
  HostTensor lse = HostTensor::lse(DType::f64, s.B, s.Hq, s.Nq);
  std::vector<double> qrow(static_cast<std::size_t>(s.D)), krow(static_cast<std::size_t>(s.D)),
      scores(static_cast<std::size_t>(s.Nk));
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < s.Hq; ++h) {
      const std::int64_t hk = h / group;
      const double descale = static_cast<double>(d.q_scale[b * s.Hkv + hk]) * d.k_scale[b * s.Hkv + hk];
      for (std::int64_t i = 0; i < s.Nq; ++i) {
        std::int64_t first, last;
        visible_keys(c, i, first, last);
        for (std::int64_t dd = 0; dd < s.D; ++dd) qrow[dd] = d.q.get(b, i, h, dd);
        double m = -kInf;
        for (std::int64_t j = first; j <= last; ++j) {
          for (std::int64_t dd = 0; dd < s.D; ++dd) krow[dd] = d.k.get(b, j, hk, dd);
          scores[j] = tensor_core_fp8_dot(qrow.data(), krow.data(), s.D) * descale * scale;
          m = std::max(m, scores[j]);
        }
        double l = 0.0;
        for (std::int64_t j = first; j <= last; ++j) l += std::exp(scores[j] - m);
        lse.set(b, h, i, 0, last >= first ? m + std::log(l) : -kInf);
      }
    }
  return lse;
}

ForwardOutputs emulated_kernel_forward(const Fp8Case& c, const Fp8Data& d) {
  const auto& s = c.shape;
  const std::int64_t group = s.Hq / s.Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
  ForwardOutputs out;
  out.o = HostTensor::attention(c.out_dtype, s.B, s.Nq, s.Hq, s.D, Layout::bnhd);
  out.lse = HostTensor::lse(DType::f32, s.B, s.Hq, s.Nq);
  const Dense q(d.q), k(d.k), v(d.v);
  std::vector<double> scores(static_cast<std::size_t>(s.Nk)), p8(static_cast<std::size_t>(s.Nk)),
      vcol(static_cast<std::size_t>(s.Nk));
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < s.Hq; ++h) {
      const std::int64_t hk = h / group;
      const double qk = static_cast<double>(d.q_scale[b * s.Hkv + hk]) * d.k_scale[b * s.Hkv + hk];
      const double vd = d.v_scale[b * s.Hkv + hk];
      for (std::int64_t i = 0; i < s.Nq; ++i) {
        std::int64_t first, last;
        visible_keys(c, i, first, last);
        double m = -kInf;
        for (std::int64_t j = first; j <= last; ++j) {
          scores[j] = tensor_core_fp8_dot(q.row(b, i, h), k.row(b, j, hk), s.D) * qk * scale;
          m = std::max(m, scores[j]);
        }
        float l = 0.0f;
        for (std::int64_t j = first; j <= last; ++j) {
          const float pj = static_cast<float>(std::exp(scores[j] - m) * 256.0);
          l += pj;
          p8[j] = round_e4m3(pj);
        }
        for (std::int64_t dd = 0; dd < s.D; ++dd) {
          double o = 0.0;
          if (last >= first) {
            const std::int64_t n = last - first + 1;
            for (std::int64_t j = first; j <= last; ++j) vcol[j - first] = v.row(b, j, hk)[dd];
            o = tensor_core_fp8_dot(p8.data() + first, vcol.data(), n);
          }
          out.o.set(b, i, h, dd, round_to(c.out_dtype, last >= first ? o / l * vd : 0.0));
        }
        out.lse.set(b, h, i, 0, last >= first ? m + std::log(static_cast<double>(l)) - 8 * std::log(2.0) : -kInf);
      }
    }
  return out;
}

double lse_bound_ratio(const HostTensor& lse, const HostTensor& ref, const HostTensor& bounds) {
  double worst = 0.0;
  for (std::int64_t b = 0; b < ref.size(0); ++b)
    for (std::int64_t h = 0; h < ref.size(1); ++h)
      for (std::int64_t i = 0; i < ref.size(2); ++i) {
        const double x = lse.get(b, h, i), r = ref.get(b, h, i);
        if (std::isinf(r)) {
          if (!(std::isinf(x) && x < 0)) return kInf;
          continue;
        }
        if (!std::isfinite(x)) return kInf;
        worst = std::max(worst, std::abs(x - r) / bounds.get(b, h, i));
      }
  return worst;
}

double lse_max_error(const HostTensor& lse, const HostTensor& ref) {
  double worst = 0.0;
  for (std::int64_t b = 0; b < ref.size(0); ++b)
    for (std::int64_t h = 0; h < ref.size(1); ++h)
      for (std::int64_t i = 0; i < ref.size(2); ++i) {
        const double x = lse.get(b, h, i), r = ref.get(b, h, i);
        if (std::isinf(r)) {
          if (!(std::isinf(x) && x < 0)) return kInf;
          continue;
        }
        if (!std::isfinite(x)) return kInf;
        worst = std::max(worst, std::abs(x - r));
      }
  return worst;
}

}  // namespace flashpp::test
