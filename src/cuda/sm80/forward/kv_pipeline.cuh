// The sm80 forward's copies (kernel.cuh): its Q tile once, and its K/V tiles through a ring of
// `stages` shared-memory buffers with cp.async, the next tiles loading while the current one is
// used. The kernel calls prologue() and start_loop() before its loop, wait_and_prefetch(it) at
// the top of iteration `it` (tile `it` has landed; the tile stages - 1 ahead starts loading),
// wait_first_v(it) before P V, and drain() after the loop.
#pragma once

#include <cstdint>

#include "../../common/forward_params.hpp"
#include "../../common/swizzle.cuh"
#include "../../common/tile_copy.cuh"
#include "../../common/tile_range.hpp"
#include "../../ptx/cp_async.cuh"

namespace flashpp::cuda::sm80 {

// Shared memory of one block: the Q tile, then stage s's K tile at 2s and V tile at 2s + 1.
template <typename Traits>
struct ForwardSmem {
  using Element = typename Traits::Element;
  Element* q;
  Element* kv;
  __device__ __forceinline__ explicit ForwardSmem(unsigned char* raw)
      : q(reinterpret_cast<Element*>(raw)), kv(q + Traits::QTile::kElements) {}
  __device__ __forceinline__ Element* k_stage(int s) const {
    return kv + (2 * s) * Traits::KVTile::kElements;
  }
  __device__ __forceinline__ Element* v_stage(int s) const {
    return kv + (2 * s + 1) * Traits::KVTile::kElements;
  }
};

// kExtras: the kernel instantiation with softcap and dropout (see flash_fwd_kernel).
template <typename Traits, bool kExtras>
struct KvPipeline {
  using Element = typename Traits::Element;
  using KVTile = typename Traits::KVTile;
  static constexpr int kBlockN = Traits::kBlockN, kStages = Traits::kStages;
  static constexpr int kThreads = Traits::kThreads;

  // K/V tiles wholly inside [0, Nk) (all but possibly the last) take a lighter copy path when
  // the block's threads cover whole rows: each thread keeps one chunk column of the tile and
  // steps down by kRowStep rows, so the copy of a tile is one 64-bit add per chunk from a
  // per-thread source pointer that the main loop advances by one tile per iteration (no
  // per-tile n0 * stride products, no per-chunk selects). A chunk past the true head dim is
  // zero-filled (src-size 0, nothing read); it is given its row's chunk 0, an address inside
  // the tensor. Other shapes, the last partial tile, and the extras kernel (whose Philox code
  // leaves no registers for the loop-carried pointers: ptxas spills more) use load_tile_async.
  static constexpr bool kWholeRows = !kExtras && kThreads % KVTile::kChunks == 0 &&
                                     (kThreads / KVTile::kChunks) % 8 == 0;
  static constexpr int kRowStep = kWholeRows ? kThreads / KVTile::kChunks : 8;
  static constexpr int kCopies = KVTile::kElements / 8 / kThreads;  // chunks per thread
  // The first tile's K and V go into separate copy groups (see prologue), except in the extras
  // kernel.
  static constexpr bool kSplitFirstTile = !kExtras;

  const ForwardParams& p;
  const ForwardSmem<Traits>& smem;
  const Element* q_gmem;
  const Element* k_gmem;
  const Element* v_gmem;
  int chunks_valid;
  int tid;
  // This thread's chunk of a whole-row copy: row row0, chunk `chunk` (column col).
  int row0, chunk;
  bool chunk_valid;
  int col, dst_offset;
  // The key tiles of the walk, [tile_begin, tile_begin + num_tiles); tiles are counted from
  // tile_begin in 32-bit (fewer than 2^31 per row block), and there is at least one.
  std::int64_t tile_begin, tile_end;
  int num_tiles;
  // Prefetches of tiles it < num_full_tiles read only rows < Nk; the whole-row copy of the next
  // one reads from k_next / v_next, advanced by one tile per iteration.
  int num_full_tiles = 0;
  const Element* k_next = nullptr;
  const Element* v_next = nullptr;

