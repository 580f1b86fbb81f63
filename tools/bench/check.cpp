#include "check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "api/problem.hpp"
#include "cpu/element_access.hpp"

namespace flashpp::bench {
namespace {

using detail::load_element;
using detail::offset3;
using detail::offset4;

// Score-matrix multiply-adds (rows x keys x D x heads) one reference run may cost: the
// reference is plain single-threaded float64 loops, about 1 s per 1e8 on the build machine.
// The o/lse/dq slice shrinks its rows to fit; dk/dv (all rows needed) are skipped beyond.
constexpr double kReferenceBudget = 1e8;
constexpr double kAllRowsBudget = 3e8;

// A sub-problem of batch 0: query rows [row0, row0 + rows), query heads [0, heads), kv heads
// [0, kv_heads), all keys.
struct Slice {
  std::int64_t row0 = 0, rows = 0, heads = 0, kv_heads = 0;
};

// The o/lse/dq slice: 1-2 query heads, as many rows (<= 256) as the budget allows.
Slice row_slice(const Case& c) {
  Slice s;
  s.heads = std::min<std::int64_t>(2, c.Hq);
  const std::int64_t group = c.Hq / c.Hkv;  // query heads per kv head
  s.kv_heads = (s.heads + group - 1) / group;
  const double per_row = double(std::max<std::int64_t>(c.Nk, 1)) * double(c.D) * double(s.heads);
  s.rows = std::min<std::int64_t>(
      {c.Nq, 256, std::max<std::int64_t>(1, std::int64_t(kReferenceBudget / per_row))});
  // With bottom-right alignment the diagonal is anchored at the last row: keep the last rows.
  const bool anchored_at_end = c.causal && c.alignment == Alignment::bottom_right;
  s.row0 = anchored_at_end ? c.Nq - s.rows : 0;
  return s;
}

// float64 copy, [1, rows, heads, D] contiguous, of rows/heads of a [B, N, H, D] tensor stored
// in the case's layout and dtype.
std::vector<double> extract(const Case& c, const std::vector<std::byte>& data, std::int64_t N,
                            std::int64_t H, std::int64_t row0, std::int64_t rows,
                            std::int64_t heads) {
  const TensorView t = view_of(c, const_cast<std::byte*>(data.data()), c.dtype, N, H, Device{});
  std::vector<double> out(std::size_t(rows * heads * c.D));
  std::size_t n = 0;
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t d = 0; d < c.D; ++d)
        out[n++] = load_element(t, offset4(t, 0, row0 + i, h, d));
  return out;
}

// float64 copy, [1, heads, rows], of the float32 lse [B, Hq, Nq].
std::vector<double> extract_lse(const Case& c, const std::vector<std::byte>& data, const Slice& s) {
  const TensorView t =
      make_lse(reinterpret_cast<float*>(const_cast<std::byte*>(data.data())), c.B, c.Hq, c.Nq);
  std::vector<double> out(std::size_t(s.heads * s.rows));
  std::size_t n = 0;
  for (std::int64_t h = 0; h < s.heads; ++h)
    for (std::int64_t i = 0; i < s.rows; ++i)
      out[n++] = load_element(t, offset3(t, 0, h, s.row0 + i));
  return out;
}

TensorView f64_bnhd(std::vector<double>& data, std::int64_t N, std::int64_t H, std::int64_t D) {
  return make_bnhd(data.data(), DType::f64, 1, N, H, D);
}

TensorView f64_lse(std::vector<double>& data, std::int64_t H, std::int64_t N) {
  TensorView t = make_lse(nullptr, 1, H, N);
  t.data = data.data();
  t.dtype = DType::f64;
  return t;
}

Options reference_options(const Case& c) {
  Options o;
  o.causal = c.causal;
  o.alignment = c.alignment;
  o.backend = Backend::cpu_reference;
  return o;
}

// ||out - ref|| / ||ref||; entries where both are the same infinity (lse of a row that sees no
// key) are equal and left out; any other infinity or NaN makes the error infinite / NaN.
double relative_error(const std::vector<double>& out, const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i]) || std::isinf(out[i])) {
      if (out[i] == ref[i]) continue;
      return std::numeric_limits<double>::infinity();
    }
    const double d = out[i] - ref[i];
    diff += d * d;
    norm += ref[i] * ref[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// The reference's inputs and outputs for one slice, all float64 [1, N, H, D].
struct ReferenceRun {
  std::int64_t Nq, Nk, Hq, Hkv, D;
  std::vector<double> q, k, v, dout, o, lse, dq, dk, dv;
};

ReferenceRun slice_inputs(const Case& c, const HostInputs& in, const Slice& s, bool with_dout) {
  ReferenceRun r{s.rows, c.Nk, s.heads, s.kv_heads, c.D, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  r.q = extract(c, in.q, c.Nq, c.Hq, s.row0, s.rows, s.heads);
  r.k = extract(c, in.k, c.Nk, c.Hkv, 0, c.Nk, s.kv_heads);
  r.v = extract(c, in.v, c.Nk, c.Hkv, 0, c.Nk, s.kv_heads);
  if (with_dout) r.dout = extract(c, in.dout, c.Nq, c.Hq, s.row0, s.rows, s.heads);
  r.o.assign(r.q.size(), 0.0);
  r.lse.assign(std::size_t(r.Hq * r.Nq), 0.0);
  return r;
}

void run_reference_forward(const Case& c, ReferenceRun& r) {
  forward(f64_bnhd(r.q, r.Nq, r.Hq, r.D), f64_bnhd(r.k, r.Nk, r.Hkv, r.D),
          f64_bnhd(r.v, r.Nk, r.Hkv, r.D), f64_bnhd(r.o, r.Nq, r.Hq, r.D),
          f64_lse(r.lse, r.Hq, r.Nq), reference_options(c));
}

// The reference backward recomputes everything from q, k, v (o and lse are not read).
void run_reference_backward(const Case& c, ReferenceRun& r) {
  r.dq.assign(r.q.size(), 0.0);
  r.dk.assign(r.k.size(), 0.0);
  r.dv.assign(r.v.size(), 0.0);
  backward(f64_bnhd(r.q, r.Nq, r.Hq, r.D), f64_bnhd(r.k, r.Nk, r.Hkv, r.D),
           f64_bnhd(r.v, r.Nk, r.Hkv, r.D), f64_bnhd(r.o, r.Nq, r.Hq, r.D),
           f64_lse(r.lse, r.Hq, r.Nq), f64_bnhd(r.dout, r.Nq, r.Hq, r.D),
           f64_bnhd(r.dq, r.Nq, r.Hq, r.D), f64_bnhd(r.dk, r.Nk, r.Hkv, r.D),
           f64_bnhd(r.dv, r.Nk, r.Hkv, r.D), reference_options(c));
}

std::string format_error(double e) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1e", e);
  return text;
}

}  // namespace

