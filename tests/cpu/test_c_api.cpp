// The C API (include/flashpp/flashpp.h): the bad-input table of test_validation.cpp through the
// C entry points (status code + a thread-local message naming the argument), the C-only checks
// (NULL pointers, out-of-range enum values), and agreement with the C++ API on valid calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include "common/metrics.hpp"
#include "flashpp/flashpp.h"
#include "validation_cases.hpp"

namespace flashpp::test {
namespace {

// Stores an arbitrary int in a C enum field, as C code may; in C++ a static_cast to the enum
// of a value outside its range would itself be undefined.
template <class Enum>
void store_raw(Enum& field, int value) {
  static_assert(sizeof(Enum) == sizeof(int));
  std::memcpy(&field, &value, sizeof value);
}

flashpp_tensor to_c(const TensorView& v) {
  flashpp_tensor t{};
  t.data = v.data;
  store_raw(t.dtype, static_cast<int>(v.dtype));
  store_raw(t.device_type, static_cast<int>(v.device.type));
  t.device_index = v.device.index;
  t.rank = v.rank;
  for (int i = 0; i < 4; ++i) {
    t.sizes[i] = v.sizes[i];
    t.strides[i] = v.strides[i];
  }
  return t;
}

flashpp_options to_c(const Options& o) {
  flashpp_options c = flashpp_options_default();
  c.softmax_scale = o.softmax_scale;
  c.causal = o.causal;
  store_raw(c.alignment, static_cast<int>(o.alignment));
  c.window_left = o.window_left;
  c.window_right = o.window_right;
  c.softcap = o.softcap;
  c.dropout_p = o.dropout_p;
  c.seed = o.seed;
  c.offset = o.offset;
  c.deterministic = o.deterministic;
  c.write_lse = o.write_lse;
  store_raw(c.backend, static_cast<int>(o.backend));
  return c;
}

// All the C views of one ValidCall.
struct CCall {
  explicit CCall(const ValidCall& c)
      : q(to_c(c.q)), k(to_c(c.k)), v(to_c(c.v)), o(to_c(c.o)), lse(to_c(c.lse)),
        dout(to_c(c.dout)), dq(to_c(c.dq)), dk(to_c(c.dk)), dv(to_c(c.dv)),
        options(to_c(c.options)), workspace(c.workspace) {}
  flashpp_tensor q, k, v, o, lse, dout, dq, dk, dv;
  flashpp_options options;
  Workspace workspace;

