"""Attention written out in plain torch ops (materialised scores, autograd for the backward),
used as the reference for flashpp's torch path. `compute_dtype` float32 (or float64) is the
reference; the storage dtype itself is the "naive" baseline of the FlashAttention criterion."""
from __future__ import annotations

import torch



def dropout_keep_scale(dropout_p):
    """The scale of kept probabilities: 1/(1 - p) for p rounded to a multiple of 1/256, as the
    mask draws one random byte per element (python/README.md, src/common/philox.hpp)."""
    import math
    t = min(255, max(1, math.floor(dropout_p * 256 + 0.5)))
    return 256.0 / (256.0 - t)

def visible(Nq, Nk, *, causal=False, bottom_right=False, window=(-1, -1), device="cpu"):
    left, right = window
    if causal:
        right = 0
    shift = Nk - Nq if bottom_right else 0
    i = torch.arange(Nq, device=device)[:, None] + shift
    j = torch.arange(Nk, device=device)[None, :]
    mask = torch.ones(Nq, Nk, dtype=torch.bool, device=device)
    if left >= 0:
        mask &= j >= i - left
    if right >= 0:
        mask &= j <= i + right
    return mask


def attention(q, k, v, *, causal=False, bottom_right=False, window=(-1, -1), scale=None,
              softcap=0.0, dropout_p=0.0, keep=None, compute_dtype=torch.float32):
    """o [B, Nq, Hq, D] (in compute_dtype) and lse [B, Hq, Nq]; q, k, v are [B, N, H, D]."""
    B, Nq, Hq, D = q.shape
    Nk, Hkv = k.shape[1], k.shape[2]
    scale = D ** -0.5 if scale is None else scale
    qf, kf, vf = (x.to(compute_dtype) for x in (q, k, v))
    kf = kf.repeat_interleave(Hq // Hkv, dim=2)
    vf = vf.repeat_interleave(Hq // Hkv, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", qf, kf) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    mask = visible(Nq, Nk, causal=causal, bottom_right=bottom_right, window=window,
                   device=q.device)
    row_ok = mask.any(-1, keepdim=True)  # rows that see at least one key
    s = s.masked_fill(~mask, float("-inf"))
    s = torch.where(row_ok, s, torch.zeros((), dtype=s.dtype, device=s.device))
    p = torch.softmax(s, dim=-1) * row_ok
    lse = torch.logsumexp(s, dim=-1).masked_fill(~row_ok[..., 0], float("-inf"))
    if keep is not None and dropout_p > 0:
        p = p * keep.to(p.dtype) * dropout_keep_scale(dropout_p)
    o = torch.einsum("bhij,bjhd->bihd", p, vf)
    return o, lse


def rel_err(x, ref) -> float:
    x, ref = x.detach().double(), ref.detach().double()
    den = ref.norm()
    return float((x - ref).norm() / den) if den > 0 else float((x - ref).norm())
