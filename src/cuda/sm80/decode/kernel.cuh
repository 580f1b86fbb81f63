// The sm80-family decode kernels: a few queries against a long KV cache.
//
// Decoding is memory-bound: each step reads the whole cache once, with a handful of queries. So
//   - the query heads of a GQA group and the Nq queries share each K/V row read: they are packed
//     into the M dimension of one mma tile (row r = query r / group, head r % group), M tiles of
//     16 rows;
//   - a block (4 warps) owns one (sequence, kv head, M tile, key split); its warps take the key
//     tiles of its split in turn, each with a private cp.async pipeline of kStages tiles (K and V,
//     16 keys each, swizzled so that ldmatrix is conflict-free), and merge their online-softmax
//     states through shared memory at the end;
//   - the split count is chosen from the SM count (split_kv.hpp) so that B x Hkv x M tiles x
//     splits fills the GPU; each split writes its normalised partial O and natural-log lse in
//     float32, and a combine kernel merges them by lse (a split that saw no key has lse = -inf and
//     weight 0, so an all-masked row gives O = 0, never NaN): decode_combine_rows_kernel, one
//     block per output row with every partial's load in flight at once, launched as a
//     programmatic dependent of the decode kernel on sm90 (its blocks are resident and waiting
//     when the decode kernel ends); decode_combine_kernel, the legacy variant's, walks the splits
//     one after another per row (lse_merge.hpp), two dependent L2 round trips per split;
//   - a paged cache is read through the block table one 16-key tile at a time (pages hold a
//     multiple of 16 rows); a page id outside [0, num_pages) and rows past the sequence's length
//     are zero-filled by cp.async and masked, so nothing is read out of bounds.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../../../common/lse_merge.hpp"
#include "../../../common/split_kv.hpp"
#include "../../ptx/cp_async.cuh"
#include "../../ptx/griddepcontrol.cuh"
#include "../../ptx/ldmatrix.cuh"
#include "../../common/math.cuh"
#include "../../ptx/mma.cuh"
#include "../../common/poison.cuh"
#include "params.hpp"

namespace flashpp::cuda::decode {

inline constexpr int kTileKeys = 16;
inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kMaxSplits = 128;  // the combine kernels hold one split per thread

template <int D>
struct DecodeConfig {
  static_assert(D % 64 == 0, "the swizzle needs at least 8 chunks of 16 bytes per row");
  static constexpr int kStages = D >= 256 ? 2 : 3;
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kTileElements = kTileKeys * D;
  static constexpr int kPipelineBytes = kWarps * kStages * 2 * kTileElements * 2;
  static constexpr int kMergeBytes = kWarps * 16 * (D + 2) * 4;
  static constexpr int kSmemBytes = kPipelineBytes > kMergeBytes ? kPipelineBytes : kMergeBytes;
};

// Element offset of 16-byte chunk `chunk` of row `row` in a [16][D] tile: chunks are XORed with
// the row's low 3 bits, so the 8 rows an ldmatrix reads at one column hit 8 different banks.
template <int D>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) * 8);
}

__device__ __forceinline__ std::uint32_t load_pair(const std::uint16_t* row, int col) {
  return static_cast<std::uint32_t>(row[col]) | (static_cast<std::uint32_t>(row[col + 1]) << 16);
}

