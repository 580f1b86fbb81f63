"""Ring attention's arithmetic, independent of the transport: the per-step block calls, the
float32 merge of partial outputs by their lse, and the float32 gradient accumulators.

The NCCL driver (flashpp.distributed) and the simulated ring below (every rank in one process,
K/V passed on by rotating a list) call the same RingForward/RingBackward steps, so the tests of
the simulated ring (numpy on the CPU in CI, torch on one GPU) check the schedule and the merge
that the multi-GPU run uses.

Arrays are [B, N, H, D] (the local slice of the sequence) and lse [B, H, N] float32. `ops` is an
adapter for the array library (NumpyOps here, TorchOps in flashpp.distributed):
  ops.xp                    the module with maximum, minimum, where, isneginf, exp, log1p
  ops.forward(q, k, v, causal)                    -> o, lse
  ops.backward(dout, q, k, v, o, lse, causal)     -> dq, dk, dv
  ops.f32(x)                a new float32 copy;   ops.cast(x, like): x in like's dtype
  ops.contiguous(x)
"""
from __future__ import annotations

from ._ring_schedule import check_ring, piece


def merge_into(ops, o_acc, lse_acc, o_blk, lse_blk) -> None:
    """In place: (o_acc, lse_acc) becomes the attention over the union of the keys behind
    (o_acc, lse_acc) and behind (o_blk, lse_blk). o_acc float32 [B, n, H, D], lse_acc float32
    [B, H, n] (views are fine: both are written through), o_blk any float dtype.
        lse = max + log1p(exp(min - max)),  o = o_acc e^(lse_acc - lse) + o_blk e^(lse_blk - lse)
    Rows with no visible key on either side (lse -inf) stay o = 0, lse = -inf, never NaN."""
    xp = ops.xp
    hi = xp.maximum(lse_acc, lse_blk)
    lo = xp.minimum(lse_acc, lse_blk)
    hi_finite = xp.where(xp.isneginf(hi), 0.0, hi)  # both -inf: lo - 0 = -inf, log1p(0) = 0
    lse = hi + xp.log1p(xp.exp(lo - hi_finite))
    lse_finite = xp.where(xp.isneginf(lse), 0.0, lse)
    w_acc = xp.exp(lse_acc - lse_finite).swapaxes(1, 2)[..., None]  # [B, n, H, 1]
    w_blk = xp.exp(lse_blk - lse_finite).swapaxes(1, 2)[..., None]
    o_acc *= w_acc
    o_acc += ops.f32(o_blk) * w_blk
    lse_acc[...] = lse


class RingForward:
    """One rank's forward: step(s, k, v) with the K/V block held at step s, for s = 0..W-1 in
    order; then result() -> (o in q's dtype, lse float32)."""

    def __init__(self, ops, world: int, rank: int, q, causal: bool):
        check_ring(world, rank, q.shape[1], causal)
        self.ops, self.world, self.rank, self.q, self.causal = ops, world, rank, q, causal
        self.o = None  # float32 accumulator
        self.lse = None

    def step(self, step: int, k, v) -> None:
        p = piece(self.world, self.rank, step, self.q.shape[1], self.causal)
        o_blk, lse_blk = self.ops.forward(self.q[:, p.q0:p.q1], k[:, p.k0:p.k1], v[:, p.k0:p.k1],
                                          p.causal)
        if self.o is None:  # step 0 covers every local row
            self.o, self.lse = self.ops.f32(o_blk), lse_blk
        else:
            merge_into(self.ops, self.o[:, p.q0:p.q1], self.lse[:, :, p.q0:p.q1], o_blk, lse_blk)

    def result(self):
        return self.ops.cast(self.o, self.q), self.lse