  flashpp_status forward() {
    return flashpp_forward_with_workspace(&q, &k, &v, &o, &lse, &options, nullptr, workspace.data,
                                          workspace.bytes);
  }
  flashpp_status backward() {
    return flashpp_backward_with_workspace(&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv, &options,
                                           nullptr, workspace.data, workspace.bytes);
  }
};

bool names(const std::string& message, const std::string& argument) {
  return message.find(": " + argument + ": ") != std::string::npos;
}

class CApiBadInput : public ::testing::TestWithParam<BadInputCase> {};

TEST_P(CApiBadInput, ReturnsCodeAndNamesTheArgument) {
  const BadInputCase& bad = GetParam();
  ValidCall call;
  bad.mutate(call);
  CCall c(call);
  const flashpp_status status = bad.backward ? c.backward() : c.forward();
  const std::string message = flashpp_last_error();
  EXPECT_EQ(static_cast<int>(status), static_cast<int>(bad.code)) << message;
  EXPECT_TRUE(names(message, bad.argument)) << "does not name " << bad.argument << ": " << message;
  EXPECT_EQ(message.rfind("flashpp", 0), 0u) << "message does not start with the call: " << message;
  EXPECT_TRUE(call.outputs_untouched(bad.backward));
}

INSTANTIATE_TEST_SUITE_P(All, CApiBadInput, ::testing::ValuesIn(bad_input_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(CApi, NullPointersAreNamed) {
  ValidCall call;
  CCall c(call);
  EXPECT_EQ(flashpp_forward(nullptr, &c.k, &c.v, &c.o, &c.lse, &c.options, nullptr),
            FLASHPP_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(names(flashpp_last_error(), "q")) << flashpp_last_error();
  EXPECT_EQ(flashpp_forward(&c.q, &c.k, &c.v, &c.o, &c.lse, nullptr, nullptr),
            FLASHPP_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(names(flashpp_last_error(), "options")) << flashpp_last_error();
  EXPECT_EQ(flashpp_forward(&c.q, &c.k, &c.v, &c.o, nullptr, &c.options, nullptr),
            FLASHPP_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(names(flashpp_last_error(), "lse")) << flashpp_last_error();
  EXPECT_EQ(flashpp_backward(&c.q, &c.k, &c.v, &c.o, &c.lse, &c.dout, &c.dq, nullptr, &c.dv,
                             &c.options, nullptr),
            FLASHPP_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(names(flashpp_last_error(), "dk")) << flashpp_last_error();
  EXPECT_EQ(flashpp_backward(&c.q, &c.k, &c.v, &c.o, nullptr, &c.dout, &c.dq, &c.dk, &c.dv,
                             &c.options, nullptr),
            FLASHPP_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(names(flashpp_last_error(), "lse")) << flashpp_last_error();
  EXPECT_EQ(flashpp_forward_workspace_size(&c.q, &c.k, &c.v, &c.options, nullptr),
            FLASHPP_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(names(flashpp_last_error(), "bytes")) << flashpp_last_error();
  EXPECT_EQ(flashpp_options_init(nullptr), FLASHPP_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(call.outputs_untouched(true));
}

TEST(CApi, OutOfRangeEnumsAndRankAreNamed) {
  {
    ValidCall call;
    CCall c(call);
    store_raw(c.v.dtype, 9);
    EXPECT_EQ(c.forward(), FLASHPP_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(names(flashpp_last_error(), "v")) << flashpp_last_error();
  }
  {
    ValidCall call;
    CCall c(call);
    store_raw(c.k.device_type, 5);
    EXPECT_EQ(c.forward(), FLASHPP_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(names(flashpp_last_error(), "k")) << flashpp_last_error();
  }
  {
    ValidCall call;
    CCall c(call);
    c.q.rank = 5;
    EXPECT_EQ(c.backward(), FLASHPP_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(names(flashpp_last_error(), "q")) << flashpp_last_error();
  }
  {
    ValidCall call;
    CCall c(call);
    store_raw(c.options.alignment, -1);
    EXPECT_EQ(c.forward(), FLASHPP_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(names(flashpp_last_error(), "options.alignment")) << flashpp_last_error();
  }
}

TEST(CApi, WriteLseOffAcceptsNullLse) {
  ValidCall call;
  CCall c(call);
  c.options.write_lse = 0;
  EXPECT_EQ(flashpp_forward(&c.q, &c.k, &c.v, &c.o, nullptr, &c.options, nullptr), FLASHPP_OK)
      << flashpp_last_error();
}

TEST(CApi, TooSmallWorkspaceIsRefused) {
  ValidCall call;
  CCall c(call);
  std::size_t needed = 0;
  ASSERT_EQ(flashpp_backward_workspace_size(&c.q, &c.k, &c.v, &c.options, &needed), FLASHPP_OK);
  if (needed == 0) GTEST_SKIP() << "Backend::cpu's backward needs no workspace";
  std::vector<unsigned char> buffer(needed);
  c.workspace = Workspace{buffer.data(), needed - 1};
  EXPECT_EQ(c.backward(), FLASHPP_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(names(flashpp_last_error(), "workspace")) << flashpp_last_error();
  c.workspace = Workspace{buffer.data(), needed};
  EXPECT_EQ(c.backward(), FLASHPP_OK) << flashpp_last_error();
}

// The message survives successful calls and is per thread.
TEST(CApi, LastErrorIsStickyAndThreadLocal) {
  ValidCall bad;
  CCall c(bad);
  c.options.dropout_p = 2.0f;
  ASSERT_EQ(c.forward(), FLASHPP_ERROR_INVALID_ARGUMENT);
  const std::string first = flashpp_last_error();
  EXPECT_TRUE(names(first, "options.dropout_p")) << first;
  ValidCall good;
  CCall ok(good);
  ASSERT_EQ(ok.forward(), FLASHPP_OK);
  EXPECT_EQ(std::string(flashpp_last_error()), first) << "a successful call changed the message";

  std::string other_thread_before, other_thread_after;
  std::thread t([&] {
    other_thread_before = flashpp_last_error();
    ValidCall call;
    CCall c2(call);
    c2.k.sizes[0] = 1;
    c2.forward();
    other_thread_after = flashpp_last_error();
  });
  t.join();
  EXPECT_EQ(other_thread_before, "") << "a new thread starts with no message";
  EXPECT_TRUE(names(other_thread_after, "k")) << other_thread_after;
  EXPECT_EQ(std::string(flashpp_last_error()), first) << "another thread's error leaked here";
}

TEST(CApi, StatusStringsAndCodesMirrorCpp) {
  EXPECT_STREQ(flashpp_status_string(FLASHPP_OK), "ok");
  EXPECT_STREQ(flashpp_status_string(FLASHPP_ERROR_INVALID_ARGUMENT), "invalid argument");
  EXPECT_STREQ(flashpp_status_string(FLASHPP_ERROR_UNSUPPORTED), "unsupported");
  EXPECT_STREQ(flashpp_status_string(static_cast<flashpp_status>(7)), "unknown status");
  EXPECT_EQ(FLASHPP_ERROR_INVALID_ARGUMENT, static_cast<int>(ErrorCode::invalid_argument));
  EXPECT_EQ(FLASHPP_ERROR_UNSUPPORTED, static_cast<int>(ErrorCode::unsupported));
  EXPECT_EQ(FLASHPP_ERROR_BACKEND_FAILURE, static_cast<int>(ErrorCode::backend_failure));
  EXPECT_EQ(FLASHPP_ERROR_INTERNAL, static_cast<int>(ErrorCode::internal));
  EXPECT_STREQ(flashpp_version(), flashpp::version());
  EXPECT_EQ(flashpp_cuda_compiled() != 0, flashpp::cuda_compiled());
}

TEST(CApi, DefaultsAndViewHelpersMatchCpp) {
  const Options d;
  const flashpp_options c = flashpp_options_default();
  EXPECT_TRUE(std::isnan(c.softmax_scale) && std::isnan(d.softmax_scale));
  EXPECT_EQ(c.causal, 0);
  EXPECT_EQ(c.window_left, d.window_left);
  EXPECT_EQ(c.window_right, d.window_right);
  EXPECT_EQ(c.softcap, d.softcap);
  EXPECT_EQ(c.dropout_p, d.dropout_p);
  EXPECT_EQ(c.write_lse, 1);
  EXPECT_EQ(c.backend, FLASHPP_BACKEND_AUTO);
  flashpp_options init;
  std::memset(&init, 0xAB, sizeof init);
  ASSERT_EQ(flashpp_options_init(&init), FLASHPP_OK);
  EXPECT_EQ(init.window_left, c.window_left);
  EXPECT_EQ(init.write_lse, c.write_lse);

  float buffer[1];
  const flashpp_tensor a = flashpp_make_bhnd(buffer, FLASHPP_F16, 2, 3, 4, 5, FLASHPP_CPU, 0);
  const TensorView b = make_bhnd(buffer, DType::f16, 2, 3, 4, 5);
  const flashpp_tensor l = flashpp_make_lse(buffer, 2, 4, 3, FLASHPP_CPU, 0);
  const TensorView m = make_lse(buffer, 2, 4, 3);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(a.sizes[i], b.sizes[i]);
    EXPECT_EQ(a.strides[i], b.strides[i]);
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(l.strides[i], m.strides[i]);
  EXPECT_EQ(a.rank, 4);
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(a.dtype, FLASHPP_F16);
}

// A valid call through C gives bit for bit what the C++ API gives.
TEST(CApi, ResultsEqualTheCppApi) {
  AttentionCase ac;
  ac.shape = {2, 19, 23, 4, 2, 32};
  ac.dtype = DType::bf16;
  ac.layout = Layout::bhnd;
  ac.options.causal = true;
  ac.options.dropout_p = 0.2f;
  ac.options.seed = 5;
  const AttentionInputs in = make_inputs(ac);
  const ForwardOutputs cpp_fwd = run_forward(in, ac.options, Backend::cpu);
  const Gradients cpp_grad = run_backward(in, cpp_fwd, ac.options, Backend::cpu);

  Options opt = ac.options;
  opt.backend = Backend::cpu;
  const flashpp_options copt = to_c(opt);
  ForwardOutputs c_fwd{cpp_fwd.o.like(), cpp_fwd.lse.like()};
  Gradients c_grad{cpp_grad.dq.like(), cpp_grad.dk.like(), cpp_grad.dv.like()};
  const flashpp_tensor q = to_c(in.q.view()), k = to_c(in.k.view()), v = to_c(in.v.view()),
                       dout = to_c(in.dout.view()), o = to_c(c_fwd.o.view()),
                       lse = to_c(c_fwd.lse.view()), dq = to_c(c_grad.dq.view()),
                       dk = to_c(c_grad.dk.view()), dv = to_c(c_grad.dv.view());
  ASSERT_EQ(flashpp_forward(&q, &k, &v, &o, &lse, &copt, nullptr), FLASHPP_OK)
      << flashpp_last_error();
  ASSERT_EQ(flashpp_backward(&q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv, &copt, nullptr),
            FLASHPP_OK)
      << flashpp_last_error();
  EXPECT_EQ(c_fwd.o.values(), cpp_fwd.o.values());
  EXPECT_EQ(c_fwd.lse.values(), cpp_fwd.lse.values());
  EXPECT_EQ(count_nan(c_grad.dq), 0);
  // The backward may use atomics unless deterministic; compare to the C++ result loosely.
  EXPECT_LE(relative_error(c_grad.dq, cpp_grad.dq), 1e-2);
  EXPECT_LE(relative_error(c_grad.dk, cpp_grad.dk), 1e-2);
  EXPECT_LE(relative_error(c_grad.dv, cpp_grad.dv), 1e-2);
}

}  // namespace
}  // namespace flashpp::test

namespace {

// The kernel-family report never fails and always says something: the families in use, or why
// there are none (no CUDA in the build, no device).
TEST(CApi, CudaKernelFamiliesReport) {
  const std::string text = flashpp_cuda_kernel_families(0);
  EXPECT_FALSE(text.empty());
  EXPECT_TRUE(text.rfind("forward: ", 0) == 0 || text.rfind("none: ", 0) == 0) << text;
  EXPECT_EQ(std::string(flashpp_cuda_kernel_families(-1)).rfind("none: ", 0), 0u);
}

}  // namespace
