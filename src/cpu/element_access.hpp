// Reading and writing one element of a view of any storage dtype, in double. Slow; meant for the
// reference backend and for tests, not for kernels.
#pragma once

#include <cstdint>

#include "../common/half_convert.hpp"
#include "flashpp/flashpp.hpp"

namespace flashpp::detail {

inline double load_element(const TensorView& t, std::int64_t offset) {
  switch (t.dtype) {
    case DType::f32: return static_cast<const float*>(t.data)[offset];
    case DType::f64: return static_cast<const double*>(t.data)[offset];
    case DType::f16: return half_to_float(static_cast<const std::uint16_t*>(t.data)[offset]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(t.data)[offset]);
    case DType::e4m3: return e4m3_to_float(static_cast<const std::uint8_t*>(t.data)[offset]);
    case DType::i32: return static_cast<const std::int32_t*>(t.data)[offset];
  }
  return 0.0;
}

inline void store_element(const TensorView& t, std::int64_t offset, double value) {
  switch (t.dtype) {
    case DType::f32: static_cast<float*>(t.data)[offset] = static_cast<float>(value); break;
    case DType::f64: static_cast<double*>(t.data)[offset] = value; break;
    case DType::f16:
      static_cast<std::uint16_t*>(t.data)[offset] = float_to_half(static_cast<float>(value));
      break;
    case DType::bf16:
      static_cast<std::uint16_t*>(t.data)[offset] = float_to_bf16(static_cast<float>(value));
      break;
    case DType::e4m3:
      static_cast<std::uint8_t*>(t.data)[offset] = float_to_e4m3(static_cast<float>(value));
      break;
    case DType::i32: static_cast<std::int32_t*>(t.data)[offset] = static_cast<std::int32_t>(value); break;
  }
}

}  // namespace flashpp::detail
