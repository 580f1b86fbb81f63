// Host-side helpers of the primitive tests (test_primitives.cu, test_primitives_sm90.cu): 16-bit
// values as raw bits, the launch check, and the swizzled-tile layout written out independently of
// src/cuda/common/swizzle.cuh (from its comment) so that the tests compare the code with the
// documented layout rather than with itself.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "gpu_buffer.hpp"

namespace flashpp::gpu_test {

// Compute capability major of device 0 (0 when unknown).
inline int device_major() {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return major;
}

inline int device_minor() {
  int minor = 0;
  if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return minor;
}

// After a launch: a device this binary has no code for skips the test; any other error fails it.
#define FLASHPP_LAUNCH_OK()                                                             \
  do {                                                                                  \
    const cudaError_t launch_error = cudaGetLastError();                                \
    if (launch_error == cudaErrorNoKernelImageForDevice) {                              \
      GTEST_SKIP() << "this build has no kernel image for the device";                  \
    }                                                                                   \
    ASSERT_EQ(launch_error, cudaSuccess) << cudaGetErrorString(launch_error);           \
    const cudaError_t sync_error = cudaDeviceSynchronize();                             \
    ASSERT_EQ(sync_error, cudaSuccess) << cudaGetErrorString(sync_error);               \
  } while (0)

#define FLASHPP_ALLOC_OK(buffer) ASSERT_TRUE((buffer).ok()) << "cudaMalloc of " #buffer

// Checks an M x N row-major result against want(m, n) within 1e-6 (the products of these tests
// are sums of eighths: exact in float32), reporting the first 10 mismatches.
template <typename Want>
void expect_matrix(const std::vector<float>& d, int M, int N, Want&& want) {
  int errors = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const float w = want(m, n);
      const float diff = d[m * N + n] > w ? d[m * N + n] - w : w - d[m * N + n];
      if (!(diff <= 1e-6f) && ++errors <= 10) {
        ADD_FAILURE() << "D[" << m << "][" << n << "]: got " << d[m * N + n] << ", want " << w;
      }
    }
  EXPECT_EQ(errors, 0);
}

// 16-bit floats as their bits, for exact comparisons and for poison (0xFFFF is a NaN in both).
inline constexpr std::uint16_t kPoison16 = 0xFFFFu;

template <typename T>
T from_float(float x);
template <>
inline __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// (Through the raw structs: __half and __nv_bfloat16 are classes, not plain 16-bit data.)
inline std::uint16_t raw_bits(__half h) { return static_cast<__half_raw>(h).x; }
inline std::uint16_t raw_bits(__nv_bfloat16 h) { return static_cast<__nv_bfloat16_raw>(h).x; }

template <typename T>
std::uint16_t bits_of(float x) {
  return raw_bits(from_float<T>(x));
}

template <typename T>
float float_of(std::uint16_t bits);
template <>
inline float float_of<__half>(std::uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}
template <>
inline float float_of<__nv_bfloat16>(std::uint16_t bits) {
  __nv_bfloat16_raw raw;
  raw.x = bits;
  return __bfloat162float(__nv_bfloat16(raw));
}

// Values k/8 for k in [-8, 8]: exact in fp16 and bf16, and products and sums of a few hundred of
// them are exact in float32, so matrix products can be compared exactly.
inline std::vector<float> eighths(std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<float> v(count);
  for (float& x : v) x = static_cast<float>(dist(rng)) / 8.0f;
  return v;
}

template <typename T>
std::vector<std::uint16_t> to_bits(const std::vector<float>& v) {
  std::vector<std::uint16_t> bits(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) bits[i] = bits_of<T>(v[i]);
  return bits;
}

// Element offset of (row, col) in a SwizzledTile<rows, cols>, as swizzle.cuh documents it:
// panels of 8 16-byte chunks (cols a multiple of 64) or of 4, each stored row after row, the chunk
// index inside a panel XORed with row % 8 (8-chunk panels) or (row / 2) % 4 (4-chunk panels).
inline int swizzled_offset(int rows, int cols, int row, int col) {
  const int panel_chunks = cols % 64 == 0 ? 8 : 4;
  const int chunk = col / 8;
  const int panel = chunk / panel_chunks;
  const int in_panel = chunk % panel_chunks;
  const int xor_bits = panel_chunks == 8 ? (row & 7) : ((row >> 1) & 3);
  return panel * rows * panel_chunks * 8 + (row * panel_chunks + (in_panel ^ xor_bits)) * 8 +
         col % 8;
}

inline std::uint32_t pack16(std::uint16_t lo, std::uint16_t hi) {
  return static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
}

// |got - want| within a relative tolerance (and an absolute floor); equal infinities pass.
inline bool near(double got, double want, double rel, double abs_floor = 0.0) {
  if (got == want) return true;
  const double d = got > want ? got - want : want - got;
  const double w = want < 0 ? -want : want;
  return d <= rel * w + abs_floor;
}

}  // namespace flashpp::gpu_test
