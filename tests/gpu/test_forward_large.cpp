// 64-bit indexing: K and V of more than 2^31 elements each (B=1, Nk=2^20+80, Hkv=16, D=128,
// fp16: 4.3 GB per tensor). A bottom-right causal window makes the last query rows see only the
// last keys, whose offsets are past 2^31 elements; they are checked against a float64 sum on
// the host (only the few rows involved). Skipped when the GPU lacks the memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/half_convert.hpp"
#include "flashpp/flashpp.hpp"
#include "gpu_buffer.hpp"

namespace flashpp {
namespace {

// A cheap, index-keyed pseudo-random value in [-1, 1): every element differs, so a wrapped
// 32-bit offset would read visibly different data.
float hashed_value(std::uint64_t index) {
  std::uint64_t z = index + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);
}

TEST(ForwardLarge, KeysBeyond2To31Elements) {
  FLASHPP_SKIP_WITHOUT_GPU();
  constexpr std::int64_t Nq = 8, Nk = (std::int64_t(1) << 20) + 80, Hq = 32, Hkv = 16, D = 128;
  constexpr std::int64_t kv_elements = Nk * Hkv * D;
  static_assert(kv_elements > (std::int64_t(1) << 31));
  std::size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  if (free_bytes < std::size_t(2 * kv_elements * 2 + (std::int64_t(1) << 30))) {
    GTEST_SKIP() << "needs ~9 GB of free GPU memory";
  }
  std::vector<std::uint16_t> k(kv_elements), v(kv_elements), q(Nq * Hq * D);
#pragma omp parallel for
  for (std::int64_t e = 0; e < kv_elements; ++e) {
    k[e] = detail::float_to_half(hashed_value(2 * e));
    v[e] = detail::float_to_half(hashed_value(2 * e + 1));
  }
  for (std::int64_t e = 0; e < Nq * Hq * D; ++e)
    q[e] = detail::float_to_half(hashed_value(std::uint64_t(1) << 40 | e));

  gpu_test::DeviceBuffer dq(q.size() * 2), dk(k.size() * 2), dv(v.size() * 2), dout(q.size() * 2),
      dlse(Hq * Nq * 4);
  ASSERT_TRUE(dk.ok() && dv.ok() && dq.ok());
  dq.upload(q);
  dk.upload(k);
  dv.upload(v);
  dout.fill_bytes(0xFF);
  dlse.fill_bytes(0xFF);
  const Device dev{DeviceType::cuda, 0};
  Options options;
  options.causal = true;
  options.alignment = Alignment::bottom_right;
  options.window_left = 100;
  options.backend = Backend::cuda;
  forward(make_bnhd(dq.data(), DType::f16, 1, Nq, Hq, D, dev),
          make_bnhd(dk.data(), DType::f16, 1, Nk, Hkv, D, dev),
          make_bnhd(dv.data(), DType::f16, 1, Nk, Hkv, D, dev),
          make_bnhd(dout.data(), DType::f16, 1, Nq, Hq, D, dev),
          make_lse(static_cast<float*>(dlse.data()), 1, Hq, Nq, dev), options);
  FLASHPP_CUDA_OK(cudaDeviceSynchronize());
  const auto o = dout.download<std::uint16_t>(q.size());
  const auto lse = dlse.download<float>(Hq * Nq);

  const double scale = 1.0 / std::sqrt(double(D));
  double worst_o = 0.0, worst_lse = 0.0;
  for (std::int64_t h : {0L, 17L, 31L}) {
    for (std::int64_t i = 0; i < Nq; ++i) {
      const std::int64_t hk = h / (Hq / Hkv);
      const std::int64_t last = i + Nk - Nq, first = last - 100;  // the window
      std::vector<double> s;
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = first; j <= last; ++j) {
        double dot = 0.0;
        for (std::int64_t d = 0; d < D; ++d)
          dot += detail::half_to_float(q[(i * Hq + h) * D + d]) *
                 detail::half_to_float(k[(j * Hkv + hk) * D + d]);
        s.push_back(dot * scale);
        mx = std::max(mx, s.back());
      }
      double sum = 0.0;
      for (double x : s) sum += std::exp(x - mx);
      const double ref_lse = mx + std::log(sum);
      worst_lse = std::max(worst_lse, std::abs(lse[h * Nq + i] - ref_lse));
      for (std::int64_t d = 0; d < D; ++d) {
        double acc = 0.0;
        for (std::int64_t j = first; j <= last; ++j)
          acc += std::exp(s[j - first] - ref_lse) * detail::half_to_float(v[(j * Hkv + hk) * D + d]);
        const double got = detail::half_to_float(o[(i * Hq + h) * D + d]);
        worst_o = std::max(worst_o, std::abs(got - acc));
      }
    }
  }
  // |O| <~ 0.2 here; fp16 output rounding alone is ~1e-4.
  EXPECT_LT(worst_o, 2e-3);
  EXPECT_LT(worst_lse, 1e-4);
}

}  // namespace
}  // namespace flashpp
