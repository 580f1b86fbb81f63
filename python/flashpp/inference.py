"""flashpp.attention_kvcache and flashpp.attention_varlen: KV-cache decoding (contiguous or
paged cache, optional append) and packed variable-length batches, for numpy and torch.

torch tensors go through the torch.library operators of flashpp.torch (autograd for varlen,
torch.compile); numpy arrays go straight to the C++ library on the CPU.
"""
from __future__ import annotations

import numpy as np

from . import _C, _numpy, _rng
from ._options import make_config, to_options
from .functional import _is_torch_tensor


def attention_kvcache(
    q,
    k_cache,
    v_cache,
    cache_seqlens,
    *,
    block_table=None,
    k_new=None,
    v_new=None,
    causal: bool = False,
    softmax_scale: float | None = None,
    window=None,
    softcap: float = 0.0,
    return_lse: bool = False,
    validate_indices: bool = True,
    backend: str = "auto",
):
    """Attention of a few queries over a KV cache (decoding), in the [B, N, H, D] layout.

    q: [B, Nq, Hq, D]. k_cache, v_cache: [B, capacity, Hkv, D], or pages [num_pages,
    page_size, Hkv, D] with block_table int32 [B, max_pages] (key j of sequence b is in page
    block_table[b, j // page_size], row j % page_size). cache_seqlens: int32 [B], keys already
    cached. k_new, v_new: [B, Nnew, Hkv, D], written into the cache at cache_seqlens (in place)
    and attended to as well; cache_seqlens itself is not changed.
    causal and window align bottom-right (the last query sees the last key). Sequence b attends
    to cache_seqlens[b] + Nnew keys; one that sees none gives o = 0 and lse = -inf.
    validate_indices=False skips the host-side check of cache_seqlens/block_table (on CUDA that
    check synchronises); the kernels then clamp bad indices instead of reading out of bounds.

    Returns o (like q), and lse float32 [B, Hq, Nq] if return_lse.
    """
    cfg = make_config(causal=causal, causal_alignment="bottom_right", softmax_scale=softmax_scale,
                      window=window, softcap=softcap, backend=backend)
    if _is_torch_tensor(q):
        from .torch import inference as torch_inference

        return torch_inference.attention_kvcache(
            q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, cfg,
            return_lse=return_lse, validate_indices=validate_indices)
    q = _numpy._as_array("q", q)
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(x, np.ndarray) or not x.flags.writeable:
            raise TypeError(f"flashpp: {name}: expected a writable numpy array (the cache is "
                            f"updated in place), got {type(x).__name__}")
    o = np.empty(q.shape, dtype=q.dtype)
    B, Nq, Hq, _ = q.shape
    lse = np.empty((B, Hq, Nq), dtype=np.float32) if return_lse else None
    opt = to_options(cfg, write_lse=return_lse)
    bits = _numpy._bits
    _C.forward_kvcache(
        bits(_numpy._last_dim_contiguous(q)), bits(k_cache), bits(v_cache),
        _as_int32("cache_seqlens", cache_seqlens),
        None if block_table is None else _as_int32("block_table", block_table),
        None if k_new is None else bits(_numpy._last_dim_contiguous(np.asarray(k_new))),
        None if v_new is None else bits(_numpy._last_dim_contiguous(np.asarray(v_new))),
        bits(o), lse, opt, validate_indices, 0, None, _numpy._is_bf16(q))
    return (o, lse) if return_lse else o


