// Runs the CUDA forward on host test tensors (tests/common's HostTensor): copies the inputs to
// the device with their exact layout, poisons the outputs (NaN everywhere, gaps included),
// calls flashpp::forward with Backend::cuda, and copies the outputs back.
#pragma once

#include "common/attention_case.hpp"

namespace flashpp::gpu_test {

// Same outputs as test::run_forward (o in the inputs' dtype and layout, lse float32).
test::ForwardOutputs run_forward_cuda(const test::AttentionInputs& in, Options options);

// The same forward computed "naively" in the storage dtype, as a framework's plain attention
// does: S = scale·QKᵀ (float32 sums) rounded to the dtype, softcap and the row softmax in float32
// with P rounded to the dtype, O = P V (float32 sums) rounded. The error of this against the
// float64 oracle is the yardstick of docs/design.md ("Testing"): ours may be at most about twice as large.
test::HostTensor naive_forward_in_dtype(const test::AttentionInputs& in, const Options& options);

// The CUDA forward of case c on `in` against the float64 oracle, with GoogleTest expectations: no
// unwritten (NaN) element or touched gap, O's error at most twice the naive computation's (plus a
// quarter of the unit roundoff) and within the float32-kernel tolerance, lse within its own.
void expect_forward_matches_oracle(const test::AttentionCase& c, const test::AttentionInputs& in);

}  // namespace flashpp::gpu_test
