// Ring attention's schedule, shared by the host code (ring.cpp), the merge kernel
// (ring_kernels.cu) and the CPU tests (tests/cpu/test_ring_schedule.cpp); the merge itself is
// common/lse_merge.hpp's. No NCCL, no CUDA runtime: python/flashpp/_ring_schedule.py is the
// Python twin of the schedule.
//
// W ranks; rank r holds its slice of the sequence (n rows). At step s (0 <= s < W) it holds the
// K/V block of rank (r - s) mod W; K/V move from rank r to rank r + 1 after every step.
// Causal: the zigzag split (2W chunks of c = n/2 rows, rank r holds chunks r and 2W-1-r in that
// order), and every step does n*c query-key pairs:
//   step 0:        all n queries x all n keys, causal (local order = global order);
//   source < r:    all n queries x the source's first chunk (keys [0, c)), no mask;
//   source > r:    the second local chunk (queries [c, n)) x all n keys, no mask.
// Non-causal: every step is the full block.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.hpp"

namespace flashpp::ring_detail {

struct Piece {
  std::int64_t q0, q1;  // local query rows [q0, q1)
  std::int64_t k0, k1;  // rows [k0, k1) of the K/V block held
  bool causal;          // top-left causal within the piece
};

inline int source_rank(int world, int rank, int step) {
  return ((rank - step) % world + world) % world;
}

inline Piece ring_piece(int world, int rank, int step, std::int64_t n, bool causal) {
  if (!causal) return {0, n, 0, n, false};
  const std::int64_t half = n / 2;
  if (step == 0) return {0, n, 0, n, true};
  if (source_rank(world, rank, step) < rank) return {0, n, 0, half, false};
  return {half, n, 0, n, false};
}

// Global position of local row i of `rank` in the zigzag split of a sequence of W*n rows.
inline std::int64_t zigzag_position(int world, int rank, std::int64_t n, std::int64_t i) {
  const std::int64_t c = n / 2;
  const std::int64_t chunk = i < c ? rank : 2 * world - 1 - rank;
  return chunk * c + (i % c);
}

}  // namespace flashpp::ring_detail
