// The sm90 FP8 (e4m3) forward against the float64 oracle on the dequantised inputs, with the
// accuracy rules of tests/common/fp8_case.hpp (docs/fp8.md): O no worse than 2 x the naive FP8
// attention + 2e-3, lse within the per-row bound. Outputs are poisoned (0xFF: NaN) before each
// call, so an element the kernel forgets to write fails the comparison. Runs only on a compute
// capability 9.0 GPU with a build that has the sm90 kernels (GTEST_SKIP otherwise).
//
// Each case prints one line "fp8 case: ..." with its errors; the sweep ends with
// "fp8 summary: ..." (tools/fp8_gpu_check.sh reads both).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/fp8_case.hpp"
#include "common/metrics.hpp"
#include "gpu_buffer.hpp"
#include "scoped_env.hpp"

namespace flashpp::gpu_test {
namespace {

using test::AttentionShape;
using test::Fp8Case;
using test::Fp8Data;
using test::Fp8Inputs;
using test::ForwardOutputs;
using test::HostTensor;
using test::Layout;

constexpr Device kCuda{DeviceType::cuda, 0};

bool fp8_gpu_ready(std::string* why) {
  if (!gpu_present()) return *why = "no CUDA GPU", false;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (major != 9 || minor != 0) return *why = "the FP8 forward needs compute capability 9.0", false;
  if (cuda_kernel_families(0).find("forward: sm90") == std::string::npos) {
    return *why = "this build or environment does not run the sm90 family: " + cuda_kernel_families(0), false;
  }
  return true;
}

#define FLASHPP_SKIP_WITHOUT_FP8_GPU()          \
  do {                                          \
    std::string why;                            \
    if (!fp8_gpu_ready(&why)) GTEST_SKIP() << why; \
  } while (0)

DeviceBuffer upload(const void* data, std::size_t bytes) {
  DeviceBuffer d(bytes);
  if (bytes > 0) cudaMemcpy(d.data(), data, bytes, cudaMemcpyHostToDevice);
  return d;
}

// caller_workspace: pass a workspace of forward_workspace_size bytes, 0xFF-filled (an e4m3 NaN in
// every byte), instead of letting flashpp allocate one.
ForwardOutputs run_fp8_forward_cuda(const Fp8Case& c, const Fp8Data& d, bool caller_workspace = false) {
  const DeviceBuffer q = upload(d.q.raw(), d.q.raw_bytes()), k = upload(d.k.raw(), d.k.raw_bytes()),
                     v = upload(d.v.raw(), d.v.raw_bytes());
  const std::size_t scale_bytes = d.q_scale.size() * sizeof(float);
  const DeviceBuffer qs = upload(d.q_scale.data(), scale_bytes), ks = upload(d.k_scale.data(), scale_bytes),
                     vs = upload(d.v_scale.data(), scale_bytes);
  ForwardOutputs out = test::fp8_outputs(c);
  DeviceBuffer o(out.o.raw_bytes()), lse(out.lse.raw_bytes());
  o.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  auto on_device = [](TensorView view, const DeviceBuffer& b) {
    view.device = kCuda;
    view.data = b.data();
    return view;
  };
  Options opt = c.options();
  opt.backend = Backend::cuda;
  opt.q_descale = test::descale_view(c, qs.data(), kCuda);
  opt.k_descale = test::descale_view(c, ks.data(), kCuda);
  opt.v_descale = test::descale_view(c, vs.data(), kCuda);
  const TensorView Q = on_device(d.q.view(), q), K = on_device(d.k.view(), k),
                   V = on_device(d.v.view(), v);
  Workspace ws{};
  DeviceBuffer scratch(caller_workspace ? forward_workspace_size(Q, K, V, opt) : 0);
  if (caller_workspace) {
    scratch.fill_bytes(0xFF);
    ws = Workspace{scratch.data(), scratch.bytes()};
  }
  forward(Q, K, V, on_device(out.o.view(), o), on_device(out.lse.view(), lse), opt, nullptr, ws);
  if (cudaDeviceSynchronize() != cudaSuccess) ADD_FAILURE() << cudaGetErrorString(cudaGetLastError());
  if (out.o.raw_bytes() > 0) cudaMemcpy(out.o.raw(), o.data(), out.o.raw_bytes(), cudaMemcpyDeviceToHost);
  if (out.lse.raw_bytes() > 0) cudaMemcpy(out.lse.raw(), lse.data(), out.lse.raw_bytes(), cudaMemcpyDeviceToHost);
  return out;
}

struct Fp8Errors {
  double o_ours = 0, o_naive = 0, lse_error = 0, lse_ratio = 0;
};

// Runs one case on its data and checks the rules; returns the errors.
Fp8Errors check_data(const Fp8Case& c, const Fp8Data& d) {
  SCOPED_TRACE(c.describe());
  const ForwardOutputs ref = test::fp8_oracle(c, d);
  const ForwardOutputs naive = test::naive_fp8_forward(c, d);
  const ForwardOutputs ours = run_fp8_forward_cuda(c, d);
  const HostTensor bounds = test::fp8_lse_bounds(c, d, ref.lse);
  Fp8Errors e;
  e.o_ours = test::relative_error(ours.o, ref.o);
  e.o_naive = test::relative_error(naive.o, ref.o);
  e.lse_error = test::lse_max_error(ours.lse, ref.lse);
  e.lse_ratio = test::lse_bound_ratio(ours.lse, ref.lse, bounds);
  EXPECT_EQ(test::count_nan(ours.o), 0) << "unwritten (poisoned) or NaN output elements";
  EXPECT_LE(e.o_ours, 2 * e.o_naive + 2e-3) << test::worst_element(ours.o, ref.o);
  EXPECT_LE(e.lse_ratio, 1.0) << "max |lse error| " << e.lse_error << "; "
                              << test::worst_element(ours.lse, ref.lse);
  std::printf("fp8 case: %s | O ours %.3e naive %.3e | lse max err %.3e bound ratio %.3f\n",
              c.describe().c_str(), e.o_ours, e.o_naive, e.lse_error, e.lse_ratio);
  return e;
}

Fp8Errors check_case(const Fp8Case& c) { return check_data(c, test::make_fp8_data(c)); }

std::vector<Fp8Case> sweep_cases() {
  std::vector<Fp8Case> cases;
  const AttentionShape shapes[] = {
      {1, 1, 1, 1, 1, 64},        {1, 1, 300, 2, 1, 128},     {2, 17, 33, 2, 1, 64},
      {1, 128, 128, 2, 2, 128},   {1, 129, 255, 4, 2, 128},   {2, 300, 513, 4, 1, 128},
      {1, 513, 300, 2, 2, 256},   {1, 77, 1000, 3, 3, 256},   {1, 200, 200, 2, 1, 16},
      {1, 150, 270, 2, 2, 96},    {1, 140, 333, 2, 1, 192},   {3, 64, 64, 1, 1, 64},
      {1, 1024, 1024, 1, 1, 128}, {1, 257, 1025, 8, 2, 64},
  };
  std::uint64_t seed = 1000;
  for (const auto& shape : shapes) {
    for (int variant = 0; variant < 4; ++variant) {
      Fp8Case c;
      c.shape = shape;
      c.seed = seed++;
      c.inputs = variant % 2 ? Fp8Inputs::outliers : Fp8Inputs::normal;
      c.causal = variant >= 2;
      c.alignment = variant == 3 ? Alignment::bottom_right : Alignment::top_left;
      c.layout = variant == 1 ? Layout::bhnd : Layout::bnhd;
      c.out_dtype = variant == 2 ? DType::f16 : DType::bf16;
      c.descales = variant != 1;
      cases.push_back(c);
    }
  }
  Fp8Case window;
  window.shape = {1, 300, 700, 2, 1, 128};
  window.causal = true;
  window.window_left = 150;
  window.seed = 7;
  cases.push_back(window);
  return cases;
}

TEST(Fp8GpuForward, SweepAgainstOracleAndNaive) {
  FLASHPP_SKIP_WITHOUT_FP8_GPU();
  double worst_lse = 0, worst_lse_ratio = 0, worst_o = 0, worst_o_naive = 0, worst_o_ratio = 0;
  for (const Fp8Case& c : sweep_cases()) {
    const Fp8Errors e = check_case(c);
    worst_lse = std::max(worst_lse, e.lse_error);
    worst_lse_ratio = std::max(worst_lse_ratio, e.lse_ratio);
    if (e.o_ours / std::max(e.o_naive, 1e-12) > worst_o_ratio) {
      worst_o_ratio = e.o_ours / std::max(e.o_naive, 1e-12);
      worst_o = e.o_ours;
      worst_o_naive = e.o_naive;
    }
  }
  std::printf("fp8 summary: max lse error %.3e, max lse error / bound %.3f (limit 1); "
              "O error ours/naive worst %.3f (ours %.3e vs naive %.3e; limit 2x + 2e-3)\n",
              worst_lse, worst_lse_ratio, worst_o_ratio, worst_o, worst_o_naive);
}

TEST(Fp8GpuForward, NoKeysAndEmptyRows) {
  FLASHPP_SKIP_WITHOUT_FP8_GPU();
  Fp8Case c;
  c.shape = {1, 70, 0, 2, 1, 128};
  c.seed = 3;
  const Fp8Data d = test::make_fp8_data(c);
  const ForwardOutputs out = run_fp8_forward_cuda(c, d);
  for (std::int64_t i = 0; i < 70; ++i) {
    EXPECT_EQ(out.o.get(0, i, 1, 5), 0.0);
    EXPECT_TRUE(std::isinf(out.lse.get(0, 1, i)) && out.lse.get(0, 1, i) < 0);
  }
  // Bottom-right causal with Nq > Nk: the first Nq - Nk rows see no key.
  Fp8Case rows;
  rows.shape = {1, 200, 90, 2, 2, 64};
  rows.causal = true;
  rows.alignment = Alignment::bottom_right;
  rows.seed = 4;
  check_case(rows);
}

// The V transposition pass writes its Vt into the workspace: a caller's (poisoned) workspace gives
// the same output, bit for bit, as the one flashpp allocates; with FLASHPP_FP8_V_TRANSPOSE=kernel
// the workspace size is 0 and both calls take the in-kernel transposition.
TEST(Fp8GpuForward, CallerWorkspaceGivesTheSameOutput) {
  FLASHPP_SKIP_WITHOUT_FP8_GPU();
  for (const AttentionShape shape : {AttentionShape{2, 130, 301, 4, 2, 128}, AttentionShape{1, 64, 77, 2, 1, 256}}) {
    Fp8Case c;
    c.shape = shape;
    c.seed = 90 + shape.D;
    SCOPED_TRACE(c.describe());
    const Fp8Data d = test::make_fp8_data(c);
    const ForwardOutputs automatic = run_fp8_forward_cuda(c, d);
    const ForwardOutputs caller = run_fp8_forward_cuda(c, d, true);
    ASSERT_EQ(automatic.o.raw_bytes(), caller.o.raw_bytes());
    EXPECT_EQ(std::memcmp(automatic.o.raw(), caller.o.raw(), caller.o.raw_bytes()), 0);
    EXPECT_EQ(std::memcmp(automatic.lse.raw(), caller.lse.raw(), caller.lse.raw_bytes()), 0);
    EXPECT_EQ(test::count_nan(caller.o), 0);
  }
}

// The grids a call can take: the persistent grid (the stride walk without a mask, the snake walk
// with handoffs under one), here on two blocks that walk every item (the ring, the Q tile's
// barriers, the handoff and the issue turns carried from item to item; masked items and items
// without a visible key among them), the stride walk under a mask, one block per item, and the
// launch without the dependence on the transposition pass. Each item is computed the same way
// whichever block takes it, so every grid gives the default's output bit for bit.
TEST(Fp8GpuForward, EveryGridGivesTheSameOutput) {
  FLASHPP_SKIP_WITHOUT_FP8_GPU();
  struct Grid {
    const char* persistent;
    const char* max_blocks;
    const char* walk;
    const char* dependent;
  };
  const Grid grids[] = {{"1", "2", "", ""}, {"1", "3", "stride", ""}, {"0", "", "", ""},
                        {"", "", "", "0"}};
  std::vector<Fp8Case> cases;
  for (const AttentionShape shape : {AttentionShape{2, 300, 513, 2, 1, 64},
                                     AttentionShape{1, 513, 300, 4, 2, 128},
                                     AttentionShape{1, 260, 700, 2, 1, 256}}) {
    for (int variant = 0; variant < 3; ++variant) {
      Fp8Case c;
      c.shape = shape;
      c.seed = 500 + 3 * shape.D + variant;
      c.causal = variant > 0;
      c.alignment = variant == 2 ? Alignment::bottom_right : Alignment::top_left;
      if (variant == 2) c.window_left = 100;
      cases.push_back(c);
    }
  }
  for (const Fp8Case& c : cases) {
    SCOPED_TRACE(c.describe());
    const Fp8Data d = test::make_fp8_data(c);
    const ForwardOutputs reference = run_fp8_forward_cuda(c, d);
    for (const Grid& g : grids) {
      SCOPED_TRACE(std::string("persistent '") + g.persistent + "' max blocks '" + g.max_blocks +
                   "' walk '" + g.walk + "' dependent launch '" + g.dependent + "'");
      std::vector<std::unique_ptr<ScopedEnv>> env;
      auto set = [&](const char* name, const char* value) {
        if (value[0] != '\0') env.push_back(std::make_unique<ScopedEnv>(name, value));
      };
      set("FLASHPP_SM90_FWD_PERSISTENT", g.persistent);
      set("FLASHPP_SM90_FWD_MAX_BLOCKS", g.max_blocks);
      set("FLASHPP_SM90_FWD_WALK", g.walk);
      set("FLASHPP_FP8_DEPENDENT_LAUNCH", g.dependent);
      const ForwardOutputs ours = run_fp8_forward_cuda(c, d);
      EXPECT_EQ(test::count_nan(ours.o), 0);
      ASSERT_EQ(ours.o.raw_bytes(), reference.o.raw_bytes());
      EXPECT_EQ(std::memcmp(ours.o.raw(), reference.o.raw(), ours.o.raw_bytes()), 0);
      EXPECT_EQ(std::memcmp(ours.lse.raw(), reference.lse.raw(), ours.lse.raw_bytes()), 0);
    }
  }
}

TEST(Fp8GpuForward, LongSequenceLseBound) {
  FLASHPP_SKIP_WITHOUT_FP8_GPU();
  for (std::int64_t D : {128, 256}) {
    Fp8Case c;
    c.shape = {1, 256, 4096, 1, 1, D};
    c.inputs = Fp8Inputs::outliers;
    c.seed = 40 + D;
    check_case(c);
  }
}

// Keys whose scores jump between key tiles: a band of K rows scaled by 8 (P rises by 2^20 or
// so: the speculative softmax's rescaled path) or 64 (beyond 2^100: its recomputed path), inside
// the item so that tiles before and after it see other references; causal and not, D 64 and 128
// (the head dims with the speculative step). e4m3 inputs without descales (in range: the scaled
// values stay below 448 and exact).
TEST(Fp8GpuForward, ScoreJumpsBetweenKeyTiles) {
  FLASHPP_SKIP_WITHOUT_FP8_GPU();
  for (std::int64_t D : {64, 128})
    for (bool causal : {false, true})
      for (double factor : {8.0, 64.0}) {
        Fp8Case c;
        c.shape = {1, 300, 1100, 2, 1, D};
        c.descales = false;
        c.causal = causal;
        c.alignment = Alignment::bottom_right;
        c.seed = 90 + static_cast<std::uint64_t>(D + factor) + (causal ? 1 : 0);
        Fp8Data d = test::make_fp8_data(c);
        for (std::int64_t j = 300; j < 420; ++j)
          for (std::int64_t dd = 0; dd < D; ++dd) {
            const double x = d.k.get(0, j, 0, dd) * factor;
            d.k.set(0, j, 0, dd, x);
            d.k64.set(0, j, 0, dd, x);
          }
        SCOPED_TRACE("keys 300..420 x" + std::to_string(factor));
        check_data(c, d);
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(Fp8GpuForward, RejectsMisalignedStrides) {
  FLASHPP_SKIP_WITHOUT_FP8_GPU();
  Fp8Case c;
  c.shape = {1, 8, 8, 1, 1, 64};
  const Fp8Data d = test::make_fp8_data(c);
  DeviceBuffer buf(4096);
  TensorView q = d.q.view(kCuda);
  q.data = buf.data();
  q.strides[1] = 72;  // a row stride of 72 bytes: not a multiple of 16
  TensorView k = d.k.view(kCuda), v = d.v.view(kCuda);
  k.data = v.data = buf.data();
  ForwardOutputs out = test::fp8_outputs(c);
  DeviceBuffer o(out.o.raw_bytes() + 64), lse(4096);
  TensorView ov = out.o.view(kCuda), lv = out.lse.view(kCuda);
  ov.data = o.data();
  lv.data = lse.data();
  try {
    forward(q, k, v, ov, lv, Options{});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 16 elements"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashpp::gpu_test
