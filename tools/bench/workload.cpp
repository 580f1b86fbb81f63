#include "workload.hpp"

#include "common/mask.hpp"

namespace flashpp::bench {

double visible_pairs(const Case& c) {
  if (!c.causal) return double(c.Nq) * double(c.Nk);
  // The library's own visibility rule, so that the count matches what the kernels compute.
  detail::Mask mask;
  mask.shift = c.alignment == Alignment::bottom_right ? c.Nk - c.Nq : 0;
  mask.right = 0;
  double pairs = 0;
  for (std::int64_t i = 0; i < c.Nq; ++i) {
    const std::int64_t first = mask.first_key(i), last = mask.last_key(i, c.Nk);
    if (last >= first) pairs += double(last - first + 1);
  }
  return pairs;
}

FlopCount count_flops(const Case& c) {
  FlopCount f;
  const double per_pair = 4.0 * double(c.B) * double(c.Hq) * double(c.D);
  if (c.causal && c.Nq == c.Nk) {
    f.forward = per_pair * double(c.Nq) * double(c.Nk) / 2;
  } else {
    f.forward = per_pair * visible_pairs(c);
    f.exact_pairs = c.causal;
  }
  f.backward = 2.5 * f.forward;
  return f;
}

namespace {
Case make_case(std::int64_t B, std::int64_t Hq, std::int64_t Hkv, std::int64_t N, std::int64_t D,
               bool causal, DType dtype, Mode mode) {
  Case c;
  c.B = B, c.Hq = Hq, c.Hkv = Hkv, c.Nq = N, c.Nk = N, c.D = D;
  c.causal = causal, c.dtype = dtype, c.mode = mode;
  return c;
}
}  // namespace

std::vector<Case> cpu_grid() {
  // Sized for a 2-core machine: the N = 4096 forward is the headline figure (the seeds'
  // shape per batch-head), the others cover causal, GQA, half-precision storage and backward.
  return {
      make_case(1, 8, 8, 1024, 64, false, DType::f32, Mode::both),
      make_case(1, 8, 8, 1024, 64, true, DType::f32, Mode::both),
      make_case(1, 8, 2, 1024, 64, true, DType::bf16, Mode::both),
      make_case(1, 8, 8, 2048, 128, false, DType::f16, Mode::forward),
      make_case(1, 8, 8, 4096, 128, false, DType::f32, Mode::forward),
  };
}

std::vector<Case> cuda_grid() {
  std::vector<Case> grid;
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (std::int64_t D : {64, 128}) {
      for (bool causal : {false, true}) {
        for (std::int64_t N : {1024, 4096, 16384}) {
          grid.push_back(make_case(4, 32, 32, N, D, causal, dtype, Mode::both));
        }
      }
    }
  }
  return grid;
}

}  // namespace flashpp::bench
