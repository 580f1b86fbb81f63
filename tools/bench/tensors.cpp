#include "tensors.hpp"

#include <cmath>

#include "common/half_convert.hpp"

namespace flashpp::bench {
namespace {

// A counter-based generator: value i depends only on (seed, i), so inputs are reproducible
// and can be made in parallel.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Standard normal by Box-Muller from the two halves of one 64-bit hash.
float normal_at(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t h = splitmix64(seed ^ splitmix64(i));
  const double u1 = (double((h >> 32) & 0xFFFFFFFFu) + 1.0) / 4294967297.0;  // (0, 1)
  const double u2 = double(h & 0xFFFFFFFFu) / 4294967296.0;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

std::vector<std::byte> random_normal(DType dtype, std::int64_t count, std::uint64_t seed) {
  std::vector<std::byte> out(std::size_t(count) * element_size(dtype));
  void* data = out.data();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    const float x = normal_at(seed, std::uint64_t(i));
    switch (dtype) {
      case DType::f32:
        static_cast<float*>(data)[i] = x;
        break;
      case DType::f64:
        static_cast<double*>(data)[i] = x;
        break;
      case DType::f16:
        static_cast<std::uint16_t*>(data)[i] = detail::float_to_half(x);
        break;
      case DType::bf16:
        static_cast<std::uint16_t*>(data)[i] = detail::float_to_bf16(x);
        break;
      case DType::e4m3:
        static_cast<std::uint8_t*>(data)[i] = detail::float_to_e4m3(x);
        break;
      case DType::i32:  // an index dtype: never benchmarked
        static_cast<std::int32_t*>(data)[i] = 0;
        break;
    }
  }
  return out;
}

}  // namespace

HostInputs random_inputs(const Case& c, std::uint64_t seed) {
  const std::int64_t q_count = c.B * c.Nq * c.Hq * c.D, kv_count = c.B * c.Nk * c.Hkv * c.D;
  HostInputs in;
  in.q = random_normal(c.dtype, q_count, seed * 4 + 0);
  in.k = random_normal(c.dtype, kv_count, seed * 4 + 1);
  in.v = random_normal(c.dtype, kv_count, seed * 4 + 2);
  if (c.mode != Mode::forward) in.dout = random_normal(c.dtype, q_count, seed * 4 + 3);
  return in;
}

TensorView view_of(const Case& c, void* data, DType dtype, std::int64_t N, std::int64_t H,
                   Device device) {
  return c.layout == Layout::bnhd ? make_bnhd(data, dtype, c.B, N, H, c.D, device)
                                  : make_bhnd(data, dtype, c.B, N, H, c.D, device);
}

std::size_t AttentionTensors::bytes() const {
  return q.bytes() + k.bytes() + v.bytes() + o.bytes() + lse.bytes() + dout.bytes() + dq.bytes() +
         dk.bytes() + dv.bytes();
}

AttentionTensors place_tensors(const Case& c, Device device, const HostInputs& inputs) {
  const std::size_t es = element_size(c.dtype);
  const std::size_t q_bytes = std::size_t(c.B * c.Nq * c.Hq * c.D) * es;
  const std::size_t kv_bytes = std::size_t(c.B * c.Nk * c.Hkv * c.D) * es;
  const bool with_backward = c.mode != Mode::forward;

  AttentionTensors t;
  t.q = Buffer(device, q_bytes);
  t.k = Buffer(device, kv_bytes);
  t.v = Buffer(device, kv_bytes);
  t.o = Buffer(device, q_bytes);
  t.lse = Buffer(device, std::size_t(c.B * c.Hq * c.Nq) * sizeof(float));
  t.q.upload(inputs.q.data());
  t.k.upload(inputs.k.data());
  t.v.upload(inputs.v.data());
  t.o.fill_zero();
  t.lse.fill_zero();
  if (with_backward) {
    t.dout = Buffer(device, q_bytes);
    t.dq = Buffer(device, q_bytes);
    t.dk = Buffer(device, kv_bytes);
    t.dv = Buffer(device, kv_bytes);
    t.dout.upload(inputs.dout.data());
    t.dq.fill_zero();
    t.dk.fill_zero();
    t.dv.fill_zero();
  }

  t.Q = view_of(c, t.q.data(), c.dtype, c.Nq, c.Hq, device);
  t.K = view_of(c, t.k.data(), c.dtype, c.Nk, c.Hkv, device);
  t.V = view_of(c, t.v.data(), c.dtype, c.Nk, c.Hkv, device);
  t.O = view_of(c, t.o.data(), c.dtype, c.Nq, c.Hq, device);
  t.L = make_lse(static_cast<float*>(t.lse.data()), c.B, c.Hq, c.Nq, device);
  if (with_backward) {
    t.dO = view_of(c, t.dout.data(), c.dtype, c.Nq, c.Hq, device);
    t.dQ = view_of(c, t.dq.data(), c.dtype, c.Nq, c.Hq, device);
    t.dK = view_of(c, t.dk.data(), c.dtype, c.Nk, c.Hkv, device);
    t.dV = view_of(c, t.dv.data(), c.dtype, c.Nk, c.Hkv, device);
  }
  return t;
}

}  // namespace flashpp::bench
