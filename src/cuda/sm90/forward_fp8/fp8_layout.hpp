// The index maps of the FP8 forward's data movement, shared by the kernel (kernel.cuh) and a
// host test that replays them (tests/cpu/test_fp8_layout.cpp): the 128-byte swizzle, the key
// renumbering that lets P go from the score accumulators to the e4m3 A fragments without
// shuffles, and which keys, columns and positions a lane of a transposing warp handles.
#pragma once

#include "../../../common/host_device.hpp"
#include "../../common/swizzle.cuh"

namespace flashpp::cuda::sm90::fp8 {

// A 128-column panel of 1-byte e4m3 elements: rows of 128 bytes, 128-byte swizzled (the 16-byte
// chunk index XORed with row % 8), as the copy engine writes and wgmma reads it. The swizzle is
// common/swizzle.cuh's, over 1-byte elements; the row count does not enter the offsets.
using Fp8Panel = SwizzledTile<8, 128, 1>;

// Byte offset of (row, byte column) in such a panel (column < 128).
FLASHPP_HD int swizzled_offset(int row, int column) {
  return row * 128 + Fp8Panel::swizzled_chunk(row, (column >> 4) & 7) * 16 + (column & 15);
}

// Keys per row of Vt in the workspace (v_transpose.cu): Nk rounded up to whole 16-key groups
// (the rows then stay 16-byte aligned, as the copy engine requires).
FLASHPP_HD long long vt_keys16(long long keys) { return (keys + 15) / 16 * 16; }
// Bytes of Vt in the workspace: [batch][kv_heads][padded_head_dim][vt_keys16(keys)].
FLASHPP_HD long long vt_bytes(long long batch, long long kv_heads, long long padded_head_dim,
                              long long keys) {
  return batch * kv_heads * padded_head_dim * vt_keys16(keys);
}

// The key at k position `position` (0..127) of a key tile in the P V product: within each
// 16-key group, position 4t + e holds key 2t + (e & 1) + 8 (e >> 1). That is the order in which
// lane (g, t) holds its scores (keys 2t, 2t + 1 of each 8-key column tile), so its four scores of
// one row and 16-key group are exactly its four bytes of the 8-bit A fragment.
FLASHPP_HD int key_at_position(int position) {
  const int group = position >> 4, t = (position >> 2) & 3, e = position & 3;
  return 16 * group + 2 * t + (e & 1) + 8 * (e >> 1);
}

// Transposition step `step` (0..7) of a 128-column panel, lane `lane`:
//   its 16-byte column chunk (of the panel) ...
FLASHPP_HD int transpose_chunk(int lane, int step) { return step ^ ((lane & 7) ^ (2 * (lane & 3))); }
//   ... its r-th key (r = 0..3), the keys of positions 4 lane .. 4 lane + 3 ...
FLASHPP_HD int transpose_key(int lane, int r) { return key_at_position(4 * lane + r); }
//   ... and the 4-byte column group it handles in its i-th sub-step (i = 0..3).
FLASHPP_HD int transpose_group(int lane, int i) { return (i + (lane >> 3)) & 3; }

}  // namespace flashpp::cuda::sm90::fp8
