"""The keyword arguments of flashpp.attention, checked and resolved once.

Only what the C++ API cannot see is checked here (strings, the window tuple, Python types);
every number and shape is validated by the C++ library, in one place, and its errors surface
as ValueError/TypeError with the library's message.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import _C

ALIGNMENTS = ("top_left", "bottom_right")
LAYOUTS = ("bnhd", "bhnd")
BACKENDS = {
    "auto": _C.Backend.automatic,
    "cpu": _C.Backend.cpu,
    "cuda": _C.Backend.cuda,
    "cpu_reference": _C.Backend.cpu_reference,
}


@dataclass(frozen=True)
class AttentionConfig:
    """Everything but the tensors and the dropout seed/offset, in plain Python values
    (so it can cross a torch.library op boundary as ints, floats and bools)."""

    softmax_scale: float = 0.0  # 0 = the default, 1/sqrt(D)
    causal: bool = False
    bottom_right: bool = False
    window_left: int = -1  # -1 = unbounded
    window_right: int = -1
    softcap: float = 0.0
    dropout_p: float = 0.0
    deterministic: bool = False
    backend: str = "auto"


def parse_window(window, causal: bool) -> tuple[int, int]:
    """window: None (no window), (left, right) with None or -1 for an unbounded side, or an
    int w meaning (w, 0) when causal and (w, w) otherwise."""
    if window is None:
        return -1, -1
    if isinstance(window, bool):
        raise TypeError(f"flashpp: window: expected None, an int or a (left, right) pair, got {window!r}")
    if isinstance(window, int):
        return int(window), (0 if causal else int(window))
    try:
        left, right = window
    except (TypeError, ValueError):
        raise TypeError(
            f"flashpp: window: expected None, an int or a (left, right) pair, got {window!r}"
        ) from None
    return (-1 if left is None else int(left)), (-1 if right is None else int(right))


_configs: dict = {}
_CONFIG_LIMIT = 1024


def make_config(
    *,
    causal=False,
    causal_alignment="top_left",
    softmax_scale=None,
    window=None,
    softcap=0.0,
    dropout_p=0.0,
    deterministic=False,
    backend="auto",
) -> AttentionConfig:
    """The checked AttentionConfig of flashpp.attention's keyword arguments. Remembered per
    argument tuple (a frozen dataclass: equal arguments may share one instance), since building
    and checking it costs more than the rest of a small call's Python work. The key holds the
    types of softmax_scale and window, whose checks depend on the type (window=5 vs 5.0, True)."""
    try:
        key = (causal, causal_alignment, softmax_scale, type(softmax_scale), window, type(window),
               softcap, dropout_p, deterministic, backend)
        cfg = _configs.get(key)
    except TypeError:  # an unhashable argument (a list window): checked every call
        key = cfg = None
    if cfg is None:
        cfg = _new_config(causal, causal_alignment, softmax_scale, window, softcap, dropout_p,
                          deterministic, backend)
        if key is not None:
            if len(_configs) >= _CONFIG_LIMIT:
                _configs.clear()
            _configs[key] = cfg
    return cfg


def _new_config(causal, causal_alignment, softmax_scale, window, softcap, dropout_p,
                deterministic, backend) -> AttentionConfig:
    if causal_alignment not in ALIGNMENTS:
        raise ValueError(
            f"flashpp: causal_alignment: expected one of {ALIGNMENTS}, got {causal_alignment!r}"
        )
    if backend not in BACKENDS:
        raise ValueError(f"flashpp: backend: expected one of {tuple(BACKENDS)}, got {backend!r}")
    if softmax_scale is None:
        scale = 0.0
    else:
        scale = float(softmax_scale)
        if not (scale > 0.0 and math.isfinite(scale)):
            raise ValueError(
                f"flashpp: softmax_scale: expected a finite positive number or None, got {softmax_scale!r}"
            )
    left, right = parse_window(window, bool(causal))
    return AttentionConfig(
        softmax_scale=scale,
        causal=bool(causal),
        bottom_right=causal_alignment == "bottom_right",
        window_left=left,
        window_right=right,
        softcap=float(softcap),
        dropout_p=float(dropout_p),
        deterministic=bool(deterministic),
        backend=backend,
    )


def check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"flashpp: layout: expected one of {LAYOUTS}, got {layout!r}")


def to_options(cfg: AttentionConfig, seed: int = 0, offset: int = 0, write_lse: bool = True):
    """The C++ flashpp::Options for this configuration."""
    opt = _C.Options()
    opt.softmax_scale = cfg.softmax_scale if cfg.softmax_scale > 0.0 else float("nan")
    opt.causal = cfg.causal
    opt.alignment = _C.Alignment.bottom_right if cfg.bottom_right else _C.Alignment.top_left
    opt.window_left = cfg.window_left
    opt.window_right = cfg.window_right
    opt.softcap = cfg.softcap
    opt.dropout_p = cfg.dropout_p
    opt.seed = int(seed)
    opt.offset = int(offset)
    opt.deterministic = cfg.deterministic
    opt.write_lse = write_lse
    opt.backend = BACKENDS[cfg.backend]
    return opt
