// The FP8 forward's V transposition pass (v_transpose.hpp): one kernel, compiled once.
#include "v_transpose.hpp"

#include <algorithm>
#include <cstdint>

#include "../../common/check_cuda.hpp"
#include "../../ptx/griddepcontrol.cuh"
#include "fp8_fragments.cuh"
#include "fp8_layout.hpp"

namespace flashpp::cuda::sm90::fp8 {
namespace {

struct VTransposeParams {
  const unsigned char* v;  // [B, Nk, Hkv, D] e4m3, D contiguous
  std::int64_t v_batch_stride, v_row_stride, v_head_stride;  // elements (bytes)
  unsigned char* vt;       // [B][Hkv][Dp][Nk16]
  int keys, keys16, head_dim, padded_head_dim, kv_heads, batch_heads;
};

// One block: 128 keys (a tile) x kVtTileRows head-dim rows (128; fewer for a 64-column Vt) of one
// (batch, kv head) at a time (blockIdx.z, then every gridDim.z-th: the grid's z extent stops at
// 65535); kVtThreads (256) threads.
// Load: V's 128 rows x kVtTileRows bytes, four 16-byte loads a thread, all issued before the first
// is used (the pass is bound by the bytes in flight: with one 16-byte load a thread it moved
// 2.9 TB/s on an H200, 3.7 TB/s this way; perf-notes session 25), into shared memory (rows
// kVtTileRows + 4 bytes apart).
// Transpose: thread (w, l) of warp w takes the four keys of positions 4l .. 4l + 3 (16G + 2t +
// {0, 1, 8, 9}: key_at_position) at head-dim columns 4c .. 4c + 3 for c = w, w + kVtWarps, ...,
// turns each 4 x 4 bytes around with byte permutes (transpose_4x4_bytes) and writes one 4-byte
// word to each of the four Vt rows: a warp writes 128 contiguous bytes a row.
// FLASHPP_FP8_VT_TILE_ROWS (64 or 128) and FLASHPP_FP8_VT_THREADS (128 or 256): compile
// definitions for A/B runs of the block's shape (loads a thread = 8 x rows / threads; session 25
// run 4, ncu, H200, 32 MB of V: 64 x 128 18.8-19.2 us, 128 x 128 17.8-18.3, 128 x 256 17.2-17.6).
#ifndef FLASHPP_FP8_VT_TILE_ROWS
#define FLASHPP_FP8_VT_TILE_ROWS 128
#endif
#ifndef FLASHPP_FP8_VT_THREADS
#define FLASHPP_FP8_VT_THREADS 256
#endif
constexpr int kVtTileKeys = 128, kVtTileRows = FLASHPP_FP8_VT_TILE_ROWS;
constexpr int kVtThreads = FLASHPP_FP8_VT_THREADS, kVtTileStride = kVtTileRows + 4;
constexpr int kVtChunksPerKey = kVtTileRows / 16;                              // 16-byte chunks
constexpr int kVtLoadsPerThread = kVtTileKeys * kVtChunksPerKey / kVtThreads;  // 4 by default
constexpr int kVtWarps = kVtThreads / 32;

__global__ void __launch_bounds__(kVtThreads) fp8_v_transpose_kernel(const VTransposeParams p) {
  __shared__ __align__(16) unsigned char tile[kVtTileKeys * kVtTileStride];
  // The FP8 forward, launched dependent on this pass, may be scheduled now: it waits for the
  // whole pass (griddepcontrol.wait) before its first Vt copy.
  allow_dependent_launch();
  const int key0 = blockIdx.x * kVtTileKeys;
  const int d0 = blockIdx.y * kVtTileRows;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int bh = blockIdx.z; bh < p.batch_heads; bh += gridDim.z) {  // b * kv_heads + h
    const int b = bh / p.kv_heads, h = bh % p.kv_heads;
    const unsigned char* v = p.v + b * p.v_batch_stride + h * p.v_head_stride;
    __syncthreads();  // the previous (batch, head)'s transposition has read the tile
    {
      const int chunk = threadIdx.x % kVtChunksPerKey, d = d0 + 16 * chunk;
      uint4 x[kVtLoadsPerThread];
      // D is a multiple of 16 (the CUDA FP8 path's rule) and rows are 16-byte aligned (the copy
      // engine's rule, checked on V's map): a 16-byte group is wholly inside or outside [0, D).
#pragma unroll
      for (int i = 0; i < kVtLoadsPerThread; ++i) {
        const int key = key0 + threadIdx.x / kVtChunksPerKey + i * (kVtThreads / kVtChunksPerKey);
        x[i] = make_uint4(0, 0, 0, 0);
        if (key < p.keys && d < p.head_dim) x[i] = *reinterpret_cast<const uint4*>(v + key * p.v_row_stride + d);
      }
#pragma unroll
      for (int i = 0; i < kVtLoadsPerThread; ++i) {
        const int k = threadIdx.x / kVtChunksPerKey + i * (kVtThreads / kVtChunksPerKey);
        auto* row = reinterpret_cast<std::uint32_t*>(tile + k * kVtTileStride + 16 * chunk);
        row[0] = x[i].x;
        row[1] = x[i].y;
        row[2] = x[i].z;
        row[3] = x[i].w;
      }
    }
    __syncthreads();
    const int pos = 4 * lane;
    if (key0 + pos < p.keys16) {  // else past the last 16-key group: no such position
#pragma unroll
      for (int c = warp; c < kVtTileRows / 4; c += kVtWarps) {
        if (d0 + 4 * c >= p.padded_head_dim) break;  // a 128-row tile of a 64-column Vt
        std::uint32_t w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          w[e] = *reinterpret_cast<const std::uint32_t*>(tile + key_at_position(pos + e) * kVtTileStride + 4 * c);
        }
        transpose_4x4_bytes(w);  // w[e]: column 4c + e, the four keys in position order
        unsigned char* vt = p.vt + (static_cast<std::int64_t>(bh) * p.padded_head_dim + d0 + 4 * c) * p.keys16 + key0 + pos;
#pragma unroll
        for (int e = 0; e < 4; ++e) *reinterpret_cast<std::uint32_t*>(vt + static_cast<std::int64_t>(e) * p.keys16) = w[e];
      }
    }
  }
}

}  // namespace

void transpose_v(const detail::ForwardArgs& args, int padded_head_dim, unsigned char* vt,
                 cudaStream_t stream) {
  const detail::Problem& pr = args.problem;
  VTransposeParams t{};
  t.v = static_cast<const unsigned char*>(args.v.data);
  t.v_batch_stride = args.v.strides[0];
  t.v_row_stride = args.v.strides[1];
  t.v_head_stride = args.v.strides[2];
  t.vt = vt;
  t.keys = static_cast<int>(pr.Nk);
  t.keys16 = static_cast<int>(vt_keys16(pr.Nk));
  t.head_dim = static_cast<int>(pr.D);
  t.padded_head_dim = padded_head_dim;
  t.kv_heads = static_cast<int>(pr.Hkv);
  t.batch_heads = static_cast<int>(pr.B * pr.Hkv);
  const dim3 grid(static_cast<unsigned>((t.keys16 + kVtTileKeys - 1) / kVtTileKeys),
                  static_cast<unsigned>((padded_head_dim + kVtTileRows - 1) / kVtTileRows),
                  static_cast<unsigned>(std::min(t.batch_heads, 65535)));
  fp8_v_transpose_kernel<<<grid, kVtThreads, 0, stream>>>(t);
  check_cuda(cudaGetLastError(), "sm90 FP8 V transposition launch");
}

}  // namespace flashpp::cuda::sm90::fp8
