// Moving tiles between the caller's strided tensors (f32, f16 or bf16) and the float32 scratch
// tiles the kernels compute on. Conversion happens here and nowhere else: tiles become float32
// on load and the storage dtype on store (round to nearest even), 16 elements at a time with
// AVX-512 (F16C-style vcvtph2ps / vcvtps2ph for f16, shifts for bf16), scalar for tails and
// in the fallback build.
#pragma once

#include <cstdint>
#include <cstring>

#include "../api/problem.hpp"
#include "../common/half_convert.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12 reports its own intrinsics' deliberately undefined pass-through operands as
// "may be used uninitialized" once they are inlined; the warning is a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE {

// count elements of dtype `dtype` at src -> float32 at dst, times `scale`.
inline void convert_to_f32(const void* src, DType dtype, std::int64_t count, float* dst,
                           float scale = 1.0f) {
  std::int64_t i = 0;
  switch (dtype) {
    case DType::f32: {
      const float* s = static_cast<const float*>(src);
      if (scale == 1.0f) {
        std::memcpy(dst, s, static_cast<std::size_t>(count) * sizeof(float));
        return;
      }
      for (; i < count; ++i) dst[i] = s[i] * scale;
      return;
    }
    case DType::f16: {
      const std::uint16_t* s = static_cast<const std::uint16_t*>(src);
#if defined(__AVX512F__)
      const __m512 vs = _mm512_set1_ps(scale);
      for (; i + 16 <= count; i += 16) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
        _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_cvtph_ps(h), vs));
      }
#endif
      for (; i < count; ++i) dst[i] = detail::half_to_float(s[i]) * scale;
      return;
    }
    case DType::bf16: {
      const std::uint16_t* s = static_cast<const std::uint16_t*>(src);
#if defined(__AVX512F__)
      const __m512 vs = _mm512_set1_ps(scale);
      for (; i + 16 <= count; i += 16) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
        const __m512i wide = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
        _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_castsi512_ps(wide), vs));
      }
#endif
      for (; i < count; ++i) dst[i] = detail::bf16_to_float(s[i]) * scale;
      return;
    }
    case DType::f64: {  // not a storage dtype of this backend; kept total for safety
      const double* s = static_cast<const double*>(src);
      for (; i < count; ++i) dst[i] = static_cast<float>(s[i]) * scale;
      return;
    }
    case DType::e4m3: {  // dequantised_forward.cpp reads e4m3 before the tiled path; kept total
      const std::uint8_t* s = static_cast<const std::uint8_t*>(src);
      for (; i < count; ++i) dst[i] = detail::e4m3_to_float(s[i]) * scale;
      return;
    }
    case DType::i32: return;  // an index dtype, never attention data (validation rejects it)
  }
}

// count float32 values times `scale` -> dtype `dtype` at dst.
inline void convert_from_f32(const float* src, std::int64_t count, DType dtype, void* dst,
                             float scale = 1.0f) {
  std::int64_t i = 0;
  switch (dtype) {
    case DType::f32: {
      float* d = static_cast<float*>(dst);
      for (; i < count; ++i) d[i] = src[i] * scale;
      return;
    }
    case DType::f16: {
      std::uint16_t* d = static_cast<std::uint16_t*>(dst);
#if defined(__AVX512F__)
      const __m512 vs = _mm512_set1_ps(scale);
      for (; i + 16 <= count; i += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(src + i), vs);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                            _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
#endif
      for (; i < count; ++i) d[i] = detail::float_to_half(src[i] * scale);
      return;
    }
    case DType::bf16: {
      std::uint16_t* d = static_cast<std::uint16_t*>(dst);
#if defined(__AVX512F__)
      const __m512 vs = _mm512_set1_ps(scale);
      for (; i + 16 <= count; i += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(src + i), vs);
        const __m512i u = _mm512_castps_si512(v);
        // round to nearest even: add 0x7FFF plus the lowest kept bit, then keep the top half
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
        r = _mm512_srli_epi32(r, 16);
        // NaN stays a (quiet) NaN instead of rounding into infinity
        const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        r = _mm512_mask_mov_epi32(r, nan, quiet);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm512_cvtepi32_epi16(r));
      }
#endif
      for (; i < count; ++i) d[i] = detail::float_to_bf16(src[i] * scale);
      return;
    }
    case DType::f64: {
      double* d = static_cast<double*>(dst);
      for (; i < count; ++i) d[i] = static_cast<double>(src[i] * scale);
      return;
    }
    case DType::e4m3: {  // never an output dtype; kept total
      std::uint8_t* d = static_cast<std::uint8_t*>(dst);
      for (; i < count; ++i) d[i] = detail::float_to_e4m3(src[i] * scale);
      return;
    }
    case DType::i32: return;  // an index dtype, never attention data (validation rejects it)
  }
}

