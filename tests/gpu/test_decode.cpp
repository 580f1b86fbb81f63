// The CUDA decode kernels (split-KV, paged, append) and CUDA varlen against the float64 oracle
// on each sequence's dense tensors: poisoned outputs and workspaces, lengths 0, 1 and not a
// multiple of the 16-key tile, page sizes 16/64/256, splits, GQA, causal/window/softcap.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/inference_case.hpp"
#include "common/metrics.hpp"
#include "gpu_buffer.hpp"
#include "scoped_env.hpp"

namespace flashpp::gpu_test {
namespace {

using test::HostTensor;

constexpr Device kCuda{DeviceType::cuda, 0};

// A device copy of a host tensor (same layout), and its view.
struct Mirror {
  DeviceBuffer buffer;
  TensorView view;
};
Mirror mirror(const HostTensor& t) {
  Mirror m{DeviceBuffer(t.raw_bytes()), t.view(kCuda)};
  cudaMemcpy(m.buffer.data(), t.raw(), t.raw_bytes(), cudaMemcpyHostToDevice);
  m.view.data = m.buffer.data();
  return m;
}
Mirror mirror_indices(const std::vector<std::int32_t>& v, std::int64_t rows = 0,
                      std::int64_t cols = 0) {
  Mirror m{DeviceBuffer(v.size() * 4 + 4),
           rows ? test::index_view(v, rows, cols, kCuda) : test::index_view(v, kCuda)};
  cudaMemcpy(m.buffer.data(), v.data(), v.size() * 4, cudaMemcpyHostToDevice);
  m.view.data = m.buffer.data();
  return m;
}
void download(HostTensor& t, const Mirror& m) {
  cudaMemcpy(t.raw(), m.buffer.data(), t.raw_bytes(), cudaMemcpyDeviceToHost);
}

struct DecodeParam {
  std::string name;
  test::KvCaseSpec spec;
  bool validate = true;
};

std::vector<DecodeParam> decode_params() {
  std::vector<DecodeParam> out;
  test::KvCaseSpec base;
  base.B = 3;
  base.Hq = 8;
  base.Hkv = 2;
  base.D = 128;
  base.dtype = DType::bf16;
  base.capacity = 300;
  base.seqlens = {257, 0, 1};
  out.push_back({"contiguous_d128", base});
  for (std::int64_t D : {64, 256}) {
    test::KvCaseSpec s = base;
    s.D = D;
    s.dtype = DType::f16;
    s.seqlens = {37, 1, 290};
    out.push_back({"contiguous_f16_d" + std::to_string(D), s});
  }
  for (std::int64_t page : {16, 64, 256}) {
    test::KvCaseSpec s = base;
    s.page_size = page;
    s.capacity = 600;
    s.seqlens = {555, 0, 17};
    s.Nnew = page == 64 ? 1 : 0;
    out.push_back({"paged" + std::to_string(page), s});
    s.Nq = 4;
    s.Nnew = 4;
    s.options.causal = true;
    out.push_back({"paged" + std::to_string(page) + "_nq4_append_causal", s, false});
  }
  test::KvCaseSpec s = base;
  s.B = 1;
  s.capacity = 5000;
  s.seqlens = {4999};
  s.Nnew = 1;
  out.push_back({"long_splits", s});
  s.options.window_left = 700;
  s.options.causal = true;
  s.options.softcap = 20.0f;
  out.push_back({"long_window_softcap", s});
  s = base;
  s.Hq = 32;
  s.Hkv = 2;  // group 16 x Nq 3 -> 3 M tiles
  s.Nq = 3;
  s.options.causal = true;
  s.page_size = 16;
  s.capacity = 400;
  s.seqlens = {399 - 3, 2, 100};
  s.Nnew = 3;
  out.push_back({"gqa16_nq3_mtiles", s});
  return out;
}

// Runs one case on the GPU (poisoned outputs and workspace) and checks it against the oracle:
// o, lse and the cache after the append. The output goes to *o_out when given.
void check_decode_case(const DecodeParam& param, HostTensor* o_out = nullptr) {
  test::KvCaseData c = test::make_kv_case(param.spec);
  const test::KvCaseData before = c;
  const test::KvExpected want = test::kv_expected(before);
  SCOPED_TRACE(param.spec.describe());
  Mirror q = mirror(c.q), kc = mirror(c.k_cache), vc = mirror(c.v_cache);
  Mirror sl = mirror_indices(c.seqlens);
  Mirror bt = c.paged() ? mirror_indices(c.block_table, param.spec.B, c.max_pages) : Mirror{};
  Mirror kn, vn;
  KvCache cache;
  cache.k_cache = kc.view;
  cache.v_cache = vc.view;
  cache.cache_seqlens = sl.view;
  if (c.paged()) cache.block_table = bt.view;
  if (param.spec.Nnew > 0) {
    kn = mirror(c.k_new);
    vn = mirror(c.v_new);
    cache.k_new = kn.view;
    cache.v_new = vn.view;
  }
  cache.validate_indices = param.validate;
  HostTensor o = c.q.like(), lse = HostTensor::lse(DType::f32, param.spec.B, param.spec.Hq,
                                                   param.spec.Nq);
  o.poison();
  lse.poison();
  Mirror od = mirror(o), ld = mirror(lse);
  Options opt = param.spec.options;
  const std::size_t ws_bytes = flashpp::forward_kvcache_workspace_size(q.view, cache, opt);
  DeviceBuffer ws(ws_bytes);
  if (ws_bytes > 0) cudaMemset(ws.data(), 0xFF, ws_bytes);  // NaN: partials must all be written
  flashpp::forward_kvcache(q.view, cache, od.view, ld.view, opt, nullptr,
                           Workspace{ws.data(), ws_bytes});
  FLASHPP_CUDA_OK(cudaDeviceSynchronize());
  download(o, od);
  download(lse, ld);
  HostTensor k_after = c.k_cache.like(), v_after = c.v_cache.like();
  download(k_after, kc);
  download(v_after, vc);
  EXPECT_EQ(test::count_nan(o), 0);
  const double limit = param.spec.dtype == DType::bf16 ? 2e-2 : 4e-3;
  EXPECT_LT(test::relative_error(o, want.o), limit) << test::worst_element(o, want.o);
  for (std::int64_t b = 0; b < param.spec.B; ++b)
    for (std::int64_t h = 0; h < param.spec.Hq; ++h)
      for (std::int64_t i = 0; i < param.spec.Nq; ++i) {
        const double w = want.lse.get(b, h, i), g = lse.get(b, h, i);
        if (std::isinf(w)) {
          EXPECT_EQ(g, w) << "b=" << b << " h=" << h << " i=" << i;
        } else {
          EXPECT_NEAR(g, w, 2e-2 * (1 + std::abs(w))) << "b=" << b << " h=" << h << " i=" << i;
        }
      }
  EXPECT_EQ(test::cache_mismatches(before, k_after, v_after), 0);
  if (o_out != nullptr) *o_out = o;
}

class DecodeVsOracle : public ::testing::TestWithParam<DecodeParam> {};

TEST_P(DecodeVsOracle, MatchesOracle) {
  FLASHPP_SKIP_WITHOUT_GPU();
  check_decode_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, DecodeVsOracle, ::testing::ValuesIn(decode_params()),
                         [](const auto& info) { return info.param.name; });

// Forced split counts (FLASHPP_DECODE_SPLITS) on both variants (FLASHPP_DECODE_VARIANT): counts
// that do not divide the tile count, more splits than tiles (empty splits: lse = -inf, weight 0),
// one key, fewer keys than a tile, paged caches of 16/64/256 rows, Nq 1 and 4, GQA groups of 4
// and 16 (several M tiles), head dims 64/128/256, masks. The same call twice gives the same bits.
struct SplitsParam {
  std::string name;
  test::KvCaseSpec spec;
  std::vector<int> splits;
};

std::vector<SplitsParam> splits_params() {
  std::vector<SplitsParam> out;
  test::KvCaseSpec base;
  base.B = 2;
  base.Hq = 32;
  base.Hkv = 8;
  base.D = 128;
  base.dtype = DType::bf16;
  base.capacity = 1100;
  base.seqlens = {1000, 1};  // 63 tiles and one key
  out.push_back({"nq1_d128", base, {1, 2, 5, 7, 33, 128}});
  test::KvCaseSpec s = base;
  s.Nq = 4;
  s.seqlens = {1, 5};  // + 3 appended rows: 4 and 8 keys, less than one 16-key tile
  s.Nnew = 3;
  s.options.causal = true;
  out.push_back({"nq4_short_append_causal", s, {1, 3, 128}});
  s = base;
  s.Nq = 4;
  s.seqlens = {777, 300};
  out.push_back({"nq4_d128", s, {3, 13, 64}});
  for (std::int64_t page : {16, 64, 256}) {
    s = base;
    s.page_size = page;
    s.capacity = 1024;
    s.seqlens = {1023, 17};
    s.Nq = page == 64 ? 4 : 1;
    out.push_back({"paged" + std::to_string(page), s, {3, 7, 128}});
  }
  for (std::int64_t D : {64, 256}) {
    s = base;
    s.D = D;
    s.dtype = DType::f16;
    s.Hq = 8;
    s.Hkv = 2;
    s.seqlens = {999, 40};
    out.push_back({"f16_d" + std::to_string(D), s, {2, 9, 128}});
  }
  s = base;
  s.Hq = 32;
  s.Hkv = 2;  // group 16 x Nq 3: 3 M tiles
  s.Nq = 3;
  s.seqlens = {500, 2};
  s.options.window_left = 100;
  s.options.causal = true;
  s.options.softcap = 30.0f;
  out.push_back({"gqa16_nq3_window_softcap", s, {4, 11, 128}});
  return out;
}

class DecodeSplits : public ::testing::TestWithParam<SplitsParam> {};

TEST_P(DecodeSplits, ForcedSplitCountsMatchOracle) {
  FLASHPP_SKIP_WITHOUT_GPU();
  const SplitsParam& param = GetParam();
  for (const char* variant : {"default", "legacy"}) {
    ScopedEnv v("FLASHPP_DECODE_VARIANT", variant);
    for (int splits : param.splits) {
      SCOPED_TRACE(std::string("FLASHPP_DECODE_VARIANT=") + variant +
                   " FLASHPP_DECODE_SPLITS=" + std::to_string(splits));
      ScopedEnv e("FLASHPP_DECODE_SPLITS", std::to_string(splits));
      HostTensor first, second;
      check_decode_case({param.name, param.spec, true}, &first);
      check_decode_case({param.name, param.spec, true}, &second);
      EXPECT_EQ(std::memcmp(first.raw(), second.raw(), first.raw_bytes()), 0)
          << "two identical calls gave different bits";
    }
  }
  // The heuristic's own choice, default variant.
  check_decode_case({param.name, param.spec, false});
}

INSTANTIATE_TEST_SUITE_P(Cases, DecodeSplits, ::testing::ValuesIn(splits_params()),
                         [](const auto& info) { return info.param.name; });

// A contiguous cache of one sequence (B = 1, no block table) on the GPU, for the workspace
// queries below; `cache` views the mirrors, which live as long as this object.
struct DeviceKvCase {
  Mirror q, k, v, seqlens;
  KvCache cache;
};
DeviceKvCase one_sequence_case(std::int64_t Hq, std::int64_t Hkv, std::int64_t D, DType dtype,
                               std::int64_t capacity, std::int32_t seqlen) {
  test::KvCaseSpec s;
  s.B = 1;
  s.Hq = Hq;
  s.Hkv = Hkv;
  s.D = D;
  s.dtype = dtype;
  s.capacity = capacity;
  s.seqlens = {seqlen};
  const test::KvCaseData c = test::make_kv_case(s);
  DeviceKvCase d{mirror(c.q), mirror(c.k_cache), mirror(c.v_cache), mirror_indices(c.seqlens), {}};
  d.cache.k_cache = d.k.view;
  d.cache.v_cache = d.v.view;
  d.cache.cache_seqlens = d.seqlens.view;
  return d;
}

// Knob values outside what the variant and split knobs take are refused with their name.
TEST(DecodeSplits, BadKnobValuesAreRefused) {
  FLASHPP_SKIP_WITHOUT_GPU();
  const DeviceKvCase d = one_sequence_case(4, 1, 64, DType::f16, 64, 40);
  for (const char* bad : {"0", "129", "x"}) {
    ScopedEnv e("FLASHPP_DECODE_SPLITS", bad);
    EXPECT_THROW(flashpp::forward_kvcache_workspace_size(d.q.view, d.cache, Options{}), Error) << bad;
  }
  ScopedEnv v("FLASHPP_DECODE_VARIANT", "fast");
  EXPECT_THROW(flashpp::forward_kvcache_workspace_size(d.q.view, d.cache, Options{}), Error);
}

// The workspace is sized for either variant, so that switching FLASHPP_DECODE_VARIANT between
// calls (with a size cached per shape, as the Python wrapper does) always finds it big enough.
TEST(DecodeSplits, WorkspaceSizeIsTheSameForBothVariants) {
  FLASHPP_SKIP_WITHOUT_GPU();
  const DeviceKvCase d = one_sequence_case(32, 8, 128, DType::bf16, 4096, 4096);
  std::size_t sizes[2];
  int n = 0;
  for (const char* variant : {"default", "legacy"}) {
    ScopedEnv v("FLASHPP_DECODE_VARIANT", variant);
    sizes[n++] = flashpp::forward_kvcache_workspace_size(d.q.view, d.cache, Options{});
  }
  EXPECT_EQ(sizes[0], sizes[1]);
  EXPECT_GT(sizes[0], 0u);  // B = 1 over 4096 keys splits on any GPU of fewer than 4096 SMs
}

// Unchecked bad indices never read or write out of bounds (the sanitizer run checks that): the
// kernels clamp lengths and treat out-of-range pages as masked.
TEST(DecodeUnchecked, BadIndicesStayInBounds) {
  FLASHPP_SKIP_WITHOUT_GPU();
  test::KvCaseSpec s;
  s.B = 2;
  s.Hq = 4;
  s.Hkv = 2;
  s.D = 64;
  s.dtype = DType::f16;
  s.page_size = 16;
  s.capacity = 64;
  s.seqlens = {40, 10};
  s.Nnew = 1;
  test::KvCaseData c = test::make_kv_case(s);
  c.block_table[0] = 1 << 20;
  c.block_table[1] = -5;
  std::vector<std::int32_t> bad_lengths = {100000, -7};
  Mirror q = mirror(c.q), kc = mirror(c.k_cache), vc = mirror(c.v_cache), kn = mirror(c.k_new),
         vn = mirror(c.v_new);
  Mirror sl = mirror_indices(bad_lengths), bt = mirror_indices(c.block_table, s.B, c.max_pages);
  KvCache cache{kc.view, vc.view, sl.view, bt.view, kn.view, vn.view, false};
  HostTensor o = c.q.like(), lse = HostTensor::lse(DType::f32, s.B, s.Hq, s.Nq);
  Mirror od = mirror(o), ld = mirror(lse);
  flashpp::forward_kvcache(q.view, cache, od.view, ld.view);
  FLASHPP_CUDA_OK(cudaDeviceSynchronize());
  cache.validate_indices = true;
  EXPECT_THROW(flashpp::forward_kvcache(q.view, cache, od.view, ld.view), Error);
}

// Varlen on CUDA: per-sequence launches, against the per-sequence oracle.
TEST(VarlenCuda, ForwardBackwardMatchOracle) {
  FLASHPP_SKIP_WITHOUT_GPU();
  for (const bool causal : {false, true}) {
    test::VarlenSpec s;
    s.lens_q = {100, 0, 1, 257, 64};
    s.lens_k = {100, 3, 1, 257, 64};
    s.Hq = 4;
    s.Hkv = 2;
    s.D = 64;
    s.dtype = DType::bf16;
    s.options.causal = causal;
    s.options.alignment = Alignment::bottom_right;
    test::VarlenData d = test::make_varlen(s);
    SCOPED_TRACE(s.describe());
    const test::VarlenExpected want = test::varlen_expected(d, true);
    HostTensor o = d.q.like(), lse = HostTensor::lse(DType::f32, 1, s.Hq, d.q.size(1));
    HostTensor dq = d.q.like(), dk = d.k.like(), dv = d.v.like();
    Mirror q = mirror(d.q), k = mirror(d.k), v = mirror(d.v), dout = mirror(d.dout);
    Mirror od = mirror(o), ld = mirror(lse), dqd = mirror(dq), dkd = mirror(dk), dvd = mirror(dv);
    Mirror cq = mirror_indices(d.cu_q), ck = mirror_indices(d.cu_k);
    PackedBatch batch{cq.view, ck.view, d.max_q, d.max_k};
    flashpp::forward_varlen(test::drop_batch(q.view), test::drop_batch(k.view),
                            test::drop_batch(v.view), batch, test::drop_batch(od.view),
                            test::drop_batch(ld.view), s.options);
    flashpp::backward_varlen(test::drop_batch(q.view), test::drop_batch(k.view),
                             test::drop_batch(v.view), test::drop_batch(od.view),
                             test::drop_batch(ld.view), test::drop_batch(dout.view),
                             test::drop_batch(dqd.view), test::drop_batch(dkd.view),
                             test::drop_batch(dvd.view), batch, s.options);
    FLASHPP_CUDA_OK(cudaDeviceSynchronize());
    download(o, od);
    download(dq, dqd);
    download(dk, dkd);
    download(dv, dvd);
    EXPECT_LT(test::relative_error(o, want.o), 2e-2) << test::worst_element(o, want.o);
    EXPECT_LT(test::relative_error(dq, want.dq), 3e-2) << test::worst_element(dq, want.dq);
    EXPECT_LT(test::relative_error(dk, want.dk), 3e-2) << test::worst_element(dk, want.dk);
    EXPECT_LT(test::relative_error(dv, want.dv), 3e-2) << test::worst_element(dv, want.dv);
  }
}

}  // namespace
}  // namespace flashpp::gpu_test
