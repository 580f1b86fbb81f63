// Launches one instantiation (output dtype x head dim) of the FP8 forward: tensor maps of the
// e4m3 Q, K and V (128-byte boxes = 128 columns), the grid, the shared-memory opt-in. Each
// instances/fwd_fp8_*.cu instantiates launch_forward_fp8 for one (Out, kHeadDim).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "../../../api/problem.hpp"
#include "../../common/check_cuda.hpp"
#include "../../common/occupancy.hpp"
#include "../../common/tensor_map.hpp"
#include "../forward/launch.cuh"
#include "kernel.cuh"

namespace flashpp::cuda::sm90::fp8 {

// Pipeline depth per head dim: D = 256 fills 224 KB with two stages (Q 32 KB; K, raw V and Vt
// 32 KB each per stage); smaller heads take three.
template <int kHeadDim>
inline constexpr int kFp8Stages = kHeadDim >= 256 ? 2 : 3;

template <typename Out, int kHeadDim>
void launch_forward_fp8(const ForwardParams& params, const detail::ForwardArgs& args,
                        cudaStream_t stream);

template <typename Out, int kHeadDim>
void launch_forward_fp8(const ForwardParams& params, const detail::ForwardArgs& args,
                        cudaStream_t stream) {
  using Traits = Fp8ForwardTraits<Out, kHeadDim, kFp8Stages<kHeadDim>>;
  Sm90ForwardParams p{};
  p.args = params;
  make_map(&p.q_map, args.q, DType::e4m3, Traits::kBlockM, "q");
  if (args.problem.Nk > 0) {
    make_map(&p.k_map, args.k, DType::e4m3, Traits::kBlockN, "k");
    make_map(&p.v_map, args.v, DType::e4m3, Traits::kBlockN, "v");
  }
  launch_query_tiles(flash_fwd_fp8_sm90_kernel<Traits>, Traits::kThreads, Traits::kSmemBytes,
                     Traits::kBlockM, p, args.problem.B * args.problem.Hq, stream,
                     "sm90 FP8 forward kernel launch");
}

}  // namespace flashpp::cuda::sm90::fp8
