// The C API's inference entry points: results equal the C++ API's, and bad indices come back as
// FLASHPP_ERROR_INVALID_ARGUMENT with the C++ message.
#include <gtest/gtest.h>

#include <string>

#include "common/inference_case.hpp"
#include "common/metrics.hpp"
#include "flashpp/flashpp.h"

namespace flashpp::test {
namespace {

flashpp_tensor to_c(const TensorView& v) {
  flashpp_tensor t{};
  t.data = v.data;
  t.dtype = static_cast<flashpp_dtype>(v.dtype);
  t.device_type = FLASHPP_CPU;
  t.rank = v.rank;
  for (int i = 0; i < v.rank; ++i) {
    t.sizes[i] = v.sizes[i];
    t.strides[i] = v.strides[i];
  }
  return t;
}

TEST(CApiInference, KvCacheMatchesCppAndReportsBadPage) {
  KvCaseSpec s;
  s.B = 2;
  s.page_size = 16;
  s.capacity = 40;
  s.seqlens = {20, 3};
  s.Nnew = 1;
  KvCaseData c = make_kv_case(s), cpp = c;
  HostTensor o = c.q.like(), lse = HostTensor::lse(DType::f32, s.B, s.Hq, s.Nq);
  HostTensor o2 = o.like(), lse2 = lse.like();
  flashpp::forward_kvcache(cpp.q.view(), cpp.host_cache(), o2.view(), lse2.view());
  const KvCache view = c.host_cache();
  const flashpp_tensor q = to_c(c.q.view()), kc = to_c(view.k_cache), vc = to_c(view.v_cache),
                       sl = to_c(view.cache_seqlens), bt = to_c(view.block_table),
                       kn = to_c(view.k_new), vn = to_c(view.v_new), O = to_c(o.view()),
                       L = to_c(lse.view());
  flashpp_kv_cache cache = flashpp_kv_cache_default();
  EXPECT_EQ(cache.validate_indices, 1);
  cache.k_cache = &kc;
  cache.v_cache = &vc;
  cache.cache_seqlens = &sl;
  cache.block_table = &bt;
  cache.k_new = &kn;
  cache.v_new = &vn;
  const flashpp_options opt = flashpp_options_default();
  size_t bytes = 1;
  ASSERT_EQ(flashpp_forward_kvcache_workspace_size(&q, &cache, &opt, &bytes), FLASHPP_OK);
  EXPECT_EQ(bytes, 0u);
  ASSERT_EQ(flashpp_forward_kvcache(&q, &cache, &O, &L, &opt, nullptr, nullptr, 0), FLASHPP_OK)
      << flashpp_last_error();
  EXPECT_EQ(relative_error(o, o2), 0.0);
  EXPECT_EQ(relative_error(lse, lse2), 0.0);

  c.block_table[0] = 1000;
  EXPECT_EQ(flashpp_forward_kvcache(&q, &cache, &O, &L, &opt, nullptr, nullptr, 0),
            FLASHPP_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashpp_last_error()).find("block_table[0][0]"), std::string::npos)
      << flashpp_last_error();
  EXPECT_EQ(flashpp_forward_kvcache(&q, nullptr, &O, &L, &opt, nullptr, nullptr, 0),
            FLASHPP_ERROR_INVALID_ARGUMENT);
}

TEST(CApiInference, VarlenForwardBackwardAndBadOffsets) {
  VarlenSpec s;
  s.lens_q = {5, 0, 9};
  s.lens_k = {7, 2, 9};
  s.options.causal = true;
  VarlenData d = make_varlen(s);
  const VarlenExpected want = varlen_expected(d, true);
  HostTensor o = d.q.like(), lse = HostTensor::lse(DType::f32, 1, s.Hq, d.q.size(1));
  HostTensor dq = d.q.like(), dk = d.k.like(), dv = d.v.like();
  const flashpp_tensor q = to_c(drop_batch(d.q.view())), k = to_c(drop_batch(d.k.view())),
                       v = to_c(drop_batch(d.v.view())), dout = to_c(drop_batch(d.dout.view())),
                       O = to_c(drop_batch(o.view())), L = to_c(drop_batch(lse.view())),
                       dQ = to_c(drop_batch(dq.view())), dK = to_c(drop_batch(dk.view())),
                       dV = to_c(drop_batch(dv.view())), cq = to_c(index_view(d.cu_q)),
                       ck = to_c(index_view(d.cu_k));
  const flashpp_packed_batch batch{&cq, &ck, d.max_q, d.max_k};
  flashpp_options opt = flashpp_options_default();
  opt.causal = 1;
  ASSERT_EQ(flashpp_forward_varlen(&q, &k, &v, &batch, &O, &L, &opt, nullptr), FLASHPP_OK)
      << flashpp_last_error();
  ASSERT_EQ(flashpp_backward_varlen(&q, &k, &v, &O, &L, &dout, &dQ, &dK, &dV, &batch, &opt,
                                    nullptr),
            FLASHPP_OK)
      << flashpp_last_error();
  EXPECT_LT(relative_error(o, want.o), 1e-4);
  EXPECT_LT(relative_error(dk, want.dk), 1e-4);
  d.cu_k[2] = 1;  // decreasing
  EXPECT_EQ(flashpp_forward_varlen(&q, &k, &v, &batch, &O, &L, &opt, nullptr),
            FLASHPP_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashpp_last_error()).find("batch.cu_seqlens_k[2]"), std::string::npos)
      << flashpp_last_error();
}

}  // namespace
}  // namespace flashpp::test
