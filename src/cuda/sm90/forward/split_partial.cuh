// The device side of the split walk (split_walk.hpp): a consumer warpgroup's partial state of a
// cut item, written by the block that runs the item's first key tiles and merged by the block
// that runs its last ones.
//
// The state is each consumer thread's own registers: its unnormalised O accumulators, and per row
// half the running max (raw score units, the same in the four lanes of a row) and its partial row
// sum (reduced over the quad only at the end). The block that merges has the same threads on the
// same rows and columns (same tile shape, same item), so the merge is thread by thread, the
// online-softmax rule over two blocks of keys:
//     m = max(m_a, m_b),  O = O_a 2^((m_a - m) c) + O_b 2^((m_b - m) c),  likewise the sums,
// with c = scale * log2(e); a max of -inf (no key seen) contributes nothing.
// Layout in the workspace: float4 chunks [chunk][thread] per (ticket, all consumers), so that a
// warp's stores and loads of one chunk are 512 contiguous bytes.
#pragma once

#include <cstdint>

#include "../../common/forward_steps.cuh"
#include "../../ptx/turnstile.cuh"
#include "../../ptx/warpgroup.cuh"
#include "split_walk.hpp"

namespace flashpp::cuda::sm90 {

// Thread 0's ticket at block start: the blocks' order of arrival (split_walk.hpp, progress).
__device__ __forceinline__ std::int64_t take_split_ticket(int* flags) {
  return atomicAdd(flags, 1);
}

// The ready flag of (ticket `slot`, consumer) and its consumer threads' part of the partials.
template <int kConsumers>
__device__ __forceinline__ int* split_flag(int* flags, std::int64_t slot, int consumer) {
  return flags + 1 + slot * kConsumers + consumer;
}
template <int kConsumers, int kDTiles>
__device__ __forceinline__ float4* split_slot(float4* partials, std::int64_t slot, int consumer) {
  return partials + slot * split_slot_float4s(kConsumers, kDTiles) + consumer * 128;
}

// A warpgroup's named barrier for the split pieces (the epilogue's: ForwardBarrier in kernel.cuh).
template <int kBarrier>
__device__ __forceinline__ void warpgroup_sync(int consumer) {
  ptx::named_barrier_sync(kBarrier + consumer, 128);
}

// Writes this thread's state to ticket `slot`'s partials, then (one thread, after the warpgroup's
// barrier: the release is cumulative) raises the warpgroup's ready flag.
template <int kConsumers, int kDTiles, int kBarrier>
__device__ __forceinline__ void write_split_state(int* flags, float4* partials, std::int64_t slot,
                                                  int consumer, const float (&o)[kDTiles][4],
                                                  const float (&row_max)[2],
                                                  const float (&row_sum)[2]) {
  float4* out = split_slot<kConsumers, kDTiles>(partials, slot, consumer);
  const int t = threadIdx.x & 127;
  constexpr int kStride = kConsumers * 128;
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) out[dt * kStride + t] = make_float4(o[dt][0], o[dt][1], o[dt][2], o[dt][3]);
  out[kDTiles * kStride + t] = make_float4(row_max[0], row_max[1], row_sum[0], row_sum[1]);
  warpgroup_sync<kBarrier>(consumer);
  if (t == 0) ptx::pass_turn(split_flag<kConsumers>(flags, slot, consumer));
}

// Waits for ticket `slot`'s state of this warpgroup (one thread acquires, the barrier orders the
// others' loads after it; the loads bypass L1) and merges it into this thread's.
template <int kConsumers, int kDTiles, int kBarrier>
__device__ __forceinline__ void merge_split_state(int* flags, float4* partials, std::int64_t slot,
                                                  int consumer, float scale_log2,
                                                  float (&o)[kDTiles][4], float (&row_max)[2],
                                                  float (&row_sum)[2]) {
  const int t = threadIdx.x & 127;
  if (t == 0) ptx::wait_turn(split_flag<kConsumers>(flags, slot, consumer), 1);
  warpgroup_sync<kBarrier>(consumer);
  const float4* in = split_slot<kConsumers, kDTiles>(partials, slot, consumer);
  constexpr int kStride = kConsumers * 128;
  const float4 state = __ldcg(in + kDTiles * kStride + t);
  const float other_max[2] = {state.x, state.y}, other_sum[2] = {state.z, state.w};
  float mine_factor[2], other_factor[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float m = fmaxf(row_max[half], other_max[half]);
    const float reference = m == -INFINITY ? 0.0f : m;
    mine_factor[half] = fast_exp2((row_max[half] - reference) * scale_log2);
    other_factor[half] = fast_exp2((other_max[half] - reference) * scale_log2);
    row_max[half] = m;
    row_sum[half] = row_sum[half] * mine_factor[half] + other_sum[half] * other_factor[half];
  }
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) {
    const float4 v = __ldcg(in + dt * kStride + t);
    const float other[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) o[dt][c] = o[dt][c] * mine_factor[c >> 1] + other[c] * other_factor[c >> 1];
  }
}

}  // namespace flashpp::cuda::sm90
