"""flashpp.distributed: ring attention (context parallelism) over torch.distributed's NCCL
process group, forward and backward.

    import torch.distributed as dist, flashpp.distributed as fd
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    W, r = dist.get_world_size(), dist.get_rank()
    q_local = fd.zigzag_split(q, W, r)               # [B, N/W, H, D]: chunks r and 2W-1-r of 2W
    o_local = fd.ring_attention(q_local, k_local, v_local, causal=True)   # differentiable
    o = fd.zigzag_gather(o_local)                     # the whole sequence again (all_gather)

Each rank keeps its queries; the K/V blocks travel around the ring (rank r sends to r+1) by NCCL
send/recv issued before the compute on the block held, so the transfer overlaps the compute
(torch's NCCL process group runs them on its own stream; the compute stream waits only when
the next block is needed). Partial outputs are merged by their lse in float32; the backward
sends the float32 dK/dV accumulators around the ring with K/V (dQ stays local) and uses the
final O and lse for every block. The schedule (zigzag for causal, every step the same work) is
in _ring_schedule.py, the arithmetic in _ring_core.py; docs/ring-attention.md explains both.

NCCL comes from torch (its bundled copy, through torch.distributed); flashpp's extension does not
link NCCL. The C++ API over a caller's ncclComm_t is include/flashpp/ring.hpp.

Diagnostics only (tools/ring_bench.py): FLASHPP_RING_OVERLAP=0, FLASHPP_RING_TRANSFERS=skip and
FLASHPP_RING_COMPUTE=skip run the ring without overlap, without transfers or without compute
(_Knobs below; docs/ring-attention.md "Diagnostics").
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from . import _ring_core as core
from . import _ring_schedule as sched
from ._options import make_config
from .torch import _eager

__all__ = ["ring_attention", "zigzag_split", "zigzag_unsplit", "zigzag_gather", "nccl_options",
           "ring_group"]


def nccl_options(high_priority_stream: bool = True, max_ctas: int | None = None):
    """Options for dist.init_process_group("nccl", pg_options=...) or dist.new_group: the NCCL
    process group's transfers on a high-priority stream, so that their blocks are scheduled
    ahead of the attention kernels' waiting blocks (better overlap). max_ctas caps the thread
    blocks (SMs) NCCL uses per operation (ncclConfig_t.maxCTAs; None = NCCL's choice): a ring
    transfer that waits for its peer holds those SMs while the attention kernels run beside it
    (docs/ring-attention.md, "Overlap"). Cap it on a group made for the ring (ring_group), not
    on the group your data-parallel collectives use."""
    opts = dist.ProcessGroupNCCL.Options()
    opts.is_high_priority_stream = high_priority_stream
    if max_ctas is not None:
        if int(max_ctas) < 1:
            raise ValueError(f"flashpp.distributed.nccl_options: max_ctas must be >= 1, got {max_ctas}")
        config = getattr(opts, "config", None)
        if config is None or not hasattr(config, "max_ctas"):
            raise RuntimeError("flashpp.distributed.nccl_options: this torch build's "
                               "ProcessGroupNCCL.Options has no config.max_ctas")
        config.max_ctas = int(max_ctas)
    return opts


RING_MAX_CTAS = 8  # ring_group's default cap (measured: docs/ring-attention.md, "Overlap")


def ring_group(ranks=None, max_ctas: int | None = RING_MAX_CTAS):
    """A process group for ring_attention's transfers only: NCCL on a high-priority stream and
    at most max_ctas thread blocks per transfer (None: NCCL's choice). Every rank of the default
    group must call it, in the same order (it is dist.new_group). ranks: the ring's ranks (None =
    all). On gloo (CPU tests) it is a plain new group."""
    if dist.get_backend() != "nccl":
        return dist.new_group(ranks)
    return dist.new_group(ranks, backend="nccl", pg_options=nccl_options(max_ctas=max_ctas))


# ---- the zigzag split of the sequence dimension ---------------------------------------------

def zigzag_split(x: torch.Tensor, world: int, rank: int, dim: int = 1) -> torch.Tensor:
    """rank's slice of x along dim (the sequence, dim 1 of [B, N, H, D]): chunks rank and
    2*world-1-rank of 2*world equal chunks, concatenated (a new contiguous tensor)."""
    n = x.shape[dim]
    if n % (2 * world):
        raise ValueError(f"flashpp.distributed.zigzag_split: the length of dim {dim} ({n}) "
                         f"must be a multiple of 2 * world ({2 * world})")
    c = n // (2 * world)
    first, second = sched.zigzag_chunks(world, rank)
    return torch.cat([x.narrow(dim, first * c, c), x.narrow(dim, second * c, c)], dim=dim)


def zigzag_unsplit(parts, dim: int = 1) -> torch.Tensor:
    """The inverse of zigzag_split: parts[r] is rank r's slice; returns the whole tensor."""
    world = len(parts)
    c = parts[0].shape[dim] // 2
    chunks = [None] * (2 * world)
    for r, part in enumerate(parts):
        first, second = sched.zigzag_chunks(world, r)
        chunks[first], chunks[second] = part.narrow(dim, 0, c), part.narrow(dim, c, c)
    return torch.cat(chunks, dim=dim)


def zigzag_gather(x: torch.Tensor, group=None, dim: int = 1) -> torch.Tensor:
    """all_gather of every rank's zigzag slice, unsplit: the whole tensor on every rank."""
    world = dist.get_world_size(group)
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return zigzag_unsplit(parts, dim=dim)


# ---- the array adapter and the transport ----------------------------------------------------

class TorchOps:
    """_ring_core's adapter for torch tensors: flashpp's lean eager forward/backward
    (flashpp.torch._eager) per block, float32 accumulators."""

    xp = torch

    def __init__(self, *, softmax_scale=None, softcap=0.0, deterministic=False, backend="auto"):
        self.cfg = {c: make_config(causal=c, softmax_scale=softmax_scale, softcap=softcap,
                                   deterministic=deterministic, backend=backend)
                    for c in (False, True)}

    def forward(self, q, k, v, causal):
        return _eager.forward(q, k, v, self.cfg[causal], 0, 0)

    def backward(self, dout, q, k, v, o, lse, causal):
        return _eager.backward(dout, q, k, v, o, lse, self.cfg[causal], 0, 0)

    def f32(self, x):
        return x.clone() if x.dtype == torch.float32 else x.float()

    def cast(self, x, like):
        return x.to(like.dtype)

    def contiguous(self, x):
        return x.contiguous()


class _NcclRing:
    """The ring over a torch.distributed group: rank r sends to r+1, receives from r-1."""

    def __init__(self, group):
        self.group = group if group is not None else dist.group.WORLD
        self.world = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)
        self.next = dist.get_global_rank(self.group, (self.rank + 1) % self.world)
        self.prev = dist.get_global_rank(self.group, (self.rank - 1) % self.world)

    def exchange(self, send, recv):
        """Send the tensors `send` to the next rank and receive `recv` from the previous one,
        asynchronously: returns the works (work.wait() makes the current stream wait)."""
        ops = [dist.P2POp(dist.isend, t, self.next, self.group) for t in send]
        ops += [dist.P2POp(dist.irecv, t, self.prev, self.group) for t in recv]
        return dist.batch_isend_irecv(ops)