template <typename Element, int D>
__global__ void __launch_bounds__(kThreads) decode_kernel(const DecodeParams p) {
  using Config = DecodeConfig<D>;
  constexpr int kStages = Config::kStages;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  poison_dynamic_smem(smem_raw);
  auto* smem = reinterpret_cast<Element*>(smem_raw);
  // The combine kernel (when launched as a programmatic dependent) may be scheduled now: it
  // waits for this grid's completion before it reads the partials.
  allow_dependent_launch();

  const int split = blockIdx.x;
  const int hkv = blockIdx.y / p.m_tiles;
  const int m_tile = blockIdx.y % p.m_tiles;
  const int b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int rows_total = p.group * p.Nq;

  // The length is loaded first and used only after Q's loads are issued, so that the two
  // memory round trips at the start of the block overlap (the K/V loads need the length).
  int cached = p.seqlens[b * p.seqlens_stride];

  // Q fragments of rows g and g + 8 of the M tile (zero beyond the last row).
  std::uint32_t qa[D / 16][4];
  int row_query[2], row_head[2];
  {
    const auto* q = static_cast<const std::uint16_t*>(p.q);
    const std::uint16_t* rowp[2];
    for (int r = 0; r < 2; ++r) {
      const int row = m_tile * 16 + g + 8 * r;
      const bool valid = row < rows_total;
      row_query[r] = valid ? row / p.group : 0;
      row_head[r] = hkv * p.group + (valid ? row % p.group : 0);
      rowp[r] = valid ? q + b * p.q_stride[0] + row_query[r] * p.q_stride[1] +
                            row_head[r] * p.q_stride[2]
                      : nullptr;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int c0 = kk * 16 + 2 * t, c1 = c0 + 8;
      qa[kk][0] = rowp[0] ? load_pair(rowp[0], c0) : 0u;
      qa[kk][1] = rowp[1] ? load_pair(rowp[1], c0) : 0u;
      qa[kk][2] = rowp[0] ? load_pair(rowp[0], c1) : 0u;
      qa[kk][3] = rowp[1] ? load_pair(rowp[1], c1) : 0u;
    }
  }

  // Keys of this sequence: the cached ones (clamped: never trust an unchecked length) plus the
  // appended rows. (The length's load was issued before Q's.)
  cached = min(max(cached, 0), p.capacity - p.Nnew);
  const int nk = cached + p.Nnew;
  const std::int64_t shift = static_cast<std::int64_t>(nk) - p.Nq;  // bottom-right

  // The keys any row of this M tile may see, in whole tiles, cut into p.splits spans; the warps
  // take the tiles of this block's span in turn.
  const int i_first = (m_tile * 16) / p.group;
  const int i_last = min(p.Nq - 1, (m_tile * 16 + 15) / p.group);
  const detail::KeyRange keys = detail::decode_key_range(nk, p.Nq, i_first, i_last, p.masked,
                                                         p.window_left, p.window_right);
  const detail::TileSpan span = detail::split_tiles(keys, kTileKeys, p.splits, split);
  const int t_begin = span.begin;
  const int my_tiles = detail::warp_tile_count(span, warp, kWarps);

  const auto* kbase = static_cast<const Element*>(p.k);
  const auto* vbase = static_cast<const Element*>(p.v);
  // Page of the tile starting at key0 (-1 when the table entry is out of range).
  auto page_of = [&](int key0, int& row0) -> std::int64_t {
    if (p.block_table == nullptr) {
      row0 = key0;
      return b;
    }
    const std::int64_t page =
        p.block_table[b * p.table_stride[0] + (key0 / p.page_size) * p.table_stride[1]];
    row0 = key0 % p.page_size;
    return page >= 0 && page < p.num_pages ? page : -1;
  };
  Element* warp_smem = smem + warp * kStages * 2 * Config::kTileElements;
  auto issue = [&](int k) {
    if (k < my_tiles) {
      Element* ks = warp_smem + (k % kStages) * 2 * Config::kTileElements;
      Element* vs = ks + Config::kTileElements;
      const int key0 = (t_begin + warp + k * kWarps) * kTileKeys;
      int row0 = 0;
      const std::int64_t page = page_of(key0, row0);
#pragma unroll
      for (int it = 0; it < kTileKeys * Config::kChunks / 32; ++it) {
        const int idx = lane + it * 32;
        const int row = idx / Config::kChunks, chunk = idx % Config::kChunks;
        const bool ok = page >= 0 && key0 + row < nk;
        const std::int64_t r = row0 + row;
        const Element* ksrc =
            ok ? kbase + page * p.k_stride[0] + r * p.k_stride[1] + hkv * p.k_stride[2] + chunk * 8
               : kbase;
        const Element* vsrc =
            ok ? vbase + page * p.v_stride[0] + r * p.v_stride[1] + hkv * p.v_stride[2] + chunk * 8
               : vbase;
        cp_async_16(ks + swizzled<D>(row, chunk), ksrc, ok);
        cp_async_16(vs + swizzled<D>(row, chunk), vsrc, ok);
      }
    }
    cp_async_commit();  // an empty group past the end keeps the wait counts uniform
  };

  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};

