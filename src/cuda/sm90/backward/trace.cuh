// Per-block stamps of the sm90 backward's main kernel, for finding where a block's time goes
// beyond its steps (a timing tool, off by default). Built with -DFLASHPP_SM90_BWD_TRACE=1, each
// block of a launch writes, at fixed points (BackwardTraceEvent), clock64() (SM cycles) or
// %globaltimer (nanoseconds, one clock for every SM) into a device buffer; after the launch the
// host copies the buffer out and, where FLASHPP_SM90_BWD_TRACE_FILE names a file, writes it there
// (the last launch wins; tools/bwd_trace.py reads it). The copy synchronises the stream after
// every launch, so time whole calls of a traced build only to compare stamps. The flag changes
// Sm90BackwardParams: compile every sm90 backward object with it (tools/object_variant.sh BUILD
// OUT "-DFLASHPP_SM90_BWD_TRACE=1" 'sm90_bwd'), never a subset. Stamped by the consumers
// of both kernels (kernel.cuh's and wide_kernel.cuh's) and by the producer. At D=192 the traced
// build's products are serialised by ptxas (C7511, as the release build's are not): its stamps
// there do not time the release kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../common/trace_file.hpp"

#ifndef FLASHPP_SM90_BWD_TRACE
#define FLASHPP_SM90_BWD_TRACE 0
#endif

namespace flashpp::cuda::sm90 {

inline constexpr int kBwdTraceBlocks = 16384;  // blocks traced, in launch order (x fastest)

enum class BackwardTraceEvent : int {
  block_start_ns = 0,  // thread 0 at entry, globaltimer
  producer_start = 1,  // the producer thread before its first copy, clock
  kv_issued = 2,       // K and V copies issued
  loads_issued = 3,    // every step's copies issued
  consumer_start = 4,  // consumer 0's first thread at the start of its work, clock
  kv_ready = 5,        // K and V in shared memory
  step0_done = 6,      // the first step done (its dQ handed on)
  loop_done = 7,       // every step done
  dq_done = 8,         // the last dQ reduce-adds complete
  stored = 9,          // dK and dV stored
  end_ns = 10,         // consumer 0 after the stores, globaltimer
  sm = 11,             // %smid (not a clock)
  steps = 12,          // the block's query steps (not a clock)
  count = 13,
};

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ std::uint32_t backward_sm_id() {
  std::uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__device__ __forceinline__ void backward_stamp(std::uint64_t* trace, BackwardTraceEvent event,
                                               std::uint64_t value) {
  const std::int64_t block = blockIdx.x + static_cast<std::int64_t>(blockIdx.y) * gridDim.x;
  if (trace != nullptr && block < kBwdTraceBlocks) {
    trace[block * static_cast<int>(BackwardTraceEvent::count) + static_cast<int>(event)] = value;
  }
}

inline constexpr std::size_t kBwdTraceWords =
    std::size_t{kBwdTraceBlocks} * static_cast<int>(BackwardTraceEvent::count);

// The device buffer (made once, zeroed before every launch).
inline std::uint64_t* backward_trace_buffer(cudaStream_t stream) {
  static std::uint64_t* buffer = nullptr;
  return zeroed_trace_buffer(buffer, kBwdTraceWords, stream);
}

// After a launch: the buffer to FLASHPP_SM90_BWD_TRACE_FILE, headed by (blocks traced, events
// per block, blocks launched) as 64-bit words.
inline void write_backward_trace(const std::uint64_t* buffer, std::int64_t launched,
                                 cudaStream_t stream) {
  const std::uint64_t head[3] = {kBwdTraceBlocks, static_cast<int>(BackwardTraceEvent::count),
                                 static_cast<std::uint64_t>(launched)};
  write_trace_file("FLASHPP_SM90_BWD_TRACE_FILE", head, 3, buffer, kBwdTraceWords, stream);
}

}  // namespace flashpp::cuda::sm90
