// Launches one instantiation (element type x head dim) of the sm90 forward: the tensor maps of
// Q, K and V, the grid (query tiles x batch*heads, longest first under a mask), the shared-memory
// opt-in. Each instances/fwd_*.cu file instantiates launch_forward for one (Element, kHeadDim).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "../../../api/problem.hpp"
#include "../../common/check_cuda.hpp"
#include "../../common/tensor_map.hpp"
#include "kernel.cuh"
#include "tile_config.hpp"
#include "../../common/occupancy.hpp"

namespace flashpp::cuda::sm90 {

template <typename Element, int kHeadDim>
void launch_forward(const ForwardParams& params, const detail::ForwardArgs& args,
                    cudaStream_t stream);

// A [B, N, H, D] view's tensor map with boxes of `rows` rows; throws when the driver refuses it
// (the dispatcher checked the layout before choosing this family).
inline void make_map(CUtensorMap* map, const TensorView& t, DType dtype, int rows,
                     const char* name) {
  if (!make_row_tile_map(map, t.data, dtype, t.sizes[0], t.sizes[1], t.sizes[2], t.sizes[3],
                         t.strides[0], t.strides[1], t.strides[2], rows)) {
    throw Error(ErrorCode::backend_failure,
                std::string("flashpp CUDA backend: the driver refused the tensor map of ") + name);
  }
}

// The grid of a forward kernel: one block per (query tile, batch * head), in launches of at
// most 65535 heads (the grid's y limit); under a mask, heads grouped so that the longest query
// tiles start first (common/block_order.cuh). Shared by the bf16/fp16 and FP8 forwards.
template <typename Kernel>
void launch_query_tiles(Kernel kernel, int threads, int smem_bytes, int block_m,
                        Sm90ForwardParams p, std::int64_t batch_heads, cudaStream_t stream,
                        const char* what) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
             "cudaFuncSetAttribute (sm90 forward shared memory)");
  const std::int64_t m_blocks = (p.args.q_len + block_m - 1) / block_m;
  const bool ordered = FLASHPP_BLOCK_ORDER && p.args.mask.active();
  const std::int64_t slots = ordered ? cached_resident_blocks(kernel, threads, smem_bytes) : 0;
  constexpr std::int64_t kMaxGridY = 65535;
  for (std::int64_t first = 0; first < batch_heads; first += kMaxGridY) {
    p.args.bh_offset = first;
    const std::int64_t heads = std::min(kMaxGridY, batch_heads - first);
    p.args.heads_per_group = ordered ? heads_per_group(true, m_blocks, heads, slots) : 1;
    const dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>(heads));
    kernel<<<grid, threads, smem_bytes, stream>>>(p);
    check_launch(what);
  }
}

template <typename Element, int kHeadDim>
void launch_forward(const ForwardParams& params, const detail::ForwardArgs& args,
                    cudaStream_t stream) {
  using Traits = Sm90ForwardTraits<Element, kHeadDim, ForwardTileConfig<kHeadDim>>;
  Sm90ForwardParams p{};
  p.args = params;
  const DType dtype = args.problem.dtype;
  make_map(&p.q_map, args.q, dtype, Traits::kBlockM, "q");
  if (args.problem.Nk > 0) {  // with no keys the kernel loads nothing and writes O = 0, lse = -inf
    make_map(&p.k_map, args.k, dtype, Traits::kBlockN, "k");
    make_map(&p.v_map, args.v, dtype, Traits::kBlockN, "v");
  }

  const bool extras = params.softcap > 0.0f || params.dropout.threshold != 0;
  auto kernel = extras ? flash_fwd_sm90_kernel<Traits, true> : flash_fwd_sm90_kernel<Traits, false>;
  launch_query_tiles(kernel, Traits::kThreads, Traits::kSmemBytes, Traits::kBlockM, p,
                     args.problem.B * args.problem.Hq, stream, "sm90 forward kernel launch");
}

}  // namespace flashpp::cuda::sm90
