// Parameters of the decode kernels (split-KV attention of a few queries over a KV cache).
#pragma once

#include <cstdint>

namespace flashpp::cuda::decode {

struct DecodeParams {
  // q, o: [B, Nq, Hq, D]; lse: float32 [B, Hq, Nq] (nullptr: not written).
  const void* q = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  std::int64_t q_stride[3] = {0, 0, 0};
  std::int64_t o_stride[3] = {0, 0, 0};
  std::int64_t lse_stride[3] = {0, 0, 0};
  // The cache: [pages, rows per page, Hkv, D]; a contiguous cache is B "pages" of `capacity`
  // rows (page of sequence b = b).
  const void* k = nullptr;
  const void* v = nullptr;
  std::int64_t k_stride[3] = {0, 0, 0};
  std::int64_t v_stride[3] = {0, 0, 0};
  const std::int32_t* seqlens = nullptr;      // [B]
  const std::int32_t* block_table = nullptr;  // [B, max_pages] or nullptr (contiguous)
  std::int64_t table_stride[2] = {0, 0};
  std::int64_t seqlens_stride = 1;
  int page_size = 0;  // rows per page (a multiple of 16 when paged)
  int num_pages = 0;
  int capacity = 0;   // keys a sequence can hold
  int Nnew = 0;       // rows appended this call (attended to as well)
  int B = 0, Nq = 0, Hq = 0, Hkv = 0, group = 1;
  int m_tiles = 1;    // ceil(group * Nq / 16)
  int splits = 1;
  float scale_log2 = 1.0f;  // softmax scale * log2(e) (no softcap)
  float scale = 1.0f;       // softmax scale (softcap path)
  float softcap = 0.0f;
  bool masked = false;  // a causal mask or window is in play
  std::int64_t window_left = 0, window_right = 0;
  // Split-KV partial results (splits > 1): o [splits, B, Hq, Nq, D] and natural-log lse
  // [splits, B, Hq, Nq], float32.
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
  // Host-side choices (launch_decode): the combine kernel of the default variant (one block per
  // row, every partial in flight at once) or the legacy one (one warp per row, splits in turn);
  // whether the combine may be launched as a programmatic dependent of the decode kernel (sm90+
  // devices; launch_decode also checks that the kernel's code has the grid dependency wait).
  bool legacy_combine = false;
  bool dependent_launch = false;
};

// The appended rows: k_new/v_new [B, Nnew, Hkv, D] written into the cache at seqlens[b].
struct AppendParams {
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  std::int64_t k_new_stride[3] = {0, 0, 0};
  std::int64_t v_new_stride[3] = {0, 0, 0};
  void* k = nullptr;
  void* v = nullptr;
  std::int64_t k_stride[3] = {0, 0, 0};
  std::int64_t v_stride[3] = {0, 0, 0};
  const std::int32_t* seqlens = nullptr;
  std::int64_t seqlens_stride = 1;
  const std::int32_t* block_table = nullptr;
  std::int64_t table_stride[2] = {0, 0};
  int page_size = 0, num_pages = 0, capacity = 0;
  int B = 0, Nnew = 0, Hkv = 0, D = 0;
};

}  // namespace flashpp::cuda::decode
