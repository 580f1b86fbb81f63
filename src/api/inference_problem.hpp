// The validated KV-cache problem handed to a backend (src/api/inference.cpp builds it).
#pragma once

#include <cstdint>

#include "problem.hpp"

namespace flashpp::detail {

struct KvCacheArgs {
  // B, Nq, Hq, Hkv, D, dtype, device, scale, softcap as for forward(). Nk is the capacity of
  // one sequence (keys it can hold); mask.left/right hold the window, mask.shift is unused:
  // every sequence aligns bottom-right with its own length (shift_b = Nk_b - Nq).
  Problem problem;
  TensorView q, o, lse;  // lse.data == nullptr when write_lse is false
  bool write_lse = true;
  TensorView k_cache, v_cache;  // [B, capacity, Hkv, D] or [num_pages, page_size, Hkv, D]
  TensorView cache_seqlens;     // int32 [B]
  TensorView block_table;       // int32 [B, max_pages], or empty (contiguous)
  TensorView k_new, v_new;      // [B, Nnew, Hkv, D] or empty
  bool paged = false;
  std::int64_t page_size = 0;   // paged: rows per page; contiguous: the capacity
  std::int64_t num_pages = 0;   // paged: pages in k_cache; contiguous: B
  std::int64_t max_pages = 0;   // paged: block_table's second size; contiguous: 1
  std::int64_t Nnew = 0;        // rows appended per sequence (0 without k_new)
  // Whether the index contents were checked on the host (then `host_seqlens` holds them while
  // the call runs, else nullptr and the kernels must clamp).
  bool indices_checked = false;
  const std::int32_t* host_seqlens = nullptr;
  void* stream = nullptr;
  Workspace workspace{};
};

}  // namespace flashpp::detail
