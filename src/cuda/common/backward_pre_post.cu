// Preprocess (delta, lse in log2 units, the dQ accumulator and split sums zeroed) and postprocess
// (dQ accumulator -> dq, split sums -> their units' dK, dV) of the backward. Both are
// memory-bound and touch each element once, coalesced, with several loads in flight per thread.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "check_cuda.hpp"
#include "launch_config.hpp"
#include "math.cuh"
#include "warp_reduce.cuh"
#include "backward_workspace.hpp"
#include "dq_accum.cuh"
#include "backward_pre_post.cuh"
#include "split_unit.cuh"
#include "poison.cuh"
#include "../ptx/griddepcontrol.cuh"

namespace flashpp::cuda {
namespace {

// 16 bytes of storage dtype -> 8 floats.
template <typename Element>
__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[8]) {
  const auto* pairs = reinterpret_cast<const Element*>(&raw);
#pragma unroll
  for (int e = 0; e < 8; ++e) out[e] = static_cast<float>(pairs[e]);
}

constexpr int kPrepThreads = 256;

// The float32 dV/dK sums of the main kernel's split units (tail_split.hpp, split_unit.cuh), spread
// over the whole grid (the area is small: at most kMaxSplitUnits units, usually a few).
__device__ __forceinline__ void zero_split_sums(const BackwardParams& p) {
  if (p.split.split_units == 0) return;
  const auto vectors = static_cast<std::uint32_t>(
      p.split.split_units * static_cast<std::int64_t>(split_unit_floats(p.accum_width) / 4));
  const std::uint32_t stride = gridDim.x * blockDim.x;
  auto* sums = reinterpret_cast<float4*>(p.split_partials);
  for (std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < vectors; k += stride) {
    sums[k] = make_float4(0, 0, 0, 0);
  }
}

constexpr int kRowsPerPrepBlock = kPrepThreads / 4;  // a quad of lanes per row
static_assert(kRowPadding % kRowsPerPrepBlock == 0, "a block's rows belong to one (batch, head)");

// One block per kRowsPerPrepBlock rows of one (batch, head). It also zeroes those rows of the dQ
// accumulator (when there is one): 16-row bands of it are contiguous (dq_accum.cuh), so that is
// one coalesced run of kRowsPerPrepBlock * accum_width floats, and the pass replaces a memset.
// kLoads: 16-byte loads per lane and tensor, accum_width / 32 (the kernel head dim / 32; the
// true head dim may be smaller, the loads past it are skipped).
template <typename Element, int kLoads>
__global__ void __launch_bounds__(kPrepThreads) bwd_preprocess_kernel(const BackwardParams p) {
  // The sm90 main kernel, launched dependent on this one, may start once every block of this
  // grid has (it waits for the grid to finish before it reads lse, delta or the accumulator).
  allow_dependent_launch();
  // 32-bit block arithmetic: the grid has fewer than 2^31 blocks (backward_unsupported_reason).
  const auto blocks_per_head = static_cast<std::uint32_t>(p.rows_padded / kRowsPerPrepBlock);
  const std::uint32_t bh = blockIdx.x / blocks_per_head;
  const auto q_heads = static_cast<std::uint32_t>(p.q_heads);
  const std::uint32_t b = bh / q_heads, h = bh - b * q_heads;
  const std::int64_t first_row = static_cast<std::int64_t>(bh) * p.rows_padded +
                                 static_cast<std::int64_t>(blockIdx.x - bh * blocks_per_head) *
                                     kRowsPerPrepBlock;  // in the [B*Hq, rows_padded] space

  const std::int64_t row_index = first_row + threadIdx.x / 4;
  const std::int64_t i = row_index - static_cast<std::int64_t>(bh) * p.rows_padded;
  const int lane_in_row = threadIdx.x % 4;
  const bool real_row = i < p.q_len;

  // Every load of the row is issued before the first multiply (unrolled over the kernel head
  // dim, predicated on the true one), so each thread has all of its bytes in flight at once.
  uint4 o_raw[kLoads], do_raw[kLoads];
  if (real_row) {
    const auto* o = static_cast<const Element*>(p.o) + b * p.o_strides.batch +
                    i * p.o_strides.row + h * p.o_strides.head;
    const auto* dout = static_cast<const Element*>(p.dout) + b * p.dout_strides.batch +
                       i * p.dout_strides.row + h * p.dout_strides.head;
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int d = 8 * lane_in_row + 32 * k;
      if (d < p.head_dim) {
        o_raw[k] = *reinterpret_cast<const uint4*>(o + d);
        do_raw[k] = *reinterpret_cast<const uint4*>(dout + d);
      }
    }
  }
  // The zeros go out while the loads are in flight (after them in program order: the compiler
  // cannot move loads above stores that might alias).
  if (p.dq_accum != nullptr) {
    auto* zero = reinterpret_cast<float4*>(p.dq_accum + first_row * p.accum_width);
    const int vectors = kRowsPerPrepBlock * p.accum_width / 4;
    for (int k = threadIdx.x; k < vectors; k += kPrepThreads) zero[k] = make_float4(0, 0, 0, 0);
    zero_split_sums(p);
  }
  float sum = 0.0f;
  if (real_row) {
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      if (8 * lane_in_row + 32 * k < p.head_dim) {
        float fo[8], fdo[8];
        unpack8<Element>(o_raw[k], fo);
        unpack8<Element>(do_raw[k], fdo);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum += fo[e] * fdo[e];
      }
    }
  }
  sum = quad_sum(sum);  // every lane of the quad takes part
  if (lane_in_row != 0) return;
  p.delta[row_index] = real_row ? sum : 0.0f;
  float lse_log2 = INFINITY;
  if (real_row) {
    const float lse =
        p.lse[b * p.lse_stride_batch + h * p.lse_stride_head + i * p.lse_stride_row];
    // A row that sees no key has lse = -inf and P = 0: +inf makes exp2(s - lse_log2) = 0.
    lse_log2 = lse == -INFINITY ? INFINITY : lse * kLog2e;
  }
  p.lse_log2[row_index] = lse_log2;
}

