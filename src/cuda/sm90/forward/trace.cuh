// Per-item clock stamps of the sm90 forward, for finding where an item's time goes (a timing
// tool, off by default). Built with -DFLASHPP_SM90_FWD_TRACE=1, every block of a launch writes
// clock64() at fixed points of each of its first kTraceItems items, one slot per role (the
// producer, each consumer warpgroup) and event (ForwardTraceEvent), into a device buffer; after
// each launch the host copies it out and, where FLASHPP_SM90_FWD_TRACE_FILE names a file, writes
// it there (the last launch wins; tools/fwd_trace.py reads it). The copy synchronises the stream
// after every launch, so time whole calls of a traced build only to compare stamps. The flag
// changes Sm90ForwardParams, which the FP8 forward's objects share: compile every object that
// includes forward/kernel.cuh with it (tools/object_variant.sh BUILD OUT
// "-DFLASHPP_SM90_FWD_TRACE=1" 'sm90_fwd'), never a subset, or the launch code the objects share
// copies the parameters with the wrong size.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../common/trace_file.hpp"

#ifndef FLASHPP_SM90_FWD_TRACE
#define FLASHPP_SM90_FWD_TRACE 0
#endif

namespace flashpp::cuda::sm90 {

inline constexpr int kTraceBlocks = 512;  // blocks traced (the persistent grid's are fewer)
inline constexpr int kTraceItems = 48;     // items traced per block
inline constexpr int kTraceRoles = 4;      // producer + up to three consumer warpgroups
inline constexpr int kTraceEvents = 10;

// Consumer events per item (role 1 + consumer); the producer (role 0) uses item_start,
// loads_issued and sm_id. `tiles` holds the item's key-tile count, not a clock.
enum class ForwardTraceEvent : int {
  item_start = 0,    // before the wait for the item's Q tile
  q_ready = 1,       // Q is in shared memory
  k0_ready = 2,      // the first K tile is in shared memory
  turn0 = 3,         // the first issue turn is this warpgroup's
  s0_done = 4,       // the first S = Q K^T has landed
  p0_ready = 5,      // the first tile's softmax is done (P in registers)
  loop_done = 6,     // the S(j) + P V(j-1) steps are done
  last_pv_done = 7,  // the last P V has landed
  output_done = 8,   // the epilogue has stored O and lse
  tiles = 9,
  loads_issued = 1,  // producer: every copy of the item issued
  sm_id = 2,         // producer, item 0: the SM the block runs on (%smid), not a clock
};

__device__ __forceinline__ std::uint32_t sm_id() {
  std::uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__device__ __forceinline__ void trace_stamp(std::uint64_t* trace, int item, int role,
                                            ForwardTraceEvent event, std::uint64_t value) {
  if (trace != nullptr && item < kTraceItems && blockIdx.x < kTraceBlocks) {
    trace[((static_cast<std::int64_t>(blockIdx.x) * kTraceItems + item) * kTraceRoles + role) *
              kTraceEvents +
          static_cast<int>(event)] = value;
  }
}

inline constexpr std::size_t kTraceWords =
    std::size_t{kTraceBlocks} * kTraceItems * kTraceRoles * kTraceEvents;

// The device buffer (made once, zeroed before every launch).
inline std::uint64_t* trace_buffer(cudaStream_t stream) {
  static std::uint64_t* buffer = nullptr;
  return zeroed_trace_buffer(buffer, kTraceWords, stream);
}

// After a launch: the buffer to FLASHPP_SM90_FWD_TRACE_FILE, headed by the five sizes (blocks,
// items, roles, events, consumers) as 64-bit words.
inline void write_trace(const std::uint64_t* buffer, int consumers, cudaStream_t stream) {
  const std::uint64_t head[5] = {kTraceBlocks, kTraceItems, kTraceRoles, kTraceEvents,
                                 static_cast<std::uint64_t>(consumers)};
  write_trace_file("FLASHPP_SM90_FWD_TRACE_FILE", head, 5, buffer, kTraceWords, stream);
}

}  // namespace flashpp::cuda::sm90
