// What every backward kernel needs, gathered once on the host and passed by value. Plain data
// only (pointers, 64-bit sizes and strides), so it is valid in host and device code alike.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "../../common/mask.hpp"
#include "row_strides.hpp"
#include "../../common/philox.hpp"
#include "tail_split.hpp"

namespace flashpp::cuda {

struct BackwardParams {
  // Inputs and outputs in storage dtype (fp16 or bf16).
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  RowStrides q_strides, k_strides, v_strides, o_strides, dout_strides;
  RowStrides dq_strides, dk_strides, dv_strides;

  // lse float32 [B, Hq, Nq], strided.
  const float* lse = nullptr;
  std::int64_t lse_stride_batch = 0, lse_stride_head = 0, lse_stride_row = 0;

  std::int64_t batch = 0, q_len = 0, k_len = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  std::int64_t heads_per_kv = 1;

  float scale = 1.0f;          // multiplies Q K^T
  float scale_log2 = 1.0f;     // scale * log2(e): exp(x * scale) = exp2(x * scale_log2)
  float softcap = 0.0f;        // 0 = off
  detail::Mask mask{};
  detail::DropoutParams dropout{};

  // Workspace (float32), laid out by workspace_layout() in backward_workspace.hpp:
  //   delta    [B*Hq, rows_padded]   D_i = rowsum(dO_i * O_i); 0 on padding rows
  //   lse_log2 [B*Hq, rows_padded]   lse_i * log2(e); +inf where lse = -inf or on padding rows,
  //                                  so that P = exp2(s - lse_log2) is exactly 0 there
  //   dq_accum [B*Hq, rows_padded, accum_width]   sum_j dS_ij K_j (unscaled), atomics target
  float* delta = nullptr;
  float* lse_log2 = nullptr;
  float* dq_accum = nullptr;
  //   dq_turns [B*Hq, rows_padded / 64] int32, zeroed: the sm90 deterministic mode's count of dQ
  //            additions done into each 64-row query tile (backward_workspace.hpp kSemaphoreRows)
  int* dq_turns = nullptr;
  std::int64_t rows_padded = 0;
  int accum_width = 0;
  // dq_accum's blocks hold dQ^T fragments (common/dq_accum.cuh, dq_accum_t_block): set by a main
  // kernel that computes dQ^T = K^T dS^T (the sm90 backward at D=64), read by the postprocess.
  bool dq_accum_transposed = false;
  //   split partials [split_capacity][dV, dK][key rows][accum_width]: float32 sums of the main
  //   kernel's split units (tail_split.hpp, split_unit.cuh); the preprocess zeroes those that
  //   `split` cuts, the postprocess writes them out
  float* split_partials = nullptr;
  std::int64_t split_capacity = 0;
  TailSplit split{};  // set by each family's launch (sm80 prepare_main, sm90 plan_backward_split)
                      // with split_unit_rows (below)

  // Launch order of the main kernel's (key tile, kv head) items: common/block_order.cuh.
  std::int64_t heads_per_group = 1;
  // The sm90 main kernel's first key tile at head dims up to 128: it launches only the key tiles
  // that some query sees (sm90/backward/launch.cuh; the wide kernel launches all and ignores
  // this); launch_zero_key_rows writes dK = dV = 0 on the others.
  std::int64_t key_tile_offset = 0;

  // Main kernel on sm90: q and dout tiles through the bulk copy engine (ptx/tma.cuh), with
  // these maps (boxes of one query tile x 64 columns); false: cp.async by every thread.
  bool use_tma = false;
  // Key rows of a split unit (the main kernel's key tile: 128 or 64 in the sm80 family, 192 or
  // 128 in the sm90 one), which the postprocess writes out; set with `split`. (Here, in the
  // padding before the maps, so that no other field moves: the kernels that read them keep
  // their code.)
  int split_unit_rows = 0;
  CUtensorMap q_map{}, dout_map{};
};

}  // namespace flashpp::cuda
