// The tiled CPU backend (Backend::cpu) against the float64 oracle (Backend::cpu_reference on
// float64 copies of the same inputs): forward O and lse, backward dQ, dK, dV.
//
// Cases: a deterministic pseudo-random selection over the feature space (sequence lengths,
// Nq != Nk both ways, every head dim, GQA ratios, masks, softcap, dropout, dtypes, layouts),
// kept cheap enough for the oracle, plus targeted cases for the long sequences and the
// awkward corners. Every case prints its full description (with its seed) on failure.
//
// Limits (derived in tests/common/tolerance.hpp): relative error per tensor, lse as
// max |Δ| / max(1, |lse|); dQ and dK also get an absolute noise floor (gradient_noise_floor).
//            O         lse     dQ, dK    dV
//   f32    2e-5      2e-5    1e-4      2e-5      float32 accumulation dominates
//   f16    1.95e-3   2e-5    3.9e-3    1.95e-3   4u / 8u, u = 2^-11 (output + P/dS rounding)
//   bf16   1.56e-2   2e-5    3.1e-2    1.56e-2   4u / 8u, u = 2^-8
// Largest errors measured on the tiled CPU backend over this sweep (FLASHPP_TEST_VERBOSE=1):
// f32 O 7e-7, dQ/dK 2e-6; f16 O 2.4e-4, dQ/dK 8e-4; bf16 O 1.8e-3, dQ/dK 6.1e-3; lse 3e-6 —
// 5x to 25x inside the limits, while test_check_sensitivity.cpp shows that typical bugs exceed
// them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "common/attention_case.hpp"
#include "common/oracle_check.hpp"
#include "common/random.hpp"
#include "common/tolerance.hpp"

