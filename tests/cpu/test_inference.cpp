// KV-cache decoding and packed variable-length batches on the CPU backends, against the float64
// oracle run on each sequence's own dense tensors; and the validation of the index tensors
// (bad lengths, offsets and page ids get a clear error and nothing is written or read out of
// bounds).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "common/inference_case.hpp"
#include "common/metrics.hpp"

namespace flashpp::test {
namespace {

double kv_limit(DType dtype) { return dtype == DType::f32 ? 2e-5 : 2e-2; }

struct KvParam {
  std::string name;
  KvCaseSpec spec;
};

std::vector<KvParam> kv_params() {
  std::vector<KvParam> out;
  auto add = [&](std::string name, KvCaseSpec s) { out.push_back({std::move(name), s}); };
  KvCaseSpec base;
  base.B = 3;
  base.Hq = 4;
  base.Hkv = 2;
  base.D = 16;
  base.capacity = 70;
  base.seqlens = {37, 0, 1};
  add("contiguous", base);
  KvCaseSpec s = base;
  s.Nq = 4;
  s.options.causal = true;
  s.seqlens = {37, 2, 66};
  add("contiguous_causal_nq4", s);
  s = base;
  s.Nnew = 3;
  s.options.causal = true;
  add("contiguous_append_causal", s);
  for (std::int64_t page : {1, 16, 64}) {
    s = base;
    s.page_size = page;
    s.seqlens = {37, 0, 65};
    s.Nnew = page == 16 ? 2 : 0;
    add("paged" + std::to_string(page), s);
  }
  s = base;
  s.page_size = 16;
  s.Nq = 2;
  s.Hq = 6;
  s.Hkv = 1;
  s.options.window_left = 5;
  s.options.window_right = 0;
  s.options.softcap = 7.0f;
  s.Nnew = 1;
  add("paged_window_softcap_mqa", s);
  s = base;
  s.dtype = DType::bf16;
  s.page_size = 16;
  s.Nnew = 1;
  s.options.causal = true;
  add("paged_bf16", s);
  s = base;
  s.dtype = DType::f16;
  s.Nq = 3;
  s.options.window_left = 2;
  s.options.window_right = 1;
  add("contiguous_f16_window", s);
  return out;
}

class KvCacheVsOracle : public ::testing::TestWithParam<std::tuple<KvParam, Backend>> {};

TEST_P(KvCacheVsOracle, MatchesDenseOracleAndAppends) {
  const auto& [param, backend] = GetParam();
  KvCaseData c = make_kv_case(param.spec);
  const KvCaseData before = c;  // copies of the buffers
  const KvExpected want = kv_expected(before);
  HostTensor o = c.q.like(), lse = HostTensor::lse(DType::f32, c.spec.B, c.spec.Hq, c.spec.Nq);
  Options opt = c.spec.options;
  opt.backend = backend;
  flashpp::forward_kvcache(c.q.view(), c.host_cache(), o.view(), lse.view(), opt);
  SCOPED_TRACE(param.spec.describe());
  EXPECT_EQ(count_nan(o), 0);
  EXPECT_LT(relative_error(o, want.o), kv_limit(c.spec.dtype)) << worst_element(o, want.o);
  // lse: -inf rows must match exactly, the others closely.
  for (std::int64_t b = 0; b < c.spec.B; ++b)
    for (std::int64_t h = 0; h < c.spec.Hq; ++h)
      for (std::int64_t i = 0; i < c.spec.Nq; ++i) {
        const double w = want.lse.get(b, h, i), g = lse.get(b, h, i);
        if (std::isinf(w)) {
          EXPECT_EQ(w, g) << "b=" << b << " h=" << h << " i=" << i;
        } else {
          EXPECT_NEAR(g, w, 1e-4 * (1 + std::abs(w))) << "b=" << b << " h=" << h << " i=" << i;
        }
      }
  EXPECT_EQ(cache_mismatches(before, c.k_cache, c.v_cache), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KvCacheVsOracle,
    ::testing::Combine(::testing::ValuesIn(kv_params()),
                       ::testing::Values(Backend::cpu, Backend::cpu_reference)),
    [](const auto& info) {
      return std::get<0>(info.param).name +
             (std::get<1>(info.param) == Backend::cpu ? "_cpu" : "_reference");
    });

// A sequence with no key gives o = 0 and lse = -inf (never NaN).
TEST(KvCache, EmptySequenceGivesZeroAndMinusInf) {
  KvCaseSpec s;
  s.B = 2;
  s.seqlens = {0, 5};
  s.options.causal = true;
  KvCaseData c = make_kv_case(s);
  HostTensor o = c.q.like(), lse = HostTensor::lse(DType::f32, s.B, s.Hq, s.Nq);
  o.poison();
  flashpp::forward_kvcache(c.q.view(), c.host_cache(), o.view(), lse.view(), {});
  for (std::int64_t h = 0; h < s.Hq; ++h) {
    EXPECT_EQ(lse.get(0, h, 0), -INFINITY);
    for (std::int64_t d = 0; d < s.D; ++d) EXPECT_EQ(o.get(0, 0, h, d), 0.0);
  }
  EXPECT_EQ(count_nan(o), 0);
}

// ---- validation -----------------------------------------------------------------------------
void expect_error(const std::function<void()>& call, const std::string& argument,
                  ErrorCode code = ErrorCode::invalid_argument) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming " << argument;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), code) << m;
    EXPECT_NE(m.find(argument), std::string::npos) << "message does not name " << argument << ": " << m;
    EXPECT_NE(m.find("expected"), std::string::npos) << m;
  }
}

struct KvValidation : ::testing::Test {
  KvCaseData c;
  HostTensor o, lse;
  void SetUp() override {
    KvCaseSpec s;
    s.B = 2;
    s.page_size = 16;
    s.capacity = 48;
    s.seqlens = {20, 3};
    s.Nnew = 1;
    c = make_kv_case(s);
    o = c.q.like();
    lse = HostTensor::lse(DType::f32, s.B, s.Hq, s.Nq);
    o.poison();
    lse.poison();
  }
  void run(const KvCache& cache, Options opt = {}) {
    flashpp::forward_kvcache(c.q.view(), cache, o.view(), lse.view(), opt);
  }
  void expect_untouched() {
    EXPECT_EQ(count_nan(o), o.numel()) << "o was written despite the error";
  }
};

TEST_F(KvValidation, NegativeLength) {
  c.seqlens[1] = -1;
  expect_error([&] { run(c.host_cache()); }, "cache_seqlens[1]");
  expect_untouched();
}

TEST_F(KvValidation, LengthBeyondCapacity) {
  c.seqlens[0] = 48;  // + 1 appended row > capacity 48
  expect_error([&] { run(c.host_cache()); }, "cache_seqlens[0]");
  expect_untouched();
}

TEST_F(KvValidation, PageIdOutOfRange) {
  c.block_table[1] = static_cast<std::int32_t>(c.num_pages);  // sequence 0's second page
  expect_error([&] { run(c.host_cache()); }, "block_table[0][1]");
  c.block_table[1] = -1;
  expect_error([&] { run(c.host_cache()); }, "block_table[0][1]");
  expect_untouched();
}

TEST_F(KvValidation, UnusedPagesAreNotChecked) {
  // Sequence 1 uses one page; its other entries are -1 and never read.
  EXPECT_EQ(c.block_table[static_cast<std::size_t>(c.max_pages + 2)], -1);
  EXPECT_NO_THROW(run(c.host_cache()));
}

TEST_F(KvValidation, IndexDtypeAndShape) {
  KvCache cache = c.host_cache();
  cache.cache_seqlens.dtype = DType::f32;
  expect_error([&] { run(cache); }, "cache_seqlens");
  cache = c.host_cache();
  cache.cache_seqlens.sizes[0] = 3;
  expect_error([&] { run(cache); }, "cache_seqlens");
  cache = c.host_cache();
  cache.block_table.sizes[0] = 1;
  expect_error([&] { run(cache); }, "block_table");
  cache = c.host_cache();
  cache.block_table.rank = 1;
  expect_error([&] { run(cache); }, "block_table");
  expect_untouched();
}

TEST_F(KvValidation, NewRowsAndOptions) {
  KvCache cache = c.host_cache();
  cache.v_new = TensorView{};
  expect_error([&] { run(cache); }, "v_new");
  cache = c.host_cache();
  cache.k_new.sizes[2] = 1;
  expect_error([&] { run(cache); }, "k_new");
  Options opt;
  opt.dropout_p = 0.1f;
  expect_error([&] { run(c.host_cache(), opt); }, "options.dropout_p", ErrorCode::unsupported);
  cache = c.host_cache();
  cache.v_cache.sizes[2] = 1;
  expect_error([&] { run(cache); }, "v_cache");
  expect_untouched();
}

TEST_F(KvValidation, Fp8InputsAreRefused) {
  KvCache cache = c.host_cache();
  TensorView q = c.q.view();
  q.dtype = cache.k_cache.dtype = cache.v_cache.dtype = cache.k_new.dtype = cache.v_new.dtype =
      DType::e4m3;
  expect_error([&] { flashpp::forward_kvcache(q, cache, o.view(), lse.view()); }, ": q: ",
               ErrorCode::unsupported);
  expect_untouched();
}

TEST_F(KvValidation, HeadCountsNameTheCache) {
  KvCaseSpec s;
  s.B = 1;
  s.Hq = 4;
  s.Hkv = 3;
  s.seqlens = {2};
  KvCaseData d = make_kv_case(s);
  HostTensor out = d.q.like(), l = HostTensor::lse(DType::f32, s.B, s.Hq, s.Nq);
  expect_error([&] { flashpp::forward_kvcache(d.q.view(), d.host_cache(), out.view(), l.view()); },
               ": k_cache: ");
}

TEST_F(KvValidation, ContiguousCacheBatchMustMatch) {
  KvCaseSpec s;
  s.B = 2;
  s.seqlens = {1, 1};
  KvCaseData d = make_kv_case(s);
  KvCache cache = d.host_cache();
  cache.k_cache.sizes[0] = 1;
  cache.v_cache.sizes[0] = 1;
  HostTensor out = d.q.like(), l = HostTensor::lse(DType::f32, s.B, s.Hq, s.Nq);
  expect_error([&] { flashpp::forward_kvcache(d.q.view(), cache, out.view(), l.view()); },
               "k_cache");
}

// ---- varlen ---------------------------------------------------------------------------------
struct VarlenParam {
  std::string name;
  VarlenSpec spec;
};

std::vector<VarlenParam> varlen_params() {
  std::vector<VarlenParam> out;
  VarlenSpec s;
  s.lens_q = {17, 0, 1, 40};
  s.lens_k = {17, 5, 1, 40};
  out.push_back({"self", s});
  s.options.causal = true;
  out.push_back({"self_causal", s});
  s.lens_q = {3, 9, 1, 20};
  s.lens_k = {30, 9, 0, 7};
  s.options.alignment = Alignment::bottom_right;
  s.extra_rows = 3;
  out.push_back({"cross_causal_bottom_right", s});
  s.options.causal = false;
  s.options.window_left = 4;
  s.options.window_right = 2;
  s.options.softcap = 5.0f;
  s.Hq = 6;
  s.Hkv = 3;
  out.push_back({"window_softcap", s});
  s = VarlenSpec{};
  s.lens_q = {33, 12};
  s.lens_k = {33, 12};
  s.dtype = DType::bf16;
  s.options.causal = true;
  out.push_back({"bf16_causal", s});
  return out;
}

class VarlenVsOracle : public ::testing::TestWithParam<std::tuple<VarlenParam, Backend>> {};

TEST_P(VarlenVsOracle, ForwardAndBackwardMatchPerSequenceOracle) {
  const auto& [param, backend] = GetParam();
  VarlenData d = make_varlen(param.spec);
  SCOPED_TRACE(param.spec.describe());
  const VarlenExpected want = varlen_expected(d, true);
  HostTensor o = d.q.like(), lse = HostTensor::lse(DType::f32, 1, param.spec.Hq, d.q.size(1));
  HostTensor dq = d.q.like(), dk = d.k.like(), dv = d.v.like();
  // Rows past the last sequence are neither read nor written: zero them on both sides.
  for (HostTensor* t : {&o, &dq, &dk, &dv}) t->fill(0.0);
  lse.fill(0.0);
  Options opt = param.spec.options;
  opt.backend = backend;
  PackedBatch batch = d.batch();
  flashpp::forward_varlen(drop_batch(d.q.view()), drop_batch(d.k.view()), drop_batch(d.v.view()),
                          batch, drop_batch(o.view()), drop_batch(lse.view()), opt);
  flashpp::backward_varlen(drop_batch(d.q.view()), drop_batch(d.k.view()),
                           drop_batch(d.v.view()), drop_batch(o.view()), drop_batch(lse.view()),
                           drop_batch(d.dout.view()), drop_batch(dq.view()),
                           drop_batch(dk.view()), drop_batch(dv.view()), batch, opt);
  const double limit = param.spec.dtype == DType::f32 ? 1e-4 : 3e-2;
  EXPECT_LT(relative_error(o, want.o), limit) << worst_element(o, want.o);
  EXPECT_LT(relative_error(dq, want.dq), limit) << worst_element(dq, want.dq);
  EXPECT_LT(relative_error(dk, want.dk), limit) << worst_element(dk, want.dk);
  EXPECT_LT(relative_error(dv, want.dv), limit) << worst_element(dv, want.dv);
  EXPECT_EQ(count_nan(o) + count_nan(dq) + count_nan(dk) + count_nan(dv), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, VarlenVsOracle,
    ::testing::Combine(::testing::ValuesIn(varlen_params()),
                       ::testing::Values(Backend::cpu, Backend::cpu_reference)),
    [](const auto& info) {
      return std::get<0>(info.param).name +
             (std::get<1>(info.param) == Backend::cpu ? "_cpu" : "_reference");
    });

struct VarlenValidation : ::testing::Test {
  VarlenData d;
  HostTensor o, lse;
  void SetUp() override {
    VarlenSpec s;
    s.lens_q = {5, 3, 4};
    s.lens_k = {5, 3, 4};
    d = make_varlen(s);
    o = d.q.like();
    lse = HostTensor::lse(DType::f32, 1, s.Hq, d.q.size(1));
    o.poison();
  }
  void run(const PackedBatch& b) {
    flashpp::forward_varlen(drop_batch(d.q.view()), drop_batch(d.k.view()),
                            drop_batch(d.v.view()), b, drop_batch(o.view()),
                            drop_batch(lse.view()));
  }
};

TEST_F(VarlenValidation, DecreasingOffsets) {
  d.cu_q = {0, 5, 4, 12};
  expect_error([&] { run(d.batch()); }, "batch.cu_seqlens_q[2]");
  EXPECT_EQ(count_nan(o), o.numel());
}

TEST_F(VarlenValidation, BeyondTheTensor) {
  d.cu_k = {0, 5, 8, 13};
  d.max_k = 5;
  expect_error([&] { run(d.batch()); }, "batch.cu_seqlens_k[3]");
  d.cu_k = {-1, 5, 8, 12};
  expect_error([&] { run(d.batch()); }, "batch.cu_seqlens_k[0]");
  EXPECT_EQ(count_nan(o), o.numel());
}

TEST_F(VarlenValidation, WrongLengthAndDtype) {
  PackedBatch b = d.batch();
  b.cu_seqlens_k.sizes[0] = 3;
  expect_error([&] { run(b); }, "batch.cu_seqlens_k");
  b = d.batch();
  b.cu_seqlens_q.dtype = DType::f32;
  expect_error([&] { run(b); }, "batch.cu_seqlens_q");
  b = d.batch();
  b.cu_seqlens_q.rank = 0;
  b.cu_seqlens_q.data = nullptr;
  expect_error([&] { run(b); }, "batch.cu_seqlens_q");
  EXPECT_EQ(count_nan(o), o.numel());
}

TEST_F(VarlenValidation, MaxSeqlenTooSmall) {
  PackedBatch b = d.batch();
  b.max_seqlen_q = 4;
  expect_error([&] { run(b); }, "batch.max_seqlen_q");
  b = d.batch();
  b.max_seqlen_k = -1;
  expect_error([&] { run(b); }, "batch.max_seqlen_k");
}

TEST_F(VarlenValidation, PackedShapes) {
  TensorView q = drop_batch(d.q.view());
  TensorView lse_view = drop_batch(lse.view());
  lse_view.sizes[1] = 3;
  expect_error([&] {
    flashpp::forward_varlen(q, drop_batch(d.k.view()), drop_batch(d.v.view()), d.batch(),
                            drop_batch(o.view()), lse_view);
  }, "lse");
  expect_error([&] {
    flashpp::forward_varlen(d.q.view(), drop_batch(d.k.view()), drop_batch(d.v.view()),
                            d.batch(), drop_batch(o.view()), drop_batch(lse.view()));
  }, "q");
}

}  // namespace
}  // namespace flashpp::test