constexpr int kPostThreads = 256;
constexpr int kPostWarps = kPostThreads / 32;

// One block per band of rows of one (batch, head): its 16x8 fragment-ordered blocks (dq_accum.cuh)
// are read whole by one warp each (coalesced), placed row-major in shared memory, and leave as
// 16-byte rows of the storage dtype. Bands are 64 rows where they fit in 48 KB of shared memory
// (accumulator width <= 128), so that each thread has several loads in flight; else 16.
__host__ __device__ constexpr int post_band_rows(int accum_width) {
  return accum_width <= 128 ? 64 : 16;
}
constexpr int kMaxFragmentsPerWarp = 8;  // 64 x 128 or 16 x 256 floats: 64 or 32 16x8 blocks
__host__ __device__ constexpr int post_pitch(int accum_width) {
  return accum_width + 4;  // rows start on other banks
}

template <typename Element>
__global__ void __launch_bounds__(kPostThreads) bwd_postprocess_kernel(const BackwardParams p) {
  extern __shared__ float band[];  // [band_rows][post_pitch(accum_width)]
  poison_dynamic_smem(band);  // test builds only (poison.cuh)
  // Launched dependent on the main kernel (the sm90 family's): its dQ and split sums are complete
  // only after this wait (without the launch attribute it returns at once).
  grid_dependency_wait();
  const int band_rows = post_band_rows(p.accum_width);
  const int pitch = post_pitch(p.accum_width);
  // 32-bit block arithmetic: the grid has fewer than 2^31 blocks (backward_unsupported_reason).
  const auto bands_per_head = static_cast<std::uint32_t>((p.q_len + band_rows - 1) / band_rows);
  // The blocks after the dQ bands write out the main kernel's split units, 16 key rows each.
  const auto dq_blocks = bands_per_head * static_cast<std::uint32_t>(p.batch * p.q_heads);
  if (blockIdx.x >= dq_blocks) {
    const std::uint32_t bands_per_unit = p.split_unit_rows / 16;
    const std::uint32_t k = blockIdx.x - dq_blocks;
    write_split_rows<Element>(p, k / bands_per_unit, static_cast<int>(k % bands_per_unit),
                              kPostThreads);
    return;
  }
  const std::uint32_t bh = blockIdx.x / bands_per_head;
  const std::uint32_t band_index = blockIdx.x - bh * bands_per_head;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int col_blocks = static_cast<int>(p.head_dim / 8);  // head_dim: a multiple of 8
  // Transposed blocks (dq_accum_t_block): 16 columns x 8 rows each, as many per band.
  const bool transposed = p.dq_accum_transposed;
  const int t_col_blocks = static_cast<int>((p.head_dim + 15) / 16);
  const int fragments = transposed ? band_rows / 8 * t_col_blocks : band_rows / 16 * col_blocks;
  const std::int64_t first_row_block = static_cast<std::int64_t>(band_index) * (band_rows / 16);

  // All of the warp's loads first, then the shared-memory stores.
  float c[kMaxFragmentsPerWarp][4];
#pragma unroll
  for (int k = 0; k < kMaxFragmentsPerWarp; ++k) {
    const int f = warp + kPostWarps * k;
    if (f < fragments) {
      const float* block =
          transposed ? dq_accum_t_block(p, bh, f / (band_rows / 8), 2 * first_row_block + f % (band_rows / 8))
                     : dq_accum_block(p, bh, first_row_block + f / col_blocks, f % col_blocks, p.accum_width);
      if constexpr (kDqAccumVector == 4) {  // the lane's four values are one 16-byte vector
        const float4 v = *reinterpret_cast<const float4*>(block + 4 * lane);
        c[k][0] = v.x, c[k][1] = v.y, c[k][2] = v.z, c[k][3] = v.w;
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) c[k][e] = block[dq_accum_slot(lane, e)];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxFragmentsPerWarp; ++k) {
    const int f = warp + kPostWarps * k;
    if (f < fragments && transposed) {
      // (column g (+8), rows 2t, 2t + 1) of the block's 16 columns x 8 rows.
      const int col = 16 * (f / (band_rows / 8)) + g, row = 8 * (f % (band_rows / 8)) + 2 * t;
      band[row * pitch + col] = c[k][0];
      band[(row + 1) * pitch + col] = c[k][1];
      band[row * pitch + col + 8] = c[k][2];
      band[(row + 1) * pitch + col + 8] = c[k][3];
    } else if (f < fragments) {
      const int row = 16 * (f / col_blocks) + g, col = 8 * (f % col_blocks) + 2 * t;
      band[row * pitch + col] = c[k][0];
      band[row * pitch + col + 1] = c[k][1];
      band[(row + 8) * pitch + col] = c[k][2];
      band[(row + 8) * pitch + col + 1] = c[k][3];
    }
  }
  __syncthreads();
  const std::uint32_t b = bh / static_cast<std::uint32_t>(p.q_heads);
  const std::uint32_t h = bh - b * static_cast<std::uint32_t>(p.q_heads);
  for (int chunk = threadIdx.x; chunk < band_rows * col_blocks; chunk += kPostThreads) {
    const int r = chunk / col_blocks, d = (chunk % col_blocks) * 8;
    const std::int64_t i = static_cast<std::int64_t>(band_index) * band_rows + r;
    if (i >= p.q_len) continue;
    const float* v = &band[r * pitch + d];
    uint4 out;
    out.x = pack_pair<Element>(v[0] * p.scale, v[1] * p.scale);
    out.y = pack_pair<Element>(v[2] * p.scale, v[3] * p.scale);
    out.z = pack_pair<Element>(v[4] * p.scale, v[5] * p.scale);
    out.w = pack_pair<Element>(v[6] * p.scale, v[7] * p.scale);
    auto* dq = static_cast<Element*>(p.dq) + b * p.dq_strides.batch + i * p.dq_strides.row +
               h * p.dq_strides.head + d;
    *reinterpret_cast<uint4*>(dq) = out;
  }
}

std::int64_t blocks_for(std::int64_t items, int per_block) {
  return (items + per_block - 1) / per_block;
}

constexpr int kZeroThreads = 256;

// One 16-byte chunk of zeros per thread and step over the rows of one (batch, kv head, tensor):
// blockIdx.y = batch * kv_heads + head, blockIdx.z = 0 for dK, 1 for dV. Rows r < key_begin are
// keys r, the others keys key_end + (r - key_begin).
__global__ void __launch_bounds__(kZeroThreads)
    zero_key_rows_kernel(const BackwardParams p, std::int64_t key_begin, std::int64_t key_end) {
  const std::int64_t chunks_per_row = p.head_dim / 8;  // head_dim: a multiple of 8
  const std::int64_t chunks = (key_begin + p.k_len - key_end) * chunks_per_row;
  const std::int64_t b = blockIdx.y / p.kv_heads, h = blockIdx.y % p.kv_heads;
  const RowStrides& s = blockIdx.z == 0 ? p.dk_strides : p.dv_strides;
  // fp16 and bf16 alike: 16-bit elements.
  auto* base = static_cast<std::uint16_t*>(blockIdx.z == 0 ? p.dk : p.dv) + b * s.batch + h * s.head;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * kZeroThreads + threadIdx.x; k < chunks;
       k += static_cast<std::int64_t>(gridDim.x) * kZeroThreads) {
    const std::int64_t r = k / chunks_per_row, chunk = k - r * chunks_per_row;
    const std::int64_t j = r < key_begin ? r : key_end + (r - key_begin);
    *reinterpret_cast<uint4*>(base + j * s.row + chunk * 8) = make_uint4(0, 0, 0, 0);
  }
}

}  // namespace

