// The FP8 forward's V transposition as a pass of its own, before the attention kernel: V
// ([B, Nk, Hkv, D], e4m3) becomes Vt in the workspace, [B][Hkv][Dp][Nk16] bytes (Dp = the
// instantiation's head dim, Nk16 = Nk rounded up to 16 keys), each 128-key tile's keys in the
// order of P's 8-bit A fragments (fp8_layout.hpp, key_at_position). The attention kernel then
// loads Vt tiles with the copy engine like K, and no warp of it transposes anything.
//
// Why: the in-kernel transposition (kernel.cuh, transpose_step) runs once per query tile and
// query head, so every V tile is transposed Nq / 128 x Hq / Hkv times; ncu (session 16, H200)
// showed the D = 256 consumers waiting for Vt in 35% of their samples, and at D = 128 the
// transposing warps' instructions (IMAD, LOP3, PRMT: 40% more instructions than the bf16
// kernel) competing with the consumers for issue slots. Here each element moves once.
//
// Keys at or past Nk and head-dim rows at or past D are written as zero (the copy engine would
// otherwise read them as zero too; the P V product multiplies them by P = 0 or stores nothing of
// them, and zero keeps 0 x NaN out).
#pragma once

#include <cuda_runtime.h>

#include "../../../api/problem.hpp"

namespace flashpp::cuda::sm90::fp8 {

// Writes Vt ([B][Hkv][Dp][Nk16] bytes, Dp = padded_head_dim, Nk16 = vt_keys16(Nk)) from args.v
// into `vt` on `stream` (v_transpose.cu).
void transpose_v(const detail::ForwardArgs& args, int padded_head_dim, unsigned char* vt,
                 cudaStream_t stream);

}  // namespace flashpp::cuda::sm90::fp8
