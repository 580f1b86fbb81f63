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
  constexpr int kSmem = Traits::kSmemBytes;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
             "cudaFuncSetAttribute (sm90 forward shared memory)");
  const std::int64_t m_blocks = (params.Nq + Traits::kBlockM - 1) / Traits::kBlockM;
  const std::int64_t batch_heads = args.problem.B * args.problem.Hq;
  const bool ordered = FLASHPP_BLOCK_ORDER && params.mask.active();
  const std::int64_t slots = ordered ? cached_resident_blocks(kernel, Traits::kThreads, kSmem) : 0;
  constexpr std::int64_t kMaxGridY = 65535;
  for (std::int64_t first = 0; first < batch_heads; first += kMaxGridY) {
    p.args.bh_offset = first;
    const std::int64_t heads = std::min(kMaxGridY, batch_heads - first);
    p.args.heads_per_group = ordered ? heads_per_group(true, m_blocks, heads, slots) : 1;
    const dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>(heads));
    kernel<<<grid, Traits::kThreads, kSmem, stream>>>(p);
    check_launch("sm90 forward kernel launch");
  }
}

}  // namespace flashpp::cuda::sm90