def _wait(works):
    for w in works:
        w.wait()


# ---- diagnostics: the ring with its transfers, its compute or its overlap taken out -----------

class _Knobs:
    """Private diagnostic switches, read from the environment at each ring_attention call (its
    backward uses the call's), to time what the overlap hides (tools/ring_bench.py;
    docs/ring-attention.md "Diagnostics"). Unset: the ring as it is.

      FLASHPP_RING_TRANSFERS=skip  no transfers: every step computes on the rank's own K/V and
                                   adds into its own dK/dV accumulators; everything else as in the
                                   ring (the same buffers allocated, the same block calls, merges,
                                   casts and stream waits): "compute alone". Results are wrong
                                   for W > 1.
      FLASHPP_RING_COMPUTE=skip    no block calls, merges or accumulations: the same transfers of
                                   the same buffers in the same order: "transfers alone". Results
                                   are meaningless.
      FLASHPP_RING_OVERLAP=0       the ring without overlap: each transfer is waited for right
                                   after it is issued, before the compute of its step. Results
                                   are the ring's, bit for bit."""

    __slots__ = ("transfers", "compute", "overlap")

    def __init__(self, transfers=True, compute=True, overlap=True):
        self.transfers, self.compute, self.overlap = transfers, compute, overlap

    @classmethod
    def from_env(cls):
        import os

        def flag(name, off):
            value = os.environ.get(name, "").strip().lower()
            if value not in ("", off, "1", "on"):
                raise ValueError(f"flashpp.distributed: {name}={value!r}: expected {off!r} "
                                 "or unset")
            return value != off

        return cls(transfers=flag("FLASHPP_RING_TRANSFERS", "skip"),
                   compute=flag("FLASHPP_RING_COMPUTE", "skip"),
                   overlap=flag("FLASHPP_RING_OVERLAP", "0"))