#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) issue(k);
  for (int k = 0; k < my_tiles; ++k) {
    issue(k + kStages - 1);
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const Element* ks = warp_smem + (k % kStages) * 2 * Config::kTileElements;
    const Element* vs = ks + Config::kTileElements;
    const int key0 = (t_begin + warp + k * kWarps) * kTileKeys;
    int row0 = 0;
    const bool page_ok = page_of(key0, row0) >= 0;

    // S = Q K^T for 16 rows x 16 keys.
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int m = lane / 8;
      std::uint32_t kb[4];
      ldmatrix_x4(kb, shared_address(ks + swizzled<D>((m / 2) * 8 + lane % 8, kk * 2 + (m % 2))));
      const std::uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
      mma_m16n8k16<Element>(s[0], qa[kk], b0);
      mma_m16n8k16<Element>(s[1], qa[kk], b1);
    }
    // Scale (and soft-cap) into the log2 domain; mask.
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + nt * 8 + 2 * t + (e & 1);
        float x = s[nt][e];
        x = p.softcap > 0.0f ? p.softcap * tanhf(x * p.scale / p.softcap) * kLog2e
                             : x * p.scale_log2;
        bool visible = page_ok && key < nk;
        if (p.masked) {
          const std::int64_t d = key - (row_query[e / 2] + shift);
          visible = visible && d >= -p.window_left && d <= p.window_right;
        }
        s[nt][e] = visible ? x : -INFINITY;
      }
    }
    // Online softmax, rows g (r = 0) and g + 8 (r = 1).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(row_max[r], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float correction = fast_exp2(row_max[r] - m_use);
      row_max[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        s[nt][2 * r] = fast_exp2(s[nt][2 * r] - m_use);
        s[nt][2 * r + 1] = fast_exp2(s[nt][2 * r + 1] - m_use);
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      row_sum[r] = row_sum[r] * correction + sum;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        acc[n][2 * r] *= correction;
        acc[n][2 * r + 1] *= correction;
      }
    }
    // O += P V: P's accumulator fragments are the A fragment of a 16x16 tile.
    const std::uint32_t pa[4] = {pack_pair<Element>(s[0][0], s[0][1]),
                                 pack_pair<Element>(s[0][2], s[0][3]),
                                 pack_pair<Element>(s[1][0], s[1][1]),
                                 pack_pair<Element>(s[1][2], s[1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      const int m = lane / 8;
      std::uint32_t vb[4];
      ldmatrix_x4_trans(vb, shared_address(vs + swizzled<D>((m % 2) * 8 + lane % 8, dp * 2 + m / 2)));
      const std::uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
      mma_m16n8k16<Element>(acc[2 * dp], pa, b0);
      mma_m16n8k16<Element>(acc[2 * dp + 1], pa, b1);
    }
    __syncwarp();
  }
  cp_async_wait<0>();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
  }
  __syncthreads();  // every warp is done with its pipeline buffers: reuse them for the merge

  // Merge the warps' states: O_w, m_w, l_w -> block partial.
  auto* merge_o = reinterpret_cast<float*>(smem_raw);                // [kWarps][16][D]
  float* merge_m = merge_o + kWarps * 16 * D;                        // [kWarps][16]
  float* merge_l = merge_m + kWarps * 16;                            // [kWarps][16]
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int col = n * 8 + 2 * t;
    float* o0 = merge_o + (warp * 16 + g) * D + col;
    float* o1 = merge_o + (warp * 16 + g + 8) * D + col;
    o0[0] = acc[n][0];
    o0[1] = acc[n][1];
    o1[0] = acc[n][2];
    o1[1] = acc[n][3];
  }
  if (t == 0) {
    merge_m[warp * 16 + g] = row_max[0];
    merge_m[warp * 16 + g + 8] = row_max[1];
    merge_l[warp * 16 + g] = row_sum[0];
    merge_l[warp * 16 + g + 8] = row_sum[1];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < 16 * D; idx += kThreads) {
    const int row = idx / D, col = idx % D;
    const int grow = m_tile * 16 + row;
    if (grow >= rows_total) continue;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, merge_m[w * 16 + row]);
    const float m_use = M == -INFINITY ? 0.0f : M;
    float L = 0.0f, O = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = fast_exp2(merge_m[w * 16 + row] - m_use);
      L += merge_l[w * 16 + row] * f;
      O += merge_o[(w * 16 + row) * D + col] * f;
    }
    const float out = L > 0.0f ? O / L : 0.0f;
    const float lse = L > 0.0f ? (M + log2f(L)) * kLn2 : -INFINITY;
    const int i = grow / p.group, h = hkv * p.group + grow % p.group;
    if (p.splits == 1) {
      auto* o = static_cast<Element*>(p.o);
      o[b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2] + col] = Element(out);
      if (col == 0 && p.lse != nullptr) {
        p.lse[b * p.lse_stride[0] + h * p.lse_stride[1] + i * p.lse_stride[2]] = lse;
      }
    } else {
      const std::int64_t prow =
          ((static_cast<std::int64_t>(split) * p.B + b) * p.Hq + h) * p.Nq + i;
      p.partial_o[prow * D + col] = out;
      if (col == 0) p.partial_lse[prow] = lse;
    }
  }
}

