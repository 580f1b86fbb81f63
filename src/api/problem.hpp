// The validated problem handed to a backend. src/api builds it after checking every argument;
// backends may assume everything here is consistent (docs/design.md, "Layers": validation
// happens once, in src/api).
#pragma once

#include <cstdint>

#include "flashpp/flashpp.hpp"
#include "../common/mask.hpp"
#include "../common/philox.hpp"

namespace flashpp::detail {

struct Problem {
  std::int64_t B = 0, Nq = 0, Nk = 0, Hq = 0, Hkv = 0, D = 0;
  DType dtype = DType::f32;      // of q, k, v
  DType out_dtype = DType::f32;  // of o: dtype, except f16/bf16 for e4m3 inputs
  Device device{};
  float scale = 1.0f;    // resolved softmax scale
  float softcap = 0.0f;  // 0 = off
  Mask mask{};
  DropoutParams dropout{};

  std::int64_t heads_per_kv() const { return Hq / Hkv; }
};

struct ForwardArgs {
  Problem problem;
  TensorView q, k, v, o, lse;  // lse.data == nullptr when write_lse is false
  // e4m3 inputs only: float32 [B, Hkv] descale factors; data == nullptr means 1.
  TensorView q_descale, k_descale, v_descale;
  bool write_lse = true;
  void* stream = nullptr;
  Workspace workspace{};
};

struct BackwardArgs {
  Problem problem;
  TensorView q, k, v, o, lse, dout, dq, dk, dv;
  bool deterministic = false;
  void* stream = nullptr;
  Workspace workspace{};
};

// Element offset of [b, n, h, d] in a 4-d view.
inline std::int64_t offset4(const TensorView& t, std::int64_t b, std::int64_t n, std::int64_t h,
                            std::int64_t d) {
  return b * t.strides[0] + n * t.strides[1] + h * t.strides[2] + d * t.strides[3];
}
// Element offset of [b, h, n] in the 3-d lse view.
inline std::int64_t offset3(const TensorView& t, std::int64_t b, std::int64_t h, std::int64_t n) {
  return b * t.strides[0] + h * t.strides[1] + n * t.strides[2];
}

}  // namespace flashpp::detail
