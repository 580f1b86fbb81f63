// The CUDA forward against the float64 oracle (Backend::cpu_reference on float64 copies of the
// same inputs) over a subset of the CPU sweep: awkward lengths, Nq != Nk, every head dim class,
// GQA, causal in both alignments, windows, softcap, dropout, fp16 and bf16, both layouts.
//
// The rule (docs/design.md, "Testing"): our relative error of O is at most 2x that of the same computation done
// naively in the storage dtype (gpu_runner.hpp), plus a slack of a quarter of the dtype's unit
// roundoff (rows with one key are exact both ways); and within the float32-kernel tolerance of
// tests/common. lse (float32 for both) must be within tests/common's lse limit.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/metrics.hpp"
#include "common/tolerance.hpp"
#include "gpu_buffer.hpp"
#include "gpu_runner.hpp"

namespace flashpp {
namespace {

using test::AttentionCase;
using test::Layout;

AttentionCase make_case(std::int64_t B, std::int64_t Nq, std::int64_t Nk, std::int64_t Hq,
                        std::int64_t Hkv, std::int64_t D, DType dtype, Layout layout) {
  AttentionCase c;
  c.shape = {B, Nq, Nk, Hq, Hkv, D};
  c.dtype = dtype;
  c.layout = layout;
  c.seed = static_cast<std::uint64_t>(B * 1000003 + Nq * 1009 + Nk * 31 + D * 7 + Hq + Hkv);
  return c;
}

Options causal(Alignment a) {
  Options o;
  o.causal = true;
  o.alignment = a;
  return o;
}

Options window(std::int64_t left, std::int64_t right, Alignment a = Alignment::top_left) {
  Options o;
  o.window_left = left;
  o.window_right = right;
  o.alignment = a;
  return o;
}

// The sweep, for one dtype.
std::vector<AttentionCase> sweep_cases(DType dt) {
  std::vector<AttentionCase> cases;
  auto add = [&](AttentionCase c, Options o = {}) {
    c.options = o;
    cases.push_back(c);
  };
  // Every head dim class (instantiated ones and those rounded up), GQA 2:1, causal and not.
  for (std::int64_t D : {32, 40, 64, 80, 96, 128, 160, 192, 256}) {
    add(make_case(1, 127, 127, 2, 1, D, dt, Layout::bnhd));
    add(make_case(1, 127, 127, 2, 1, D, dt, Layout::bhnd), causal(Alignment::top_left));
  }
  // Lengths: 1, 17 (below a tile), 127 and 1000 (not multiples of any tile).
  for (std::int64_t N : {1, 17, 127, 1000}) {
    add(make_case(2, N, N, 3, 3, 64, dt, Layout::bhnd));
    add(make_case(2, N, N, 3, 3, 64, dt, Layout::bnhd), causal(Alignment::top_left));
  }
  // Nq != Nk, both causal alignments (bottom-right with Nq > Nk leaves rows with no key).
  for (auto [Nq, Nk] : {std::pair<std::int64_t, std::int64_t>{17, 1000}, {1000, 17}, {127, 300}}) {
    add(make_case(1, Nq, Nk, 4, 2, 128, dt, Layout::bnhd), causal(Alignment::top_left));
    add(make_case(1, Nq, Nk, 4, 2, 128, dt, Layout::bhnd), causal(Alignment::bottom_right));
    add(make_case(1, Nq, Nk, 4, 1, 64, dt, Layout::bnhd));
  }
  // Sliding windows (two-sided, one-sided with causal, the diagonal alone).
  add(make_case(1, 500, 500, 2, 2, 64, dt, Layout::bnhd), window(50, 10));
  {
    Options o = causal(Alignment::bottom_right);
    o.window_left = 100;
    add(make_case(1, 300, 700, 2, 1, 128, dt, Layout::bhnd), o);
  }
  add(make_case(1, 200, 200, 1, 1, 96, dt, Layout::bnhd), window(0, 0));
  // Softcap (with a scale large enough that the cap bites), alone and with causal.
  {
    Options o;
    o.softcap = 5.0f;
    o.softmax_scale = 0.5f;
    add(make_case(1, 300, 300, 2, 2, 64, dt, Layout::bnhd), o);
    o.causal = true;
    add(make_case(1, 300, 300, 2, 1, 128, dt, Layout::bhnd), o);
  }
  // Dropout (the oracle applies the same Philox mask, so a differing mask fails the error test).
  {
    Options o;
    o.dropout_p = 0.2f;
    o.seed = 1234;
    o.offset = 77;
    add(make_case(2, 127, 300, 2, 1, 64, dt, Layout::bnhd), o);
    o.causal = true;
    o.softcap = 10.0f;
    add(make_case(1, 300, 127, 2, 2, 128, dt, Layout::bhnd), o);
  }
  // Tiny key lengths under many query rows (issue 12), every head dim class, with a scale large
  // enough that some rows' scores are all very negative: a key row past Nk that were treated as
  // visible would get P = exp(0 - lse) = inf there.
  for (std::int64_t D : {32, 40, 64, 80, 96, 128, 160, 192, 224, 256}) {
    for (std::int64_t Nk : {1, 2, 3}) {
      Options o = (D / 8 + Nk) % 2 ? causal(Alignment::top_left) : Options{};
      o.softmax_scale = 0.3f;
      add(make_case(1, 1537, Nk, 2, 2, D, dt, Layout::bnhd), o);
    }
  }
  // No keys at all: O = 0, lse = -inf.
  add(make_case(1, 5, 0, 2, 2, 64, dt, Layout::bnhd));
  // Long sequences (one head: the oracle is O(N^2 D) on one core).
  add(make_case(1, 4096, 4096, 1, 1, 64, dt, Layout::bnhd), causal(Alignment::top_left));
  add(make_case(1, 4096, 4096, 1, 1, 64, dt, Layout::bhnd));
  return cases;
}

class ForwardVsOracle : public ::testing::TestWithParam<DType> {};

TEST_P(ForwardVsOracle, Sweep) {
  FLASHPP_SKIP_WITHOUT_GPU();
  const DType dt = GetParam();
  for (const AttentionCase& c : sweep_cases(dt)) {
    SCOPED_TRACE(c.describe());
    gpu_test::expect_forward_matches_oracle(c, test::make_inputs(c));
    if (::testing::Test::HasFailure()) return;  // the first failing case is the useful one
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ForwardVsOracle, ::testing::Values(DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// Small shapes for compute-sanitizer (memcheck, racecheck, synccheck): every code path (masked
// and unmasked tiles, boundary rows, rounded-up head dim, dropout, softcap, empty rows) in a
// few tiny launches.
TEST(ForwardSmall, SanitizerShapes) {
  FLASHPP_SKIP_WITHOUT_GPU();
  std::vector<AttentionCase> cases;
  auto add = [&](AttentionCase c, Options o = {}) {
    c.options = o;
    cases.push_back(c);
  };
  add(make_case(1, 70, 150, 2, 1, 40, DType::f16, Layout::bnhd));
  add(make_case(1, 150, 70, 2, 2, 128, DType::bf16, Layout::bhnd), causal(Alignment::bottom_right));
  {
    Options o = window(20, 5);
    o.dropout_p = 0.3f;
    o.softcap = 8.0f;
    add(make_case(1, 100, 100, 1, 1, 256, DType::f16, Layout::bnhd), o);
  }
  add(make_case(1, 33, 33, 1, 1, 192, DType::bf16, Layout::bnhd), causal(Alignment::top_left));
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(c.describe());
    const test::AttentionInputs in = test::make_inputs(c);
    const test::ForwardOutputs ours = gpu_test::run_forward_cuda(in, c.options);
    const test::OracleResult ref = test::run_oracle(in, c.options, false);
    EXPECT_LE(test::relative_error(ours.o, ref.fwd.o), test::float32_kernel_tolerance(c.dtype).o);
  }
}

}  // namespace
}  // namespace flashpp
