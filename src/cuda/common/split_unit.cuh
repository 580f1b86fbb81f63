// The float32 sums of the main kernel's split units (tail_split.hpp): each piece of a unit adds
// its dV and scale * dK rows into them (main kernel epilogue), and the postprocess, which runs
// after every piece, writes them out as the unit's dK and dV in the storage dtype.
//
// Layout (workspace, zeroed by the preprocess): [split unit][dV, dK][key row][kernel head dim]
// (units split_unit_floats apart; a unit's key rows are the launch's p.split_unit_rows),
// row-major, so that a piece adds exactly the (row, column pair) values its epilogue would have
// stored, at the same indices (the same code shape as the store keeps the main loop's register
// allocation unchanged; fragment-ordered blocks here changed it, docs/perf-notes.md).
#pragma once

#include <cstdint>

#include "block_order.cuh"
#include "math.cuh"
#include "backward_workspace.hpp"
#include "backward_params.hpp"

namespace flashpp::cuda {

// The sums of split unit `split_index`: dV at the returned pointer, dK key_rows * width after it.
__host__ __device__ inline float* split_unit_sums(const BackwardParams& p,
                                                  std::int64_t split_index) {
  return p.split_partials + split_index * static_cast<std::int64_t>(split_unit_floats(p.accum_width));
}

// sum[0..1] += (a, b): one 8-byte reduction where the GPU has it.
__device__ __forceinline__ void add_pair(float* sum, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(sum), make_float2(a, b));
#else
  atomicAdd(sum, a);
  atomicAdd(sum + 1, b);
#endif
}

// Postprocess side: 16 rows of split unit `split_index` (rows 16 * band ..), both tensors, to
// dK and dV; every thread of a block of `threads` calls it.
template <typename Element>
__device__ void write_split_rows(const BackwardParams& p, std::int64_t split_index, int band,
                                 int threads) {
  const int key_rows = p.split_unit_rows;
  // The main kernel's units: its launched key tiles (from p.key_tile_offset, the sm90 kernel's
  // first tile some query sees; all tiles, from 0, in the sm80 family's) x batch * kv heads.
  const std::int64_t heads = p.batch * p.kv_heads;
  const std::int64_t key_tiles = (p.split.whole_units + p.split.split_units) / heads;
  const BlockItem item = block_item(p.split.whole_units + split_index, key_tiles, heads,
                                    p.heads_per_group);
  const std::int64_t kv_head = item.head % p.kv_heads, batch = item.head / p.kv_heads;
  const float* dv_sum = split_unit_sums(p, split_index);
  const float* dk_sum = dv_sum + static_cast<std::int64_t>(key_rows) * p.accum_width;
  const int chunks_per_row = static_cast<int>(p.head_dim / 8);  // head_dim: a multiple of 8
  for (int k = threadIdx.x; k < 2 * 16 * chunks_per_row; k += threads) {
    const bool is_dk = k >= 16 * chunks_per_row;
    const int within = is_dk ? k - 16 * chunks_per_row : k;
    const int row = 16 * band + within / chunks_per_row, col = 8 * (within % chunks_per_row);
    const std::int64_t j = (item.rank + p.key_tile_offset) * key_rows + row;
    if (j >= p.k_len) continue;
    const float* src = (is_dk ? dk_sum : dv_sum) + row * p.accum_width + col;
    const float4 lo = *reinterpret_cast<const float4*>(src);
    const float4 hi = *reinterpret_cast<const float4*>(src + 4);
    uint4 out;
    out.x = pack_pair<Element>(lo.x, lo.y);
    out.y = pack_pair<Element>(lo.z, lo.w);
    out.z = pack_pair<Element>(hi.x, hi.y);
    out.w = pack_pair<Element>(hi.z, hi.w);
    auto* dst = is_dk ? static_cast<Element*>(p.dk) + batch * p.dk_strides.batch +
                            kv_head * p.dk_strides.head + j * p.dk_strides.row
                      : static_cast<Element*>(p.dv) + batch * p.dv_strides.batch +
                            kv_head * p.dv_strides.head + j * p.dv_strides.row;
    *reinterpret_cast<uint4*>(dst + col) = out;
  }
}

}  // namespace flashpp::cuda
