"""flashpp.attention for numpy arrays (CPU).

Arrays reach the C++ library through DLPack with their own strides: the "bhnd" layout is a
transposed view, never a copy. The one copy made is for an array whose last dimension is not
contiguous, which no kernel can read in place. numpy has no bfloat16 of its own; ml_dtypes'
bfloat16 arrays are passed as their uint16 bits (same memory) with the extension told so.
"""
from __future__ import annotations

import numpy as np

from . import _C, _rng
from ._options import AttentionConfig, to_options

_FLOAT_KINDS = ("float16", "bfloat16", "float32", "float64")


def _check_dtype(name: str, x: np.ndarray) -> None:
    if x.dtype.name not in _FLOAT_KINDS:
        raise TypeError(
            f"flashpp: {name}: expected dtype float16, bfloat16, float32 (or float64 for "
            f"backend='cpu_reference'), got {x.dtype.name}"
        )


def _as_array(name: str, x) -> np.ndarray:
    x = np.asarray(x)
    _check_dtype(name, x)
    if x.ndim != 4:
        raise ValueError(f"flashpp: {name}: expected a 4-d array, got shape {x.shape}")
    return x


def _bnhd(x: np.ndarray, layout: str) -> np.ndarray:
    """The [B, N, H, D] view of a user array (a transposed view for "bhnd")."""
    return x if layout == "bnhd" else x.transpose(0, 2, 1, 3)


def _last_dim_contiguous(x: np.ndarray) -> np.ndarray:
    if x.shape[-1] > 1 and x.strides[-1] != x.itemsize:
        return np.ascontiguousarray(x)
    return x


def _bits(x: np.ndarray) -> np.ndarray:
    """What crosses DLPack: bfloat16 arrays as their uint16 bits (a view, no copy)."""
    return x.view(np.uint16) if x.dtype.name == "bfloat16" else x


def _is_bf16(x: np.ndarray) -> bool:
    return x.dtype.name == "bfloat16"


def forward(q, k, v, cfg: AttentionConfig, seed: int, offset: int, layout: str, write_lse: bool):
    q, k, v = (_as_array(n, x) for n, x in (("q", q), ("k", k), ("v", v)))
    o_user = np.empty(q.shape, dtype=q.dtype)  # contiguous in the user's layout
    q, k, v = (_last_dim_contiguous(_bnhd(x, layout)) for x in (q, k, v))
    o = _bnhd(o_user, layout)
    B, Nq, Hq, _ = q.shape
    lse = np.empty((B, Hq, Nq), dtype=np.float32) if write_lse else None
    opt = to_options(cfg, seed, offset, write_lse=write_lse)
    _C.forward(_bits(q), _bits(k), _bits(v), _bits(o), lse, opt, 0, None, _is_bf16(q))
    return o_user, lse


def backward(q, k, v, o, lse, dout, cfg: AttentionConfig, seed: int, offset: int, layout: str):
    q, k, v, o, dout = (
        _as_array(n, x) for n, x in (("q", q), ("k", k), ("v", v), ("o", o), ("dout", dout))
    )
    lse = np.asarray(lse)
    dq_user = np.empty(q.shape, dtype=q.dtype)
    dk_user = np.empty(k.shape, dtype=k.dtype)
    dv_user = np.empty(v.shape, dtype=v.dtype)
    q, k, v, o, dout = (_last_dim_contiguous(_bnhd(x, layout)) for x in (q, k, v, o, dout))
    dq, dk, dv = (_bnhd(x, layout) for x in (dq_user, dk_user, dv_user))
    opt = to_options(cfg, seed, offset)
    _C.backward(
        _bits(q), _bits(k), _bits(v), _bits(o), lse, _bits(dout),
        _bits(dq), _bits(dk), _bits(dv), opt, 0, None, _is_bf16(q),
    )
    return dq_user, dk_user, dv_user


def draw_seed() -> int:
    return _rng.draw_numpy_seed()
