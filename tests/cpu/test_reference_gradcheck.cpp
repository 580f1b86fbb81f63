// The oracle's backward against central finite differences of its own forward, in float64.
//
// With L(q, k, v) = sum(dout ∘ O(q, k, v)), the backward must return dL/dq, dL/dk, dL/dv. Each
// input element x is nudged by ±h and (L(x+h) - L(x-h)) / 2h is compared with the analytic
// gradient; the truncation error is O(h^2 L''') ≈ 1e-10 and the rounding error
// O(eps |L| / h) ≈ 1e-11 for h = 1e-5, so a limit of 1e-7 (relative to max(1, |gradient|))
// leaves a wide margin while any wrong term is O(1). Dropout is included: with a fixed seed
// and offset the keep mask is fixed, so L is a smooth function of the inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/attention_case.hpp"

namespace flashpp::test {
namespace {

double loss(const AttentionInputs& in, const Options& options) {
  const ForwardOutputs f = run_forward(in, options, Backend::cpu_reference);
  double l = 0.0;
  for (std::int64_t b = 0; b < f.o.size(0); ++b)
    for (std::int64_t n = 0; n < f.o.size(1); ++n)
      for (std::int64_t h = 0; h < f.o.size(2); ++h)
        for (std::int64_t d = 0; d < f.o.size(3); ++d) l += f.o.get(b, n, h, d) * in.dout.get(b, n, h, d);
  return l;
}

// Compares gradient `analytic` of input `which` (0 = q, 1 = k, 2 = v) with finite differences.
void check_input(const char* name, int which, AttentionInputs in, const HostTensor& analytic,
                 const Options& options) {
  constexpr double h = 1e-5, limit = 1e-7;
  HostTensor* x = which == 0 ? &in.q : which == 1 ? &in.k : &in.v;
  for (std::int64_t b = 0; b < x->size(0); ++b)
    for (std::int64_t n = 0; n < x->size(1); ++n)
      for (std::int64_t hd = 0; hd < x->size(2); ++hd)
        for (std::int64_t d = 0; d < x->size(3); ++d) {
          const double x0 = x->get(b, n, hd, d);
          x->set(b, n, hd, d, x0 + h);
          const double up = loss(in, options);
          x->set(b, n, hd, d, x0 - h);
          const double down = loss(in, options);
          x->set(b, n, hd, d, x0);
          const double numeric = (up - down) / (2 * h);
          const double g = analytic.get(b, n, hd, d);
          const double err = std::abs(numeric - g) / std::max(1.0, std::abs(g));
          ASSERT_LE(err, limit) << name << "[" << b << ", " << n << ", " << hd << ", " << d
                                << "]: analytic " << g << ", finite difference " << numeric;
        }
  // The gradient must not be trivially zero (that would make the check vacuous).
  double norm = 0.0;
  for (double v : analytic.values()) norm += v * v;
  EXPECT_GT(norm, 1e-6) << name << " is all zero";
}

struct GradCase {
  std::string name;
  AttentionShape shape;
  Options options;
  Layout layout = Layout::bnhd;
};

class ReferenceGradCheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(ReferenceGradCheck, MatchesFiniteDifferences) {
  AttentionCase c;
  c.shape = GetParam().shape;
  c.dtype = DType::f64;
  c.layout = GetParam().layout;
  c.options = GetParam().options;
  c.seed = 77;
  SCOPED_TRACE(c.describe());
  const AttentionInputs in = make_inputs(c);
  const ForwardOutputs f = run_forward(in, c.options, Backend::cpu_reference);
  const Gradients g = run_backward(in, f, c.options, Backend::cpu_reference);
  check_input("dq", 0, in, g.dq, c.options);
  check_input("dk", 1, in, g.dk, c.options);
  check_input("dv", 2, in, g.dv, c.options);
}

std::vector<GradCase> grad_cases() {
  Options plain{};
  Options causal{};
  causal.causal = true;
  Options causal_br = causal;
  causal_br.alignment = Alignment::bottom_right;
  Options softcap{};
  softcap.softcap = 1.2f;  // small cap: tanh well into its curved part
  Options dropout{};
  dropout.dropout_p = 0.4f;
  dropout.seed = 1234;
  dropout.offset = 5;
  Options window{};
  window.window_left = 1;
  window.window_right = 1;
  window.softmax_scale = 0.7f;
  Options all = causal_br;
  all.window_left = 2;
  all.softcap = 2.0f;
  all.dropout_p = 0.25f;
  all.seed = 42;
  return {
      {"plain", {1, 3, 4, 1, 1, 3}, plain},
      {"causal_top_left", {1, 4, 5, 2, 2, 3}, causal},
      {"causal_bottom_right_empty_rows", {1, 5, 3, 2, 1, 3}, causal_br, Layout::bhnd},
      {"softcap", {1, 3, 4, 2, 2, 4}, softcap},
      {"dropout", {2, 3, 5, 2, 1, 3}, dropout, Layout::padded},
      {"gqa_4_to_1", {1, 3, 4, 4, 1, 3}, plain},
      {"gqa_4_to_2_window", {1, 4, 4, 4, 2, 2}, window},
      {"everything", {2, 4, 5, 4, 2, 3}, all, Layout::bhnd},
  };
}

INSTANTIATE_TEST_SUITE_P(Tiny, ReferenceGradCheck, ::testing::ValuesIn(grad_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace flashpp::test
