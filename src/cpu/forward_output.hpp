// The CPU forward's last step, shared by its kernels (flash_forward.cpp, forward_bf16.cpp): after
// the last key tile, O /= l into the caller's output (in its dtype) and, where asked, lse = m ln 2
// + log l (m is the row's running maximum in base-2 units); a row that saw no key gets O = 0 and
// lse = -inf.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "../api/problem.hpp"
#include "tile_io.hpp"
#include "vector_math.hpp"

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

// Query rows i0 .. i0 + q_rows of head h in batch b: `o` holds their unnormalised outputs, a row
// every `ld` floats; m, l their running maxima and sums.
inline void store_forward_rows(const detail::ForwardArgs& a, std::int64_t b, std::int64_t h, std::int64_t i0,
                               std::int64_t q_rows, const float* o, std::int64_t ld, const float* m,
                               const float* l) {
  const std::int64_t D = a.problem.D;
  for (std::int64_t r = 0; r < q_rows; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    convert_from_f32(o + r * ld, D, a.o.dtype, element_ptr_mut(a.o, detail::offset4(a.o, b, i0 + r, h, 0)),
                     inv);
  }
  if (a.write_lse && a.lse.data != nullptr) {
    float* lse = static_cast<float*>(a.lse.data);
    for (std::int64_t r = 0; r < q_rows; ++r) {
      lse[detail::offset3(a.lse, b, h, i0 + r)] =
          l[r] > 0.0f ? m[r] * kLn2 + std::log(l[r]) : -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