// The legacy variant's combine (FLASHPP_DECODE_VARIANT=legacy): one warp per (b, h, i) row,
// the splits merged one after another.
template <typename Element, int D>
__global__ void __launch_bounds__(kThreads) decode_combine_kernel(const DecodeParams p) {
  constexpr int kPerLane = D / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t rows = static_cast<std::int64_t>(p.B) * p.Hq * p.Nq;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp;
  if (row >= rows) return;
  const int i = static_cast<int>(row % p.Nq);
  const int h = static_cast<int>((row / p.Nq) % p.Hq);
  const int b = static_cast<int>(row / (static_cast<std::int64_t>(p.Nq) * p.Hq));
  float acc[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) acc[e] = 0.0f;
  detail::LseMerger merger;
  for (int s = 0; s < p.splits; ++s) {
    const std::int64_t prow = static_cast<std::int64_t>(s) * rows + row;
    float rescale, weight;
    merger.add(p.partial_lse[prow], rescale, weight);
    if (weight == 0.0f && rescale == 1.0f) continue;
    const float* src = p.partial_o + prow * D + lane * kPerLane;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[e] = acc[e] * rescale + weight * src[e];
  }
  const float norm = merger.normaliser();
  auto* o = static_cast<Element*>(p.o) + b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) o[lane * kPerLane + e] = Element(acc[e] * norm);
  if (lane == 0 && p.lse != nullptr) {
    p.lse[b * p.lse_stride[0] + h * p.lse_stride[1] + i * p.lse_stride[2]] = merger.lse();
  }
}

