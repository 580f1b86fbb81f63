// FP8 (e4m3) forward test cases, shared by the CPU tests (tests/cpu/test_fp8_forward.cpp) and the
// GPU tests (tests/gpu/test_fp8_forward.cpp).
//
// Inputs are drawn in float64 (random normal, optionally with outlier channels: one head-dim
// column in 16 of q and k 8x larger, of v 10x, as real activations have), then quantised per
// (batch, kv head)
// to e4m3 with the scale that maps the group's largest magnitude to 448. The oracle is
// Backend::cpu_reference on the dequantised values (e4m3 value x descale, in float64), so the
// quantisation of the inputs is shared by every side and the comparison measures only how a
// backend computes on them.
//
// Accuracy rules (docs/fp8.md):
//   O:    ours <= 2 x naive + 2e-3, relative Frobenius error against the oracle, where naive is
//         the textbook FP8 attention on the same quantised inputs (float32 Q K^T, float32
//         softmax, P quantised to e4m3, float32 P V, O rounded to the output dtype);
//   lse:  per row, |lse - lse_ref| <= lse_bound(row) = 2^-9 * scale * max_j sum_d |q_id k_jd|
//         + 1e-5 * (1 + |lse_ref|): an accumulation that keeps about 13 bits below the largest
//         addend (Hopper's FP8 wgmma; the model in tests/common/fp8_tensor_core.hpp) loses at
//         most about 2^-13 of the larger addends per step, so the score error scales with the
//         row's largest sum of magnitudes; the model stays below 0.4 of this bound.
// With stronger outliers (10x and more in q and k on the same channel) the model predicts O
// errors above 2 x naive: the naive reference computes Q K^T exactly in float32, and the FP8
// tensor cores truncate the small products next to the outlier ones (docs/fp8.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention_case.hpp"
#include "host_tensor.hpp"

namespace flashpp::test {

enum class Fp8Inputs { normal, outliers };

struct Fp8Case {
  AttentionShape shape;
  Layout layout = Layout::bnhd;
  Fp8Inputs inputs = Fp8Inputs::normal;
  bool causal = false;
  Alignment alignment = Alignment::top_left;
  std::int64_t window_left = kUnbounded;
  DType out_dtype = DType::bf16;
  bool descales = true;  // false: no descale views (factor 1; inputs drawn in e4m3's range)
  std::uint64_t seed = 1;
  std::string describe() const;
  Options options() const;  // causal, alignment, window; backend and descales left unset
};

struct Fp8Data {
  HostTensor q, k, v;        // e4m3, in c.layout
  HostTensor q64, k64, v64;  // dequantised, float64, bnhd
  std::vector<float> q_scale, k_scale, v_scale;  // descales [B * Hkv] (all 1 without descales)
};

Fp8Data make_fp8_data(const Fp8Case& c);

// A float32 [B, Hkv] view of descales at `data` (host or device memory), or an empty view when
// the case has none.
TensorView descale_view(const Fp8Case& c, const void* data, Device device = {});

// flashpp::forward on the host e4m3 inputs with `backend` (cpu or cpu_reference); o
// (out_dtype, c.layout) and lse are poisoned first.
ForwardOutputs run_fp8_forward_host(const Fp8Case& c, const Fp8Data& d, Backend backend);

// Empty outputs of the case's shapes (poisoned): o in out_dtype and c.layout, lse float32.
ForwardOutputs fp8_outputs(const Fp8Case& c);

// The lse of a model of the GPU kernel's scores: S = Q K^T computed on the e4m3 values with the
// FP8 tensor-core accumulation of fp8_tensor_core.hpp, then the exact log-sum-exp (float64).
HostTensor emulated_tensor_core_lse(const Fp8Case& c, const Fp8Data& d);

// The oracle: Backend::cpu_reference on the float64 dequantised inputs (o and lse float64).
ForwardOutputs fp8_oracle(const Fp8Case& c, const Fp8Data& d);

// The naive FP8 attention described above (o in c.out_dtype, lse float32).
ForwardOutputs naive_fp8_forward(const Fp8Case& c, const Fp8Data& d);

// lse_bound of each row [B, Hq, Nq] (float64).
HostTensor fp8_lse_bounds(const Fp8Case& c, const Fp8Data& d, const HostTensor& lse_ref);

// A model of the whole GPU kernel on the host: S by tensor_core_fp8_dot on the e4m3 values, the
// exact softmax with P = exp(s - max) * 2^8 quantised to e4m3, O = P8 V8 by tensor_core_fp8_dot,
// divided by the float32 sum of the unquantised P, times v_descale, rounded to out_dtype. (The
// kernel's running max makes P relative to the max so far instead of the final max; the model
// ignores that.)
ForwardOutputs emulated_kernel_forward(const Fp8Case& c, const Fp8Data& d);

// max over rows of |lse - ref| / bound (rows that see no key must agree on -inf: else +inf).
double lse_bound_ratio(const HostTensor& lse, const HostTensor& ref, const HostTensor& bounds);
// max over rows of |lse - ref|
double lse_max_error(const HostTensor& lse, const HostTensor& ref);

}  // namespace flashpp::test
