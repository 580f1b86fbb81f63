// Rows that see no key and empty problems: O = 0 and lse = -inf exactly for such rows, no NaN
// anywhere in any output, zero gradients where nothing flows, and no-ops for empty shapes.
// Every backend and dtype; outputs are poisoned with NaN first, so an unwritten element fails.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "common/attention_case.hpp"
#include "common/metrics.hpp"

namespace flashpp::test {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Visibility by the documented rule (flashpp.hpp, Options).
bool visible(const AttentionCase& c, std::int64_t i, std::int64_t j) {
  const Options& o = c.options;
  const std::int64_t shift = o.alignment == Alignment::bottom_right ? c.shape.Nk - c.shape.Nq : 0;
  const std::int64_t d = j - (i + shift);
  const bool left_ok = o.window_left == kUnbounded || d >= -o.window_left;
  const std::int64_t right = o.causal ? 0 : o.window_right;
  const bool right_ok = right == kUnbounded || d <= right;
  return left_ok && right_ok;
}

bool row_sees_a_key(const AttentionCase& c, std::int64_t i) {
  for (std::int64_t j = 0; j < c.shape.Nk; ++j)
    if (visible(c, i, j)) return true;
  return false;
}

bool key_is_seen(const AttentionCase& c, std::int64_t j) {
  for (std::int64_t i = 0; i < c.shape.Nq; ++i)
    if (visible(c, i, j)) return true;
  return false;
}

using Param = std::tuple<Backend, DType>;

class NoVisibleKey : public ::testing::TestWithParam<Param> {
 protected:
  // Runs forward and backward and checks the exact zeros and -infs the mask implies.
  void check(AttentionCase c, std::int64_t expected_empty_rows) {
    const Backend backend = std::get<0>(GetParam());
    c.dtype = std::get<1>(GetParam());
    SCOPED_TRACE(c.describe());
    std::int64_t empty_rows = 0;
    for (std::int64_t i = 0; i < c.shape.Nq; ++i) empty_rows += !row_sees_a_key(c, i);
    ASSERT_EQ(empty_rows, expected_empty_rows) << "the case does not test what it says";

    const AttentionInputs in = make_inputs(c);
    const ForwardOutputs f = run_forward(in, c.options, backend);
    const Gradients g = run_backward(in, f, c.options, backend);
    for (const HostTensor* t : {&f.o, &g.dq, &g.dk, &g.dv}) {
      EXPECT_EQ(count_nonfinite(*t), 0) << describe(*t);
      EXPECT_TRUE(t->gaps_untouched()) << describe(*t);
    }
    EXPECT_EQ(count_nan(f.lse), 0);
    const AttentionShape& s = c.shape;
    for (std::int64_t b = 0; b < s.B; ++b)
      for (std::int64_t h = 0; h < s.Hq; ++h)
        for (std::int64_t i = 0; i < s.Nq; ++i) {
          const bool sees = row_sees_a_key(c, i);
          const double lse = f.lse.get(b, h, i);
          if (sees) {
            ASSERT_TRUE(std::isfinite(lse)) << "row " << i;
            continue;
          }
          ASSERT_EQ(lse, kNegInf) << "row " << i << " sees no key";
          for (std::int64_t d = 0; d < s.D; ++d) {
            ASSERT_EQ(f.o.get(b, i, h, d), 0.0) << "o row " << i;
            ASSERT_EQ(g.dq.get(b, i, h, d), 0.0) << "dq row " << i;
          }
        }
    for (std::int64_t b = 0; b < s.B; ++b)
      for (std::int64_t h = 0; h < s.Hkv; ++h)
        for (std::int64_t j = 0; j < s.Nk; ++j) {
          if (key_is_seen(c, j)) continue;
          for (std::int64_t d = 0; d < s.D; ++d) {
            ASSERT_EQ(g.dk.get(b, j, h, d), 0.0) << "dk of unseen key " << j;
            ASSERT_EQ(g.dv.get(b, j, h, d), 0.0) << "dv of unseen key " << j;
          }
        }
  }
};

AttentionCase make_case(AttentionShape s, Options o, Layout layout = Layout::bnhd) {
  AttentionCase c;
  c.shape = s;
  c.options = o;
  c.layout = layout;
  c.seed = 5;
  return c;
}

TEST_P(NoVisibleKey, CausalBottomRightWithMoreQueriesThanKeys) {
  Options o;
  o.causal = true;
  o.alignment = Alignment::bottom_right;
  check(make_case({2, 40, 13, 4, 2, 64}, o), 27);  // rows 0..26 see nothing
  o.dropout_p = 0.5f;
  o.softcap = 3.0f;
  check(make_case({1, 40, 13, 2, 1, 32}, o, Layout::padded), 27);
}

TEST_P(NoVisibleKey, DiagonalWindowPastTheLastKey) {
  Options o;  // top-left, each row sees only key i: rows i >= Nk see nothing
  o.window_left = 0;
  o.window_right = 0;
  check(make_case({1, 50, 20, 2, 2, 40}, o, Layout::bhnd), 30);
}

TEST_P(NoVisibleKey, WindowLeftOfTheFirstKey) {
  Options o;  // row i sees keys [i+s-3, i+s]; bottom-right alignment makes the shift s negative
  o.alignment = Alignment::bottom_right;
  o.window_left = 3;
  o.window_right = 0;
  // shift = Nk - Nq = -30: row i sees [i-33, i-30]; rows 0..29 see nothing.
  check(make_case({1, 50, 20, 3, 1, 16}, o), 30);
}

TEST_P(NoVisibleKey, NoKeysAtAll) {
  const Backend backend = std::get<0>(GetParam());
  AttentionCase c = make_case({2, 9, 0, 4, 2, 32}, Options{});
  c.dtype = std::get<1>(GetParam());
  SCOPED_TRACE(c.describe());
  const AttentionInputs in = make_inputs(c);
  const ForwardOutputs f = run_forward(in, c.options, backend);
  const Gradients g = run_backward(in, f, c.options, backend);
  for (double x : f.o.values()) ASSERT_EQ(x, 0.0);
  for (double x : f.lse.values()) ASSERT_EQ(x, kNegInf);
  for (double x : g.dq.values()) ASSERT_EQ(x, 0.0);
  EXPECT_EQ(g.dk.numel(), 0);
}

TEST_P(NoVisibleKey, NoQueriesGivesZeroKeyGradients) {
  const Backend backend = std::get<0>(GetParam());
  AttentionCase c = make_case({2, 0, 9, 4, 2, 32}, Options{});
  c.dtype = std::get<1>(GetParam());
  SCOPED_TRACE(c.describe());
  const AttentionInputs in = make_inputs(c);
  const ForwardOutputs f = run_forward(in, c.options, backend);
  EXPECT_EQ(f.o.numel(), 0);
  const Gradients g = run_backward(in, f, c.options, backend);
  for (double x : g.dk.values()) ASSERT_EQ(x, 0.0);
  for (double x : g.dv.values()) ASSERT_EQ(x, 0.0);
  EXPECT_TRUE(g.dk.gaps_untouched());
}

TEST_P(NoVisibleKey, EmptyBatchIsANoOp) {
  const Backend backend = std::get<0>(GetParam());
  AttentionCase c = make_case({0, 7, 9, 4, 2, 32}, Options{});
  c.dtype = std::get<1>(GetParam());
  const AttentionInputs in = make_inputs(c);
  ForwardOutputs f;
  ASSERT_NO_THROW(f = run_forward(in, c.options, backend));
  ASSERT_NO_THROW(run_backward(in, f, c.options, backend));
}

INSTANTIATE_TEST_SUITE_P(
    All, NoVisibleKey,
    ::testing::Combine(::testing::Values(Backend::cpu, Backend::cpu_reference),
                       ::testing::Values(DType::f32, DType::f16, DType::bf16)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == Backend::cpu ? "cpu" : "cpu_reference") +
             "_" + flashpp::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace flashpp::test
