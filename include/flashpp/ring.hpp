// Ring attention (context parallelism) over NCCL: each rank holds its slice of the sequence of
// Q, K, V; K/V blocks travel around the ring of `comm` (rank r sends to r+1) while each rank
// computes on the block it holds. Built into libflashpp_ring (target flashpp::ring) when CMake
// finds NCCL (FLASHPP_NCCL_ROOT, $NCCL_ROOT, or the CUDA toolkit's include directory).
//
//   flashpp::RingOptions opt;  opt.causal = true;
//   flashpp::ring_forward(q, k, v, o, lse, opt, comm, stream);             // every rank
//   flashpp::ring_backward(q, k, v, o, lse, dout, dq, dk, dv, opt, comm, stream);
//
// Views as flashpp::forward's ([B, n, H, D], last dim contiguous, any other strides), fp16 or
// bf16 on the device of `comm`; every rank passes the same B, n, Hq, Hkv, D. causal = true
// needs the zigzag split: rank r holds chunks r and 2W-1-r of the sequence cut into 2W equal
// chunks, in that order (so n is even); without causal any equal split works. lse: float32
// [B, Hq, n], contiguous; the backward takes the forward's o and lse.
//
// The forward merges the blocks' partial outputs by their lse in float32; the backward sends
// float32 dK/dV accumulators around the ring with K/V and keeps dQ local. Transfers run on a
// second (high-priority) stream, ordered against `stream` by events; both calls are
// stream-ordered on `stream` (no host synchronisation), using cudaMallocAsync for their
// buffers. docs/ring-attention.md describes the schedule.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <limits>

#include "flashpp/flashpp.hpp"

namespace flashpp {

struct RingOptions {
  float softmax_scale = std::numeric_limits<float>::quiet_NaN();  // NaN: 1/sqrt(D)
  bool causal = false;                                             // zigzag split required
  float softcap = 0.0f;
  bool deterministic = false;
};

void ring_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& o, const TensorView& lse, const RingOptions& options,
                  ncclComm_t comm, cudaStream_t stream);

void ring_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& o, const TensorView& lse, const TensorView& dout,
                   const TensorView& dq, const TensorView& dk, const TensorView& dv,
                   const RingOptions& options, ncclComm_t comm, cudaStream_t stream);

}  // namespace flashpp
