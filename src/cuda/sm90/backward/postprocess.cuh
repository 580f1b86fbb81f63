// The sm90 backward's dQ postprocess: dq = scale * dq_accum, converted to the storage dtype. The
// accumulator is row-major [B*Hq, rows_padded, D] float32 (the main kernel adds whole 64-row
// tiles into it with bulk reduce-adds); each thread converts 8 consecutive columns of one row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../backward/params.hpp"
#include "../../common/check_cuda.hpp"
#include "../../common/math.cuh"

namespace flashpp::cuda::sm90 {

template <typename Element>
__global__ void dq_postprocess_kernel(const bwd::BackwardParams p) {
  const std::int64_t chunks_per_row = p.head_dim / 8;
  const std::int64_t index = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t total = p.batch * p.q_heads * p.q_len * chunks_per_row;
  if (index >= total) return;
  const std::int64_t chunk = index % chunks_per_row;
  const std::int64_t row = (index / chunks_per_row) % p.q_len;
  const std::int64_t bh = index / (chunks_per_row * p.q_len);
  const std::int64_t b = bh / p.q_heads, h = bh % p.q_heads;
  const float* src = p.dq_accum + (bh * p.rows_padded + row) * p.accum_width + chunk * 8;
  const float4 lo = *reinterpret_cast<const float4*>(src);
  const float4 hi = *reinterpret_cast<const float4*>(src + 4);
  uint4 out;
  out.x = pack_pair<Element>(lo.x * p.scale, lo.y * p.scale);
  out.y = pack_pair<Element>(lo.z * p.scale, lo.w * p.scale);
  out.z = pack_pair<Element>(hi.x * p.scale, hi.y * p.scale);
  out.w = pack_pair<Element>(hi.z * p.scale, hi.w * p.scale);
  Element* dst = static_cast<Element*>(p.dq) + b * p.dq_strides.batch + row * p.dq_strides.row +
                 h * p.dq_strides.head + chunk * 8;
  *reinterpret_cast<uint4*>(dst) = out;
}

template <typename Element>
void launch_dq_postprocess(const bwd::BackwardParams& p, cudaStream_t stream) {
  const std::int64_t total = p.batch * p.q_heads * p.q_len * (p.head_dim / 8);
  if (total == 0) return;
  constexpr int kThreads = 256;
  const std::int64_t blocks = (total + kThreads - 1) / kThreads;
  dq_postprocess_kernel<Element><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  check_launch("sm90 dQ postprocess launch");
}

}  // namespace flashpp::cuda::sm90
