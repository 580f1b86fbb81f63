// What every backward kernel family agrees on: the kernel head dims (a problem's head dim rounds
// up to one of them, and the dQ accumulator is that wide) and the layout of the float32
// workspace (backward_params.hpp names its areas). The families' tile shapes are their own
// (sm80/backward/tile_config.hpp, sm90/backward/kernel.cuh). Host and device code both include
// this (plain constexpr data).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../instances.hpp"
#include "tail_split.hpp"

namespace flashpp::cuda {

// The kernel head dim of a backward: the head dim rounded up to one the sm80 family instantiates
// (Sm80BackwardHeadDims in instances.hpp; the sm90 family has a subset of them), 0 when none is
// (unsupported). The extra columns are zero-filled in shared memory and never stored.
constexpr int kernel_head_dim(std::int64_t d) { return Sm80BackwardHeadDims::round_up(d); }

// Keys per block of the sm80 main kernel (sm80/backward/tile_config.hpp takes its key tile from
// here): also the rows of a split unit, so the split area of the workspace is sized by it.
constexpr int main_key_rows(int kernel_head_dim) { return kernel_head_dim <= 128 ? 128 : 64; }

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

// Key rows a split unit's sums have room for: the largest key tile of any family at this width
// (the sm90 kernel at D=64 has 192-key blocks: three consumers of 64 keys).
constexpr int split_unit_rows(int accum_width) {
  return accum_width == 64 ? 192 : main_key_rows(accum_width);
}

// Floats of one split unit's sums of dV and dK (split_unit.cuh).
constexpr std::size_t split_unit_floats(int accum_width) {
  return 2 * static_cast<std::size_t>(split_unit_rows(accum_width)) * accum_width;
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

}  // namespace flashpp::cuda
