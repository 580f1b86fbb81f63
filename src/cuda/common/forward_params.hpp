// Everything a forward kernel reads (every family: sm80, sm90), flattened from detail::ForwardArgs
// on the host: raw pointers, 64-bit element strides, the visibility rule and the dropout parameters.
#pragma once

#include <cstdint>

#include "../../common/mask.hpp"
#include "../../common/philox.hpp"
#include "row_strides.hpp"

namespace flashpp::cuda {

struct ForwardParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // nullptr: lse not requested

  // Element strides of [B, N, H, *] (the last dimension is contiguous) and of lse [B, H, N]
  // (the names are the backward's: backward_params.hpp).
  RowStrides q_strides, k_strides, v_strides, o_strides;
  std::int64_t lse_stride_batch = 0, lse_stride_head = 0, lse_stride_row = 0;

  std::int64_t q_len = 0, k_len = 0;
  std::int64_t q_heads = 0;
  std::int64_t heads_per_kv = 1;  // query head h reads kv head h / heads_per_kv
  int head_dim = 0;               // the true D (<= the instantiated one; a multiple of 8)

  float scale = 1.0f;       // softmax scale
  float scale_log2 = 1.0f;  // scale * log2(e): folded into the exp2 of the softmax
  float softcap = 0.0f;     // 0 = off

  detail::Mask mask{};
  detail::DropoutParams dropout{};

  // FP8 (e4m3) inputs only: float32 descale factors per (batch, kv head) (nullptr: 1), element
  // strides of their [B, Hkv] views.
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  std::int64_t q_descale_strides[2] = {0, 0};
  std::int64_t k_descale_strides[2] = {0, 0};
  std::int64_t v_descale_strides[2] = {0, 0};

  // The (batch * head) index of blockIdx.y == 0 (sm80 launches are split when B*Hq > 65535).
  std::int64_t bh_offset = 0;
  // Launch order of (query tile, head) items: common/block_order.cuh (block_item; with
  // last_tiles_first, last_tiles_first_item instead: the sm90 forward's stride walk only).
  std::int64_t heads_per_group = 1;
  bool last_tiles_first = false;
};

}  // namespace flashpp::cuda
