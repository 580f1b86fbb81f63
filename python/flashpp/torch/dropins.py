"""Drop-in replacements with the signatures PyTorch and flash-attn users already call.

Both route to flashpp.attention (so autograd, torch.compile and CUDA graphs work) and refuse,
with a message saying what to do instead, what flashpp does not compute.
"""
from __future__ import annotations

import torch

from ..functional import attention


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention's signature and semantics, [B, H, N, D]
    (or [H, N, D]) tensors. is_causal aligns top-left, as torch does. enable_gqa=True lets key
    and value have fewer heads than query (a divisor of them)."""
    name = "flashpp.torch.scaled_dot_product_attention"
    if attn_mask is not None:
        raise NotImplementedError(
            f"{name}: attn_mask: arbitrary masks are not supported; use is_causal=True, or "
            "flashpp.attention(..., causal=..., window=(left, right)) for causal, bottom-right "
            "and sliding-window masks"
        )
    if query.dim() not in (3, 4) or key.dim() != query.dim() or value.dim() != query.dim():
        raise ValueError(
            f"{name}: expected query, key, value all [B, H, N, D] or all [H, N, D], got shapes "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if value.size(-1) != query.size(-1):
        raise NotImplementedError(
            f"{name}: value: a head dim different from query's ({value.size(-1)} vs "
            f"{query.size(-1)}) is not supported"
        )
    if key.size(-3) != query.size(-3) and not enable_gqa:
        raise ValueError(
            f"{name}: key: {key.size(-3)} heads but query has {query.size(-3)}; pass "
            "enable_gqa=True for grouped-query attention"
        )
    unbatched = query.dim() == 3
    if unbatched:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    out = attention(query, key, value, causal=is_causal, softmax_scale=scale,
                    dropout_p=dropout_p, layout="bhnd")
    return out.squeeze(0) if unbatched else out


def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
) -> torch.Tensor:
    """flash-attn's flash_attn_func: [B, N, H, D] tensors, MQA/GQA by fewer k/v heads; causal
    and window_size align bottom-right (the last query sees the last key) as flash-attn >= 2.1
    does; window_size=(left, right) with -1 for an unbounded side."""
    name = "flashpp.torch.flash_attn_func"
    if return_attn_probs:
        raise NotImplementedError(
            f"{name}: return_attn_probs: flashpp never materialises the attention probabilities; "
            "flashpp.attention(..., return_lse=True) returns the log-sum-exp of each row"
        )
    if alibi_slopes is not None:
        raise NotImplementedError(f"{name}: alibi_slopes: ALiBi biases are not supported")
    left, right = window_size
    window = None if (left, right) == (-1, -1) else (left, 0 if causal else right)
    return attention(q, k, v, causal=causal, causal_alignment="bottom_right",
                     softmax_scale=softmax_scale, window=window, softcap=softcap,
                     dropout_p=dropout_p, deterministic=deterministic, layout="bnhd")
