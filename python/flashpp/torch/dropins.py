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


def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    block_table: torch.Tensor | None = None,
) -> torch.Tensor:
    """flash-attn's flash_attn_varlen_func: packed q [total_q, Hq, D], k, v [total_k, Hkv, D],
    cu_seqlens int32 [B + 1]; causal and window_size align bottom-right per sequence, as
    flash-attn >= 2.1 does. Differentiable. return_attn_probs=True returns (out, lse, None) with
    lse float32 [Hq, total_q] (flashpp never materialises the probabilities)."""
    from ..inference import attention_varlen

    name = "flashpp.torch.flash_attn_varlen_func"
    if alibi_slopes is not None:
        raise NotImplementedError(f"{name}: alibi_slopes: ALiBi biases are not supported")
    if block_table is not None:
        raise NotImplementedError(
            f"{name}: block_table: paged keys are supported for decoding only; use "
            "flashpp.torch.flash_attn_with_kvcache"
        )
    left, right = window_size
    window = None if (left, right) == (-1, -1) else (left, 0 if causal else right)
    out = attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           causal=causal, causal_alignment="bottom_right",
                           softmax_scale=softmax_scale, window=window, softcap=softcap,
                           dropout_p=dropout_p, deterministic=deterministic,
                           return_lse=return_attn_probs)
    if return_attn_probs:
        o, lse = out
        return o, lse, None
    return out


def flash_attn_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
    rotary_cos: torch.Tensor | None = None,
    rotary_sin: torch.Tensor | None = None,
    cache_seqlens: int | torch.Tensor | None = None,
    cache_batch_idx: torch.Tensor | None = None,
    cache_leftpad: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    rotary_interleaved: bool = True,
    alibi_slopes: torch.Tensor | None = None,
    num_splits: int = 0,
    return_softmax_lse: bool = False,
):
    """flash-attn's flash_attn_with_kvcache: q [B, Nq, Hq, D] over k_cache/v_cache
    [B, capacity, Hkv, D] (or pages [num_pages, page_size, Hkv, D] with block_table int32
    [B, max_pages]); k, v [B, Nnew, Hkv, D] are written into the cache at cache_seqlens in place;
    causal and window_size align bottom-right. cache_seqlens: an int, an int32 [B] tensor, or
    None (the full capacity). Returns out, and lse float32 [B, Hq, Nq] with
    return_softmax_lse=True. num_splits is ignored (flashpp chooses the split itself)."""
    from ..inference import attention_kvcache

    name = "flashpp.torch.flash_attn_with_kvcache"
    for arg, value in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin),
                       ("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad),
                       ("alibi_slopes", alibi_slopes)):
        if value is not None:
            raise NotImplementedError(
                f"{name}: {arg}: not supported (apply rotary embeddings and gather the cache "
                "rows before the call)"
            )
    B = q.shape[0]
    if cache_seqlens is None:
        capacity = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
        cache_seqlens = capacity - (0 if k is None else k.shape[1])
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32, device=q.device)
    elif cache_seqlens.dtype != torch.int32:
        cache_seqlens = cache_seqlens.to(torch.int32)
    left, right = window_size
    window = None if (left, right) == (-1, -1) else (left, 0 if causal else right)
    return attention_kvcache(q, k_cache, v_cache, cache_seqlens, block_table=block_table,
                             k_new=k, v_new=v, causal=causal, softmax_scale=softmax_scale,
                             window=window, softcap=softcap, return_lse=return_softmax_lse,
                             validate_indices=False)
