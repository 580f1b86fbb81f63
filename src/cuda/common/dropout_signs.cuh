// The GPU side of the dropout mask that src/common/philox.hpp defines: how a pair of lanes
// shares its two Philox calls, the keep decisions four at a time as sign bits, and the masks
// built from those signs with one byte permute each.
//
// One call decides a 4 x 4 comb of a 16 x 16 block of (query, key) elements, which two lanes
// (lane and lane ^ 4) hold as two whole words each: split by query parity in the forward's
// layout (queries as rows), by key parity in the backward's transposed one (keys as rows). Over
// two adjacent blocks A and B the pair makes one call each (the even lane A's, the odd lane B's)
// and swaps the halves the other lane needs: one call per 16 elements held, plus two shuffles.
#pragma once

#include <cstdint>

#include "../../common/philox.hpp"

namespace flashpp::cuda {

// prmt.b32 in its generic form: byte n of the result is byte (nibble n of `selector`) & 7 of
// {high, low}, or, when the nibble's bit 3 is set, that byte's sign bit copied into all 8 bits.
__device__ __forceinline__ std::uint32_t byte_permute(std::uint32_t low, std::uint32_t high,
                                                      std::uint32_t selector) {
  std::uint32_t result;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(result) : "r"(low), "r"(high), "r"(selector));
  return result;
}

// Keep decisions as sign bits (detail::dropout_keep_signs), for the elements of one lane in two
// adjacent 16 x 16 blocks: a[w] and b[w] are the lane's words w = 0, 1 of blocks A and B, in
// the order of the call's words.
struct KeepSigns {
  std::uint32_t a[2], b[2];
};

// kWordStride = 1: the lane uses words {0, 1} (even lane) or {2, 3} (odd) of each call: the
// forward's layout. kWordStride = 2: words {0, 2} or {1, 3}: the backward's transposed layout.
// `call` is this lane's own call: block A's for the even lane of the pair, block B's for the odd.
template <int kWordStride>
__device__ __forceinline__ KeepSigns share_dropout_calls(const detail::PhiloxResult& call,
                                                         bool odd,
                                                         const detail::DropoutParams& d) {
  constexpr int kEven0 = 0, kEven1 = kWordStride;
  constexpr int kOdd0 = kWordStride == 1 ? 2 : 1, kOdd1 = kOdd0 + kWordStride;
  const std::uint32_t mine0 = odd ? call.r[kOdd0] : call.r[kEven0];
  const std::uint32_t mine1 = odd ? call.r[kOdd1] : call.r[kEven1];
  const std::uint32_t send0 = odd ? call.r[kEven0] : call.r[kOdd0];
  const std::uint32_t send1 = odd ? call.r[kEven1] : call.r[kOdd1];
  const std::uint32_t got0 = __shfl_xor_sync(0xffffffffu, send0, 4);
  const std::uint32_t got1 = __shfl_xor_sync(0xffffffffu, send1, 4);
  KeepSigns keep;
  keep.a[0] = detail::dropout_keep_signs(odd ? got0 : mine0, d);
  keep.a[1] = detail::dropout_keep_signs(odd ? got1 : mine1, d);
  keep.b[0] = detail::dropout_keep_signs(odd ? mine0 : got0, d);
  keep.b[1] = detail::dropout_keep_signs(odd ? mine1 : got1, d);
  return keep;
}

// (`byte` is 0..3 and known at compile time once the callers' loops are unrolled: the selector
// is then an immediate.)
// 0xFFFFFFFF where byte `byte` of `signs` says keep, else 0: the mask of one 32-bit element.
__device__ __forceinline__ std::uint32_t keep_mask(std::uint32_t signs, unsigned byte) {
  return byte_permute(signs, 0u, (8u | byte) * 0x1111u);
}

// The mask of a packed pair of 16-bit elements: the low half from byte `byte` of `low_signs`,
// the high half from the same byte of `high_signs`.
__device__ __forceinline__ std::uint32_t keep_mask_pair(std::uint32_t low_signs,
                                                        std::uint32_t high_signs, unsigned byte) {
  return byte_permute(low_signs, high_signs, (8u | byte) * 0x11u | (12u | byte) * 0x1100u);
}

}  // namespace flashpp::cuda
