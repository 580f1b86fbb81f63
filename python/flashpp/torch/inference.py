"""flashpp's PyTorch operators for inference and packed batches:

  flashpp::attention_kvcache  KV-cache decoding (contiguous or paged cache; appends k_new/v_new
                              into the cache in place, so the op declares k_cache and v_cache
                              mutated)
  flashpp::varlen_fwd / varlen_bwd   packed variable-length sequences, with autograd

Registered with torch.library.custom_op and fake implementations, so torch.compile traces them
as single opaque nodes. Note: varlen reads cu_seqlens on the host (a copy and a synchronisation
on CUDA), and attention_kvcache does the same for its indices unless validate_indices=False;
inside a CUDA graph capture pass validate_indices=False.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import _C
from .._options import AttentionConfig
from .ops import (_dl, _last_dim_contiguous, _on_device, _options, _resolve_rng, _stream,
                  _workspace)

_kv_workspace_sizes: dict = {}


def _opt_dl(t: Optional[Tensor]):
    return None if t is None else _dl(t)


def _index(name: str, t: Tensor) -> Tensor:
    if not isinstance(t, Tensor) or t.dtype != torch.int32:
        raise TypeError(f"flashpp: {name}: expected an int32 tensor, got "
                        f"{getattr(t, 'dtype', type(t).__name__)}")
    return t.contiguous()


@torch.library.custom_op("flashpp::attention_kvcache", mutates_args=("k_cache", "v_cache"))
def attention_kvcache_op(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_seqlens: Tensor,
    block_table: Optional[Tensor], k_new: Optional[Tensor], v_new: Optional[Tensor],
    softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
    validate_indices: bool, backend: str,
) -> tuple[Tensor, Tensor]:
    """(o, lse): o like q, lse float32 [B, Hq, Nq]."""
    config = (softmax_scale, causal, True, window_left, window_right, softcap, 0.0, False,
              backend)
    B, Nq, Hq, _ = q.shape
    o = torch.empty_like(q) if q.stride(-1) == 1 else q.new_empty(q.shape)
    lse = torch.empty((B, Hq, Nq), dtype=torch.float32, device=q.device)
    q = _last_dim_contiguous(q.detach())
    k_new = None if k_new is None else _last_dim_contiguous(k_new.detach())
    v_new = None if v_new is None else _last_dim_contiguous(v_new.detach())
    cache_seqlens = _index("cache_seqlens", cache_seqlens)
    block_table = None if block_table is None else _index("block_table", block_table)
    opt = _options(*config, 0, 0)
    with _on_device(q):
        key = (q.shape, k_cache.shape, None if block_table is None else block_table.shape,
               None if k_new is None else k_new.shape, q.dtype, q.device, config)
        nbytes = _kv_workspace_sizes.get(key)
        if nbytes is None:
            nbytes = _C.forward_kvcache_workspace_size(
                _dl(q), _dl(k_cache), _dl(v_cache), _dl(cache_seqlens), _opt_dl(block_table),
                _opt_dl(k_new), _opt_dl(v_new), opt)
            if len(_kv_workspace_sizes) > 4096:
                _kv_workspace_sizes.clear()
            _kv_workspace_sizes[key] = nbytes
        workspace = _workspace(nbytes, q)
        _C.forward_kvcache(_dl(q), _dl(k_cache), _dl(v_cache), _dl(cache_seqlens),
                           _opt_dl(block_table), _opt_dl(k_new), _opt_dl(v_new), _dl(o), _dl(lse),
                           opt, validate_indices, _stream(q),
                           None if workspace is None else _dl(workspace))
    return o, lse


@attention_kvcache_op.register_fake
def _attention_kvcache_fake(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new,
                            softmax_scale, causal, window_left, window_right, softcap,
                            validate_indices, backend):
    B, Nq, Hq, _ = q.shape
    o = torch.empty_like(q) if q.stride(-1) == 1 else q.new_empty(q.shape)
    return o, q.new_empty((B, Hq, Nq), dtype=torch.float32)


def attention_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new,
                      cfg: AttentionConfig, *, return_lse: bool, validate_indices: bool):
    if (k_new is None) != (v_new is None):
        raise ValueError("flashpp: attention_kvcache: k_new and v_new come together")
    o, lse = attention_kvcache_op(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new,
                                  cfg.softmax_scale, cfg.causal, cfg.window_left,
                                  cfg.window_right, cfg.softcap, validate_indices, cfg.backend)
    return (o, lse) if return_lse else o


# ---- varlen -----------------------------------------------------------------------------------
@torch.library.custom_op("flashpp::varlen_fwd", mutates_args=())
def varlen_fwd(
    q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
    max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, bottom_right: bool, window_left: int, window_right: int,
    softcap: float, dropout_p: float, seed: int, offset: int, deterministic: bool, backend: str,
) -> tuple[Tensor, Tensor, Tensor]:
    """(o, lse, rng_state): o like q (rows past the last sequence zero), lse float32
    [Hq, total_q], rng_state int64 [2] on the CPU."""
    config = (softmax_scale, causal, bottom_right, window_left, window_right, softcap, dropout_p,
              deterministic, backend)
    seed, offset = _resolve_rng(dropout_p, seed, offset)
    o = torch.zeros_like(q)
    lse = torch.zeros((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    q, k, v = (_last_dim_contiguous(t.detach()) for t in (q, k, v))
    cu_q, cu_k = _index("cu_seqlens_q", cu_seqlens_q), _index("cu_seqlens_k", cu_seqlens_k)
    opt = _options(*config, seed, offset)
    with _on_device(q):
        _C.forward_varlen(_dl(q), _dl(k), _dl(v), _dl(cu_q), _dl(cu_k), max_seqlen_q,
                          max_seqlen_k, _dl(o), _dl(lse), opt, _stream(q))
    return o, lse, torch.tensor([seed, offset], dtype=torch.int64)


@varlen_fwd.register_fake
def _varlen_fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     softmax_scale, causal, bottom_right, window_left, window_right, softcap,
                     dropout_p, seed, offset, deterministic, backend):
    return (torch.empty_like(q), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32),
            torch.empty(2, dtype=torch.int64, device="cpu"))


@torch.library.custom_op("flashpp::varlen_bwd", mutates_args=())
def varlen_bwd(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, rng_state: Tensor,
    cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, bottom_right: bool, window_left: int, window_right: int,
    softcap: float, dropout_p: float, deterministic: bool, backend: str,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv), each like its input (rows past the last sequence zero)."""
    config = (softmax_scale, causal, bottom_right, window_left, window_right, softcap, dropout_p,
              deterministic, backend)
    seed, offset = (int(x) for x in rng_state.tolist())
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    q, k, v, o, dout = (_last_dim_contiguous(t.detach()) for t in (q, k, v, o, dout))
    cu_q, cu_k = _index("cu_seqlens_q", cu_seqlens_q), _index("cu_seqlens_k", cu_seqlens_k)
    opt = _options(*config, seed, offset)
    with _on_device(q):
        _C.backward_varlen(_dl(q), _dl(k), _dl(v), _dl(o), _dl(lse.detach()), _dl(dout),
                           _dl(dq), _dl(dk), _dl(dv), _dl(cu_q), _dl(cu_k), max_seqlen_q,
                           max_seqlen_k, opt, _stream(q))
    return dq, dk, dv


