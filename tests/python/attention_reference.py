"""A float64 numpy reference for attention, forward and backward, written from the semantics
in DESIGN.md (independent of the C++ code it checks):

    S = scale·q kᵀ;  softcap c > 0: S = c·tanh(S / c);  masked → -inf
    lse = log Σ_j exp(S);  P = exp(S − lse);  P̃ = P·keep/(1−p);  O = P̃ v
    backward: D = rowsum(dO∘O); dP = (dO vᵀ)·keep/(1−p); dS = P∘(dP − D); softcap: dS *= 1−(S/c)²
              dq = scale·dS k;  dk = scale·dSᵀ q;  dv = P̃ᵀ dO   (dk, dv summed over a kv group)

Tensors are [B, N, H, D] ("bnhd"). keep is [B, Hq, Nq, Nk] (1 = kept) or None.
"""
from __future__ import annotations

import numpy as np



def dropout_keep_scale(dropout_p):
    """The scale of kept probabilities: 1/(1 - p) for p rounded to a multiple of 1/256, as the
    mask draws one random byte per element (python/README.md, src/common/philox.hpp)."""
    import math
    t = min(255, max(1, math.floor(dropout_p * 256 + 0.5)))
    return 256.0 / (256.0 - t)

def visible(Nq, Nk, *, causal=False, bottom_right=False, window=(-1, -1)):
    """bool [Nq, Nk]: query i sees key j iff i+s-left <= j <= i+s+right (s = Nk-Nq for
    bottom_right, else 0; causal means right = 0; -1 = unbounded)."""
    left, right = window
    if causal:
        right = 0
    shift = Nk - Nq if bottom_right else 0
    i = np.arange(Nq)[:, None] + shift
    j = np.arange(Nk)[None, :]
    mask = np.ones((Nq, Nk), dtype=bool)
    if left >= 0:
        mask &= j >= i - left
    if right >= 0:
        mask &= j <= i + right
    return mask


def _expand_kv(x, Hq):
    return np.repeat(x, Hq // x.shape[2], axis=2)


def _scores(q, k, scale, softcap, mask):
    s = np.einsum("bihd,bjhd->bhij", q, k) * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    return np.where(mask, s, -np.inf)


def forward(q, k, v, *, causal=False, bottom_right=False, window=(-1, -1), scale=None,
            softcap=0.0, dropout_p=0.0, keep=None):
    """(o, lse, cache) in float64; cache feeds backward()."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, Nq, Hq, D = q.shape
    Nk = k.shape[1]
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    mask = visible(Nq, Nk, causal=causal, bottom_right=bottom_right, window=window)
    ke, ve = _expand_kv(k, Hq), _expand_kv(v, Hq)
    s = _scores(q, ke, scale, softcap, mask)
    row_max = s.max(axis=-1, keepdims=True) if Nk else np.full((B, Hq, Nq, 1), -np.inf)
    seen = np.isfinite(row_max)
    shifted = np.where(seen, s - np.where(seen, row_max, 0.0), -np.inf)
    with np.errstate(divide="ignore"):
        lse = np.where(seen[..., 0], np.log(np.exp(shifted).sum(-1)) + row_max[..., 0], -np.inf)
    p = np.where(mask & seen, np.exp(s - np.where(seen, lse[..., None], 0.0)), 0.0)
    drop = np.ones_like(p) if keep is None or dropout_p == 0 else keep * dropout_keep_scale(dropout_p)
    o = np.einsum("bhij,bjhd->bihd", p * drop, ve)
    cache = dict(q=q, ke=ke, ve=ve, s=s, p=p, drop=drop, o=o, scale=scale, softcap=softcap,
                 Hkv=k.shape[2])
    return o, lse, cache


def backward(dout, cache):
    """(dq, dk, dv) in float64."""
    c = cache
    dout = np.asarray(dout, dtype=np.float64)
    B, Nq, Hq, D = c["q"].shape
    pd = c["p"] * c["drop"]
    dv = np.einsum("bhij,bihd->bjhd", pd, dout)
    dp = np.einsum("bihd,bjhd->bhij", dout, c["ve"]) * c["drop"]
    Di = (c["p"] * dp).sum(-1, keepdims=True)
    ds = c["p"] * (dp - Di)
    if c["softcap"] > 0:
        t = np.where(np.isfinite(c["s"]), c["s"], 0.0) / c["softcap"]
        ds = ds * (1.0 - t * t)
    dq = c["scale"] * np.einsum("bhij,bjhd->bihd", ds, c["ke"])
    dk = c["scale"] * np.einsum("bhij,bihd->bjhd", ds, c["q"])
    group = Hq // c["Hkv"]
    fold = lambda x: x.reshape(x.shape[0], x.shape[1], c["Hkv"], group, D).sum(3)  # noqa: E731
    return dq, fold(dk), fold(dv)


def rel_err(x, ref) -> float:
    """‖x − ref‖ / ‖ref‖ in float64 (absolute when ref is all zero)."""
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    den = np.linalg.norm(ref)
    num = np.linalg.norm(x - ref)
    return float(num / den) if den > 0 else float(num)
