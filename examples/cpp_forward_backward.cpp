// flashpp from C++: causal attention with grouped-query heads (GQA), forward and backward, on
// the CPU. Tensors are plain arrays in the [B, N, H, D] ("bnhd") layout; flashpp only sees views
// of them (pointer, dtype, device, sizes, strides).
#include <cmath>
#include <cstdio>
#include <flashpp/flashpp.hpp>
#include <random>
#include <vector>

int main() {
  // 8 query heads share 2 key/value heads: query head h reads kv head h / 4.
  const std::int64_t B = 2, N = 128, Hq = 8, Hkv = 2, D = 64;

  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  auto random_tensor = [&](std::int64_t H) {
    std::vector<float> t(std::size_t(B * N * H * D));
    for (float& x : t) x = normal(rng);
    return t;
  };
  std::vector<float> q = random_tensor(Hq), k = random_tensor(Hkv), v = random_tensor(Hkv);
  std::vector<float> o(q.size()), lse(std::size_t(B * Hq * N));

  using flashpp::DType;
  const auto Q = flashpp::make_bnhd(q.data(), DType::f32, B, N, Hq, D);
  const auto K = flashpp::make_bnhd(k.data(), DType::f32, B, N, Hkv, D);
  const auto V = flashpp::make_bnhd(v.data(), DType::f32, B, N, Hkv, D);
  const auto O = flashpp::make_bnhd(o.data(), DType::f32, B, N, Hq, D);
  const auto L = flashpp::make_lse(lse.data(), B, Hq, N);

  flashpp::Options options;
  options.causal = true;  // query i sees keys 0..i; the scale defaults to 1/sqrt(D)

  try {
    flashpp::forward(Q, K, V, O, L, options);

    // Backward of loss = sum(o): its gradient dout is all ones.
    std::vector<float> dout(o.size(), 1.0f), dq(q.size()), dk(k.size()), dv(v.size());
    const auto dO = flashpp::make_bnhd(dout.data(), DType::f32, B, N, Hq, D);
    const auto dQ = flashpp::make_bnhd(dq.data(), DType::f32, B, N, Hq, D);
    const auto dK = flashpp::make_bnhd(dk.data(), DType::f32, B, N, Hkv, D);
    const auto dV = flashpp::make_bnhd(dv.data(), DType::f32, B, N, Hkv, D);
    flashpp::backward(Q, K, V, O, L, dO, dQ, dK, dV, options);

    // Query 0 sees only key 0, so its output is v[key 0] of its kv head, and its lse is its
    // one scaled score.
    std::printf("o[b=0, i=0, h=5, :4]  = %.4f %.4f %.4f %.4f\n", o[5 * D], o[5 * D + 1],
                o[5 * D + 2], o[5 * D + 3]);
    std::printf("v[b=0, j=0, kv=1, :4] = %.4f %.4f %.4f %.4f\n", v[D], v[D + 1], v[D + 2],
                v[D + 3]);

    // Each row of P sums to 1, so sum(o) = sum over rows of P v; its gradient with respect
    // to v sums to (rows x heads) per feature.
    double dv_sum = 0;
    for (float x : dv) dv_sum += x;
    std::printf("sum(dv) = %.1f (expected B*N*Hq*D = %lld)\n", dv_sum,
                static_cast<long long>(B * N * Hq * D));
    return std::fabs(dv_sum - double(B * N * Hq * D)) < 1e-2 * double(B * N * Hq * D) ? 0 : 1;
  } catch (const flashpp::Error& e) {
    // The message names the argument, what was expected and what was given.
    std::fprintf(stderr, "flashpp error: %s\n", e.what());
    return 1;
  }
}