@varlen_bwd.register_fake
def _varlen_bwd_fake(dout, q, k, v, o, lse, rng_state, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                     max_seqlen_k, softmax_scale, causal, bottom_right, window_left, window_right,
                     softcap, dropout_p, deterministic, backend):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


_N_VARLEN_CONFIG = 15  # varlen_fwd's inputs after q, k, v


def _varlen_setup_context(ctx, inputs, output):
    (q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, bottom_right, wl, wr, softcap, p, _seed,
     _offset, det, backend) = inputs
    o, lse, rng_state = output
    ctx.save_for_backward(q, k, v, o, lse, rng_state, cu_q, cu_k)
    ctx.lengths = (max_q, max_k)
    ctx.config = (scale, causal, bottom_right, wl, wr, softcap, p, det, backend)
    ctx.mark_non_differentiable(lse, rng_state)


def _varlen_backward(ctx, grad_o, _grad_lse, _grad_rng):
    q, k, v, o, lse, rng_state, cu_q, cu_k = ctx.saved_tensors
    if grad_o is None:
        return (None,) * (3 + _N_VARLEN_CONFIG)
    dq, dk, dv = varlen_bwd(grad_o, q, k, v, o, lse, rng_state, cu_q, cu_k, *ctx.lengths,
                            *ctx.config)
    return (dq, dk, dv) + (None,) * _N_VARLEN_CONFIG


varlen_fwd.register_autograd(_varlen_backward, setup_context=_varlen_setup_context)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     cfg: AttentionConfig, *, seed, offset, return_lse):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise ValueError(f"flashpp: {name}: expected a 3-d packed tensor [total, H, D], got "
                             f"shape {tuple(t.shape)}")
    o, lse, _rng_state = varlen_fwd(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, cfg.softmax_scale,
        cfg.causal, cfg.bottom_right, cfg.window_left, cfg.window_right, cfg.softcap,
        cfg.dropout_p, -1 if seed is None else int(seed), -1 if offset is None else int(offset),
        cfg.deterministic, cfg.backend)
    return (o, lse) if return_lse else o
