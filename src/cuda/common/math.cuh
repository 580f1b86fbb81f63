// Scalar math on the hot path of the softmax, and float32 -> 16-bit pair packing for mma inputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashpp::cuda {

// 2^x with the hardware approximation (ex2.approx, relative error ~2^-22, flushes subnormal
// results to zero): one MUFU op instead of the accurate exp2f's range reduction. exp2(-inf) = 0,
// which the masked scores rely on. The softmax folds scale*log2(e) into one FFMA before it.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// log2(x) with the hardware approximation (lg2.approx: -inf for 0, +inf for inf).
__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// Two floats -> one 32-bit register of two 16-bit values (lo in the low half), round to nearest.
template <typename Element>
__device__ __forceinline__ std::uint32_t pack_pair(float lo, float hi);

template <>
__device__ __forceinline__ std::uint32_t pack_pair<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

template <>
__device__ __forceinline__ std::uint32_t pack_pair<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

// One 32-bit register of two 16-bit values -> two floats (lo in .x).
template <typename Element>
__device__ __forceinline__ float2 unpack_pair(std::uint32_t pair);

template <>
__device__ __forceinline__ float2 unpack_pair<__half>(std::uint32_t pair) {
  return __half22float2(*reinterpret_cast<const __half2*>(&pair));
}

template <>
__device__ __forceinline__ float2 unpack_pair<__nv_bfloat16>(std::uint32_t pair) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pair));
}

}  // namespace flashpp::cuda