_DEFAULT = _Knobs()


def _exchange(ring, knobs, send, recv):
    """ring.exchange, or nothing when the transfers are skipped; waited for at once when the
    overlap is off (then nothing is left to wait for: a gloo work waited twice blocks)."""
    if not knobs.transfers:
        return []
    works = ring.exchange(send, recv)
    if not knobs.overlap:
        _wait(works)
        return []
    return works


def _ring_forward(ring, ops, q, k, v, causal, knobs=_DEFAULT):
    world = ring.world
    state = core.RingForward(ops, world, ring.rank, q, causal)
    k_cur, v_cur = k.contiguous(), v.contiguous()  # NCCL sends contiguous buffers
    held = None  # knobs.transfers off: the receive buffers, kept as long as the ring keeps them
    for step in range(world):
        works = None
        if step + 1 < world:
            k_next, v_next = torch.empty_like(k_cur), torch.empty_like(v_cur)
            works = _exchange(ring, knobs, [k_cur, v_cur], [k_next, v_next])  # before the compute
        if knobs.compute:
            state.step(step, k_cur, v_cur)
        if works is not None:
            _wait(works)
            if knobs.transfers:
                k_cur, v_cur = k_next, v_next
            else:
                held = (k_next, v_next)  # the own block stays the one computed on
            del k_next, v_next
    del held
    if not knobs.compute:  # outputs of the right shapes, for autograd
        B, n, H, _ = q.shape
        return torch.empty_like(q), torch.empty((B, H, n), dtype=torch.float32, device=q.device)
    return state.result()


