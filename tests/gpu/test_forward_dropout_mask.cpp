// The CUDA forward's dropout mask equals the shared Philox rule (src/common/philox.hpp, the one
// the CPU backends use) element for element. With V = the identity (Nk = D), O's row i is
// P~_i = P_i * keep_i / (1 - p) itself, so an element of O is zero exactly where the key was
// dropped: the mask is read straight off the output. Every head dim, with and without softcap
// (the sm90 forward has a dropout kernel and a softcap-and-dropout kernel), on the default grid
// and on two persistent blocks that walk every item (each item's tiles masked with the right
// counters).
#include <gtest/gtest.h>

#include <string>

#include "api/validate.hpp"
#include "common/attention_case.hpp"
#include "gpu_buffer.hpp"
#include "gpu_runner.hpp"
#include "scoped_env.hpp"

namespace flashpp {
namespace {

// Nk = D keys; Nq query rows. softcap > 0 keeps every P above zero, so the check holds with it.
void check_mask(DType dtype, test::Layout layout, bool causal, std::int64_t D = 64,
                std::int64_t Nq = 100, float softcap = 0.0f) {
  test::AttentionCase c;
  c.shape = {2, Nq, D, 3, 3, D};
  c.dtype = dtype;
  c.layout = layout;
  c.seed = 99;
  c.options.dropout_p = 0.3f;
  c.options.seed = 0x0123456789ABCDEFull;
  c.options.offset = (5ull << 32) + 99;
  c.options.causal = causal;
  c.options.softcap = softcap;
  test::AttentionInputs in = test::make_inputs(c);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t j = 0; j < D; ++j)
      for (std::int64_t h = 0; h < 3; ++h)
        for (std::int64_t d = 0; d < D; ++d) in.v.set(b, j, h, d, d == j ? 1.0 : 0.0);

  const test::ForwardOutputs out = gpu_test::run_forward_cuda(in, c.options);
  const detail::Problem p =
      detail::validate_inputs("check_mask", in.q.view(), in.k.view(), in.v.view(), c.options);
  std::int64_t mismatches = 0, kept = 0, visible = 0;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 3; ++h)
      for (std::int64_t i = 0; i < Nq; ++i)
        for (std::int64_t j = 0; j < D; ++j) {
          if (!p.mask.visible(i, j)) continue;
          ++visible;
          const bool keep = detail::dropout_keep(p.dropout, static_cast<std::uint32_t>(b * 3 + h),
                                                 static_cast<std::uint32_t>(i),
                                                 static_cast<std::uint32_t>(j));
          const bool kept_on_gpu = out.o.get(b, i, h, j) != 0.0;
          kept += keep;
          if (keep != kept_on_gpu) {
            if (++mismatches <= 5) {
              ADD_FAILURE() << "mask differs at b=" << b << " h=" << h << " i=" << i << " j=" << j
                            << ": rule keeps=" << keep << ", GPU kept=" << kept_on_gpu;
            }
          }
        }
  EXPECT_EQ(mismatches, 0);
  // Sanity: roughly 70% kept, so the check is not vacuous.
  EXPECT_GT(kept, visible / 2);
  EXPECT_LT(kept, visible * 9 / 10);
}

TEST(ForwardDropoutMask, EqualsPhiloxRuleF16) {
  FLASHPP_SKIP_WITHOUT_GPU();
  check_mask(DType::f16, test::Layout::bnhd, false);
}

TEST(ForwardDropoutMask, EqualsPhiloxRuleBf16Causal) {
  FLASHPP_SKIP_WITHOUT_GPU();
  check_mask(DType::bf16, test::Layout::bhnd, true);
}

TEST(ForwardDropoutMask, EqualsPhiloxRuleD128) {
  FLASHPP_SKIP_WITHOUT_GPU();
  check_mask(DType::bf16, test::Layout::bnhd, false, 128, 300);
  check_mask(DType::f16, test::Layout::bhnd, true, 128, 300);
}

TEST(ForwardDropoutMask, EqualsPhiloxRuleEveryHeadDimWithAndWithoutSoftcap) {
  FLASHPP_SKIP_WITHOUT_GPU();
  for (const std::int64_t D : {64, 96, 128, 192, 256}) {
    for (const float softcap : {0.0f, 5.0f}) {
      SCOPED_TRACE("D=" + std::to_string(D) + " softcap=" + std::to_string(softcap));
      check_mask(DType::bf16, test::Layout::bnhd, false, D, 200, softcap);
    }
  }
}

// Two blocks walk all 18 items (3 query tiles x 6 heads, one key tile each) on the sm90 family
// (the variables are ignored elsewhere).
TEST(ForwardDropoutMask, EqualsPhiloxRuleWalkingBlocks) {
  FLASHPP_SKIP_WITHOUT_GPU();
  const gpu_test::ScopedEnv persistent("FLASHPP_SM90_FWD_PERSISTENT", "1");
  const gpu_test::ScopedEnv max_blocks("FLASHPP_SM90_FWD_MAX_BLOCKS", "2");
  check_mask(DType::bf16, test::Layout::bnhd, false, 64, 300);
  check_mask(DType::f16, test::Layout::bnhd, false, 128, 300);
  check_mask(DType::bf16, test::Layout::bhnd, true, 128, 300);
}

}  // namespace
}  // namespace flashpp
