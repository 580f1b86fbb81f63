// Launches one instantiation (element type x head dim) of the sm80 forward: grid, shared memory
// opt-in, and the choice between the plain kernel and the one with softcap/dropout code.
// Each sm80_fwd_d*_*.cu instance (src/cuda/instances.cmake) instantiates launch_forward for one
// (Element, kHeadDim).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "../../common/block_order.cuh"
#include "../../common/check_cuda.hpp"
#include "kernel.cuh"
#include "tile_config.hpp"
#include "../../common/occupancy.hpp"

namespace flashpp::cuda::sm80 {

template <typename Element, int kHeadDim>
void launch_forward(const ForwardParams& params, std::int64_t batch_heads, cudaStream_t stream);

// Grid: x = query tiles (consecutive blocks share one head's K/V in L2), y = batch * head,
// split into launches of at most 65535 along y.
template <typename Traits, bool kExtras>
void launch_forward_kernel(const ForwardParams& params, std::int64_t batch_heads,
                           cudaStream_t stream) {
  auto kernel = flash_fwd_kernel<Traits, kExtras>;
  constexpr int kSmem = Traits::kSmemBytes;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
             "cudaFuncSetAttribute (forward shared memory)");
  const std::int64_t m_blocks = (params.q_len + Traits::kBlockM - 1) / Traits::kBlockM;
  // Occupancy is only asked for where the block order matters (a mask makes tile costs unequal).
  const bool ordered = FLASHPP_BLOCK_ORDER && params.mask.active();
  const std::int64_t slots = ordered ? cached_resident_blocks(kernel, Traits::kThreads, kSmem) : 0;
  constexpr std::int64_t kMaxGridY = 65535;
  for (std::int64_t first = 0; first < batch_heads; first += kMaxGridY) {
    ForwardParams chunk = params;
    chunk.bh_offset = first;
    const std::int64_t heads = std::min(kMaxGridY, batch_heads - first);
    chunk.heads_per_group = ordered ? heads_per_group(true, m_blocks, heads, slots) : 1;
    const dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>(heads));
    kernel<<<grid, Traits::kThreads, kSmem, stream>>>(chunk);
    check_launch("forward kernel launch");
  }
}

template <typename Element, int kHeadDim>
void launch_forward(const ForwardParams& params, std::int64_t batch_heads, cudaStream_t stream) {
  using Traits = ForwardTraits<Element, kHeadDim, ForwardTileConfig<kHeadDim>>;
  const bool extras = params.softcap > 0.0f || params.dropout.threshold != 0;
  if (extras) {
    launch_forward_kernel<Traits, true>(params, batch_heads, stream);
  } else {
    launch_forward_kernel<Traits, false>(params, batch_heads, stream);
  }
}

}  // namespace flashpp::cuda::sm80
