// KV-cache decoding on the CPU: append the new keys/values into the cache (through the block
// table when paged), then run the reference or the tiled forward once per sequence over the
// keys it holds, with the causal mask and window aligned bottom-right to its own length. A
// contiguous cache is read in place; a paged one is gathered row by row into a scratch buffer
// first (decoding on the CPU is for tests and small models; clarity wins here).
#include <cstring>
#include <vector>

#include "cpu_backend.hpp"

namespace flashpp::cpu {
namespace {

using detail::KvCacheArgs;

std::int64_t bytes_of(const TensorView& t) { return static_cast<std::int64_t>(element_size(t.dtype)); }

// Address of row `row` (key position) of head `h` of sequence b in a cache view.
char* cache_row(const KvCacheArgs& a, const TensorView& cache, const std::int32_t* table,
                std::int64_t b, std::int64_t row, std::int64_t h) {
  std::int64_t page = b, in_page = row;
  if (a.paged) {
    page = table[b * a.max_pages + row / a.page_size];
    in_page = row % a.page_size;
  }
  return static_cast<char*>(cache.data) +
         (page * cache.strides[0] + in_page * cache.strides[1] + h * cache.strides[2]) *
             bytes_of(cache);
}

}  // namespace

void forward_kvcache(const KvCacheArgs& a, bool reference) {
  const detail::Problem& p = a.problem;
  if (a.host_seqlens == nullptr) {
    throw Error(ErrorCode::internal, "flashpp::forward_kvcache: cpu: lengths not on the host");
  }
  // The block table as a dense host array (CPU tensors: read through their strides).
  std::vector<std::int32_t> table;
  if (a.paged) {
    table.resize(static_cast<std::size_t>(p.B * a.max_pages));
    const auto* src = static_cast<const std::int32_t*>(a.block_table.data);
    for (std::int64_t b = 0; b < p.B; ++b) {
      for (std::int64_t j = 0; j < a.max_pages; ++j) {
        table[static_cast<std::size_t>(b * a.max_pages + j)] =
            src[b * a.block_table.strides[0] + j * a.block_table.strides[1]];
      }
    }
  }
  const std::int64_t row_bytes = p.D * bytes_of(a.k_cache);
  // 1. Append.
  for (std::int64_t b = 0; b < p.B; ++b) {
    const std::int64_t start = a.host_seqlens[b];
    for (std::int64_t t = 0; t < a.Nnew; ++t) {
      for (std::int64_t h = 0; h < p.Hkv; ++h) {
        const auto* kn = static_cast<const char*>(a.k_new.data) +
                         detail::offset4(a.k_new, b, t, h, 0) * bytes_of(a.k_new);
        const auto* vn = static_cast<const char*>(a.v_new.data) +
                         detail::offset4(a.v_new, b, t, h, 0) * bytes_of(a.v_new);
        std::memmove(cache_row(a, a.k_cache, table.data(), b, start + t, h), kn,
                     static_cast<std::size_t>(row_bytes));
        std::memmove(cache_row(a, a.v_cache, table.data(), b, start + t, h), vn,
                     static_cast<std::size_t>(row_bytes));
      }
    }
  }
  // 2. Attention, one sequence at a time.
  std::vector<char> gathered_k, gathered_v;
  for (std::int64_t b = 0; b < p.B; ++b) {
    const std::int64_t nk = a.host_seqlens[b] + a.Nnew;
    detail::ForwardArgs f;
    f.problem = p;
    f.problem.B = 1;
    f.problem.Nk = nk;
    f.problem.mask.shift = nk - p.Nq;
    auto batch_view = [b](const TensorView& t) {
      TensorView r = t;
      r.data = static_cast<char*>(t.data) + b * t.strides[0] * bytes_of(t);
      r.sizes[0] = 1;
      return r;
    };
    f.q = batch_view(a.q);
    f.o = batch_view(a.o);
    f.write_lse = a.write_lse;
    if (a.write_lse) f.lse = batch_view(a.lse);
    if (!a.paged) {
      f.k = batch_view(a.k_cache);
      f.v = batch_view(a.v_cache);
      f.k.sizes[1] = f.v.sizes[1] = nk;
    } else {
      const std::size_t bytes = static_cast<std::size_t>(nk * p.Hkv * row_bytes);
      gathered_k.resize(bytes > 0 ? bytes : 1);
      gathered_v.resize(bytes > 0 ? bytes : 1);
      for (std::int64_t j = 0; j < nk; ++j) {
        for (std::int64_t h = 0; h < p.Hkv; ++h) {
          const std::size_t at = static_cast<std::size_t>((j * p.Hkv + h) * row_bytes);
          std::memcpy(gathered_k.data() + at, cache_row(a, a.k_cache, table.data(), b, j, h),
                      static_cast<std::size_t>(row_bytes));
          std::memcpy(gathered_v.data() + at, cache_row(a, a.v_cache, table.data(), b, j, h),
                      static_cast<std::size_t>(row_bytes));
        }
      }
      f.k = make_bnhd(gathered_k.data(), a.k_cache.dtype, 1, nk, p.Hkv, p.D, a.k_cache.device);
      f.v = make_bnhd(gathered_v.data(), a.v_cache.dtype, 1, nk, p.Hkv, p.D, a.v_cache.device);
    }
    if (p.Nq == 0 || p.Hq == 0) continue;
    if (reference) {
      reference_forward(f);
    } else {
      flash_forward(f);
    }
  }
}

}  // namespace flashpp::cpu