namespace flashpp::test {
namespace {

struct NamedCase {
  std::string name;  // a gtest-safe name: letters, digits, underscores
  AttentionCase c;
};
// gtest prints parameters in listings and failures; the description is the useful part.
void PrintTo(const NamedCase& c, std::ostream* os) { *os << c.c.describe(); }

// ---------------------------------------------------------------------------------------------
// Case selection
// ---------------------------------------------------------------------------------------------

// Oracle work grows with B*Hq*Nq*Nk*D; this keeps each case well under a second on one core.
constexpr double kMaxCost = 1.2e7;
constexpr int kRandomCases = 240;

double cost(const AttentionShape& s) {
  return static_cast<double>(s.B) * s.Hq * s.Nq * s.Nk * s.D;
}

// Shrinks the case until the oracle can afford it: first the batch, then the number of kv heads
// (keeping the GQA ratio Hq/Hkv), and only then the ratio itself.
void fit_budget(AttentionShape& s) {
  if (cost(s) > kMaxCost) s.B = 1;
  if (cost(s) > kMaxCost && s.Hkv > 1) {
    s.Hq /= s.Hkv;
    s.Hkv = 1;
  }
  while (cost(s) > kMaxCost && s.Hq > 1) s.Hq /= 2;
}

template <class T, std::size_t N>
T pick(SplitMix64& r, const T (&values)[N]) {
  return values[r.below(N)];
}

std::string mask_tag(const Options& o) {
  std::string t;
  if (o.causal) t += "causal";
  if (o.window_left != kUnbounded) t += "wl" + std::to_string(o.window_left);
  if (o.window_right != kUnbounded && !o.causal) t += "wr" + std::to_string(o.window_right);
  if (t.empty()) return "full";
  return t + (o.alignment == Alignment::bottom_right ? "BR" : "TL");
}

std::string make_name(const std::string& prefix, const AttentionCase& c) {
  const AttentionShape& s = c.shape;
  std::string n = prefix + "_" + flashpp::to_string(c.dtype) + "_" + to_string(c.layout) + "_B" +
                  std::to_string(s.B) + "_Nq" + std::to_string(s.Nq) + "_Nk" +
                  std::to_string(s.Nk) + "_H" + std::to_string(s.Hq) + "x" +
                  std::to_string(s.Hkv) + "_D" + std::to_string(s.D) + "_" + mask_tag(c.options);
  if (c.options.softcap > 0) n += "_softcap";
  if (c.options.dropout_p > 0) n += "_dropout";
  if (!std::isnan(c.options.softmax_scale)) n += "_scaled";
  return n;
}

std::vector<NamedCase> random_cases() {
  const std::int64_t lengths[] = {1, 17, 17, 127, 127, 1000};  // 1000 is rarer: the oracle is slow
  const std::int64_t head_dims[] = {8, 40, 64, 80, 96, 128, 160, 192, 256};
  const std::int64_t ratios[] = {1, 2, 4, 8};
  const std::int64_t kv_heads[] = {1, 1, 2, 3};
  const std::int64_t windows[] = {0, 1, 5, 16, 100};
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  const Layout layouts[] = {Layout::bnhd, Layout::bhnd, Layout::padded};
  const float softcaps[] = {1.5f, 5.0f, 30.0f};
  const float dropouts[] = {0.1f, 0.5f, 0.83f};
  const float scales[] = {0.05f, 0.3f, 1.0f};

  SplitMix64 r(0x5EEDF1A5u);
  std::vector<NamedCase> cases;
  for (int n = 0; n < kRandomCases; ++n) {
    AttentionCase c;
    AttentionShape& s = c.shape;
    s.Nq = pick(r, lengths);
    s.Nk = pick(r, lengths);
    if (s.Nq == 1000 && s.Nk == 1000) s.Nk = 17;  // both long: left to the targeted cases
    s.D = pick(r, head_dims);
    s.Hkv = pick(r, kv_heads);
    s.Hq = s.Hkv * pick(r, ratios);
    s.B = 1 + static_cast<std::int64_t>(r.below(2));
    c.dtype = pick(r, dtypes);
    c.layout = pick(r, layouts);
    Options& o = c.options;
    switch (r.below(8)) {
      case 0: case 1: break;                                            // no mask
      case 2: o.causal = true; break;                                   // causal
      case 3: o.window_left = pick(r, windows); break;                  // left only
      case 4: o.window_right = pick(r, windows); break;                 // right only
      case 5: o.window_left = pick(r, windows); o.window_right = pick(r, windows); break;
      case 6: o.causal = true; o.window_left = pick(r, windows); break; // causal + left
      case 7: o.causal = true; o.window_right = 0; break;               // causal, explicit 0
    }
    o.alignment = r.below(2) ? Alignment::bottom_right : Alignment::top_left;
    if (r.below(4) == 0) o.softcap = pick(r, softcaps);
    if (r.below(4) == 0) {
      o.dropout_p = pick(r, dropouts);
      o.seed = r.next();
      o.offset = r.next();
    }
    if (r.below(5) == 0) o.softmax_scale = pick(r, scales);
    o.deterministic = r.below(2) == 0;
    c.seed = r.next() >> 16;
    fit_budget(s);
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "r%03d", n);
    cases.push_back({make_name(prefix, c), c});
  }
  return cases;
}

// Hand-picked: the long sequences (few, with small D and H), every head dim once per dtype in
// a tile-unfriendly shape, and the mask corners.
std::vector<NamedCase> targeted_cases() {
  std::vector<NamedCase> cases;
  auto add = [&](const std::string& tag, AttentionShape s, DType dtype, Layout layout,
                 Options o) {
    AttentionCase c;
    c.shape = s;
    c.dtype = dtype;
    c.layout = layout;
    c.options = o;
    c.seed = 1000 + cases.size();
    cases.push_back({make_name("t" + std::to_string(cases.size()) + "_" + tag, c), c});
  };
  const Options plain{};
  Options causal{};
  causal.causal = true;
  Options causal_br = causal;
  causal_br.alignment = Alignment::bottom_right;

  // Long sequences: N = 1000 on both sides.
  add("long", {1, 1000, 1000, 1, 1, 8}, DType::f32, Layout::bnhd, plain);
  add("long", {1, 1000, 1000, 2, 1, 8}, DType::bf16, Layout::bhnd, causal);
  add("long", {1, 1000, 1000, 1, 1, 16}, DType::f16, Layout::padded, causal_br);
  Options window_long{};
  window_long.window_left = 64;
  window_long.window_right = 64;
  window_long.dropout_p = 0.2f;
  window_long.seed = 7;
  add("long", {1, 1000, 1000, 1, 1, 8}, DType::f32, Layout::bhnd, window_long);

  // Every head dim, every dtype, Nq != Nk both ways (not multiples of any tile size).
  const std::int64_t head_dims[] = {8, 40, 64, 80, 96, 128, 160, 192, 256};
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (std::int64_t D : head_dims) {
      const bool wide = D % 3 == 0;  // alternate which side is longer
      add("headdim", {1, wide ? 33 : 70, wide ? 70 : 33, 2, 1, D}, dtype,
          D % 2 ? Layout::bhnd : Layout::bnhd, D >= 128 ? causal_br : causal);
    }
  }

