// The backward's two light passes around the main kernel (declarations; backward_pre_post.cu defines
// them for fp16 and bf16).
//   preprocess:  delta_i = rowsum(dO_i * O_i) in float32, and lse_i * log2(e) (+inf for rows that
//                see no key and for padding rows), both laid out [B*Hq, rows_padded]; and the
//                float32 dQ accumulator and the main kernel's split sums set to zero
//                (non-deterministic mode)
//   postprocess: dq = scale * dq_accum, converted to the storage dtype; the split units' dK, dV
//                (tail_split.hpp) from their float32 sums
#pragma once

#include <cuda_runtime.h>

#include "backward_params.hpp"

namespace flashpp::cuda {

template <typename Element>
void launch_preprocess(const BackwardParams& p, cudaStream_t stream);

template <typename Element>
void launch_postprocess(const BackwardParams& p, cudaStream_t stream);

}  // namespace flashpp::cuda
