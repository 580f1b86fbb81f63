"""The FP8 (float8 e4m3) forward for torch tensors and numpy arrays, and quantize_fp8.

q, k, v in float8_e4m3fn with optional float32 descale factors per (batch, kv head): the inputs
the attention sees are q * q_descale, k * k_descale, v * v_descale. The output is bfloat16 (the
default) or float16. The FP8 forward is forward-only: no autograd, no dropout, no softcap.
float8 tensors cross DLPack as their uint8 bits (a view, no copy) with the extension told so.
"""
from __future__ import annotations

from ._options import AttentionConfig, to_options

E4M3_MAX = 448.0


def _is_torch_tensor(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "requires_grad")


def is_fp8(x) -> bool:
    """Whether x is a float8 e4m3 (fn) torch tensor or numpy array."""
    if _is_torch_tensor(x):
        import torch

        return x.dtype == torch.float8_e4m3fn
    dtype = getattr(x, "dtype", None)
    return dtype is not None and getattr(dtype, "name", "") == "float8_e4m3fn"


_torch_e4m3 = None


def is_torch_fp8(x) -> bool:
    """is_fp8 for an x known to be a torch tensor (flashpp.attention's per-call check: the
    dtype object is looked up once)."""
    global _torch_e4m3
    if _torch_e4m3 is None:
        import torch

        _torch_e4m3 = torch.float8_e4m3fn
    return x.dtype == _torch_e4m3


def _bnhd(x, layout: str):
    if layout == "bnhd":
        return x
    return x.transpose(1, 2) if _is_torch_tensor(x) else x.transpose(0, 2, 1, 3)


def _check_inputs(q, k, v):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not is_fp8(x):
            raise TypeError(
                f"flashpp: {name}: expected float8_e4m3fn like q (an FP8 forward takes q, k and v "
                f"all in e4m3), got {getattr(x, 'dtype', type(x).__name__)}"
            )
        if len(x.shape) != 4:
            raise ValueError(f"flashpp: {name}: expected a 4-d tensor, got shape {tuple(x.shape)}")


def _torch_forward(q, k, v, opt, layout, descales, out_dtype, return_lse):
    import torch

    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
        raise RuntimeError(
            "flashpp: q: a backward through an FP8 (float8_e4m3fn) forward is not supported; "
            "call it under torch.no_grad() or on tensors that do not require grad"
        )
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    if out_dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"flashpp: out_dtype: expected torch.bfloat16 or torch.float16, got {out_dtype}")
    o_user = torch.empty(q.shape, dtype=out_dtype, device=q.device)
    qb, kb, vb = (_bnhd(x, layout) for x in (q, k, v))
    qb, kb, vb = (x.contiguous() if x.shape[-1] > 1 and x.stride(-1) != 1 else x for x in (qb, kb, vb))
    o = _bnhd(o_user, layout)
    B, Nq, Hq, _ = qb.shape
    lse = torch.empty((B, Hq, Nq), dtype=torch.float32, device=q.device) if return_lse else None
    scales = []
    for name, d in zip(("q_descale", "k_descale", "v_descale"), descales):
        if d is not None and not _is_torch_tensor(d):
            d = torch.as_tensor(d, dtype=torch.float32, device=q.device)
        if d is not None and d.dtype != torch.float32:
            raise TypeError(f"flashpp: {name}: expected dtype torch.float32, got {d.dtype}")
        scales.append(d)
    stream = torch.cuda.current_stream(q.device).cuda_stream if q.is_cuda else 0
    from . import _C

    _C.forward_fp8(
        qb.view(torch.uint8), kb.view(torch.uint8), vb.view(torch.uint8), o, lse, opt,
        *scales, stream,
    )
    return o_user, lse


