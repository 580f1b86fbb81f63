// Every class of bad input gets flashpp::Error with the right code and a message that names
// the argument ("<call>: <argument>: expected ..., got ..."), and no output is written.
//
// Each case starts from a valid call (f32, B=2, Nq=5, Nk=7, Hq=4, Hkv=2, D=8) and breaks one
// thing. The same table runs through the C API in test_c_api.cpp (bad_input_cases() is shared
// through validation_cases.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "validation_cases.hpp"

namespace flashpp::test {
namespace {

class BadInput : public ::testing::TestWithParam<BadInputCase> {};

TEST_P(BadInput, ThrowsNamedErrorAndWritesNothing) {
  const BadInputCase& bad = GetParam();
  ValidCall call;
  bad.mutate(call);
  const std::string expected_call = bad.backward ? "flashpp::backward: " : "flashpp::forward: ";
  try {
    if (bad.backward) {
      flashpp::backward(call.q, call.k, call.v, call.o, call.lse, call.dout, call.dq, call.dk,
                        call.dv, call.options, nullptr, call.workspace);
    } else {
      flashpp::forward(call.q, call.k, call.v, call.o, call.lse, call.options, nullptr,
                       call.workspace);
    }
    FAIL() << "no error for: " << bad.name;
  } catch (const flashpp::Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), bad.code) << message;
    EXPECT_EQ(message.rfind(expected_call, 0), 0u) << "message does not start with the call: " << message;
    EXPECT_NE(message.find(": " + bad.argument + ": "), std::string::npos)
        << "message does not name " << bad.argument << ": " << message;
    EXPECT_NE(message.find("expected"), std::string::npos) << message;
  }
  EXPECT_TRUE(call.outputs_untouched(bad.backward)) << "an output was written despite the error";
}

INSTANTIATE_TEST_SUITE_P(All, BadInput, ::testing::ValuesIn(bad_input_cases()),
                         [](const auto& info) { return info.param.name; });

// The workspace-size queries validate the same way.
TEST(BadInputWorkspaceQuery, ValidatesInputsAndOptions) {
  ValidCall call;
  call.k.sizes[0] = 3;
  EXPECT_THROW(flashpp::forward_workspace_size(call.q, call.k, call.v, call.options), Error);
  EXPECT_THROW(flashpp::backward_workspace_size(call.q, call.k, call.v, call.options), Error);
  ValidCall dropout;
  dropout.options.dropout_p = 1.0f;
  EXPECT_THROW(flashpp::backward_workspace_size(dropout.q, dropout.k, dropout.v, dropout.options),
               Error);
}

// A workspace smaller than the reported size is refused (only testable when the backend needs
// one: the tiled CPU backward keeps D = rowsum(dO∘O) there).
TEST(BadInputWorkspaceQuery, TooSmallWorkspaceIsRefused) {
  ValidCall call;
  const std::size_t needed =
      flashpp::backward_workspace_size(call.q, call.k, call.v, call.options);
  if (needed == 0) GTEST_SKIP() << "Backend::cpu's backward needs no workspace";
  std::vector<unsigned char> buffer(needed);
  call.workspace = Workspace{buffer.data(), needed - 1};
  try {
    flashpp::backward(call.q, call.k, call.v, call.o, call.lse, call.dout, call.dq, call.dk,
                      call.dv, call.options, nullptr, call.workspace);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("workspace"), std::string::npos) << e.what();
  }
  // And exactly the reported size works.
  call.workspace = Workspace{buffer.data(), needed};
  EXPECT_NO_THROW(flashpp::backward(call.q, call.k, call.v, call.o, call.lse, call.dout, call.dq,
                                    call.dk, call.dv, call.options, nullptr, call.workspace));
}

// Things that look odd but are valid must not be refused.
TEST(ValidEdgeInputs, AreAccepted) {
  {  // the unmodified call, forward and backward
    ValidCall call;
    EXPECT_NO_THROW(flashpp::forward(call.q, call.k, call.v, call.o, call.lse, call.options));
    EXPECT_NO_THROW(flashpp::backward(call.q, call.k, call.v, call.o, call.lse, call.dout, call.dq,
                                      call.dk, call.dv, call.options));
  }
  {  // a broadcast input (zero stride over heads) is fine: only outputs must not alias
    ValidCall call;
    call.q.strides[2] = 0;
    EXPECT_NO_THROW(flashpp::forward(call.q, call.k, call.v, call.o, call.lse, call.options));
  }
  {  // write_lse = false: lse may be an empty view
    ValidCall call;
    call.options.write_lse = false;
    EXPECT_NO_THROW(flashpp::forward(call.q, call.k, call.v, call.o, TensorView{}, call.options));
  }
  {  // causal with window_right = 0 (the same thing said twice) and -1
    ValidCall call;
    call.options.causal = true;
    call.options.window_right = 0;
    EXPECT_NO_THROW(flashpp::forward(call.q, call.k, call.v, call.o, call.lse, call.options));
    call.options.window_right = kUnbounded;
    EXPECT_NO_THROW(flashpp::forward(call.q, call.k, call.v, call.o, call.lse, call.options));
  }
  {  // non-positive or NaN scale means the default
    ValidCall call;
    call.options.softmax_scale = -1.0f;
    EXPECT_NO_THROW(flashpp::forward(call.q, call.k, call.v, call.o, call.lse, call.options));
  }
  {  // dropout just below 1
    ValidCall call;
    call.options.dropout_p = 0.999f;
    EXPECT_NO_THROW(flashpp::forward(call.q, call.k, call.v, call.o, call.lse, call.options));
  }
  {  // f64 everywhere with the reference backend, lse f64 too
    ValidCall call(DType::f64);
    call.options.backend = Backend::cpu_reference;
    EXPECT_NO_THROW(flashpp::forward(call.q, call.k, call.v, call.o, call.lse, call.options));
  }
}

// A window of INT64_MAX keys is as good as unbounded (it must not overflow the mask arithmetic).
TEST(ValidEdgeInputs, HugeWindowsEqualUnbounded) {
  AttentionCase c;
  c.shape = {1, 37, 45, 2, 1, 16};
  const AttentionInputs in = make_inputs(c);
  Options huge;
  huge.window_left = std::numeric_limits<std::int64_t>::max();
  huge.window_right = std::numeric_limits<std::int64_t>::max();
  for (Backend backend : {Backend::cpu, Backend::cpu_reference}) {
    const ForwardOutputs a = run_forward(in, Options{}, backend);
    const ForwardOutputs b = run_forward(in, huge, backend);
    EXPECT_EQ(a.o.values(), b.o.values());
    EXPECT_EQ(a.lse.values(), b.lse.values());
  }
}

}  // namespace
}  // namespace flashpp::test