double tolerance(DType dtype, Mode direction) {
  const bool backward = direction == Mode::backward;
  switch (dtype) {
    case DType::f32:
      return 1e-4;
    case DType::f16:
      return backward ? 1e-2 : 5e-3;
    case DType::bf16:
      return backward ? 3e-2 : 2e-2;
    case DType::f64:
      return 1e-10;
    case DType::e4m3:
      return 0.1;
    case DType::i32:  // an index dtype: never benchmarked
      return 0;
  }
  return 0;
}

bool CheckResult::pass() const {
  for (const auto& [name, error] : errors) {
    if (!(error <= tolerance)) return false;
  }
  return true;
}

double CheckResult::max_error() const {
  double worst = 0;
  for (const auto& [name, error] : errors) {
    if (std::isnan(error)) return error;
    worst = std::max(worst, error);
  }
  return worst;
}

std::string CheckResult::summary() const {
  if (!ran) return "-";
  std::string names;
  for (const auto& [name, error] : errors) names += (names.empty() ? "" : ",") + name;
  if (names.empty()) return "PASS (empty)";
  std::string text = pass() ? "PASS " + format_error(max_error()) + " <= "
                            : "FAIL " + format_error(max_error()) + " > ";
  text += format_error(tolerance) + " (" + names + ")";
  if (!skipped.empty()) text += " [" + skipped + "]";
  return text;
}

CheckResult check_forward(const Case& c, const HostInputs& in, const HostOutputs& out) {
  CheckResult result;
  result.ran = true;
  result.tolerance = tolerance(c.dtype, Mode::forward);
  const Slice s = row_slice(c);
  if (s.rows == 0) return result;
  ReferenceRun r = slice_inputs(c, in, s, false);
  run_reference_forward(c, r);
  result.errors.emplace_back(
      "o", relative_error(extract(c, out.o, c.Nq, c.Hq, s.row0, s.rows, s.heads), r.o));
  result.errors.emplace_back("lse", relative_error(extract_lse(c, out.lse, s), r.lse));
  return result;
}

CheckResult check_backward(const Case& c, const HostInputs& in, const HostOutputs& out) {
  CheckResult result;
  result.ran = true;
  result.tolerance = tolerance(c.dtype, Mode::backward);

  // dq of a row depends on that row alone: the row slice is exact.
  const Slice s = row_slice(c);
  if (s.rows > 0) {
    ReferenceRun r = slice_inputs(c, in, s, true);
    run_reference_backward(c, r);
    result.errors.emplace_back(
        "dq", relative_error(extract(c, out.dq, c.Nq, c.Hq, s.row0, s.rows, s.heads), r.dq));
  }

  // dk, dv of kv head 0 sum over all rows of all query heads in its group.
  Slice all_rows;
  all_rows.rows = c.Nq;
  all_rows.heads = c.Hq / c.Hkv;
  all_rows.kv_heads = 1;
  const double cost = double(c.Nq) * double(c.Nk) * double(c.D) * double(all_rows.heads);
  if (c.Nk == 0) return result;
  if (cost > kAllRowsBudget) {
    result.skipped = "dk,dv unchecked: all Nq rows too costly for the reference";
    return result;
  }
  ReferenceRun r = slice_inputs(c, in, all_rows, true);
  run_reference_backward(c, r);
  result.errors.emplace_back("dk",
                             relative_error(extract(c, out.dk, c.Nk, c.Hkv, 0, c.Nk, 1), r.dk));
  result.errors.emplace_back("dv",
                             relative_error(extract(c, out.dv, c.Nk, c.Hkv, 0, c.Nk, 1), r.dv));
  return result;
}

}  // namespace flashpp::bench
