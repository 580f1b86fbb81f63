// Tile shapes of the backward kernels per head dim, and the layout of the float32 workspace.
// Host and device code both include this (plain constexpr data).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tail_split.hpp"

namespace flashpp::cuda::bwd {

// The head dims that have kernel instantiations; any other multiple of 8 up to 256 runs on the
// next one up, with the extra columns zero-filled in shared memory and never stored.
inline constexpr int kInstantiatedHeadDims[] = {32, 64, 96, 128, 192, 256};

constexpr int kernel_head_dim(std::int64_t d) {
  for (int h : kInstantiatedHeadDims) {
    if (d <= h) return h;
  }
  return 0;  // unsupported
}

// Main kernel (one block per key tile): kKeyRows keys stay in shared memory while the block
// walks query tiles of kQueryRows rows, two stages deep. Every warp owns 16 keys in the S^T and
// dK/dV products, so kKeyRows / 16 warp rows; the rest of the warps split columns.
// Shared memory: K, V (2 * kKeyRows * D), Q, dO (2 stages * 2 * kQueryRows * D), P, dS
// (2 * kKeyRows * kQueryRows), all 16-bit; it must stay under 163 KB (A100's per-block limit).
// kKeysPerWarp: keys a warp owns in S^T and dK/dV (16 or 32). With 16 keys per warp and 8 warps
// a warp owns all query columns and P~^T/dS^T stay in registers for dV/dK. With 32 keys per warp
// ("wide") two warps share a key group (half of the query columns in S^T, half of the head
// columns in dV/dK each), P~^T and dS^T go through shared memory, and each ldmatrix feeds twice
// the mma; measured on the H200: +8% at D=64, +23% at D=128 (docs/perf-notes.md).
// FLASHPP_BWD_TILE_VARIANT (compile definition, default 0) selects alternatives for tuning runs.
#ifndef FLASHPP_BWD_TILE_VARIANT
#define FLASHPP_BWD_TILE_VARIANT 0
#endif
constexpr int main_key_rows(int kernel_head_dim) { return kernel_head_dim <= 128 ? 128 : 64; }

template <int kHeadDim>
struct MainTile {
  static constexpr bool kWide = (kHeadDim >= 64 && kHeadDim <= 128) ||
                                (FLASHPP_BWD_TILE_VARIANT == 1 && kHeadDim == 32);
  static constexpr int kKeyRows = main_key_rows(kHeadDim);
  // D=64 walks 128 queries per step (FlashAttention-2's 128x128 block): each warp's S^T is then
  // 32 keys x 64 queries, half the barriers per FLOP; measured +6..8% over 64-query steps.
  static constexpr int kQueryRows =
      kHeadDim == 64 && FLASHPP_BWD_TILE_VARIANT != 2 ? 128
      : kHeadDim <= 96 || kHeadDim == 192 || kWide    ? 64
                                                      : 32;
  static constexpr int kKeysPerWarp = kWide ? 32 : 16;
  static constexpr int kWarps = 8;  // every head dim
  // Blocks of 4 warps leave room for two per SM (registers: 2 x 128 x 255 < 64 K), so one
  // block's mma phase can overlap the other's element-wise phase and barriers.
  static constexpr int kMinBlocksPerSm = kWarps <= 4 ? 2 : 1;
};

// Deterministic dQ kernel (one block per query tile): every warp owns 16 query rows and keeps its
// dQ rows in registers while K/V tiles stream through shared memory two stages deep.
template <int kHeadDim>
struct DqTile {
  static constexpr int kWarps = 4;
  static constexpr int kQueryRows = 16 * kWarps;
  static constexpr int kKeyRows = kHeadDim <= 128 ? 64 : 32;
};

// Rows of the per-(batch, head) workspace vectors are padded to a multiple of this, so kernels
// read whole query tiles without bounds checks (padding rows hold values that contribute 0).
inline constexpr std::int64_t kRowPadding = 128;

struct WorkspaceLayout {
  std::int64_t rows_padded = 0;
  int accum_width = 0;          // columns of dq_accum (the kernel head dim)
  std::int64_t split_capacity = 0;  // units the split area holds (tail_split.hpp)
  std::size_t delta_offset = 0, lse_offset = 0, dq_accum_offset = 0;  // bytes
  std::size_t split_offset = 0;  // split_capacity x (dV, dK) x key rows x accum_width floats
  // Ordered dQ (the sm90 family's deterministic mode): one int32 turn counter per
  // kSemaphoreRows query rows of each (batch, query head).
  std::size_t semaphore_offset = 0;
  std::int64_t semaphore_count = 0;
  std::size_t total_bytes = 0;
};

inline constexpr std::int64_t kSemaphoreRows = 64;
static_assert(kRowPadding % kSemaphoreRows == 0, "turn counters cover whole padded rows");

constexpr std::size_t align_up(std::size_t bytes, std::size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// Floats of one split unit's sums of dV and dK (split_unit.cuh).
constexpr std::size_t split_unit_floats(int accum_width) {
  return 2 * static_cast<std::size_t>(main_key_rows(accum_width)) * accum_width;
}

// delta and lse_log2 always; dq_accum and the split area only when dQ is accumulated with
// atomics (the sm80 deterministic mode computes dQ in its own kernel and splits no unit). With
// ordered_dq (the sm90 deterministic mode) dq_accum and its turn counters, no split area.
constexpr WorkspaceLayout workspace_layout(std::int64_t batch, std::int64_t q_heads,
                                           std::int64_t q_len, std::int64_t kv_heads,
                                           std::int64_t k_len, std::int64_t head_dim,
                                           bool deterministic, bool ordered_dq = false) {
  WorkspaceLayout w;
  w.rows_padded = (q_len + kRowPadding - 1) / kRowPadding * kRowPadding;
  w.accum_width = kernel_head_dim(head_dim);
  const auto rows = static_cast<std::size_t>(batch * q_heads * w.rows_padded);
  w.delta_offset = 0;
  w.lse_offset = align_up(rows * sizeof(float), 256);
  w.dq_accum_offset = w.lse_offset + align_up(rows * sizeof(float), 256);
  if (deterministic && ordered_dq) {
    w.semaphore_offset =
        w.dq_accum_offset + align_up(rows * static_cast<std::size_t>(w.accum_width) * sizeof(float), 256);
    w.semaphore_count = static_cast<std::int64_t>(rows) / kSemaphoreRows;
    w.split_offset = w.total_bytes =
        w.semaphore_offset + align_up(static_cast<std::size_t>(w.semaphore_count) * 4, 256);
    return w;
  }
  if (deterministic) {
    w.split_offset = w.total_bytes = w.dq_accum_offset;
    return w;
  }
  const std::int64_t key_rows = main_key_rows(w.accum_width);
  const std::int64_t units = (k_len + key_rows - 1) / key_rows * kv_heads * batch;
  w.split_capacity = units < kMaxSplitUnits ? units : kMaxSplitUnits;
  const auto capacity = static_cast<std::size_t>(w.split_capacity);
  w.split_offset = w.dq_accum_offset +
                   align_up(rows * static_cast<std::size_t>(w.accum_width) * sizeof(float), 256);
  w.total_bytes = w.split_offset + capacity * split_unit_floats(w.accum_width) * sizeof(float);
  return w;
}

}  // namespace flashpp::cuda::bwd
