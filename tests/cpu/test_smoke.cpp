#include <gtest/gtest.h>
#include <vector>
#include "flashpp/flashpp.hpp"
TEST(Smoke, ReferenceRuns) {
  std::vector<float> q(2*3*4*8, 0.5f), o(2*3*4*8);
  std::vector<float> lse(2*4*3);
  auto Q = flashpp::make_bnhd(q.data(), flashpp::DType::f32, 2,3,4,8);
  auto O = flashpp::make_bnhd(o.data(), flashpp::DType::f32, 2,3,4,8);
  flashpp::Options opt; opt.backend = flashpp::Backend::cpu_reference;
  flashpp::forward(Q,Q,Q,O,flashpp::make_lse(lse.data(),2,4,3),opt);
  EXPECT_NEAR(o[0], 0.5f, 1e-6);
}