class RingBackward:
    """One rank's backward. o and lse are the final (merged) forward outputs: every block's
    backward then uses the global lse (P = exp(S - lse) is the block's slice of the global
    softmax) and delta = rowsum(dO * O) of the final O, which is exactly the whole-sequence
    backward restricted to the block's keys.
      compute(s, k, v) -> (piece, dk_blk, dv_blk): the block's gradients; dQ is added to the
        local float32 accumulator.
      accumulate(dk_acc, dv_acc, piece, dk_blk, dv_blk) -> (dk_acc, dv_acc): adds the block's
        dK/dV to the float32 accumulators of the K/V block held (which travel with it); None
        accumulators (step 0) start from the block's.
      dq() -> dQ in q's dtype."""

    def __init__(self, ops, world: int, rank: int, q, o, lse, dout, causal: bool):
        check_ring(world, rank, q.shape[1], causal)
        self.ops, self.world, self.rank, self.causal = ops, world, rank, causal
        self.q, self.o, self.lse, self.dout = q, o, lse, dout
        self._dq = None
        self._lse_half = None

    def _lse_rows(self, q0: int, q1: int):
        if q0 == 0 and q1 == self.q.shape[1]:
            return self.lse
        if self._lse_half is None:  # the only partial row range: the second zigzag chunk
            self._lse_half = self.ops.contiguous(self.lse[:, :, q0:q1])
        return self._lse_half

    def compute(self, step: int, k, v):
        p = piece(self.world, self.rank, step, self.q.shape[1], self.causal)
        rows = slice(p.q0, p.q1)
        dq, dk, dv = self.ops.backward(self.dout[:, rows], self.q[:, rows], k[:, p.k0:p.k1],
                                       v[:, p.k0:p.k1], self.o[:, rows],
                                       self._lse_rows(p.q0, p.q1), p.causal)
        if self._dq is None:  # step 0 covers every local row
            self._dq = self.ops.f32(dq)
        else:
            self._dq[:, rows] += self.ops.f32(dq)
        return p, dk, dv

    def accumulate(self, dk_acc, dv_acc, p, dk_blk, dv_blk):
        if dk_acc is None:  # step 0: the own block, every key row
            return self.ops.f32(dk_blk), self.ops.f32(dv_blk)
        dk_acc[:, p.k0:p.k1] += self.ops.f32(dk_blk)
        dv_acc[:, p.k0:p.k1] += self.ops.f32(dv_blk)
        return dk_acc, dv_acc

    def dq(self):
        return self.ops.cast(self._dq, self.q)


def simulate_forward(ops, qs, ks, vs, causal: bool):
    """Every rank's forward in one process: qs[r], ks[r], vs[r] are rank r's slices. K/V move
    on by list rotation (rank r receives rank r-1's block). Returns [(o, lse)] per rank."""
    world = len(qs)
    ranks = [RingForward(ops, world, r, qs[r], causal) for r in range(world)]
    kv = list(zip(ks, vs))
    for step in range(world):
        for r in range(world):
            ranks[r].step(step, *kv[r])
        kv = kv[-1:] + kv[:-1]
    return [rk.result() for rk in ranks]


def simulate_backward(ops, qs, ks, vs, os_, lses, douts, causal: bool):
    """Every rank's backward in one process, the dK/dV accumulators travelling with K/V.
    Returns [(dq, dk, dv)] per rank (dk, dv float32 cast to k's dtype)."""
    world = len(qs)
    ranks = [RingBackward(ops, world, r, qs[r], os_[r], lses[r], douts[r], causal)
             for r in range(world)]
    kv = list(zip(ks, vs))
    acc = [(None, None)] * world  # acc[r]: the accumulators of the K/V block rank r holds
    for step in range(world):
        for r in range(world):
            p, dk, dv = ranks[r].compute(step, *kv[r])
            acc[r] = ranks[r].accumulate(*acc[r], p, dk, dv)
        kv = kv[-1:] + kv[:-1]
        acc = acc[-1:] + acc[:-1]
    # After W steps and W rotations every accumulator is back with the rank that owns its K/V.
    return [(ranks[r].dq(), ops.cast(acc[r][0], ks[r]), ops.cast(acc[r][1], vs[r]))
            for r in range(world)]


class NumpyOps:
    """The adapter for numpy arrays on flashpp's CPU backend (tests; a reference driver)."""

    def __init__(self, **attention_kwargs):
        import numpy as np

        self.xp = np
        self.kwargs = attention_kwargs  # softmax_scale, softcap, deterministic, backend

    def forward(self, q, k, v, causal):
        from .functional import attention

        return attention(q, k, v, causal=causal, return_lse=True, **self.kwargs)

    def backward(self, dout, q, k, v, o, lse, causal):
        from .functional import attention_backward

        return attention_backward(q, k, v, o, lse, dout, causal=causal, **self.kwargs)

    def f32(self, x):
        return x.astype(self.xp.float32)  # always a copy

    def cast(self, x, like):
        return x.astype(like.dtype)

    def contiguous(self, x):
        return self.xp.ascontiguousarray(x)