void launch_zero_key_rows(const BackwardParams& p, std::int64_t key_begin, std::int64_t key_end,
                          cudaStream_t stream) {
  const std::int64_t chunks = (key_begin + p.k_len - key_end) * (p.head_dim / 8);
  const std::int64_t heads = p.batch * p.kv_heads;  // <= 65535 (the main kernel's grid.y)
  if (chunks <= 0 || heads == 0) return;
  const std::int64_t blocks = std::min<std::int64_t>(blocks_for(chunks, kZeroThreads), 1024);
  zero_key_rows_kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(heads), 2),
                         kZeroThreads, 0, stream>>>(p, key_begin, key_end);
  check_launch("backward zero_key_rows kernel launch");
}

template <typename Element>
void launch_preprocess(const BackwardParams& p, cudaStream_t stream) {
  const std::int64_t rows = p.batch * p.q_heads * p.rows_padded;
  if (rows == 0) return;
  // One instantiation per kernel head dim (the accumulator width, backward_workspace.hpp).
  void (*kernel)(BackwardParams) = nullptr;
  Sm80BackwardHeadDims::dispatch(p.accum_width, [&](auto kHeadDim) {
    static_assert(decltype(kHeadDim)::value % 32 == 0, "whole 16-byte loads per lane of a quad");
    kernel = &bwd_preprocess_kernel<Element, decltype(kHeadDim)::value / 32>;
  });
  kernel<<<static_cast<unsigned>(blocks_for(rows, kRowsPerPrepBlock)), kPrepThreads, 0, stream>>>(
      p);
  check_launch("backward preprocess kernel launch");
}

