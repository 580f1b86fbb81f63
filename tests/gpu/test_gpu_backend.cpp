// The CUDA backend's entry points: availability, capability checks and their messages.
#include <gtest/gtest.h>

#include "flashpp/flashpp.hpp"
#include "gpu_buffer.hpp"

namespace flashpp {
namespace {

TEST(CudaBackend, CompiledAndAvailableAgree) {
  EXPECT_TRUE(cuda_compiled());
  EXPECT_EQ(cuda_available(), gpu_test::gpu_present());
}

TEST(CudaBackend, RejectsFloat32WithAMessageNamingTheDtype) {
  FLASHPP_SKIP_WITHOUT_GPU();
  gpu_test::DeviceBuffer buffer(4 * 8 * 4);
  const Device dev{DeviceType::cuda, 0};
  const TensorView q = make_bnhd(buffer.data(), DType::f32, 1, 4, 1, 8, dev);
  Options options;
  options.backend = Backend::cuda;
  try {
    options.write_lse = false;
    forward(q, q, q, q, TensorView{}, options);
    FAIL() << "expected flashpp::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("f32"), std::string::npos) << e.what();
  }
}

TEST(CudaBackend, RejectsHeadDimsAbove256OrNotMultiplesOf8) {
  FLASHPP_SKIP_WITHOUT_GPU();
  for (std::int64_t D : {12, 264}) {
    gpu_test::DeviceBuffer buffer(4 * D * 2);
    const Device dev{DeviceType::cuda, 0};
    const TensorView q = make_bnhd(buffer.data(), DType::f16, 1, 4, 1, D, dev);
    Options options;
    options.backend = Backend::cuda;
    options.write_lse = false;
    try {
      forward(q, q, q, q, TensorView{}, options);
      FAIL() << "expected flashpp::Error for D=" << D;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
    }
  }
}

}  // namespace
}  // namespace flashpp
