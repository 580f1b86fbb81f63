// The CPU backends' FP8 (e4m3) forward: q, k and v are read into float32 copies, each element
// times its (batch, kv head) descale factor, and the float32 path (reference or tiled) runs on
// them, storing o in its own dtype (f16 or bf16). This gives exactly the semantics the GPU kernel
// approximates: attention on the dequantised inputs, accumulated in float32 (float64 in the
// reference). The copies cost 4 bytes per input element; the CPU path is for semantics and
// tests, not speed.
#include <vector>

#include "../common/half_convert.hpp"
#include "cpu_backend.hpp"

namespace flashpp::cpu {
namespace {

// The descale factor of (b, kv head), 1 for an empty view.
float descale_at(const TensorView& d, std::int64_t b, std::int64_t h_kv) {
  if (d.data == nullptr) return 1.0f;
  return static_cast<const float*>(d.data)[b * d.strides[0] + h_kv * d.strides[1]];
}

// A contiguous [B, N, H, D] float32 copy of an e4m3 view; `heads_per_kv` maps head h to the
// descale's kv head h / heads_per_kv (1 for k and v).
TensorView dequantise(const TensorView& t, const TensorView& descale, std::int64_t heads_per_kv,
                      std::vector<float>& storage) {
  const std::int64_t B = t.sizes[0], N = t.sizes[1], H = t.sizes[2], D = t.sizes[3];
  storage.assign(static_cast<std::size_t>(B * N * H * D), 0.0f);
  const auto* src = static_cast<const std::uint8_t*>(t.data);
  float table[256];
  for (int x = 0; x < 256; ++x) table[x] = detail::e4m3_to_float(static_cast<std::uint8_t>(x));
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t h = 0; h < H; ++h) {
        const float factor = descale_at(descale, b, h / heads_per_kv);
        const std::uint8_t* row = src + detail::offset4(t, b, n, h, 0);
        float* out = storage.data() + ((b * N + n) * H + h) * D;
        for (std::int64_t d = 0; d < D; ++d) out[d] = table[row[d]] * factor;
      }
  return make_bnhd(storage.data(), DType::f32, B, N, H, D, t.device);
}

}  // namespace

void dequantised_forward(const detail::ForwardArgs& args, bool reference) {
  detail::ForwardArgs a = args;
  const std::int64_t group = a.problem.heads_per_kv();
  std::vector<float> q, k, v;
  a.q = dequantise(args.q, args.q_descale, group, q);
  a.k = dequantise(args.k, args.k_descale, 1, k);
  a.v = dequantise(args.v, args.v_descale, 1, v);
  a.q_descale = a.k_descale = a.v_descale = TensorView{};
  a.problem.dtype = DType::f32;
  if (reference) {
    reference_forward(a);
  } else {
    flash_forward(a);
  }
}

}  // namespace flashpp::cpu