// Merges the splits' partial results by lse: one block per (b, h, i) row. Thread (c, g) owns
// columns 4c .. 4c + 3 and the splits g, g + kGroups, ...: every partial is read once, with all
// of a thread's loads in flight together, then the kGroups sums are added in a fixed order
// (deterministic). With M = max_s L_s, w_s = exp(L_s - M): O = sum_s w_s O_s / sum_s w_s and
// L = M + log(sum_s w_s); no visible key at all (every L_s = -inf) gives O = 0, L = -inf.
template <typename Element, int D>
__global__ void __launch_bounds__(kThreads) decode_combine_rows_kernel(const DecodeParams p) {
  constexpr int kCols = D / 4;             // threads per row of D floats (4 floats each)
  constexpr int kGroups = kThreads / kCols;  // split groups: 8 (D = 64), 4 (128), 2 (256)
  static_assert(kThreads % kCols == 0 && kGroups >= 1, "D / 4 must divide the block");
  __shared__ float weights[kMaxSplits];
  __shared__ float warp_max[kWarps], warp_sum[kWarps];
  __shared__ float4 sums[kGroups][kCols];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const std::int64_t rows = static_cast<std::int64_t>(p.B) * p.Hq * p.Nq;
  const std::int64_t row = blockIdx.x;
  const int i = static_cast<int>(row % p.Nq);
  const int h = static_cast<int>((row / p.Nq) % p.Hq);
  const int b = static_cast<int>(row / (static_cast<std::int64_t>(p.Nq) * p.Hq));
  grid_dependency_wait();  // the partials come from the decode kernel just before

  const float l = tid < p.splits ? p.partial_lse[tid * rows + row] : -INFINITY;
  float m = l;
#pragma unroll
  for (int d = 16; d >= 1; d /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  float M = warp_max[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) M = fmaxf(M, warp_max[w]);
  const float w_own = l > -INFINITY ? expf(l - M) : 0.0f;  // M is finite when l is
  if (tid < kMaxSplits) weights[tid] = w_own;
  float s = w_own;
#pragma unroll
  for (int d = 16; d >= 1; d /= 2) s += __shfl_xor_sync(0xffffffffu, s, d);
  if (lane == 0) warp_sum[warp] = s;

  const int c = tid % kCols, g = tid / kCols;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  __syncthreads();
  const float* src = p.partial_o + row * D + 4 * c;
#pragma unroll 8
  for (int sp = g; sp < p.splits; sp += kGroups) {
    const float w = weights[sp];
    const float4 x = *reinterpret_cast<const float4*>(src + sp * rows * D);
    // A weight of 0 (a split that saw no key) contributes nothing, whatever its partial holds.
    acc.x += w > 0.0f ? w * x.x : 0.0f;
    acc.y += w > 0.0f ? w * x.y : 0.0f;
    acc.z += w > 0.0f ? w * x.z : 0.0f;
    acc.w += w > 0.0f ? w * x.w : 0.0f;
  }
  sums[g][c] = acc;
  __syncthreads();
  if (g != 0) return;
  float total = warp_sum[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) total += warp_sum[w];
#pragma unroll
  for (int gg = 1; gg < kGroups; ++gg) {
    acc.x += sums[gg][c].x;
    acc.y += sums[gg][c].y;
    acc.z += sums[gg][c].z;
    acc.w += sums[gg][c].w;
  }
  const float norm = total > 0.0f ? 1.0f / total : 0.0f;
  auto* o = static_cast<Element*>(p.o) + b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2] +
            4 * c;
  o[0] = Element(acc.x * norm);
  o[1] = Element(acc.y * norm);
  o[2] = Element(acc.z * norm);
  o[3] = Element(acc.w * norm);
  if (c == 0 && p.lse != nullptr) {
    p.lse[b * p.lse_stride[0] + h * p.lse_stride[1] + i * p.lse_stride[2]] =
        total > 0.0f ? M + logf(total) : -INFINITY;
  }
}

// Host side, per instantiation (generated from src/cuda/instances.cmake).
template <typename Element, int D>
void launch_decode(const DecodeParams& params, cudaStream_t stream);

}  // namespace flashpp::cuda::decode
