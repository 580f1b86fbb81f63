"""flashpp.attention / attention_backward for torch tensors (called by flashpp.functional)."""
from __future__ import annotations

import torch

from .. import _rng
from .._options import AttentionConfig
from . import _eager, ops


def _bnhd(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The [B, N, H, D] view of a user tensor: for "bhnd" a transposed view, no copy."""
    if t.dim() != 4:
        raise ValueError(f"flashpp: expected 4-d tensors ({layout}), got shape {tuple(t.shape)}")
    return t if layout == "bnhd" else t.transpose(1, 2)


def _config_args(cfg: AttentionConfig):
    return (cfg.softmax_scale, cfg.causal, cfg.bottom_right, cfg.window_left, cfg.window_right,
            cfg.softcap, cfg.dropout_p)


def attention(q, k, v, cfg: AttentionConfig, *, seed, offset, layout, return_lse,
              return_rng_state):
    if _eager.usable(q, k, v) and q.dim() == 4:
        # Plain eager call: the lean path (same library, same results, less host work).
        o, lse, rng = _eager.attention(_bnhd(q, layout), _bnhd(k, layout), _bnhd(v, layout), cfg,
                                       seed, offset, return_lse)
        o = _bnhd(o, layout)
        if not (return_lse or return_rng_state):
            return o
        return (o,) + ((lse,) if return_lse else ()) + ((rng,) if return_rng_state else ())
    if seed is not None or offset is not None:
        _rng.check_seed(seed or 0, offset or 0)
    o, lse, rng_state = ops.attention_fwd(
        _bnhd(q, layout), _bnhd(k, layout), _bnhd(v, layout), *_config_args(cfg),
        -1 if seed is None else int(seed), -1 if offset is None else int(offset),
        cfg.deterministic, cfg.backend,
    )
    o = _bnhd(o, layout)  # back to the caller's layout (a view)
    result = (o,)
    if return_lse:
        result += (lse,)
    if return_rng_state:
        result += (tuple(int(x) for x in rng_state.tolist()),)
    return result[0] if len(result) == 1 else result


def attention_backward(q, k, v, o, lse, dout, cfg: AttentionConfig, *, seed, offset, layout):
    rng_state = torch.tensor([seed, offset], dtype=torch.int64)
    dq, dk, dv = ops.attention_bwd(
        _bnhd(dout, layout), _bnhd(q, layout), _bnhd(k, layout), _bnhd(v, layout),
        _bnhd(o, layout), lse, rng_state, *_config_args(cfg), cfg.deterministic, cfg.backend,
    )
    return _bnhd(dq, layout), _bnhd(dk, layout), _bnhd(dv, layout)
