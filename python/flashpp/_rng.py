"""Dropout seeds and offsets.

The keep-mask of attention element (b, h, i, j) is a pure function of (seed, offset, b, h, i, j)
(src/common/philox.hpp), so the backward regenerates the forward's mask from the same pair.
When the caller gives no seed, one is drawn from the framework's generator (torch's default CPU
generator, or numpy's global one), so torch.manual_seed / numpy.random.seed make runs
repeatable; the offset counts calls in this process, so two calls never share a mask even if
they draw the same seed.
"""
from __future__ import annotations

import itertools
import threading

_SEED_LIMIT = 2**63 - 1  # seeds travel as int64 through torch.library ops
_offsets = itertools.count()
_lock = threading.Lock()


def next_offset() -> int:
    with _lock:
        return next(_offsets)


def draw_numpy_seed() -> int:
    import numpy as np

    return int(np.random.randint(0, _SEED_LIMIT, dtype=np.int64))


def draw_torch_seed() -> int:
    import torch

    # The CPU generator: drawing never touches a CUDA stream, so it is safe inside CUDA graph
    # capture and costs no device synchronisation.
    return int(torch.randint(0, _SEED_LIMIT, (), dtype=torch.int64).item())


def check_seed(seed, offset) -> tuple[int, int]:
    seed, offset = int(seed), int(offset)
    if not (0 <= seed <= _SEED_LIMIT) or not (0 <= offset <= _SEED_LIMIT):
        raise ValueError(
            f"flashpp: seed/offset: expected integers in [0, 2**63), got seed={seed}, offset={offset}"
        )
    return seed, offset