  // Causal with Nq > Nk, bottom-right: the first Nq - Nk rows see nothing.
  add("emptyrows", {2, 70, 20, 2, 2, 64}, DType::f32, Layout::bnhd, causal_br);
  add("emptyrows", {1, 70, 20, 4, 1, 64}, DType::f16, Layout::padded, causal_br);
  // Causal with Nq < Nk, top-left: the last keys are seen by nobody (dK = dV = 0 there).
  add("unseenkeys", {1, 20, 70, 2, 1, 64}, DType::bf16, Layout::bhnd, causal);
  // Window narrower than a tile, both sides, with causal, softcap and dropout all at once.
  Options everything = causal_br;
  everything.window_left = 3;
  everything.softcap = 2.0f;
  everything.dropout_p = 0.3f;
  everything.seed = 99;
  everything.offset = 1ull << 40;
  add("everything", {2, 100, 130, 8, 2, 64}, DType::f16, Layout::padded, everything);
  // Single query (decode step) against many keys, MQA (one kv head for 8 query heads).
  add("decode", {3, 1, 1000, 8, 1, 128}, DType::bf16, Layout::bnhd, causal_br);
  // Single key.
  add("onekey", {2, 127, 1, 4, 2, 64}, DType::f16, Layout::bhnd, plain);
  // Lengths at and just past the CPU backend's tile sizes (multiples of 16, 36, 48, 64, 96,
  // 128, 256), where an off-by-one in a tile bound would show.
  Options window_both{};
  window_both.window_left = 40;
  window_both.window_right = 7;
  add("tileedge", {1, 256, 256, 2, 1, 32}, DType::f32, Layout::bnhd, causal);
  add("tileedge", {1, 128, 257, 2, 2, 16}, DType::bf16, Layout::padded, causal_br);
  add("tileedge", {1, 65, 96, 4, 1, 64}, DType::f16, Layout::bhnd, window_both);
  add("tileedge", {2, 48, 36, 2, 1, 80}, DType::f32, Layout::bhnd, plain);
  add("tileedge", {1, 129, 64, 3, 3, 40}, DType::f16, Layout::bnhd, causal_br);
  // A window that lies wholly outside the keys for some rows.
  Options far_right{};
  far_right.window_left = 0;
  far_right.window_right = 2;
  add("farwindow", {1, 60, 30, 2, 1, 40}, DType::f32, Layout::padded, far_right);
  return cases;
}

// ---------------------------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------------------------

// FLASHPP_TEST_VERBOSE=1 prints every measured error (used to check the limits have margin).
bool verbose() {
  const char* v = std::getenv("FLASHPP_TEST_VERBOSE");
  return v != nullptr && v[0] == '1';
}

class CpuVsOracle : public ::testing::TestWithParam<NamedCase> {};

TEST_P(CpuVsOracle, ForwardAndBackward) {
  const AttentionCase& c = GetParam().c;
  SCOPED_TRACE(c.describe());
  const AttentionInputs in = make_inputs(c);
  const OracleResult ref = run_oracle(in, c.options, /*with_backward=*/true);
  const Tolerance tol = float32_kernel_tolerance(c.dtype);

  const ForwardOutputs fwd = run_forward(in, c.options, Backend::cpu);
  const CheckReport forward = check_forward(fwd, ref.fwd, tol);
  EXPECT_TRUE(forward.passed()) << forward.text();

  const Gradients grads = run_backward(in, fwd, c.options, Backend::cpu);
  const CheckReport backward = check_backward(c, grads, ref.grads, tol);
  EXPECT_TRUE(backward.passed()) << backward.text();
  if (verbose()) std::cout << c.describe() << "\n  " << forward.text() << "\n  " << backward.text() << "\n";
}

std::string case_name(const ::testing::TestParamInfo<NamedCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Random, CpuVsOracle, ::testing::ValuesIn(random_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Targeted, CpuVsOracle, ::testing::ValuesIn(targeted_cases()), case_name);

}  // namespace
}  // namespace flashpp::test
