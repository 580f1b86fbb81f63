// The CUDA backend's entry points: availability, capability checks and their messages.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

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

// A backward without a workspace takes its scratch (the float32 dQ accumulator, lse, delta) from
// flashpp's pool, which keeps it mapped after the call; cuda_release_scratch gives it back to the
// driver (the device's free memory grows by about that much), and is harmless when repeated.
TEST(CudaBackend, ReleaseScratchGivesThePoolsMemoryBack) {
  FLASHPP_SKIP_WITHOUT_GPU();
  if (std::getenv("FLASHPP_CUDA_POOL_KEEP_MB") != nullptr) {
    GTEST_SKIP() << "FLASHPP_CUDA_POOL_KEEP_MB is set: the pool may not keep this scratch";
  }
  const std::int64_t B = 1, N = 4096, H = 8, D = 128;
  const std::size_t tensor_bytes = static_cast<std::size_t>(B * N * H * D) * 2;
  const Device dev{DeviceType::cuda, 0};
  std::vector<gpu_test::DeviceBuffer> buffers;
  for (int i = 0; i < 8; ++i) {
    buffers.emplace_back(tensor_bytes);
    ASSERT_TRUE(buffers.back().ok());
    buffers.back().fill_bytes(0);  // zeros: a valid input; lse of zeros comes from the forward
  }
  gpu_test::DeviceBuffer lse(static_cast<std::size_t>(B * H * N) * 4);
  ASSERT_TRUE(lse.ok());
  auto view = [&](int i) { return make_bnhd(buffers[i].data(), DType::f16, B, N, H, D, dev); };
  const TensorView L = make_lse(static_cast<float*>(lse.data()), B, H, N, dev);
  Options options;
  options.backend = Backend::cuda;
  forward(view(0), view(1), view(2), view(3), L, options);
  const std::size_t scratch = backward_workspace_size(view(0), view(1), view(2), options);
  ASSERT_GE(scratch, static_cast<std::size_t>(B * H * N * D) * 4) << "the dQ accumulator";
  backward(view(0), view(1), view(2), view(3), L, view(4), view(5), view(6), view(7), options);
  FLASHPP_CUDA_OK(cudaDeviceSynchronize());

  std::size_t free_kept = 0, free_released = 0, total = 0;
  FLASHPP_CUDA_OK(cudaMemGetInfo(&free_kept, &total));
  cuda_release_scratch();
  FLASHPP_CUDA_OK(cudaMemGetInfo(&free_released, &total));
  EXPECT_GE(free_released, free_kept + scratch / 2)
      << "scratch " << scratch << " bytes; free before " << free_kept << ", after " << free_released;
  cuda_release_scratch();
  FLASHPP_CUDA_OK(cudaGetLastError());
}

}  // namespace
}  // namespace flashpp