// Address of element `offset` of a view.
inline const void* element_ptr(const TensorView& t, std::int64_t offset) {
  return static_cast<const char*>(t.data) + offset * static_cast<std::int64_t>(element_size(t.dtype));
}
inline void* element_ptr_mut(const TensorView& t, std::int64_t offset) {
  return static_cast<char*>(t.data) + offset * static_cast<std::int64_t>(element_size(t.dtype));
}

// Rows n0 .. n0+rows-1 of head h of batch b ([B, N, H, D] view) -> dst[r * ld + d], float32,
// times `scale`. Rows rows .. padded_rows-1 of dst are zeroed.
inline void load_tile_rows(const TensorView& t, std::int64_t b, std::int64_t n0,
                           std::int64_t rows, std::int64_t h, std::int64_t D, float* dst,
                           std::int64_t ld, std::int64_t padded_rows, float scale = 1.0f) {
  for (std::int64_t r = 0; r < rows; ++r) {
    convert_to_f32(element_ptr(t, detail::offset4(t, b, n0 + r, h, 0)), t.dtype, D, dst + r * ld,
                   scale);
  }
  for (std::int64_t r = rows; r < padded_rows; ++r) std::memset(dst + r * ld, 0, D * sizeof(float));
}

// Rows n0 .. n0+rows-1 of head h of batch b as float32 rows D apart, for a tile product to read:
// where they already are when the view is float32 with rows D apart (e.g. [B, H, N, D] storage),
// else copied (and converted) into `scratch` (ld D) by load_tile_rows (the float32 kernels'
// products; in place: +0..+3% forward, +1..+2% backward at 2 threads on the development VM).
inline const float* tile_rows_f32(const TensorView& t, std::int64_t b, std::int64_t n0,
                                  std::int64_t rows, std::int64_t h, std::int64_t D, float* scratch) {
  if (t.dtype == DType::f32 && t.strides[3] == 1 && (t.strides[1] == D || rows <= 1)) {
    return static_cast<const float*>(element_ptr(t, detail::offset4(t, b, n0, h, 0)));
  }
  load_tile_rows(t, b, n0, rows, h, D, scratch, D, rows);
  return scratch;
}

// The same rows, transposed: dst[d * ld + r]. Columns rows .. padded_rows-1 are zeroed.
// `row_buffer` holds D floats. Used only for tiles that stay fixed over a whole inner loop, so
// the scalar scatter is paid once per tile, not once per tile product.
inline void load_tile_transposed(const TensorView& t, std::int64_t b, std::int64_t n0,
                                 std::int64_t rows, std::int64_t h, std::int64_t D, float* dst,
                                 std::int64_t ld, std::int64_t padded_rows, float* row_buffer,
                                 float scale = 1.0f) {
  for (std::int64_t r = 0; r < rows; ++r) {
    convert_to_f32(element_ptr(t, detail::offset4(t, b, n0 + r, h, 0)), t.dtype, D, row_buffer,
                   scale);
    for (std::int64_t d = 0; d < D; ++d) dst[d * ld + r] = row_buffer[d];
  }
  for (std::int64_t d = 0; d < D; ++d) {
    for (std::int64_t r = rows; r < padded_rows; ++r) dst[d * ld + r] = 0.0f;
  }
}

// src[r * ld + d] times `scale` -> rows n0 .. n0+rows-1 of head h of batch b.
inline void store_tile_rows(const float* src, std::int64_t ld, const TensorView& t, std::int64_t b,
                            std::int64_t n0, std::int64_t rows, std::int64_t h, std::int64_t D,
                            float scale = 1.0f) {
  for (std::int64_t r = 0; r < rows; ++r) {
    convert_from_f32(src + r * ld, D, t.dtype, element_ptr_mut(t, detail::offset4(t, b, n0 + r, h, 0)),
                     scale);
  }
}

}  // namespace flashpp::cpu::FLASHPP_CPU_KERNEL_NAMESPACE
