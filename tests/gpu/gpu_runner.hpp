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

}  // namespace flashpp::gpu_test
