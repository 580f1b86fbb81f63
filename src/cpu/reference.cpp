// The oracle: attention computed the plain way, one (batch, head) at a time, materialising the
// full score matrix S and probabilities P and accumulating in float64. Every other kernel in
// flashpp is tested against this. It favours clarity over speed.
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_backend.hpp"
#include "element_access.hpp"

namespace flashpp::cpu {
namespace {

using detail::load_element;
using detail::offset3;
using detail::offset4;
using detail::store_element;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Scores, probabilities and dropout factors of one (b, h): S and P are Nq x Nk, row-major.
struct HeadScores {
  std::vector<double> scores;      // s = softcap(x), -inf where masked
  std::vector<double> probs;       // P = exp(s - lse), 0 where masked
  std::vector<double> drop_scale;  // 0 for dropped, 1/(1-p) for kept (1 without dropout)
  std::vector<double> lse;         // per row; -inf when the row sees no key
};

HeadScores compute_scores(const detail::Problem& p, const TensorView& q, const TensorView& k,
                          std::int64_t b, std::int64_t h) {
  const std::int64_t hk = h / p.heads_per_kv();
  HeadScores hs;
  hs.scores.assign(p.Nq * p.Nk, kNegInf);
  hs.probs.assign(p.Nq * p.Nk, 0.0);
  hs.drop_scale.assign(p.Nq * p.Nk, 1.0);
  hs.lse.assign(p.Nq, kNegInf);
  const auto bh = static_cast<std::uint32_t>(b * p.Hq + h);
  for (std::int64_t i = 0; i < p.Nq; ++i) {
    double row_max = kNegInf;
    for (std::int64_t j = 0; j < p.Nk; ++j) {
      if (!p.mask.visible(i, j)) continue;
      double dot = 0.0;
      for (std::int64_t d = 0; d < p.D; ++d) {
        dot += load_element(q, offset4(q, b, i, h, d)) * load_element(k, offset4(k, b, j, hk, d));
      }
      const double x = dot * static_cast<double>(p.scale);
      double s = x;
      if (p.softcap > 0.0f) s = p.softcap * std::tanh(x / p.softcap);
      hs.scores[i * p.Nk + j] = s;
      row_max = std::max(row_max, s);
    }
    if (row_max == kNegInf) continue;  // no visible key: P = 0, lse = -inf
    double sum = 0.0;
    for (std::int64_t j = 0; j < p.Nk; ++j) sum += std::exp(hs.scores[i * p.Nk + j] - row_max);
    hs.lse[i] = row_max + std::log(sum);
    for (std::int64_t j = 0; j < p.Nk; ++j) {
      hs.probs[i * p.Nk + j] = std::exp(hs.scores[i * p.Nk + j] - hs.lse[i]);
      if (p.dropout.enabled()) {
        const bool keep = detail::dropout_keep(p.dropout, bh, static_cast<std::uint32_t>(i),
                                               static_cast<std::uint32_t>(j));
        hs.drop_scale[i * p.Nk + j] = keep ? static_cast<double>(p.dropout.keep_scale) : 0.0;
      }
    }
  }
  return hs;
}

}  // namespace

void reference_forward(const detail::ForwardArgs& a) {
  const detail::Problem& p = a.problem;
  const std::int64_t hpk = p.heads_per_kv();
  for (std::int64_t b = 0; b < p.B; ++b) {
    for (std::int64_t h = 0; h < p.Hq; ++h) {
      const HeadScores hs = compute_scores(p, a.q, a.k, b, h);
      std::vector<double> out(p.D);
      for (std::int64_t i = 0; i < p.Nq; ++i) {
        std::fill(out.begin(), out.end(), 0.0);
        for (std::int64_t j = 0; j < p.Nk; ++j) {
          const double w = hs.probs[i * p.Nk + j] * hs.drop_scale[i * p.Nk + j];
          if (w == 0.0) continue;
          for (std::int64_t d = 0; d < p.D; ++d) {
            out[d] += w * load_element(a.v, offset4(a.v, b, j, h / hpk, d));
          }
        }
        for (std::int64_t d = 0; d < p.D; ++d) store_element(a.o, offset4(a.o, b, i, h, d), out[d]);
        if (a.write_lse) store_element(a.lse, offset3(a.lse, b, h, i), hs.lse[i]);
      }
    }
  }
}

// The true gradient of the forward, recomputed from scratch in float64 (the given o and lse
// are not used: the oracle does not trust them). D_i = sum_j P~_ij dP_ij equals
// rowsum(dO * O) for the exact O.
void reference_backward(const detail::BackwardArgs& a) {
  const detail::Problem& p = a.problem;
  const std::int64_t hpk = p.heads_per_kv();
  const double scale = p.scale;
  for (std::int64_t b = 0; b < p.B; ++b) {
    for (std::int64_t hk = 0; hk < p.Hkv; ++hk) {
      std::vector<double> dk(p.Nk * p.D, 0.0), dv(p.Nk * p.D, 0.0);
      for (std::int64_t h = hk * hpk; h < (hk + 1) * hpk; ++h) {
        const HeadScores hs = compute_scores(p, a.q, a.k, b, h);
        std::vector<double> dq(p.D);
        for (std::int64_t i = 0; i < p.Nq; ++i) {
          // dP_ij = dO_i . v_j, then dropout: dP~_ij = dP_ij * drop_scale_ij
          std::vector<double> dp(p.Nk, 0.0);
          double Di = 0.0;
          for (std::int64_t j = 0; j < p.Nk; ++j) {
            const std::int64_t ij = i * p.Nk + j;
            if (hs.probs[ij] == 0.0) continue;
            double dot = 0.0;
            for (std::int64_t d = 0; d < p.D; ++d) {
              dot += load_element(a.dout, offset4(a.dout, b, i, h, d)) *
                     load_element(a.v, offset4(a.v, b, j, hk, d));
            }
            dp[j] = dot * hs.drop_scale[ij];
            Di += hs.probs[ij] * dp[j];
          }
          std::fill(dq.begin(), dq.end(), 0.0);
          for (std::int64_t j = 0; j < p.Nk; ++j) {
            const std::int64_t ij = i * p.Nk + j;
            const double P = hs.probs[ij];
            if (P == 0.0) continue;
            // dV_j += P~_ij dO_i
            const double pd = P * hs.drop_scale[ij];
            for (std::int64_t d = 0; d < p.D; ++d) {
              dv[j * p.D + d] += pd * load_element(a.dout, offset4(a.dout, b, i, h, d));
            }
            // dS_ij = P_ij (dP~_ij - D_i); through softcap: dX = dS (1 - (s/c)^2)
            double dS = P * (dp[j] - Di);
            if (p.softcap > 0.0f) {
              const double t = hs.scores[ij] / p.softcap;
              dS *= 1.0 - t * t;
            }
            for (std::int64_t d = 0; d < p.D; ++d) {
              dq[d] += dS * scale * load_element(a.k, offset4(a.k, b, j, hk, d));
              dk[j * p.D + d] += dS * scale * load_element(a.q, offset4(a.q, b, i, h, d));
            }
          }
          for (std::int64_t d = 0; d < p.D; ++d) store_element(a.dq, offset4(a.dq, b, i, h, d), dq[d]);
        }
      }
      for (std::int64_t j = 0; j < p.Nk; ++j) {
        for (std::int64_t d = 0; d < p.D; ++d) {
          store_element(a.dk, offset4(a.dk, b, j, hk, d), dk[j * p.D + d]);
          store_element(a.dv, offset4(a.dv, b, j, hk, d), dv[j * p.D + d]);
        }
      }
    }
  }
}

}  // namespace flashpp::cpu
