// The ring of shared-memory slots through which the sm90 forward's producer warps 1-3 hand each
// key tile's dropout decisions to the consumer warpgroups (the layout: dropout_bits.hpp).
//
// Slot n % kSlots takes the block's n-th key tile (n counts on across items, as the K/V ring's
// position does). Each slot has a full barrier (every producer dropout thread arrives after its
// own stores) and an empty barrier (every consumer thread arrives after its own load: racecheck
// follows a reading thread's own arrival only, perf-notes session 13).
#pragma once

#include <cstdint>

#include "../../common/forward_params.hpp"
#include "../../common/forward_steps.cuh"
#include "../../ptx/mbarrier.cuh"
#include "../../ptx/tma.cuh"
#include "dropout_bits.hpp"

namespace flashpp::cuda::sm90 {

struct DropoutBitsRing {
  using Layout = DropoutBitsLayout;
  unsigned char* base;  // 16-byte aligned, Layout::kBytes

  __device__ std::uint32_t* slot(int n) const {
    return reinterpret_cast<std::uint32_t*>(base + (n % Layout::kSlots) * Layout::kSlotBytes);
  }
  __device__ std::uint64_t* full(int n) const {
    return reinterpret_cast<std::uint64_t*>(base + Layout::kSlots * Layout::kSlotBytes) +
           n % Layout::kSlots;
  }
  __device__ std::uint64_t* empty(int n) const { return full(n) + Layout::kSlots; }
  // The parity of the slot's use by tile n.
  __device__ static std::uint32_t phase(int n) {
    return static_cast<std::uint32_t>(n / Layout::kSlots) & 1u;
  }

  __device__ void init() const {
    for (int s = 0; s < Layout::kSlots; ++s) {
      ptx::mbarrier_init(full(s), Layout::kProducerThreads);
      ptx::mbarrier_init(empty(s), Layout::kConsumerThreads);
    }
  }

  // Producer side, one dropout thread (producer warp 1..3, lane): the decisions of the block's
  // n-th key tile (first key key0) for the query tile from m0 of head bh, once the consumers have
  // read the slot's previous tile.
  __device__ void produce(int n, const detail::DropoutParams& d, std::uint32_t bh, std::int64_t m0,
                          std::int64_t key0, int producer_warp, int lane) const {
    if (n >= Layout::kSlots) mbarrier_wait(empty(n), phase(n) ^ 1u);
    std::uint32_t* words = slot(n);
    const int even = dropout_bits_even_lane(lane), h = dropout_bits_half(lane);
    for (int cw = producer_warp; cw < Layout::kConsumerWarps; cw += Layout::kProducerWarps) {
      const DropoutBitsUnit unit = make_dropout_bits_unit(
          d, bh, static_cast<std::uint32_t>(m0 + 16 * cw), static_cast<std::uint32_t>(key0), lane);
      const int ct = 32 * cw + even;
      *reinterpret_cast<uint2*>(words + 4 * ct + 2 * h) = make_uint2(unit.even[0], unit.even[1]);
      *reinterpret_cast<uint2*>(words + 4 * (ct + 4) + 2 * h) = make_uint2(unit.odd[0], unit.odd[1]);
    }
    ptx::mbarrier_arrive(full(n));
  }

  // Consumer side, consumer thread ct: the sign words of tile n (once the producer warps have
  // written them), in the form the consumers' apply_dropout_signs reads; the slot is released.
  template <typename Traits>
  __device__ void consume(int n, int ct, DropoutSigns<Traits>& keep) const {
    static_assert(Traits::kBlockN == 128 && Traits::kMTiles == 1, "the slot's layout");
    mbarrier_wait(full(n), phase(n));
    const uint4 loaded = *reinterpret_cast<const uint4*>(slot(n) + 4 * ct);
    ptx::mbarrier_arrive(empty(n));
    const std::uint32_t words[4] = {loaded.x, loaded.y, loaded.z, loaded.w};
#pragma unroll
    for (int q = 0; q < Traits::kNTiles / 4; ++q) {
      KeepSigns& pair = keep.block_pair[0][q];
      dropout_bits_block_words(words, 2 * q, pair.a[0], pair.a[1]);
      dropout_bits_block_words(words, 2 * q + 1, pair.b[0], pair.b[1]);
    }
  }

  // A consumer with no rows in the item: the slot of tile n released once it is written (an
  // earlier arrival would count towards the slot's previous use).
  __device__ void skip(int n) const {
    mbarrier_wait(full(n), phase(n));
    ptx::mbarrier_arrive(empty(n));
  }
};

}  // namespace flashpp::cuda::sm90
