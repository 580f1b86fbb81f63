"""flashpp.attention and flashpp.attention_backward: one entry point for numpy and torch.

torch tensors go through the torch.library operators of flashpp.torch (autograd,
torch.compile and CUDA graphs work); numpy arrays go straight to the C++ library on the CPU.
"""
from __future__ import annotations

from . import _fp8, _numpy, _rng
from ._options import check_layout, make_config


def _is_torch_tensor(x) -> bool:
    # No torch import: flashpp works (with numpy) where torch is not installed.
    return type(x).__module__.startswith("torch") and hasattr(x, "requires_grad")


_torch_functional = None


def _torch_api():
    """flashpp.torch.functional, imported on the first torch call (a `from . import` statement
    per call costs about a microsecond of a small call's host time)."""
    global _torch_functional
    if _torch_functional is None:
        from .torch import functional

        _torch_functional = functional
    return _torch_functional


def attention(
    q,
    k,
    v,
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
    return_rng_state: bool = False,
    layout: str = "bnhd",
    backend: str = "auto",
    q_descale=None,
    k_descale=None,
    v_descale=None,
    out_dtype=None,
):
    """Exact attention softmax(q kᵀ · scale) v, computed the FlashAttention way.

    q: [B, Nq, Hq, D]; k, v: [B, Nk, Hkv, D] with Hq a multiple of Hkv (GQA/MQA), or
    [B, H, N, D] each with layout="bhnd" (a strided view, no copy). numpy arrays (CPU, float16,
    ml_dtypes.bfloat16, float32) or torch tensors (CPU or CUDA; differentiable).

    causal, causal_alignment: "top_left" (query i sees keys ≤ i, as torch's is_causal) or
        "bottom_right" (the last query sees the last key, as flash-attn ≥ 2.1 and KV caches).
    softmax_scale: default 1/sqrt(D).
    window: sliding window: (left, right) keys each side of the diagonal, None or -1 for an
        unbounded side; an int w means (w, 0) when causal, (w, w) otherwise.
    softcap: logits become softcap·tanh(s/softcap) (0 = off).
    dropout_p, seed, offset: dropout on the probabilities. The mask is a pure function of
        (seed, offset, b, h, i, j). seed=None draws a seed from the framework's generator;
        offset=None counts calls. return_rng_state=True also returns (seed, offset), which
        attention_backward needs to regenerate the mask (torch autograd keeps them itself).
    deterministic: the backward gives bit-identical results run to run.
    return_lse: also return lse, float32 [B, Hq, Nq], the natural log-sum-exp of each row of
        scaled scores (-inf for a row that sees no key); not differentiable.
    backend: "auto" (the tensors' device), "cpu", "cuda", or "cpu_reference" (the float64
        oracle, which also takes float64 inputs).
    FP8: q, k, v in float8_e4m3fn (torch.float8_e4m3fn; ml_dtypes.float8_e4m3fn on the CPU),
        forward only (no autograd, dropout or softcap). q_descale, k_descale, v_descale: float32
        [B, Hkv] (None = 1), the inputs being q * q_descale etc.; out_dtype: bfloat16 (default)
        or float16. flashpp.quantize_fp8 makes (tensor, descale) pairs. See docs/fp8.md.

    Returns o (the layout of q), then lse if return_lse, then (seed, offset) if
    return_rng_state.
    """
    check_layout(layout)
    cfg = make_config(
        causal=causal,
        causal_alignment=causal_alignment,
        softmax_scale=softmax_scale,
        window=window,
        softcap=softcap,
        dropout_p=dropout_p,
        deterministic=deterministic,
        backend=backend,
    )
    torch_input = _is_torch_tensor(q)
    if _fp8.is_torch_fp8(q) if torch_input else _fp8.is_fp8(q):
        if return_rng_state:
            raise ValueError("flashpp: return_rng_state: the FP8 forward has no dropout")
        o, lse = _fp8.forward(q, k, v, cfg, layout, q_descale, k_descale, v_descale, out_dtype,
                              return_lse)
        return (o, lse) if return_lse else o
    if q_descale is not None or k_descale is not None or v_descale is not None \
            or out_dtype is not None:
        raise TypeError(
            "flashpp: q_descale, k_descale, v_descale and out_dtype apply to float8_e4m3fn "
            f"inputs only; q has dtype {getattr(q, 'dtype', type(q).__name__)}"
        )
    if torch_input:
        return _torch_api().attention(
            q, k, v, cfg, seed=seed, offset=offset, layout=layout,
            return_lse=return_lse, return_rng_state=return_rng_state,
        )
    dropout = cfg.dropout_p > 0.0
    seed = (_numpy.draw_seed() if dropout else 0) if seed is None else seed
    offset = (_rng.next_offset() if dropout else 0) if offset is None else offset
    seed, offset = _rng.check_seed(seed, offset)
    o, lse = _numpy.forward(q, k, v, cfg, seed, offset, layout, write_lse=return_lse)
    result = (o,) + ((lse,) if return_lse else ()) + (((seed, offset),) if return_rng_state else ())
    return result[0] if len(result) == 1 else result


def attention_backward(
    q,
    k,
    v,
    o,
    lse,
    dout,
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
    layout: str = "bnhd",
    backend: str = "auto",
):
    """Gradients (dq, dk, dv) of attention() given its outputs o, lse and the gradient dout of
    o. Takes the forward's options; with dropout, seed and offset must be the forward's (see
    return_rng_state). dk and dv sum over the query heads that share a kv head."""
    check_layout(layout)
    cfg = make_config(
        causal=causal,
        causal_alignment=causal_alignment,
        softmax_scale=softmax_scale,
        window=window,
        softcap=softcap,
        dropout_p=dropout_p,
        deterministic=deterministic,
        backend=backend,
    )
    if cfg.dropout_p > 0.0 and (seed is None or offset is None):
        raise ValueError(
            "flashpp: attention_backward: with dropout_p > 0, pass the forward's seed and offset "
            "(attention(..., return_rng_state=True) returns them)"
        )
    seed, offset = _rng.check_seed(seed or 0, offset or 0)
    if _is_torch_tensor(q):
        return _torch_api().attention_backward(
            q, k, v, o, lse, dout, cfg, seed=seed, offset=offset, layout=layout
        )
    return _numpy.backward(q, k, v, o, lse, dout, cfg, seed, offset, layout)