def _ring_backward(ring, ops, q, k, v, o, lse, dout, causal, knobs=_DEFAULT):
    world = ring.world
    state = core.RingBackward(ops, world, ring.rank, q, o, lse, dout, causal)
    k_cur, v_cur = k.contiguous(), v.contiguous()
    dk_acc = dv_acc = None  # float32 accumulators of the K/V block held: they travel with it
    pending = None  # the accumulators' transfer from the previous step, still in flight
    held = None
    for step in range(world):
        works = None
        if step + 1 < world:
            k_next, v_next = torch.empty_like(k_cur), torch.empty_like(v_cur)
            works = _exchange(ring, knobs, [k_cur, v_cur], [k_next, v_next])
        if knobs.compute:
            p, dk_blk, dv_blk = state.compute(step, k_cur, v_cur)  # overlaps both transfers
        if pending is not None:
            _wait(pending[0])
            dk_acc, dv_acc = pending[1], pending[2]
            pending = None
        if knobs.compute:
            dk_acc, dv_acc = state.accumulate(dk_acc, dv_acc, p, dk_blk, dv_blk)
            del p, dk_blk, dv_blk
        elif dk_acc is None:  # values do not matter: no fill kernel in the transfers' time
            dk_acc = torch.empty(k_cur.shape, dtype=torch.float32, device=k_cur.device)
            dv_acc = torch.empty(v_cur.shape, dtype=torch.float32, device=v_cur.device)
        if world > 1:  # on to the next rank (after the last step: home)
            send = [dk_acc, dv_acc]
            if step == world - 1:
                # Home: the sum is complete, so it travels in the storage dtype (half the bytes
                # of this transfer, the one no compute hides); the cast at home would give the
                # same values. (Transfers alone: the same bytes, no cast kernel.)
                send = ([dk_acc.to(k.dtype), dv_acc.to(v.dtype)] if knobs.compute else
                        [torch.empty_like(k_cur), torch.empty_like(v_cur)])
            recv = [torch.empty_like(t) for t in send]
            works_acc = _exchange(ring, knobs, send, recv)
            # transfers skipped: the block's own accumulators stay (what the ring would send);
            # recv is kept as long as the ring keeps it
            pending = (works_acc, *(recv if knobs.transfers else send), recv)
            del send, recv
        if works is not None:
            _wait(works)
            if knobs.transfers:
                k_cur, v_cur = k_next, v_next
            else:
                held = (k_next, v_next)
            del k_next, v_next
    del held
    if pending is not None:
        _wait(pending[0])
        dk_acc, dv_acc = pending[1], pending[2]
    if not knobs.compute:
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    return state.dq(), dk_acc.to(k.dtype), dv_acc.to(v.dtype)


# ---- head chunks: the ring per group of kv heads, to bound the temporaries ------------------

def _head_ranges(hq: int, hkv: int, chunks: int):
    if chunks < 1 or hkv % chunks:
        raise ValueError(f"flashpp.distributed: head_chunks: expected a divisor of the kv head "
                         f"count {hkv}, got {chunks}")
    g, ratio = hkv // chunks, hq // hkv
    return [(i * g * ratio, (i + 1) * g * ratio, i * g, (i + 1) * g) for i in range(chunks)]


def _auto_head_chunks(q, k, backward: bool) -> int:
    """The fewest head chunks whose ring temporaries (K/V in flight twice, float32 dK/dV
    accumulators in flight twice, block outputs and gradients, float32 dQ/O accumulators, the
    kernels' workspace; estimated) take at most half of the free device memory."""
    hkv = k.shape[2]
    if not q.is_cuda:
        return 1
    free, _ = torch.cuda.mem_get_info(q.device)
    # blocks torch's caching allocator holds but does not use are free for this call too
    free += torch.cuda.memory_reserved(q.device) - torch.cuda.memory_allocated(q.device)
    kv = 2 * k.numel() * k.element_size()
    qb = q.numel() * q.element_size()
    need = (2 * kv + 4 * kv + 4 * qb + kv) if backward else (2 * kv + 3 * qb)
    for chunks in range(1, hkv + 1):
        if hkv % chunks == 0 and need / chunks <= free / 2:
            return chunks
    return hkv


def _forward(ring, ops, q, k, v, causal, chunks, knobs=_DEFAULT):
    if chunks == 1:
        return _ring_forward(ring, ops, q, k, v, causal, knobs)
    B, N, Hq, _ = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((B, Hq, N), dtype=torch.float32, device=q.device)
    for q0, q1, k0, k1 in _head_ranges(Hq, k.shape[2], chunks):
        r = _ring_forward(ring, ops, q[:, :, q0:q1], k[:, :, k0:k1], v[:, :, k0:k1], causal, knobs)
        o[:, :, q0:q1] = r[0]
        lse[:, q0:q1] = r[1]
    return o, lse


