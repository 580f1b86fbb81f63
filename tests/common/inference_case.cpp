#include "inference_case.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "random.hpp"

namespace flashpp::test {

TensorView index_view(const std::vector<std::int32_t>& v, Device device) {
  TensorView t;
  t.data = const_cast<std::int32_t*>(v.data());
  t.dtype = DType::i32;
  t.device = device;
  t.rank = 1;
  t.sizes[0] = static_cast<std::int64_t>(v.size());
  t.strides[0] = 1;
  return t;
}

TensorView index_view(const std::vector<std::int32_t>& v, std::int64_t rows, std::int64_t cols,
                      Device device) {
  TensorView t = index_view(v, device);
  t.rank = 2;
  t.sizes[0] = rows;
  t.sizes[1] = cols;
  t.strides[0] = cols;
  t.strides[1] = 1;
  return t;
}

TensorView drop_batch(const TensorView& t) {
  TensorView r = t;
  r.rank = t.rank - 1;
  for (int i = 0; i < r.rank; ++i) {
    r.sizes[i] = t.sizes[i + 1];
    r.strides[i] = t.strides[i + 1];
  }
  r.sizes[r.rank] = 0;
  r.strides[r.rank] = 0;
  return r;
}

namespace {
std::string options_text(const Options& o) {
  std::ostringstream s;
  s << (o.causal ? " causal" : "") << " window=(" << o.window_left << "," << o.window_right
    << ")" << (o.softcap > 0 ? " softcap=" + std::to_string(o.softcap) : "");
  return s.str();
}
}  // namespace

std::string KvCaseSpec::describe() const {
  std::ostringstream s;
  s << "B=" << B << " Nq=" << Nq << " Hq=" << Hq << " Hkv=" << Hkv << " D=" << D
    << " Nnew=" << Nnew << " page=" << page_size << " capacity=" << capacity << " "
    << to_string(dtype) << options_text(options) << " seqlens=";
  for (auto l : seqlens) s << l << ",";
  s << " seed=" << seed;
  return s.str();
}

std::int64_t KvCaseData::capacity() const { return paged() ? max_pages * spec.page_size : spec.capacity; }

std::int64_t KvCaseData::page_of(std::int64_t b, std::int64_t j) const {
  return paged() ? block_table[static_cast<std::size_t>(b * max_pages + j / spec.page_size)] : b;
}
std::int64_t KvCaseData::row_of(std::int64_t j) const { return paged() ? j % spec.page_size : j; }

double KvCaseData::key(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t d) const {
  const std::int64_t L = seqlens[static_cast<std::size_t>(b)];
  return j < L ? k_cache.get(page_of(b, j), row_of(j), h, d) : k_new.get(b, j - L, h, d);
}
double KvCaseData::value(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t d) const {
  const std::int64_t L = seqlens[static_cast<std::size_t>(b)];
  return j < L ? v_cache.get(page_of(b, j), row_of(j), h, d) : v_new.get(b, j - L, h, d);
}

KvCache KvCaseData::host_cache() {
  KvCache c;
  c.k_cache = k_cache.view();
  c.v_cache = v_cache.view();
  c.cache_seqlens = index_view(seqlens);
  if (paged()) c.block_table = index_view(block_table, spec.B, max_pages);
  if (spec.Nnew > 0) {
    c.k_new = k_new.view();
    c.v_new = v_new.view();
  }
  return c;
}

KvCaseData make_kv_case(const KvCaseSpec& spec) {
  KvCaseData c;
  c.spec = spec;
  c.seqlens = spec.seqlens;
  c.seqlens.resize(static_cast<std::size_t>(spec.B), 0);
  c.q = HostTensor::attention(spec.dtype, spec.B, spec.Nq, spec.Hq, spec.D, Layout::bnhd);
  c.q.fill_normal(derive_seed(spec.seed, 0));
  if (spec.page_size > 0) {
    c.max_pages = (spec.capacity + spec.page_size - 1) / spec.page_size;
    c.num_pages = spec.B * c.max_pages + 1;  // one page no sequence uses
    std::vector<std::int32_t> pages(static_cast<std::size_t>(c.num_pages));
    std::iota(pages.begin(), pages.end(), 0);
    SplitMix64 rng(derive_seed(spec.seed, 5));
    for (std::size_t i = pages.size(); i > 1; --i) std::swap(pages[i - 1], pages[rng.below(i)]);
    c.block_table.assign(static_cast<std::size_t>(spec.B * c.max_pages), -1);
    std::size_t next = 0;
    for (std::int64_t b = 0; b < spec.B; ++b) {
      const std::int64_t used =
          (c.seqlens[static_cast<std::size_t>(b)] + spec.Nnew + spec.page_size - 1) /
          spec.page_size;
      for (std::int64_t p = 0; p < used; ++p) {
        c.block_table[static_cast<std::size_t>(b * c.max_pages + p)] = pages[next++];
      }
    }
    c.k_cache = HostTensor::attention(spec.dtype, c.num_pages, spec.page_size, spec.Hkv, spec.D,
                                      Layout::bnhd);
  } else {
    c.max_pages = 1;
    c.num_pages = spec.B;
    c.k_cache = HostTensor::attention(spec.dtype, spec.B, spec.capacity, spec.Hkv, spec.D,
                                      Layout::bnhd);
  }
  c.v_cache = c.k_cache.like();
  c.k_cache.fill_normal(derive_seed(spec.seed, 1));
  c.v_cache.fill_normal(derive_seed(spec.seed, 2));
  if (spec.Nnew > 0) {
    c.k_new = HostTensor::attention(spec.dtype, spec.B, spec.Nnew, spec.Hkv, spec.D, Layout::bnhd);
    c.v_new = c.k_new.like();
    c.k_new.fill_normal(derive_seed(spec.seed, 3));
    c.v_new.fill_normal(derive_seed(spec.seed, 4));
  }
  return c;
}

KvExpected kv_expected(const KvCaseData& c) {
  const KvCaseSpec& s = c.spec;
  KvExpected e;
  e.o = HostTensor::attention(DType::f64, s.B, s.Nq, s.Hq, s.D, Layout::bnhd);
  e.lse = HostTensor::lse(DType::f64, s.B, s.Hq, s.Nq);
  for (std::int64_t b = 0; b < s.B; ++b) {
    const std::int64_t nk = c.seqlens[static_cast<std::size_t>(b)] + s.Nnew;
    HostTensor q = HostTensor::attention(DType::f64, 1, s.Nq, s.Hq, s.D, Layout::bnhd);
    HostTensor k = HostTensor::attention(DType::f64, 1, nk, s.Hkv, s.D, Layout::bnhd);
    HostTensor v = k.like();
    for (std::int64_t i = 0; i < s.Nq; ++i)
      for (std::int64_t h = 0; h < s.Hq; ++h)
        for (std::int64_t d = 0; d < s.D; ++d) q.set(0, i, h, d, c.q.get(b, i, h, d));
    for (std::int64_t j = 0; j < nk; ++j)
      for (std::int64_t h = 0; h < s.Hkv; ++h)
        for (std::int64_t d = 0; d < s.D; ++d) {
          k.set(0, j, h, d, c.key(b, j, h, d));
          v.set(0, j, h, d, c.value(b, j, h, d));
        }
    HostTensor o = q.like(), lse = HostTensor::lse(DType::f64, 1, s.Hq, s.Nq);
    Options opt = s.options;
    opt.alignment = Alignment::bottom_right;
    opt.backend = Backend::cpu_reference;
    opt.write_lse = true;
    flashpp::forward(q.view(), k.view(), v.view(), o.view(), lse.view(), opt);
    for (std::int64_t i = 0; i < s.Nq; ++i)
      for (std::int64_t h = 0; h < s.Hq; ++h) {
        e.lse.set(b, h, i, 0, lse.get(0, h, i));
        for (std::int64_t d = 0; d < s.D; ++d) e.o.set(b, i, h, d, o.get(0, i, h, d));
      }
  }
  return e;
}

std::int64_t cache_mismatches(const KvCaseData& before, const HostTensor& k_after,
                              const HostTensor& v_after) {
  const KvCaseSpec& s = before.spec;
  HostTensor k_want = before.k_cache.converted(before.k_cache.dtype());
  HostTensor v_want = before.v_cache.converted(before.v_cache.dtype());
  for (std::int64_t b = 0; b < s.B; ++b) {
    const std::int64_t L = before.seqlens[static_cast<std::size_t>(b)];
    for (std::int64_t t = 0; t < s.Nnew; ++t)
      for (std::int64_t h = 0; h < s.Hkv; ++h)
        for (std::int64_t d = 0; d < s.D; ++d) {
          const std::int64_t page = before.page_of(b, L + t), row = before.row_of(L + t);
          k_want.set(page, row, h, d, before.k_new.get(b, t, h, d));
          v_want.set(page, row, h, d, before.v_new.get(b, t, h, d));
        }
  }
  std::int64_t bad = 0;
  const auto a1 = k_after.values(), w1 = k_want.values();
  const auto a2 = v_after.values(), w2 = v_want.values();
  for (std::size_t i = 0; i < a1.size(); ++i) bad += !(a1[i] == w1[i]);
  for (std::size_t i = 0; i < a2.size(); ++i) bad += !(a2[i] == w2[i]);
  return bad;
}

// ---- varlen ---------------------------------------------------------------------------------
std::string VarlenSpec::describe() const {
  std::ostringstream s;
  s << "lens_q=";
  for (auto l : lens_q) s << l << ",";
  s << " lens_k=";
  for (auto l : lens_k) s << l << ",";
  s << " Hq=" << Hq << " Hkv=" << Hkv << " D=" << D << " extra=" << extra_rows << " "
    << to_string(dtype) << options_text(options)
    << (options.alignment == Alignment::bottom_right ? " bottom_right" : "") << " seed=" << seed;
  return s.str();
}

PackedBatch VarlenData::batch() {
  PackedBatch b;
  b.cu_seqlens_q = index_view(cu_q);
  b.cu_seqlens_k = index_view(cu_k);
  b.max_seqlen_q = max_q;
  b.max_seqlen_k = max_k;
  return b;
}

VarlenData make_varlen(const VarlenSpec& spec) {
  VarlenData d;
  d.spec = spec;
  d.cu_q.assign(1, 0);
  d.cu_k.assign(1, 0);
  for (std::size_t b = 0; b < spec.lens_q.size(); ++b) {
    d.cu_q.push_back(d.cu_q.back() + spec.lens_q[b]);
    d.cu_k.push_back(d.cu_k.back() + spec.lens_k[b]);
    d.max_q = std::max<std::int64_t>(d.max_q, spec.lens_q[b]);
    d.max_k = std::max<std::int64_t>(d.max_k, spec.lens_k[b]);
  }
  const std::int64_t total_q = d.cu_q.back() + spec.extra_rows;
  const std::int64_t total_k = d.cu_k.back() + spec.extra_rows;
  d.q = HostTensor::attention(spec.dtype, 1, total_q, spec.Hq, spec.D, Layout::bnhd);
  d.k = HostTensor::attention(spec.dtype, 1, total_k, spec.Hkv, spec.D, Layout::bnhd);
  d.v = d.k.like();
  d.dout = d.q.like();
  d.q.fill_normal(derive_seed(spec.seed, 0));
  d.k.fill_normal(derive_seed(spec.seed, 1));
  d.v.fill_normal(derive_seed(spec.seed, 2));
  d.dout.fill_normal(derive_seed(spec.seed, 3));
  return d;
}

namespace {
// Rows [start, start + len) of a [1, N, H, D] tensor as a float64 [1, len, H, D] tensor.
HostTensor slice_rows(const HostTensor& t, std::int64_t start, std::int64_t len) {
  HostTensor r = HostTensor::attention(DType::f64, 1, len, t.size(2), t.size(3), Layout::bnhd);
  for (std::int64_t i = 0; i < len; ++i)
    for (std::int64_t h = 0; h < t.size(2); ++h)
      for (std::int64_t d = 0; d < t.size(3); ++d) r.set(0, i, h, d, t.get(0, start + i, h, d));
  return r;
}
void put_rows(HostTensor& dst, const HostTensor& src, std::int64_t start) {
  for (std::int64_t i = 0; i < src.size(1); ++i)
    for (std::int64_t h = 0; h < src.size(2); ++h)
      for (std::int64_t d = 0; d < src.size(3); ++d)
        dst.set(0, start + i, h, d, src.get(0, i, h, d));
}
}  // namespace

VarlenExpected varlen_expected(const VarlenData& dat, bool with_backward) {
  const VarlenSpec& s = dat.spec;
  VarlenExpected e;
  e.o = HostTensor::attention(DType::f64, 1, dat.q.size(1), s.Hq, s.D, Layout::bnhd);
  e.dq = e.o.like();
  e.dk = HostTensor::attention(DType::f64, 1, dat.k.size(1), s.Hkv, s.D, Layout::bnhd);
  e.dv = e.dk.like();
  e.lse = HostTensor::lse(DType::f64, 1, s.Hq, dat.q.size(1));
  // Rows past the last sequence are not written by the call: zero here as in the tests.
  for (HostTensor* t : {&e.o, &e.dq, &e.dk, &e.dv, &e.lse}) t->fill(0.0);
  for (std::size_t b = 0; b + 1 < dat.cu_q.size(); ++b) {
    const std::int64_t q0 = dat.cu_q[b], lq = dat.cu_q[b + 1] - q0;
    const std::int64_t k0 = dat.cu_k[b], lk = dat.cu_k[b + 1] - k0;
    HostTensor q = slice_rows(dat.q, q0, lq), k = slice_rows(dat.k, k0, lk),
               v = slice_rows(dat.v, k0, lk), dout = slice_rows(dat.dout, q0, lq);
    HostTensor o = q.like(), lse = HostTensor::lse(DType::f64, 1, s.Hq, lq);
    Options opt = s.options;
    opt.backend = Backend::cpu_reference;
    opt.write_lse = true;
    flashpp::forward(q.view(), k.view(), v.view(), o.view(), lse.view(), opt);
    put_rows(e.o, o, q0);
    for (std::int64_t h = 0; h < s.Hq; ++h)
      for (std::int64_t i = 0; i < lq; ++i) e.lse.set(0, h, q0 + i, 0, lse.get(0, h, i));
    if (with_backward) {
      HostTensor dq = q.like(), dk = k.like(), dv = v.like();
      flashpp::backward(q.view(), k.view(), v.view(), o.view(), lse.view(), dout.view(),
                        dq.view(), dk.view(), dv.view(), opt);
      put_rows(e.dq, dq, q0);
      put_rows(e.dk, dk, k0);
      put_rows(e.dv, dv, k0);
    }
  }
  return e;
}

}  // namespace flashpp::test
