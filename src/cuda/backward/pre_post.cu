// Preprocess (delta, lse in log2 units) and postprocess (dQ accumulator -> dq) of the backward.
// Both are memory-bound and read each element once, coalesced.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "../common/check_cuda.hpp"
#include "../common/math.cuh"
#include "../common/warp_reduce.cuh"
#include "config.hpp"
#include "dq_accum.cuh"
#include "pre_post.cuh"

namespace flashpp::cuda::bwd {
namespace {

// 16 bytes of storage dtype -> 8 floats.
template <typename Element>
__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[8]) {
  const auto* pairs = reinterpret_cast<const Element*>(&raw);
#pragma unroll
  for (int e = 0; e < 8; ++e) out[e] = static_cast<float>(pairs[e]);
}

constexpr int kPrepThreads = 256;
constexpr int kRowsPerPrepBlock = kPrepThreads / 4;  // a quad of lanes per row

template <typename Element>
__global__ void __launch_bounds__(kPrepThreads) bwd_preprocess_kernel(const BackwardParams p) {
  const std::int64_t row_index = static_cast<std::int64_t>(blockIdx.x) * kRowsPerPrepBlock +
                                 threadIdx.x / 4;  // over [B*Hq, rows_padded]
  const int lane_in_row = threadIdx.x % 4;
  const std::int64_t rows_total = p.batch * p.q_heads * p.rows_padded;
  // Every lane of a quad stays in the loop (quad_sum shuffles need all of them).
  const bool in_range = row_index < rows_total;
  const std::int64_t bh = in_range ? row_index / p.rows_padded : 0;
  const std::int64_t i = in_range ? row_index % p.rows_padded : 0;
  const std::int64_t b = bh / p.q_heads, h = bh % p.q_heads;
  const bool real_row = in_range && i < p.q_len;

  float sum = 0.0f;
  if (real_row) {
    const auto* o = static_cast<const Element*>(p.o) + b * p.o_strides.batch +
                    i * p.o_strides.row + h * p.o_strides.head;
    const auto* dout = static_cast<const Element*>(p.dout) + b * p.dout_strides.batch +
                       i * p.dout_strides.row + h * p.dout_strides.head;
    for (int d = 8 * lane_in_row; d < p.head_dim; d += 32) {
      float fo[8], fdo[8];
      unpack8<Element>(*reinterpret_cast<const uint4*>(o + d), fo);
      unpack8<Element>(*reinterpret_cast<const uint4*>(dout + d), fdo);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += fo[e] * fdo[e];
    }
  }
  sum = quad_sum(sum);
  if (!in_range || lane_in_row != 0) return;
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

// One block per 16-row band of one (batch, head): its 16x8 fragment-ordered blocks (dq_accum.cuh)
// are read whole by one warp each (coalesced), placed row-major in shared memory, and leave as
// 16-byte rows of the storage dtype.
constexpr int kBandRows = 16;
constexpr int kMaxAccumWidth = 256;

template <typename Element>
__global__ void __launch_bounds__(kPostThreads) bwd_postprocess_kernel(const BackwardParams p) {
  __shared__ float band[kBandRows][kMaxAccumWidth + 4];  // +4: rows start on other banks
  const std::int64_t bands_per_head = (p.q_len + kBandRows - 1) / kBandRows;
  const std::int64_t bh = blockIdx.x / bands_per_head;
  const std::int64_t band_index = blockIdx.x % bands_per_head;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int col_blocks = static_cast<int>(p.head_dim / 8);  // head_dim: a multiple of 8
  for (int cb = warp; cb < col_blocks; cb += kPostThreads / 32) {
    const float* block = dq_accum_block(p, bh, band_index, cb, p.accum_width);
    float c[4];
    if constexpr (kDqAccumVector == 4) {  // the lane's four values are one 16-byte vector
      const float4 v = *reinterpret_cast<const float4*>(block + 4 * lane);
      c[0] = v.x, c[1] = v.y, c[2] = v.z, c[3] = v.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) c[e] = block[dq_accum_slot(lane, e)];
    }
    band[g][8 * cb + 2 * t] = c[0];
    band[g][8 * cb + 2 * t + 1] = c[1];
    band[g + 8][8 * cb + 2 * t] = c[2];
    band[g + 8][8 * cb + 2 * t + 1] = c[3];
  }
  __syncthreads();
  const std::int64_t b = bh / p.q_heads, h = bh % p.q_heads;
  for (int chunk = threadIdx.x; chunk < kBandRows * col_blocks; chunk += kPostThreads) {
    const int r = chunk / col_blocks, d = (chunk % col_blocks) * 8;
    const std::int64_t i = band_index * kBandRows + r;
    if (i >= p.q_len) continue;
    const float* v = &band[r][d];
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

}  // namespace

template <typename Element>
void launch_preprocess(const BackwardParams& p, cudaStream_t stream) {
  const std::int64_t rows = p.batch * p.q_heads * p.rows_padded;
  if (rows == 0) return;
  bwd_preprocess_kernel<Element>
      <<<static_cast<unsigned>(blocks_for(rows, kRowsPerPrepBlock)), kPrepThreads, 0, stream>>>(p);
  check_launch("backward preprocess kernel launch");
}

template <typename Element>
void launch_postprocess(const BackwardParams& p, cudaStream_t stream) {
  const std::int64_t chunks = p.batch * p.q_heads * p.q_len * (p.head_dim / 8);
  if (chunks == 0) return;
  const std::int64_t blocks = p.batch * p.q_heads * ((p.q_len + kBandRows - 1) / kBandRows);
  bwd_postprocess_kernel<Element>
      <<<static_cast<unsigned>(blocks), kPostThreads, 0, stream>>>(p);
  check_launch("backward postprocess kernel launch");
}

template void launch_preprocess<__half>(const BackwardParams&, cudaStream_t);
template void launch_preprocess<__nv_bfloat16>(const BackwardParams&, cudaStream_t);
template void launch_postprocess<__half>(const BackwardParams&, cudaStream_t);
template void launch_postprocess<__nv_bfloat16>(const BackwardParams&, cudaStream_t);

}  // namespace flashpp::cuda::bwd
