// Launchers of the backward's per-head-dim kernels. Each (Element, kHeadDim) pair is explicitly
// instantiated in its own small file under instances/, so the build parallelises and a change to
// one kernel recompiles little.
#pragma once

#include <cuda_runtime.h>

#include "params.hpp"

namespace flashpp::cuda::bwd {

// bwd_main_kernel over every (key tile, kv head, batch); adds dQ into p.dq_accum when
// accumulate_dq (non-deterministic mode).
template <typename Element, int kHeadDim>
void launch_main(const BackwardParams& p, bool accumulate_dq, cudaStream_t stream);

// bwd_dq_kernel over every (query tile, query head, batch): deterministic dQ, written to p.dq.
template <typename Element, int kHeadDim>
void launch_dq(const BackwardParams& p, cudaStream_t stream);

}  // namespace flashpp::cuda::bwd
