// Definitions of the launchers declared in launch.hpp; included only by instances/*.cu.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/block_order.cuh"
#include "../common/check_cuda.hpp"
#include "../common/tensor_map.hpp"
#include "dq_kernel.cuh"
#include "launch.hpp"
#include "main_kernel.cuh"

namespace flashpp::cuda::bwd {

template <typename Element, int kHeadDim>
void launch_main(const BackwardParams& p, bool accumulate_dq, cudaStream_t stream) {
  using Shape = MainKernelShape<Element, kHeadDim>;
  const std::int64_t blocks =
      (p.k_len + Shape::kKeyRows - 1) / Shape::kKeyRows * p.kv_heads * p.batch;
  if (blocks == 0) return;
  const bool extras = p.softcap > 0.0f || p.dropout.threshold != 0;
  auto* kernel = extras ? &bwd_main_kernel<Element, kHeadDim, true>
                        : &bwd_main_kernel<Element, kHeadDim, false>;
  // Above 48 KB a block must opt in to more dynamic shared memory.
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Shape::kSmemBytes),
             "backward main kernel shared-memory opt-in");
  BackwardParams launch_params = p;
  const std::int64_t key_tiles = (p.k_len + Shape::kKeyRows - 1) / Shape::kKeyRows;
  // Occupancy is only asked for where the order matters (a mask makes tile costs unequal).
  launch_params.heads_per_group =
      FLASHPP_BLOCK_ORDER && p.mask.active()
          ? heads_per_group(true, key_tiles, p.kv_heads * p.batch,
                            resident_blocks(kernel, Shape::kThreads, Shape::kSmemBytes))
          : 1;
  // Bulk copies of the query-side tiles where the GPU has them and the tiles are 64-column panels
  // (the sm80 code, where it runs on such a GPU, ignores the flag).
  launch_params.use_tma = false;
  if constexpr (Shape::QTile::kPanelChunks == 8) {
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    constexpr DType kDType = std::is_same_v<Element, __half> ? DType::f16 : DType::bf16;
    launch_params.use_tma =
        FLASHPP_BWD_TMA && device_has_tma(device) &&
        make_row_tile_map(&launch_params.q_map, p.q, kDType, p.batch, p.q_len, p.q_heads,
                          p.head_dim, p.q_strides.batch, p.q_strides.row, p.q_strides.head,
                          Shape::kQueryRows) &&
        make_row_tile_map(&launch_params.dout_map, p.dout, kDType, p.batch, p.q_len, p.q_heads,
                          p.head_dim, p.dout_strides.batch, p.dout_strides.row,
                          p.dout_strides.head, Shape::kQueryRows);
  }
  kernel<<<static_cast<unsigned>(blocks), Shape::kThreads, Shape::kSmemBytes, stream>>>(
      launch_params, accumulate_dq);
  check_launch("backward main kernel launch");
}

template <typename Element, int kHeadDim>
void launch_dq(const BackwardParams& p, cudaStream_t stream) {
  using Shape = DqKernelShape<Element, kHeadDim>;
  const std::int64_t blocks =
      (p.q_len + Shape::kQueryRows - 1) / Shape::kQueryRows * p.q_heads * p.batch;
  if (blocks == 0) return;
  auto* kernel = &bwd_dq_kernel<Element, kHeadDim>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Shape::kSmemBytes),
             "backward dq kernel shared-memory opt-in");
  kernel<<<static_cast<unsigned>(blocks), Shape::kThreads, Shape::kSmemBytes, stream>>>(p);
  check_launch("backward dq kernel launch");
}

}  // namespace flashpp::cuda::bwd
