// One attention test case (shapes, storage, options, seed), its random inputs, and helpers that
// run the forward and backward through the public API with a chosen backend.
//
// The oracle is Backend::cpu_reference on float64 copies of the very same (already rounded)
// inputs, so the input rounding is shared by both sides and only the backend's own arithmetic
// and output rounding show up in the error.
#pragma once

#include <cstdint>
#include <string>

#include "flashpp/flashpp.hpp"
#include "host_tensor.hpp"

namespace flashpp::test {

struct AttentionShape {
  std::int64_t B = 1, Nq = 1, Nk = 1, Hq = 1, Hkv = 1, D = 8;
};

struct AttentionCase {
  AttentionShape shape;
  DType dtype = DType::f32;
  Layout layout = Layout::bnhd;
  Options options{};  // options.backend is set by the runners
  std::uint64_t seed = 1;

  // Everything needed to reproduce the case, e.g.
  // "B=1 Nq=17 Nk=127 Hq=4 Hkv=2 D=64 f16 bhnd causal bottom_right window=(-1,0) softcap=0
  //  dropout=0 scale=default seed=42"
  std::string describe() const;
};

// The forward's inputs and the gradient of its output.
struct AttentionInputs {
  HostTensor q, k, v, dout;
  // Float64 copies (same layout), for the oracle.
  AttentionInputs to_f64() const;
};

// Random normal q, k, v, dout in the case's dtype and layout, from derive_seed(case.seed, 0..3).
AttentionInputs make_inputs(const AttentionCase& c);

struct ForwardOutputs {
  HostTensor o, lse;
};
struct Gradients {
  HostTensor dq, dk, dv;
};

// Runs flashpp::forward with `backend` on poisoned outputs: o in the inputs' dtype and layout,
// lse float32 (float64 when the inputs are float64), padded when the inputs are padded.
ForwardOutputs run_forward(const AttentionInputs& in, Options options, Backend backend);

// Runs flashpp::backward with `backend` on poisoned gradients (the inputs' dtype and layout).
// `fwd` should be the same backend's forward outputs, as in real use.
Gradients run_backward(const AttentionInputs& in, const ForwardOutputs& fwd, Options options,
                       Backend backend);

// The oracle: forward and backward of Backend::cpu_reference on in.to_f64(), outputs float64.
struct OracleResult {
  ForwardOutputs fwd;
  Gradients grads;
};
OracleResult run_oracle(const AttentionInputs& in, const Options& options, bool with_backward);

// Unit roundoff of a storage dtype: the largest relative error of rounding one value to it
// (2^-24 for f32, 2^-11 for f16, 2^-8 for bf16, 2^-53 for f64).
double unit_roundoff(DType dtype);

}  // namespace flashpp::test
