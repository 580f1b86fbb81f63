// The backward's two light passes around the main kernel (declarations; backward_pre_post.cu defines
// them for fp16 and bf16).
//   preprocess:  delta_i = rowsum(dO_i * O_i) in float32, and lse_i * log2(e) (+inf for rows that
//                see no key and for padding rows), both laid out [B*Hq, rows_padded]; and the
//                float32 dQ accumulator and the main kernel's split sums set to zero
//                (non-deterministic mode)
//   postprocess: dq = scale * dq_accum, converted to the storage dtype; the split units' dK, dV
//                (tail_split.hpp) from their float32 sums
//   zero_key_rows: dK = dV = 0 on the keys no query sees (the sm90 main kernel skips them)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backward_params.hpp"

namespace flashpp::cuda {

template <typename Element>
void launch_preprocess(const BackwardParams& p, cudaStream_t stream);

// dependent: launched with programmatic stream serialisation after the main kernel (the sm90
// family's, which allows it; ptx/griddepcontrol.cuh), so that its launch overlaps that kernel's
// end; the kernel waits for the main kernel's grid before it reads anything.
template <typename Element>
void launch_postprocess(const BackwardParams& p, cudaStream_t stream, bool dependent = false);

// dK = dV = 0 on the key rows [0, key_begin) and [key_end, Nk) of every (batch, kv head): keys that
// no query sees, whose blocks the sm90 main kernel leaves out of its launch. Nothing when both
// ranges are empty.
void launch_zero_key_rows(const BackwardParams& p, std::int64_t key_begin, std::int64_t key_end,
                          cudaStream_t stream);

}  // namespace flashpp::cuda