  __device__ __forceinline__ KvPipeline(const ForwardParams& p_, const ForwardSmem<Traits>& smem_,
                                        std::int64_t b, std::int64_t h, std::int64_t h_kv,
                                        std::int64_t m0, const KeyTileRange& keys, int tid_)
      : p(p_), smem(smem_),
        q_gmem(static_cast<const Element*>(p_.q) + b * p_.q_strides.batch +
               h * p_.q_strides.head + m0 * p_.q_strides.row),
        k_gmem(static_cast<const Element*>(p_.k) + b * p_.k_strides.batch +
               h_kv * p_.k_strides.head),
        v_gmem(static_cast<const Element*>(p_.v) + b * p_.v_strides.batch +
               h_kv * p_.v_strides.head),
        chunks_valid(p_.head_dim / 8), tid(tid_),
        row0(tid_ / KVTile::kChunks), chunk(tid_ % KVTile::kChunks),
        chunk_valid(chunk < chunks_valid), col(chunk_valid ? chunk * 8 : 0),
        dst_offset(KVTile::chunk_offset(row0, chunk)), tile_begin(keys.begin), tile_end(keys.end),
        num_tiles(static_cast<int>(keys.end - keys.begin)) {}

  // A tile wholly inside [0, Nk) by whole rows; k_from / v_from: this thread's first chunk.
  __device__ __forceinline__ void copy_full_tile(const Element* k_from, const Element* v_from,
                                                 int stage) const {
    Element* k_to = smem.k_stage(stage) + dst_offset;
    Element* v_to = smem.v_stage(stage) + dst_offset;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      cp_async_16(k_to + i * KVTile::kRowStepElements(kRowStep), k_from, chunk_valid);
      cp_async_16(v_to + i * KVTile::kRowStepElements(kRowStep), v_from, chunk_valid);
      k_from += kRowStep * p.k_strides.row;
      v_from += kRowStep * p.v_strides.row;
    }
  }

  // A tile whose rows may pass Nk: the checked loader zero-fills rows >= Nk.
  __device__ __forceinline__ void load_partial_tile(std::int64_t tile, int stage) const {
    const std::int64_t n0 = tile * kBlockN;
    load_tile_async<KVTile, kThreads>(smem.k_stage(stage), k_gmem + n0 * p.k_strides.row,
                                      p.k_strides.row, p.k_len - n0, chunks_valid, tid);
    load_tile_async<KVTile, kThreads>(smem.v_stage(stage), v_gmem + n0 * p.v_strides.row,
                                      p.v_strides.row, p.k_len - n0, chunks_valid, tid);
  }

  __device__ __forceinline__ void load_tile(std::int64_t tile, int stage) const {
    const std::int64_t n0 = tile * kBlockN;
    const Element* k_src = k_gmem + n0 * p.k_strides.row;
    const Element* v_src = v_gmem + n0 * p.v_strides.row;
    if (n0 + kBlockN <= p.k_len) {
      if constexpr (kWholeRows) {
        copy_full_tile(k_src + row0 * p.k_strides.row + col,
                       v_src + row0 * p.v_strides.row + col, stage);
      } else {
        load_tile_async<KVTile, kThreads, false>(smem.k_stage(stage), k_src, p.k_strides.row,
                                                 kBlockN, chunks_valid, tid);
        load_tile_async<KVTile, kThreads, false>(smem.v_stage(stage), v_src, p.v_strides.row,
                                                 kBlockN, chunks_valid, tid);
      }
    } else {
      load_partial_tile(tile, stage);
    }
  }

  // One K or V tile alone.
  __device__ __forceinline__ void load_single_tile(Element* dst, const Element* gmem,
                                                   std::int64_t row_stride,
                                                   std::int64_t tile) const {
    const std::int64_t n0 = tile * kBlockN;
    if (n0 + kBlockN <= p.k_len) {
      load_tile_async<KVTile, kThreads, false>(dst, gmem + n0 * row_stride, row_stride, kBlockN,
                                               chunks_valid, tid);
    } else {
      load_tile_async<KVTile, kThreads>(dst, gmem + n0 * row_stride, row_stride, p.k_len - n0,
                                        chunks_valid, tid);
    }
  }

