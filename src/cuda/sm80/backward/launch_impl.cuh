// Definitions of the launchers declared in launch.hpp; included only by the instance files
// (src/cuda/instances.cmake).
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "../../common/block_order.cuh"
#include "../../common/check_cuda.hpp"
#include "../../common/tensor_map.hpp"
#include "dq_kernel.cuh"
#include "launch.hpp"
#include "main_kernel.cuh"

namespace flashpp::cuda::sm80 {

// The main kernel's instantiation for p: kExtras (softcap, dropout) or the plain one.
template <typename Element, int kHeadDim>
auto main_kernel_for(const BackwardParams& p) {
  const bool extras = p.softcap > 0.0f || p.dropout.threshold != 0;
  return extras ? &bwd_main_kernel<Element, kHeadDim, true>
                : &bwd_main_kernel<Element, kHeadDim, false>;
}

// Blocks of the main kernel resident on the current device at once, asked once per device and
// instantiation (the occupancy query costs more host time than the rest of a launch).
template <typename Element, int kHeadDim>
std::int64_t main_kernel_slots(const BackwardParams& p) {
  using Shape = MainKernelShape<Element, kHeadDim>;
  constexpr int kMaxDevices = 64;
  static std::atomic<std::int64_t> cache[2][kMaxDevices] = {};
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  auto* kernel = main_kernel_for<Element, kHeadDim>(p);
  const int extras = kernel == &bwd_main_kernel<Element, kHeadDim, true> ? 1 : 0;
  std::int64_t slots =
      device < kMaxDevices ? cache[extras][device].load(std::memory_order_relaxed) : 0;
  if (slots == 0) {
    // Above 48 KB a block must opt in to more dynamic shared memory (before the query).
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    Shape::kSmemBytes),
               "backward main kernel shared-memory opt-in");
    slots = resident_blocks(kernel, Shape::kThreads, Shape::kSmemBytes);
    if (device < kMaxDevices) cache[extras][device].store(slots, std::memory_order_relaxed);
  }
  return slots;
}

template <typename Element, int kHeadDim>
BackwardParams prepare_main(const BackwardParams& p, bool deterministic) {
  using Shape = MainKernelShape<Element, kHeadDim>;
  BackwardParams prepared = p;
  const std::int64_t key_tiles = (p.k_len + Shape::kKeyRows - 1) / Shape::kKeyRows;
  const std::int64_t units = key_tiles * p.kv_heads * p.batch;
  prepared.split = TailSplit{units, 0, 1};
  if (units == 0) return prepared;
  const std::int64_t slots = main_kernel_slots<Element, kHeadDim>(p);
  // Occupancy matters to the order only where a mask makes tile costs unequal.
  prepared.heads_per_group = FLASHPP_BLOCK_ORDER && p.mask.active()
                                 ? heads_per_group(true, key_tiles, p.kv_heads * p.batch, slots)
                                 : 1;
  // Without a mask every unit walks all query tiles of every head of its group.
  const std::int64_t steps =
      (p.q_len + Shape::kQueryRows - 1) / Shape::kQueryRows * p.heads_per_kv;
  prepared.split = plan_tail_split(
      units, steps, slots,
      FLASHPP_BWD_SPLIT_TAIL && !deterministic && !p.mask.active() && p.split_partials != nullptr);
  if (prepared.split.split_units > p.split_capacity) prepared.split = TailSplit{units, 0, 1};
  prepared.split_unit_rows = Shape::kKeyRows;
  // Bulk copies of the query-side tiles where the GPU has them and the tiles are 64-column panels
  // (the sm80 code, where it runs on such a GPU, ignores the flag).
  prepared.use_tma = false;
  if constexpr (Shape::QTile::kPanelChunks == 8) {
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    constexpr DType kDType = std::is_same_v<Element, __half> ? DType::f16 : DType::bf16;
    prepared.use_tma =
        FLASHPP_BWD_TMA && device_has_tma(device) &&
        make_row_tile_map(&prepared.q_map, p.q, kDType, p.batch, p.q_len, p.q_heads, p.head_dim,
                          p.q_strides.batch, p.q_strides.row, p.q_strides.head,
                          Shape::kQueryRows) &&
        make_row_tile_map(&prepared.dout_map, p.dout, kDType, p.batch, p.q_len, p.q_heads,
                          p.head_dim, p.dout_strides.batch, p.dout_strides.row,
                          p.dout_strides.head, Shape::kQueryRows);
  }
  return prepared;
}

template <typename Element, int kHeadDim>
void launch_main(const BackwardParams& p, bool accumulate_dq, cudaStream_t stream) {
  using Shape = MainKernelShape<Element, kHeadDim>;
  const std::int64_t blocks = p.split.blocks();
  if (blocks == 0) return;
  auto* kernel = main_kernel_for<Element, kHeadDim>(p);
  // Above 48 KB a block must opt in to more dynamic shared memory. Made on every launch, not
  // only next to the cached occupancy query, in case the device was reset since.
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Shape::kSmemBytes),
             "backward main kernel shared-memory opt-in");
  kernel<<<static_cast<unsigned>(blocks), Shape::kThreads, Shape::kSmemBytes, stream>>>(
      p, accumulate_dq);
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

}  // namespace flashpp::cuda::sm80