template <typename Element>
void launch_postprocess(const BackwardParams& p, cudaStream_t stream, bool dependent) {
  const std::int64_t chunks = p.batch * p.q_heads * p.q_len * (p.head_dim / 8);
  if (chunks == 0) return;
  const int band_rows = post_band_rows(p.accum_width);
  static_assert(kMaxFragmentsPerWarp * kPostWarps >= 64 / 16 * 128 / 8 &&
                    kMaxFragmentsPerWarp * kPostWarps >= 16 / 16 * 256 / 8,
                "every 16x8 block of a band has a warp slot");
  const std::int64_t blocks = p.batch * p.q_heads * ((p.q_len + band_rows - 1) / band_rows) +
                              p.split.split_units * (p.split_unit_rows / 16);
  const std::size_t smem = sizeof(float) * band_rows * post_pitch(p.accum_width);  // <= 48 KB
  LaunchShape shape{dim3(static_cast<unsigned>(blocks)), dim3(kPostThreads), smem};
  shape.dependent = dependent;
  launch_kernel(shape, stream, bwd_postprocess_kernel<Element>, "backward postprocess kernel launch",
                p);
}

template void launch_preprocess<__half>(const BackwardParams&, cudaStream_t);
template void launch_preprocess<__nv_bfloat16>(const BackwardParams&, cudaStream_t);
template void launch_postprocess<__half>(const BackwardParams&, cudaStream_t, bool);
template void launch_postprocess<__nv_bfloat16>(const BackwardParams&, cudaStream_t, bool);

}  // namespace flashpp::cuda