  // The Q tile (rows m0 .. of this block) and the first kStages - 1 K/V tiles, in copy groups:
  // G0 = Q + K0, G1 = V0, then one group per tile 1 .. stages - 2. The first tile's scores wait
  // only for G0, so V0 lands while Q K0^T is computed; P V0 waits for G1. From tile 1 on, tile t
  // is in group t + 1 and kStages + t groups are committed when iteration t waits, which leaves
  // the usual kStages - 2 pending. The extras kernel keeps one group for Q + K0 + V0 (its extra
  // first-tile wait costs ptxas spills there), and every tile t in group t.
  __device__ __forceinline__ void prologue(std::int64_t m0) {
    load_tile_async<typename Traits::QTile, kThreads>(smem.q, q_gmem, p.q_strides.row,
                                                      p.q_len - m0, chunks_valid, tid);
    if constexpr (kSplitFirstTile) {
      load_single_tile(smem.k_stage(0), k_gmem, p.k_strides.row, tile_begin);
      cp_async_commit();
      load_single_tile(smem.v_stage(0), v_gmem, p.v_strides.row, tile_begin);
    } else {
      load_tile(tile_begin, 0);
    }
    cp_async_commit();
#pragma unroll
    for (int s = 1; s < kStages - 1; ++s) {
      if (s < num_tiles) load_tile(tile_begin + s, s);
      cp_async_commit();  // committed even when empty: the wait counts stay uniform
    }
  }

  // Before the loop: where its prefetches start.
  __device__ __forceinline__ void start_loop() {
    const std::int64_t full_tile_end = p.k_len / kBlockN < tile_end ? p.k_len / kBlockN : tile_end;
    num_full_tiles = static_cast<int>(full_tile_end - tile_begin);
    // The whole-row copy's sources for the first in-loop prefetch, tile_begin + kStages - 1.
    const std::int64_t first_prefetch_n0 = (tile_begin + kStages - 1) * kBlockN;
    k_next = k_gmem + (first_prefetch_n0 + row0) * p.k_strides.row + col;
    v_next = v_gmem + (first_prefetch_n0 + row0) * p.v_strides.row + col;
  }

  // Waits until tile `it` (counted from tile_begin) has landed for every thread (on the first
  // tile: Q and K0; V0 may be in flight) and every warp is done with the stage the prefetch
  // overwrites (the one used in the previous iteration), then starts the copy of tile
  // it + kStages - 1. Returns tile it's stage.
  __device__ __forceinline__ int wait_and_prefetch(int it) {
    if (kSplitFirstTile && it == 0) {
      cp_async_wait<kStages - 1>();
    } else {
      cp_async_wait<kStages - 2>();
    }
    __syncthreads();
    const int prefetch = it + kStages - 1;
    if constexpr (kWholeRows) {
      if (prefetch < num_full_tiles) {
        copy_full_tile(k_next, v_next, prefetch % kStages);
      } else if (prefetch < num_tiles) {  // the last tile, cut by Nk
        load_partial_tile(tile_begin + prefetch, prefetch % kStages);
      }
    } else {
      if (prefetch < num_tiles) load_tile(tile_begin + prefetch, prefetch % kStages);
    }
    if constexpr (kWholeRows) {
      k_next += kBlockN * p.k_strides.row;
      v_next += kBlockN * p.v_strides.row;
    }
    cp_async_commit();
    return it % kStages;
  }

  // Before the first P V: V0 (group G1) has landed; kStages + 1 groups are committed by now.
  __device__ __forceinline__ void wait_first_v(int it) const {
    if (kSplitFirstTile && it == 0) {
      cp_async_wait<kStages - 1>();
      __syncthreads();
    }
  }

  // No copy left in flight into shared memory that is about to be freed.
  __device__ __forceinline__ static void drain() { cp_async_wait<0>(); }
};

}  // namespace flashpp::cuda::sm80
