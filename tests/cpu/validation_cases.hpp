// The bad-input table shared by the C++ (test_validation.cpp) and C API (test_c_api.cpp) tests:
// a valid call, and named ways to break exactly one argument of it.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/attention_case.hpp"
#include "common/host_tensor.hpp"

namespace flashpp::test {

// A valid forward/backward call with poisoned outputs: f32 (or `dtype`), B=2, Nq=5, Nk=7,
// Hq=4, Hkv=2, D=8, bnhd. The views may be edited freely; the buffers stay put.
struct ValidCall {
  explicit ValidCall(DType dtype = DType::f32);
  HostTensor q_buf, k_buf, v_buf, o_buf, lse_buf, dout_buf, dq_buf, dk_buf, dv_buf;
  TensorView q, k, v, o, lse, dout, dq, dk, dv;
  Options options;
  Workspace workspace;
  // The outputs of the forward (o, lse) or of the backward (dq, dk, dv) are still all NaN.
  bool outputs_untouched(bool backward) const;
};

struct BadInputCase {
  std::string name;      // gtest-safe
  bool backward;         // which call it breaks
  std::string argument;  // the name the message must carry, e.g. "k" or "options.dropout_p"
  ErrorCode code;
  std::function<void(ValidCall&)> mutate;
};

std::vector<BadInputCase> bad_input_cases();

}  // namespace flashpp::test
