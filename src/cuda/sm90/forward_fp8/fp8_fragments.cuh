// Register-level helpers of the FP8 forward: float32 -> e4m3 packing of P into the 8-bit
// A-fragment layout, and the 4 x 4 byte transpose the V transposition is built from.
#pragma once

#include <cstdint>

namespace flashpp::cuda::sm90::fp8 {

// Four floats -> one register of four e4m3 bytes, x0 in the lowest byte (round to nearest even,
// saturating to +-448). cvt.rn.satfinite.e4m3x2.f32 d, a, b puts a in the high byte of d.
__device__ __forceinline__ std::uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
  std::uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}

// Byte permute: result byte i = byte sel_i (nibble i of `selector`) of the 8 bytes {b:a}.
__device__ __forceinline__ std::uint32_t byte_perm(std::uint32_t a, std::uint32_t b,
                                                   std::uint32_t selector) {
  std::uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
}

// In: rows r = 0..3 of a 4 x 4 byte block, row r in w[r] (column c in byte c). Out: its columns,
// column c in w[c] (row r in byte r). Eight byte permutes.
__device__ __forceinline__ void transpose_4x4_bytes(std::uint32_t (&w)[4]) {
  const std::uint32_t x0 = byte_perm(w[0], w[1], 0x5140u);  // r0c0 r1c0 r0c1 r1c1
  const std::uint32_t x1 = byte_perm(w[0], w[1], 0x7362u);  // r0c2 r1c2 r0c3 r1c3
  const std::uint32_t y0 = byte_perm(w[2], w[3], 0x5140u);  // r2c0 r3c0 r2c1 r3c1
  const std::uint32_t y1 = byte_perm(w[2], w[3], 0x7362u);
  w[0] = byte_perm(x0, y0, 0x5410u);  // r0c0 r1c0 r2c0 r3c0
  w[1] = byte_perm(x0, y0, 0x7632u);
  w[2] = byte_perm(x1, y1, 0x5410u);
  w[3] = byte_perm(x1, y1, 0x7632u);
}

// 4-byte shared-memory accesses by 32-bit shared address (volatile: they stay between the
// barrier waits and arrivals around them).
__device__ __forceinline__ std::uint32_t load_shared_u32(std::uint32_t address) {
  std::uint32_t x;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(x) : "r"(address) : "memory");
  return x;
}

__device__ __forceinline__ void store_shared_u32(std::uint32_t address, std::uint32_t x) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(x) : "memory");
}

}  // namespace flashpp::cuda::sm90::fp8
