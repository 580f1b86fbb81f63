// 64-bit indexing in the backward: K, V, dK, dV of more than 2^31 elements each (B=1,
// Nk=2^20+80, Hkv=16, D=128, fp16: 4.3 GB per tensor, ~17 GB in all). A bottom-right causal
// window of 100 keys makes the 8 query rows see only the last ~108 keys, whose element offsets
// straddle 2^31; their dK/dV rows and all of dQ are checked against a float64 computation on
// the host (cheap: only those keys), and the first key rows, which no query sees, must come out
// exactly 0. Outputs are poisoned first. Skipped when the GPU lacks the memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/half_convert.hpp"
#include "flashpp/flashpp.hpp"
#include "gpu_buffer.hpp"

namespace flashpp {
namespace {

// Index-keyed pseudo-random values in [-1, 1) (SplitMix64's finaliser): every element differs,
// so a wrapped 32-bit offset reads visibly different data.
float hashed(std::uint64_t index) {
  std::uint64_t z = index + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);
}

double h2d(std::uint16_t h) { return detail::half_to_float(h); }

TEST(BackwardLarge, KeysBeyond2To31Elements) {
  FLASHPP_SKIP_WITHOUT_GPU();
  constexpr std::int64_t Nq = 8, Nk = (std::int64_t(1) << 20) + 80, Hq = 32, Hkv = 16, D = 128;
  constexpr std::int64_t kWindow = 100, hpk = Hq / Hkv;
  constexpr std::int64_t kv = Nk * Hkv * D, qn = Nq * Hq * D;
  static_assert(kv > (std::int64_t(1) << 31));
  std::size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  if (free_bytes < std::size_t(4 * kv * 2 + (std::int64_t(1) << 30))) {
    GTEST_SKIP() << "needs ~18 GB of free GPU memory";
  }
  std::vector<std::uint16_t> k(kv), v(kv), q(qn), dout(qn);
#pragma omp parallel for
  for (std::int64_t e = 0; e < kv; ++e) {
    k[e] = detail::float_to_half(hashed(2 * e));
    v[e] = detail::float_to_half(hashed(2 * e + 1));
  }
  for (std::int64_t e = 0; e < qn; ++e) {
    q[e] = detail::float_to_half(hashed(std::uint64_t(1) << 40 | e));
    dout[e] = detail::float_to_half(hashed(std::uint64_t(1) << 41 | e));
  }
  auto K = [&](std::int64_t j, std::int64_t hk, std::int64_t d) { return h2d(k[(j * Hkv + hk) * D + d]); };
  auto V = [&](std::int64_t j, std::int64_t hk, std::int64_t d) { return h2d(v[(j * Hkv + hk) * D + d]); };
  auto Q = [&](std::int64_t i, std::int64_t h, std::int64_t d) { return h2d(q[(i * Hq + h) * D + d]); };
  auto dO = [&](std::int64_t i, std::int64_t h, std::int64_t d) { return h2d(dout[(i * Hq + h) * D + d]); };

  // Float64 forward and backward of the rows involved. Query i sees keys
  // [i + shift - window, i + shift] with shift = Nk - Nq.
  const double scale = 1.0 / std::sqrt(double(D));
  constexpr std::int64_t kFirstKey = Nk - Nq - kWindow;  // the first key any row sees
  constexpr std::int64_t kKeys = Nk - kFirstKey;
  std::vector<std::uint16_t> o(qn);
  std::vector<float> lse(Hq * Nq);
  std::vector<double> ref_dq(qn, 0.0), ref_dk(kKeys * Hkv * D, 0.0), ref_dv(kKeys * Hkv * D, 0.0);
  for (std::int64_t h = 0; h < Hq; ++h) {
    const std::int64_t hk = h / hpk;
    for (std::int64_t i = 0; i < Nq; ++i) {
      const std::int64_t last = i + Nk - Nq, first = last - kWindow;
      std::vector<double> s, P;
      double mx = -INFINITY;
      for (std::int64_t j = first; j <= last; ++j) {
        double dot = 0.0;
        for (std::int64_t d = 0; d < D; ++d) dot += Q(i, h, d) * K(j, hk, d);
        s.push_back(dot * scale);
        mx = std::max(mx, s.back());
      }
      double sum = 0.0;
      for (double x : s) sum += std::exp(x - mx);
      const double row_lse = mx + std::log(sum);
      lse[h * Nq + i] = static_cast<float>(row_lse);
      for (double x : s) P.push_back(std::exp(x - row_lse));
      double delta = 0.0;  // rowsum(dO * O) with O as the backward receives it (fp16)
      for (std::int64_t d = 0; d < D; ++d) {
        double acc = 0.0;
        for (std::int64_t j = first; j <= last; ++j) acc += P[j - first] * V(j, hk, d);
        o[(i * Hq + h) * D + d] = detail::float_to_half(static_cast<float>(acc));
        delta += dO(i, h, d) * h2d(o[(i * Hq + h) * D + d]);
      }
      for (std::int64_t j = first; j <= last; ++j) {
        double dp = 0.0;
        for (std::int64_t d = 0; d < D; ++d) dp += dO(i, h, d) * V(j, hk, d);
        const double ds = P[j - first] * (dp - delta);
        const std::int64_t r = (j - kFirstKey) * Hkv + hk;
        for (std::int64_t d = 0; d < D; ++d) {
          ref_dq[(i * Hq + h) * D + d] += scale * ds * K(j, hk, d);
          ref_dk[r * D + d] += scale * ds * Q(i, h, d);
          ref_dv[r * D + d] += P[j - first] * dO(i, h, d);
        }
      }
    }
  }

  gpu_test::DeviceBuffer gq(qn * 2), gk(kv * 2), gv(kv * 2), go(qn * 2), gdo(qn * 2),
      glse(Hq * Nq * 4), gdq(qn * 2), gdk(kv * 2), gdv(kv * 2);
  ASSERT_TRUE(gk.ok() && gv.ok() && gdk.ok() && gdv.ok());
  gq.upload(q);
  gk.upload(k);
  gv.upload(v);
  go.upload(o);
  gdo.upload(dout);
  glse.upload(lse);
  for (auto* b : {&gdq, &gdk, &gdv}) b->fill_bytes(0xFF);  // NaN poison
  const Device dev{DeviceType::cuda, 0};
  Options options;
  options.causal = true;
  options.alignment = Alignment::bottom_right;
  options.window_left = kWindow;
  options.backend = Backend::cuda;
  auto qv = [&](const gpu_test::DeviceBuffer& b) { return make_bnhd(b.data(), DType::f16, 1, Nq, Hq, D, dev); };
  auto kvv = [&](const gpu_test::DeviceBuffer& b) { return make_bnhd(b.data(), DType::f16, 1, Nk, Hkv, D, dev); };
  backward(qv(gq), kvv(gk), kvv(gv), qv(go), make_lse(static_cast<float*>(glse.data()), 1, Hq, Nq, dev),
           qv(gdo), qv(gdq), kvv(gdk), kvv(gdv), options);
  FLASHPP_CUDA_OK(cudaDeviceSynchronize());

  // Downloads: all of dq; the seen key rows (offsets past 2^31) and the first rows of dk/dv.
  auto rows = [&](const gpu_test::DeviceBuffer& b, std::int64_t row0, std::int64_t n) {
    std::vector<std::uint16_t> out(n * Hkv * D);
    cudaMemcpy(out.data(), static_cast<const std::uint16_t*>(b.data()) + row0 * Hkv * D,
               out.size() * 2, cudaMemcpyDeviceToHost);
    return out;
  };
  const auto got_dq = gdq.download<std::uint16_t>(qn);
  const auto got_dk = rows(gdk, kFirstKey, kKeys), got_dv = rows(gdv, kFirstKey, kKeys);
  const auto head_dk = rows(gdk, 0, 128), head_dv = rows(gdv, 0, 128);

  auto check = [](const char* name, const std::vector<std::uint16_t>& got,
                  const std::vector<double>& ref) {
    double worst = 0.0, largest = 0.0;
    for (std::size_t e = 0; e < ref.size(); ++e) {
      const double g = h2d(got[e]);
      ASSERT_TRUE(std::isfinite(g)) << name << " element " << e << " not written";
      worst = std::max(worst, std::abs(g - ref[e]));
      largest = std::max(largest, std::abs(ref[e]));
    }
    // fp16 operands of the products (P, dS rounded to fp16) and fp16 output: ~1e-3 of the
    // largest value; a wrong 32-bit offset gives errors of the order of the values themselves.
    EXPECT_LT(worst, 1e-2 * largest + 1e-4) << name << ": worst |got - ref| " << worst
                                            << " with largest |ref| " << largest;
  };
  check("dq", got_dq, ref_dq);
  check("dk (keys past 2^31 elements)", got_dk, ref_dk);
  check("dv (keys past 2^31 elements)", got_dv, ref_dv);
  for (std::size_t e = 0; e < head_dk.size(); ++e) {
    ASSERT_EQ(h2d(head_dk[e]), 0.0) << "dk of a key no query sees, element " << e;
    ASSERT_EQ(h2d(head_dv[e]), 0.0) << "dv of a key no query sees, element " << e;
  }
}

}  // namespace
}  // namespace flashpp
