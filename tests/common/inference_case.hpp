// Test cases for the inference entry points: KV-cache decoding (contiguous or paged cache,
// with or without append) and packed variable-length batches. The expected results come from
// the float64 oracle (Backend::cpu_reference of flashpp::forward/backward) run on each
// sequence's own dense tensors, gathered here independently of the code under test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashpp/flashpp.hpp"
#include "host_tensor.hpp"

namespace flashpp::test {

// A view of a std::vector<int32_t> as an int32 [n] (or [rows, cols]) tensor.
TensorView index_view(const std::vector<std::int32_t>& v, Device device = {});
TensorView index_view(const std::vector<std::int32_t>& v, std::int64_t rows, std::int64_t cols,
                      Device device = {});
// A [1, ...] view without its leading dimension (rank 4 -> 3, rank 3 -> 2).
TensorView drop_batch(const TensorView& t);

// ---- KV cache -------------------------------------------------------------------------------
struct KvCaseSpec {
  std::int64_t B = 2, Nq = 1, Hq = 4, Hkv = 2, D = 16;
  std::vector<std::int32_t> seqlens;  // keys in the cache before the call, per sequence
  std::int64_t Nnew = 0;              // rows appended (k_new/v_new) per sequence
  std::int64_t page_size = 0;         // 0: a contiguous cache
  std::int64_t capacity = 64;         // keys a sequence can hold (paged: rounded up to pages)
  DType dtype = DType::f32;
  Options options{};
  std::uint64_t seed = 1;
  std::string describe() const;
};

struct KvCaseData {
  KvCaseSpec spec;
  HostTensor q, k_cache, v_cache, k_new, v_new;  // k_new/v_new empty when Nnew == 0
  std::vector<std::int32_t> seqlens;
  std::vector<std::int32_t> block_table;  // [B, max_pages]; unused entries are -1
  std::int64_t max_pages = 0, num_pages = 0;

  bool paged() const { return spec.page_size > 0; }
  std::int64_t capacity() const;
  // (page, row in page) of key j of sequence b.
  std::int64_t page_of(std::int64_t b, std::int64_t j) const;
  std::int64_t row_of(std::int64_t j) const;
  // The key/value the call should attend to at position j of sequence b (the cache before j <
  // seqlens[b], the appended rows after).
  double key(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t d) const;
  double value(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t d) const;
  // The flashpp::KvCache of host buffers.
  KvCache host_cache();
};

KvCaseData make_kv_case(const KvCaseSpec& spec);

struct KvExpected {
  HostTensor o, lse;  // float64 [B, Nq, Hq, D] and [B, Hq, Nq]
};
KvExpected kv_expected(const KvCaseData& c);

// Number of cache elements that differ from what the call should have left: the appended rows
// equal k_new/v_new, every other element unchanged from `before`.
std::int64_t cache_mismatches(const KvCaseData& before, const HostTensor& k_after,
                              const HostTensor& v_after);

// ---- varlen ---------------------------------------------------------------------------------
struct VarlenSpec {
  std::vector<std::int32_t> lens_q, lens_k;
  std::int64_t Hq = 4, Hkv = 2, D = 16;
  std::int64_t extra_rows = 0;  // rows past the last sequence in every packed tensor
  DType dtype = DType::f32;
  Options options{};
  std::uint64_t seed = 1;
  std::string describe() const;
};

struct VarlenData {
  VarlenSpec spec;
  HostTensor q, k, v, dout;  // [1, total, H, D]; view through drop_batch()
  std::vector<std::int32_t> cu_q, cu_k;
  std::int64_t max_q = 0, max_k = 0;
  PackedBatch batch();  // host views of cu_q / cu_k
};

VarlenData make_varlen(const VarlenSpec& spec);

struct VarlenExpected {
  HostTensor o, lse, dq, dk, dv;  // float64; lse [1, Hq, total_q]
};
// Per sequence: the oracle's forward (and backward when asked) on dense copies.
VarlenExpected varlen_expected(const VarlenData& d, bool with_backward);

}  // namespace flashpp::test