def _numpy_forward(q, k, v, opt, layout, descales, out_dtype, return_lse):
    import numpy as np
    import ml_dtypes

    out_dtype = np.dtype(ml_dtypes.bfloat16 if out_dtype is None else out_dtype)
    if out_dtype.name not in ("bfloat16", "float16"):
        raise TypeError(f"flashpp: out_dtype: expected bfloat16 or float16, got {out_dtype.name}")
    o_user = np.empty(q.shape, dtype=out_dtype)
    qb, kb, vb = (_bnhd(np.asarray(x), layout) for x in (q, k, v))
    qb, kb, vb = (
        np.ascontiguousarray(x) if x.shape[-1] > 1 and x.strides[-1] != 1 else x for x in (qb, kb, vb)
    )
    o = _bnhd(o_user, layout)
    B, Nq, Hq, _ = qb.shape
    lse = np.empty((B, Hq, Nq), dtype=np.float32) if return_lse else None
    scales = [None if d is None else np.asarray(d, dtype=np.float32) for d in descales]
    bf16 = out_dtype.name == "bfloat16"
    from . import _C

    _C.forward_fp8(
        qb.view(np.uint8), kb.view(np.uint8), vb.view(np.uint8),
        o.view(np.uint16) if bf16 else o, lse, opt, *scales, 0, bf16,
    )
    return o_user, lse


def forward(q, k, v, cfg: AttentionConfig, layout: str, q_descale, k_descale, v_descale,
            out_dtype, return_lse: bool):
    _check_inputs(q, k, v)
    opt = to_options(cfg, 0, 0, write_lse=return_lse)
    args = (q, k, v, opt, layout, (q_descale, k_descale, v_descale), out_dtype, return_lse)
    if _is_torch_tensor(q):
        return _torch_forward(*args)
    return _numpy_forward(*args)


def quantize_fp8(x, *, layout: str = "bnhd", kv_heads: int | None = None):
    """Quantises a [B, N, H, D] (or [B, H, N, D] with layout="bhnd") tensor to float8_e4m3fn
    with one scale per (batch, head group): returns (x8, descale) with x ≈ x8 * descale.

    descale is float32 [B, G]: G = H, or kv_heads (H a multiple of it) for a query tensor under
    GQA, whose descale flashpp takes per (batch, kv head). The scale maps each group's largest
    magnitude to 448, e4m3's largest finite value (a group of zeros gets descale 1). torch
    tensors (any float dtype, any device) or numpy arrays (ml_dtypes.float8_e4m3fn out).
    """
    if layout not in ("bnhd", "bhnd"):
        raise ValueError(f"flashpp: layout: expected 'bnhd' or 'bhnd', got {layout!r}")
    shape = tuple(x.shape)
    if len(shape) != 4:
        raise ValueError(f"flashpp: x: expected a 4-d tensor, got shape {shape}")
    B, H = shape[0], shape[2] if layout == "bnhd" else shape[1]
    G = H if kv_heads is None else kv_heads
    if G <= 0 or H % G != 0:
        raise ValueError(f"flashpp: kv_heads: expected a divisor of the {H} heads, got {kv_heads}")
    if _is_torch_tensor(x):
        import torch

        xb = _bnhd(x, layout).float()  # [B, N, H, D]
        amax = xb.abs().amax(dim=(1, 3)).reshape(B, G, H // G).amax(dim=2)  # [B, G]
        descale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
        per_head = descale.repeat_interleave(H // G, dim=1)  # [B, H]
        scaled = (xb / per_head[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX)
        x8 = _bnhd(scaled.to(torch.float8_e4m3fn), layout).contiguous()
        return x8, descale.to(torch.float32).contiguous()
    import numpy as np
    import ml_dtypes

    xb = _bnhd(np.asarray(x), layout).astype(np.float32)
    amax = np.abs(xb).max(axis=(1, 3)).reshape(B, G, H // G).max(axis=2)
    descale = np.where(amax > 0, amax / E4M3_MAX, 1.0).astype(np.float32)
    per_head = np.repeat(descale, H // G, axis=1)
    scaled = np.clip(xb / per_head[:, None, :, None], -E4M3_MAX, E4M3_MAX)
    x8 = np.ascontiguousarray(_bnhd(scaled.astype(ml_dtypes.float8_e4m3fn), layout))
    return x8, descale