def _as_int32(name, x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.int32:
        raise TypeError(f"flashpp: {name}: expected an int32 array, got dtype {x.dtype.name}")
    return np.ascontiguousarray(x)


def _packed(name, x) -> np.ndarray:
    x = np.asarray(x)
    _numpy._check_dtype(name, x)
    if x.ndim != 3:
        raise ValueError(f"flashpp: {name}: expected a 3-d packed array [total, H, D], got shape {x.shape}")
    return _numpy._last_dim_contiguous(x)


def attention_varlen(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool = False,
    causal_alignment: str = "top_left",
    softmax_scale: float | None = None,
    window=None,
    softcap: float = 0.0,
    dropout_p: float = 0.0,
    seed: int | None = None,
    offset: int | None = None,
    deterministic: bool = False,
    return_lse: bool = False,
    backend: str = "auto",
):
    """Attention over packed sequences, no padding: q [total_q, Hq, D], k, v [total_k, Hkv, D];
    sequence b is q[cu_seqlens_q[b]:cu_seqlens_q[b+1]] against k/v[cu_seqlens_k[b]:cu_seqlens_k[b+1]]
    (cu_seqlens int32 [B+1], non-decreasing). Each sequence is an independent problem with the
    given options (see flashpp.attention). Differentiable for torch tensors.

    Returns o (like q), and lse float32 [Hq, total_q] if return_lse. Rows past the last sequence
    are not written."""
    cfg = make_config(causal=causal, causal_alignment=causal_alignment,
                      softmax_scale=softmax_scale, window=window, softcap=softcap,
                      dropout_p=dropout_p, deterministic=deterministic, backend=backend)
    if _is_torch_tensor(q):
        from .torch import inference as torch_inference

        return torch_inference.attention_varlen(
            q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), cfg,
            seed=seed, offset=offset, return_lse=return_lse)
    dropout = cfg.dropout_p > 0.0
    seed = (_numpy.draw_seed() if dropout else 0) if seed is None else seed
    offset = (_rng.next_offset() if dropout else 0) if offset is None else offset
    seed, offset = _rng.check_seed(seed, offset)
    q, k, v = _packed("q", q), _packed("k", k), _packed("v", v)
    o = np.zeros(q.shape, dtype=q.dtype)
    lse = np.zeros((q.shape[1], q.shape[0]), dtype=np.float32) if return_lse else None
    opt = to_options(cfg, seed, offset, write_lse=return_lse)
    bits = _numpy._bits
    _C.forward_varlen(bits(q), bits(k), bits(v), _as_int32("cu_seqlens_q", cu_seqlens_q),
                      _as_int32("cu_seqlens_k", cu_seqlens_k), int(max_seqlen_q),
                      int(max_seqlen_k), bits(o), lse, opt, 0, _numpy._is_bf16(q))
    return (o, lse) if return_lse else o


def attention_varlen_backward(
    q, k, v, o, lse, dout, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
    *,
    causal: bool = False,
    causal_alignment: str = "top_left",
    softmax_scale: float | None = None,
    window=None,
    softcap: float = 0.0,
    dropout_p: float = 0.0,
    seed: int | None = None,
    offset: int | None = None,
    deterministic: bool = False,
    backend: str = "auto",
):
    """Gradients (dq, dk, dv) of attention_varlen (numpy arrays; torch tensors use autograd)
    given its o, lse and the gradient dout of o. Rows past the last sequence get zeros."""
    cfg = make_config(causal=causal, causal_alignment=causal_alignment,
                      softmax_scale=softmax_scale, window=window, softcap=softcap,
                      dropout_p=dropout_p, deterministic=deterministic, backend=backend)
    if cfg.dropout_p > 0.0 and (seed is None or offset is None):
        raise ValueError("flashpp: attention_varlen_backward: with dropout_p > 0, pass the "
                         "forward's seed and offset")
    seed, offset = _rng.check_seed(seed or 0, offset or 0)
    q, k, v, o, dout = (_packed(n, x) for n, x in
                        (("q", q), ("k", k), ("v", v), ("o", o), ("dout", dout)))
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    opt = to_options(cfg, seed, offset)
    bits = _numpy._bits
    _C.backward_varlen(bits(q), bits(k), bits(v), bits(o), np.asarray(lse), bits(dout), bits(dq),
                       bits(dk), bits(dv), _as_int32("cu_seqlens_q", cu_seqlens_q),
                       _as_int32("cu_seqlens_k", cu_seqlens_k), int(max_seqlen_q),
                       int(max_seqlen_k), opt, 0, _numpy._is_bf16(q))
    return dq, dk, dv
