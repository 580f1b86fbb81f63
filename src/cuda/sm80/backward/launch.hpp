// Launchers of the backward's per-head-dim kernels. Each (Element, kHeadDim) pair is explicitly
// instantiated in its own small file (generated from src/cuda/instances.cmake), so the build
// parallelises and a change to one kernel recompiles little.
#pragma once

#include <cuda_runtime.h>

#include "../../common/backward_params.hpp"

namespace flashpp::cuda::sm80 {

// p with the main kernel's launch choices filled in: block order (heads_per_group), bulk copies
// (use_tma and the tensor maps) and the split of its last wave (split; none when deterministic).
template <typename Element, int kHeadDim>
BackwardParams prepare_main(const BackwardParams& p, bool deterministic);

// bwd_main_kernel over every (key tile, kv head, batch) of a prepare_main'd p; adds dQ into
// p.dq_accum when accumulate_dq (non-deterministic mode).
template <typename Element, int kHeadDim>
void launch_main(const BackwardParams& p, bool accumulate_dq, cudaStream_t stream);

// bwd_dq_kernel over every (query tile, query head, batch): deterministic dQ, written to p.dq.
template <typename Element, int kHeadDim>
void launch_dq(const BackwardParams& p, cudaStream_t stream);

}  // namespace flashpp::cuda::sm80
