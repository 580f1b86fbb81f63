// The FP8 (e4m3) forward on the CPU: e4m3 conversions, both CPU backends against the float64
// oracle on the dequantised inputs, the tensor-core accumulation model against the lse bound
// (tests/common/fp8_case.hpp), validation of the FP8 arguments, and the C API.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/fp8_case.hpp"
#include "common/half_convert.hpp"
#include "common/metrics.hpp"
#include "flashpp/flashpp.h"

namespace flashpp::test {
namespace {

TEST(Fp8Convert, EveryCodeRoundTrips) {
  for (int x = 0; x < 256; ++x) {
    const float f = detail::e4m3_to_float(static_cast<std::uint8_t>(x));
    if ((x & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << x;
      EXPECT_EQ(detail::float_to_e4m3(f) & 0x7F, 0x7F) << x;
      continue;
    }
    EXPECT_EQ(detail::float_to_e4m3(f), x == 0x80 ? 0x80 : x) << "code " << x << " value " << f;
  }
}

TEST(Fp8Convert, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(detail::e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(detail::e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(detail::e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(detail::float_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(detail::float_to_e4m3(460.0f), 0x7E);
  EXPECT_EQ(detail::float_to_e4m3(1e9f), 0x7E);
  EXPECT_EQ(detail::float_to_e4m3(-1e9f), 0xFE);
  EXPECT_EQ(detail::float_to_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(detail::float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);       // tie -> even (0)
  EXPECT_EQ(detail::float_to_e4m3(3 * std::ldexp(1.0f, -10)), 0x02);   // tie -> even (2)
  EXPECT_EQ(detail::float_to_e4m3(1.0625f), 0x38);                      // tie 1 | 1.125 -> 1
  EXPECT_EQ(detail::float_to_e4m3(1.1875f), 0x3A);                      // tie 1.125 | 1.25 -> 1.25
  EXPECT_EQ(detail::float_to_e4m3(15.5f), 0x58);                        // tie 15 | 16 -> 16 (even)
  EXPECT_EQ(detail::float_to_e4m3(std::ldexp(1.0f, -6) * 0.9999f), 0x08);  // subnormal -> normal
  EXPECT_EQ(detail::float_to_e4m3(-0.0f), 0x80);
}

std::vector<Fp8Case> cpu_cases() {
  std::vector<Fp8Case> cases;
  const AttentionShape shapes[] = {
      {1, 1, 1, 1, 1, 64},     {1, 17, 33, 2, 1, 64},  {2, 70, 129, 4, 2, 128},
      {1, 130, 65, 3, 3, 128}, {1, 64, 200, 2, 2, 256}, {1, 33, 47, 4, 1, 96},
      {2, 45, 45, 2, 2, 16},
  };
  std::uint64_t seed = 11;
  for (const auto& shape : shapes) {
    for (int variant = 0; variant < 4; ++variant) {
      Fp8Case c;
      c.shape = shape;
      c.seed = seed++;
      c.inputs = variant % 2 ? Fp8Inputs::outliers : Fp8Inputs::normal;
      c.causal = variant >= 2;
      c.alignment = variant == 3 ? Alignment::bottom_right : Alignment::top_left;
      c.layout = variant == 1 ? Layout::bhnd : variant == 2 ? Layout::padded : Layout::bnhd;
      c.out_dtype = variant == 2 ? DType::f16 : DType::bf16;
      c.descales = variant != 1;
      cases.push_back(c);
    }
  }
  Fp8Case window;
  window.shape = {1, 50, 90, 2, 1, 64};
  window.causal = true;
  window.window_left = 7;
  window.seed = 99;
  cases.push_back(window);
  return cases;
}

// Both CPU backends compute in float32 (float64) on the dequantised inputs: the only error left
// is the output rounding (bf16: 2^-8 relative per element; f16: 2^-11) and float32 arithmetic.
TEST(Fp8CpuForward, MatchesOracleOnDequantisedInputs) {
  for (const Fp8Case& c : cpu_cases()) {
    SCOPED_TRACE(c.describe());
    const Fp8Data d = make_fp8_data(c);
    const ForwardOutputs ref = fp8_oracle(c, d);
    const double o_limit = c.out_dtype == DType::bf16 ? 4e-3 : 6e-4;
    for (Backend backend : {Backend::cpu, Backend::cpu_reference}) {
      const ForwardOutputs out = run_fp8_forward_host(c, d, backend);
      EXPECT_LE(relative_error(out.o, ref.o), o_limit) << worst_element(out.o, ref.o);
      EXPECT_LE(max_scaled_error(out.lse, ref.lse), 2e-5) << worst_element(out.lse, ref.lse);
      EXPECT_TRUE(out.o.gaps_untouched());
    }
  }
}

// The naive FP8 attention (P quantised to e4m3) is far less accurate than the CPU's float32 P;
// the GPU rule "ours <= 2 x naive + 2e-3" therefore has room, and naive must not be vacuous.
TEST(Fp8CpuForward, NaiveFp8IsTheLooserBaseline) {
  for (const Fp8Case& c : cpu_cases()) {
    if (c.shape.Nk < 16) continue;
    SCOPED_TRACE(c.describe());
    const Fp8Data d = make_fp8_data(c);
    const ForwardOutputs ref = fp8_oracle(c, d);
    const ForwardOutputs naive = naive_fp8_forward(c, d);
    const ForwardOutputs ours = run_fp8_forward_host(c, d, Backend::cpu);
    const double naive_error = relative_error(naive.o, ref.o);
    std::printf("fp8 naive vs cpu: %s: O error naive %.3e, cpu %.3e\n", c.describe().c_str(),
                naive_error, relative_error(ours.o, ref.o));
    EXPECT_GT(naive_error, 1e-3);
    EXPECT_LT(naive_error, 0.2);
    EXPECT_LE(relative_error(ours.o, ref.o), 2 * naive_error + 2e-3);
  }
}

// The model of the FP8 tensor-core accumulation (fp8_tensor_core.hpp) stays within half the
// stated per-row lse bound: the bound explains the hardware's truncation with room to spare.
TEST(Fp8CpuForward, TensorCoreModelWithinLseBound) {
  for (Fp8Inputs inputs : {Fp8Inputs::normal, Fp8Inputs::outliers}) {
    for (std::int64_t D : {64, 128, 256}) {
      Fp8Case c;
      c.shape = {1, 48, 160, 2, 1, D};
      c.inputs = inputs;
      c.seed = 500 + D;
      SCOPED_TRACE(c.describe());
      const Fp8Data d = make_fp8_data(c);
      const ForwardOutputs ref = fp8_oracle(c, d);
      const HostTensor model = emulated_tensor_core_lse(c, d);
      const HostTensor bounds = fp8_lse_bounds(c, d, ref.lse);
      const double ratio = lse_bound_ratio(model, ref.lse, bounds);
      std::printf("fp8 tensor-core model: %s: max |lse error| %.3e, error / bound %.3f\n",
                  c.describe().c_str(), lse_max_error(model, ref.lse), ratio);
      EXPECT_LE(ratio, 0.5) << "max |lse error| " << lse_max_error(model, ref.lse);
      EXPECT_GT(lse_max_error(model, ref.lse), 0.0);  // the model does lose bits
    }
  }
}

// The host model of the whole kernel (fp8_case.hpp) meets the GPU rules: O no worse than
// 2 x naive + 2e-3 and lse within the bound, on normal and outlier inputs, causal and not.
TEST(Fp8CpuForward, KernelModelMeetsTheGpuRules) {
  for (Fp8Inputs inputs : {Fp8Inputs::normal, Fp8Inputs::outliers}) {
    for (std::int64_t D : {64, 128, 256}) {
      for (bool causal : {false, true}) {
        Fp8Case c;
        c.shape = {1, 64, 300, 2, 1, D};
        c.inputs = inputs;
        c.causal = causal;
        c.alignment = Alignment::bottom_right;
        c.seed = 900 + D + causal;
        SCOPED_TRACE(c.describe());
        const Fp8Data d = make_fp8_data(c);
        const ForwardOutputs ref = fp8_oracle(c, d);
        const ForwardOutputs naive = naive_fp8_forward(c, d);
        const ForwardOutputs model = emulated_kernel_forward(c, d);
        const double ours = relative_error(model.o, ref.o), base = relative_error(naive.o, ref.o);
        const double ratio = lse_bound_ratio(model.lse, ref.lse, fp8_lse_bounds(c, d, ref.lse));
        std::printf("fp8 kernel model: %s: O error model %.3e naive %.3e; lse error / bound %.3f\n",
                    c.describe().c_str(), ours, base, ratio);
        EXPECT_LE(ours, 2 * base + 2e-3);
        EXPECT_LE(ratio, 1.0);
      }
    }
  }
}

// ---- validation -----------------------------------------------------------------------------

struct Fp8Call {
  Fp8Case c;
  Fp8Data d;
  ForwardOutputs out;
  Options options;
  Fp8Call() {
    c.shape = {2, 8, 8, 4, 2, 64};
    d = make_fp8_data(c);
    out = fp8_outputs(c);
    options = c.options();
    options.q_descale = descale_view(c, d.q_scale.data());
    options.k_descale = descale_view(c, d.k_scale.data());
    options.v_descale = descale_view(c, d.v_scale.data());
  }
  void run() const { forward(d.q.view(), d.k.view(), d.v.view(), out.o.view(), out.lse.view(), options); }
};

void expect_error(const Fp8Call& call, ErrorCode code, const char* needle) {
  try {
    call.run();
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Fp8Validation, ValidCallRuns) { EXPECT_NO_THROW(Fp8Call().run()); }

TEST(Fp8Validation, DescaleShapeDtypeDevice) {
  {
    Fp8Call call;
    call.options.k_descale.sizes[1] = 4;  // Hq instead of Hkv
    expect_error(call, ErrorCode::invalid_argument, "options.k_descale: expected shape [2, 2]");
  }
  {
    Fp8Call call;
    call.options.q_descale.rank = 1;
    expect_error(call, ErrorCode::invalid_argument, "options.q_descale");
  }
  {
    Fp8Call call;
    call.options.v_descale.dtype = DType::f16;
    expect_error(call, ErrorCode::invalid_argument, "options.v_descale: expected dtype f32");
  }
  {
    Fp8Call call;
    call.options.v_descale.device = Device{DeviceType::cuda, 0};
    expect_error(call, ErrorCode::invalid_argument, "options.v_descale: expected device cpu");
  }
}

TEST(Fp8Validation, OutputDtype) {
  Fp8Call call;
  call.out.o = HostTensor::attention(DType::f32, 2, 8, 4, 64, Layout::bnhd);
  expect_error(call, ErrorCode::invalid_argument, "o: expected dtype f16 or bf16");
  Fp8Call e4m3_out;
  e4m3_out.out.o = HostTensor::attention(DType::e4m3, 2, 8, 4, 64, Layout::bnhd);
  expect_error(e4m3_out, ErrorCode::invalid_argument, "o: expected dtype f16 or bf16");
}

TEST(Fp8Validation, MixedInputDtypes) {
  Fp8Call call;
  call.d.k = call.d.k64;
  expect_error(call, ErrorCode::invalid_argument, "k: expected dtype e4m3");
}

TEST(Fp8Validation, UnsupportedOptions) {
  Fp8Call dropout;
  dropout.options.dropout_p = 0.1f;
  expect_error(dropout, ErrorCode::unsupported, "options.dropout_p");
  Fp8Call softcap;
  softcap.options.softcap = 30.0f;
  expect_error(softcap, ErrorCode::unsupported, "options.softcap");
}

TEST(Fp8Validation, DescaleWithoutFp8Inputs) {
  Fp8Call call;
  const AttentionShape s = call.c.shape;
  HostTensor q = HostTensor::attention(DType::bf16, s.B, s.Nq, s.Hq, s.D, Layout::bnhd);
  HostTensor k = HostTensor::attention(DType::bf16, s.B, s.Nk, s.Hkv, s.D, Layout::bnhd);
  q.fill(0.5);
  k.fill(0.25);
  try {
    forward(q.view(), k.view(), k.view(), q.like().view(), call.out.lse.view(), call.options);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("options.q_descale"), std::string::npos) << e.what();
  }
}

TEST(Fp8Validation, BackwardIsRejected) {
  Fp8Call call;
  HostTensor dq = call.d.q.like(), dk = call.d.k.like(), dv = call.d.v.like();
  for (Backend backend : {Backend::automatic, Backend::cpu, Backend::cpu_reference}) {
    Options o = call.options;
    o.backend = backend;
    try {
      backward(call.d.q.view(), call.d.k.view(), call.d.v.view(), call.out.o.view(),
               call.out.lse.view(), call.out.o.view(), dq.view(), dk.view(), dv.view(), o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unsupported);
      EXPECT_NE(std::string(e.what()).find("backward through an FP8 forward"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Fp8Validation, CudaBackendNamesTheReason) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  Fp8Call call;
  call.options.backend = Backend::cuda;
  expect_error(call, ErrorCode::invalid_argument, "options.backend");
}

// ---- C API ----------------------------------------------------------------------------------

TEST(Fp8CApi, ForwardWithDescales) {
  Fp8Case c;
  c.shape = {1, 20, 36, 2, 1, 32};
  c.causal = true;
  const Fp8Data d = make_fp8_data(c);
  const ForwardOutputs ref = fp8_oracle(c, d);
  ForwardOutputs out = fp8_outputs(c);
  auto tensor = [](const TensorView& v) {
    flashpp_tensor t{};
    t.data = v.data;
    t.dtype = static_cast<flashpp_dtype>(v.dtype);
    t.device_type = FLASHPP_CPU;
    t.rank = v.rank;
    for (int i = 0; i < 4; ++i) t.sizes[i] = v.sizes[i], t.strides[i] = v.strides[i];
    return t;
  };
  const flashpp_tensor q = tensor(d.q.view()), k = tensor(d.k.view()), v = tensor(d.v.view()),
                       o = tensor(out.o.view()), lse = tensor(out.lse.view());
  EXPECT_EQ(q.dtype, FLASHPP_E4M3);
  const flashpp_tensor qs = tensor(descale_view(c, d.q_scale.data())),
                       ks = tensor(descale_view(c, d.k_scale.data())),
                       vs = tensor(descale_view(c, d.v_scale.data()));
  flashpp_options opt = flashpp_options_default();
  EXPECT_EQ(opt.q_descale, nullptr);
  opt.causal = 1;
  opt.q_descale = &qs;
  opt.k_descale = &ks;
  opt.v_descale = &vs;
  ASSERT_EQ(flashpp_forward(&q, &k, &v, &o, &lse, &opt, nullptr), FLASHPP_OK) << flashpp_last_error();
  EXPECT_LE(relative_error(out.o, ref.o), 4e-3);
  EXPECT_LE(max_scaled_error(out.lse, ref.lse), 2e-5);

  flashpp_tensor bad = ks;
  bad.sizes[0] = 3;
  opt.k_descale = &bad;
  EXPECT_EQ(flashpp_forward(&q, &k, &v, &o, &lse, &opt, nullptr), FLASHPP_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashpp_last_error()).find("options.k_descale"), std::string::npos);
}

}  // namespace
}  // namespace flashpp::test