def _backward(ring, ops, q, k, v, o, lse, dout, causal, chunks, knobs=_DEFAULT):
    if chunks == 1:
        return _ring_backward(ring, ops, q, k, v, o, lse, dout, causal, knobs)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    for q0, q1, k0, k1 in _head_ranges(q.shape[2], k.shape[2], chunks):
        dq[:, :, q0:q1], dk[:, :, k0:k1], dv[:, :, k0:k1] = _ring_backward(
            ring, ops, q[:, :, q0:q1], k[:, :, k0:k1], v[:, :, k0:k1], o[:, :, q0:q1],
            lse[:, q0:q1].contiguous(), dout[:, :, q0:q1], causal, knobs)
    return dq, dk, dv


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, ring, ops, causal, head_chunks, knobs):
        chunks = head_chunks or _auto_head_chunks(q, k, backward=False)
        o, lse = _forward(ring, ops, q, k, v, causal, chunks, knobs)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.ring, ctx.ops, ctx.causal, ctx.head_chunks = ring, ops, causal, head_chunks
        ctx.knobs = knobs
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, _grad_lse):
        q, k, v, o, lse = ctx.saved_tensors
        chunks = ctx.head_chunks or _auto_head_chunks(q, k, backward=True)
        dq, dk, dv = _backward(ctx.ring, ctx.ops, q, k, v, o, lse, grad_o.contiguous(),
                               ctx.causal, chunks, ctx.knobs)
        return dq, dk, dv, None, None, None, None, None


def ring_attention(q, k, v, *, group=None, causal=False, softmax_scale=None, softcap=0.0,
                   deterministic=False, head_chunks=None, return_lse=False):
    """Attention of this rank's queries against the keys/values of every rank of `group` (a
    torch.distributed process group; None = the default group), differentiable.

    q: [B, n, Hq, D], k, v: [B, n, Hkv, D] (Hq a multiple of Hkv), this rank's slice of the
    sequence; every rank holds the same n. causal=True needs the zigzag split (zigzag_split:
    rank r holds chunks r and 2W-1-r of 2W, so n is even); without causal any equal split works.
    fp16/bf16 on CUDA with the NCCL backend (CPU tensors work with gloo, for tests).
    softmax_scale defaults to 1/sqrt(D); softcap and deterministic as flashpp.attention.
    head_chunks: run the ring once per group of kv heads (a divisor of Hkv) to bound the
    temporaries; None picks the fewest that fit half the free memory.
    Returns o [B, n, Hq, D] (and lse [B, Hq, n] float32 with return_lse=True)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("flashpp.distributed.ring_attention: q, k, v must be [B, N, H, D]")
    if k.shape[1] != q.shape[1] or v.shape[1] != q.shape[1]:
        raise ValueError("flashpp.distributed.ring_attention: q, k, v must hold the same "
                         f"sequence slice, got lengths {q.shape[1]}, {k.shape[1]}, {v.shape[1]}")
    ring = _NcclRing(group)
    sched.check_ring(ring.world, ring.rank, q.shape[1], causal)
    ops = TorchOps(softmax_scale=softmax_scale, softcap=softcap, deterministic=deterministic)
    knobs = _Knobs.from_env()  # diagnostics only (_Knobs); unset: the ring as documented
    o, lse = _RingAttention.apply(q, k, v, ring, ops, bool(causal), head_chunks, knobs)
    return (o, lse) if return_lse else o


# ---- the simulated ring: every rank in one process (tests) ----------------------------------

def simulate_ring_attention(qs, ks, vs, douts=None, *, causal=False, softmax_scale=None):
    """Runs the ring schedule of len(qs) ranks in this process, K/V passed on by list
    rotation: the same block calls and merges as ring_attention, for any world size on one
    device. Returns [(o, lse)] per rank, and [(dq, dk, dv)] per rank when douts is given."""
    ops = TorchOps(softmax_scale=softmax_scale)
    fwd = core.simulate_forward(ops, qs, ks, vs, causal)
    if douts is None:
        return fwd
    bwd = core.simulate_backward(ops, qs, ks, vs, [f[0] for f in fwd], [f[1] for f in fwd],
                                 douts, causal)
    return fwd, bwd
